#!/usr/bin/env python3
"""Instruction counts of the innermost loops of functions in an `aarch64-linux-gnu-objdump -d -C`
listing: for each backward conditional branch inside the function, the number of instructions
between its target and itself (and how many of them are sdot / smmla / loads), and for loops with
dot products the instructions per 32 multiply-adds (an sdot does 16, an smmla 32): the unit of
docs/PERFORMANCE.md's ARM tables (32 weights x one activation row).

Usage: arm_loop_counts.py LISTING 'function-name-regex' ..."""
import re
import sys

def functions(path):
    name, body = None, []
    for line in open(path):
        m = re.match(r'^([0-9a-f]+) <(.*)>:$', line)
        if m:
            if name:
                yield name, body
            name, body = m.group(2), []
            continue
        m = re.match(r'^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$', line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2), m.group(3)))
    if name:
        yield name, body

def loops(body):
    addrs = [a for a, _, _ in body]
    out = []
    for i, (a, op, args) in enumerate(body):
        if not (op.startswith('b.') or op in ('cbnz', 'cbz', 'tbnz', 'tbz')):
            continue
        t = re.search(r'\b([0-9a-f]+) <', args)
        if not t:
            continue
        target = int(t.group(1), 16)
        if target <= a and target in addrs:
            j = addrs.index(target)
            ins = body[j:i + 1]
            kinds = lambda p: sum(1 for _, o, _ in ins if re.match(p, o))
            macs = 16 * kinds(r'sdot|udot') + 32 * kinds(r'smmla')
            out.append((len(ins), kinds(r'sdot|smmla|udot'), kinds(r'ld'), kinds(r'shl|tbl'), hex(target), macs))
    return out

path, pats = sys.argv[1], sys.argv[2:]
for name, body in functions(path):
    if any(re.search(p, name) for p in pats):
        for n, dot, ld, dec, at, macs in loops(body):
            unit = f', {32 * n / macs:.2f} per 32 MACs' if macs else ''
            print(f'{name} @{at}: {n} instructions ({dot} sdot/smmla, {ld} loads, {dec} shl/tbl){unit}')

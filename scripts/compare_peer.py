#!/usr/bin/env python3
"""Times qrepack against the ggml peer benchmark in one session and prints a markdown table.

Usage: scripts/compare_peer.py [--peer /tmp/ggml-peer/bin/ggml_mm_bench] [--threads 2]
                               [--cases q4_0:4096x4096:1,...] [--runs 3] [--cold-mb 64]
                               [--stat median|min] [--qrepack PATH] [--baseline PATH]
                               [--isa avx2] [--preset llama7b|small|types] [--hot]

For every case (type, rows x cols, batch) it runs, alternating and `--runs` times each:
ggml with repack on, ggml with repack off, and `qrepack bench` (the chosen layout) - all on
the same splitmix64 data - and reports the median of the per-run medians and the ratio of
qrepack's time to the faster ggml mode. `--stat min` reports the fastest repetition of all runs
instead (on a shared, noisy machine the least disturbed measurement of both sides). Needs the peer build (../shared/peer/build.sh) and
`cargo build --release -p qrepack-cli`.

`--baseline PATH` times a second qrepack binary (an older build) in the same alternation and
adds its time and the ratio new / baseline, for before/after comparisons in one sitting.
`--isa NAME` caps qrepack's kernel sets (`qrepack bench --isa`), e.g. to measure the AVX2
kernels on an AVX-512 machine against a ggml built with `ARCHFLAGS=-march=haswell`.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QREPACK = ROOT / "target" / "release" / "qrepack"

DEFAULT_CASES = [
    f"{t}:{s}:{n}"
    for t in ["q4_0", "q4_K", "iq4_nl", "q8_0"]
    for s, ns in [("4096x4096", [1, 2, 4, 8, 16, 32, 512]), ("11008x4096", [1])]
    for n in ns
]


# The matrix shapes of SmolLM2-135M (hidden 576, FFN 1536) and Gemma 3 270M (hidden 640,
# FFN 2048, Q heads 1024), rows x cols. Q4_K needs columns that are a multiple of 256.
SMALL_SHAPES = ["576x576", "1536x576", "576x1536", "1024x640", "640x1024", "2048x640", "640x2048"]
SMALL_CASES = [
    f"{t}:{s}:{n}"
    for t in ["q4_0", "q4_K", "iq4_nl", "q8_0"]
    for s in SMALL_SHAPES
    if t != "q4_K" or int(s.split("x")[1]) % 256 == 0
    for n in [1, 32, 128, 512]
]
# Every weight type qrepack loads that ggml multiplies, LLaMA-7B attention and FFN-up shapes,
# decode and two prompt sizes (`qrepack bench --suite types` runs the same cases).
TYPES = ["f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K", "q4_K", "q5_K",
         "q6_K", "iq4_nl", "iq4_xs"]
TYPES_CASES = [
    f"{t}:{s}:{n}" for t in TYPES for s in ["4096x4096", "11008x4096"] for n in [1, 32, 512]
]
PRESETS = {"llama7b": DEFAULT_CASES, "small": SMALL_CASES, "types": TYPES_CASES}

STAT = "median"
HOT = False


def reps_for(n):
    """Timed reps of one measurement, the same on both sides (a short run of a large matrix
    from memory reads slower here than a long one)."""
    return 200 if n <= 3 else (20 if n <= 32 else 5)


def peer(bin_, ty, m, k, n, threads, repack, cold_mb):
    reps = reps_for(n)
    cmd = [bin_, "--type", ty, "--M", str(m), "--K", str(k), "--N", str(n),
           "--threads", str(threads), "--repack", repack, "--reps", str(reps)]
    if n <= 3 and not HOT:
        cmd += ["--cold-mb", str(cold_mb)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    # With --cold-mb the peer prints a "hot" line (one W) and then a "cold" one (rotating):
    # compare like with like (qrepack rotates for batches up to 3 too).
    lines = [l for l in out.splitlines() if l.startswith("RESULT")]
    line = next((l for l in lines if "mode=cold" in l), lines[0])
    fields = dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    key = "min_ms" if STAT == "min" else "med_ms"
    return float(fields[key]), fields.get("layout", "?"), fields.get("buft", "?")


def ours(ty, m, k, n, threads, cold_mb, layout=None, binary=None, isa=None):
    cmd = [str(binary or QREPACK), "bench", "--type", ty, "--rows", str(m), "--cols", str(k),
           "--batch", str(n), "--threads", str(threads), "--cold-mb", str(0 if HOT else cold_mb),
           "--reps", str(reps_for(n)), "--json", "-q"]
    if layout:
        cmd += ["--layout", layout]
    env = None
    if isa:
        import os
        env = dict(os.environ, QREPACK_ISA=isa)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
    rec = json.loads(out.strip().splitlines()[-1])
    return rec["min_ms" if STAT == "min" else "median_ms"], rec["layout"], rec["kernels"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", default="/tmp/ggml-peer/bin/ggml_mm_bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default=None, help="type:ROWSxCOLS:batch,... (default: --preset)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="llama7b",
                    help="llama7b: 4096x4096 and 11008x4096; small: SmolLM2/Gemma 3 shapes")
    ap.add_argument("--hot", action="store_true",
                    help="time batches up to 3 on one resident matrix too (default: rotate)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cold-mb", type=int, default=64)
    ap.add_argument("--stat", choices=["median", "min"], default="median")
    ap.add_argument("--qrepack", default=None, help="the qrepack binary (default: target/release)")
    ap.add_argument("--baseline", default=None, help="a second qrepack binary to compare with")
    ap.add_argument("--isa", default=None, help="QREPACK_ISA for both qrepack binaries")
    args = ap.parse_args()
    global STAT, HOT
    STAT = args.stat
    HOT = args.hot
    cases = args.cases or ",".join(PRESETS[args.preset])

    print(f"threads={args.threads} runs={args.runs} cold_mb={0 if HOT else args.cold_mb} stat={STAT}",
          file=sys.stderr)
    base_cols = " baseline ms | new / baseline |" if args.baseline else ""
    print("| type | rows x cols | batch | ggml repack on ms | ggml repack off ms | qrepack ms "
          "| qrepack layout / kernels | ratio vs faster ggml |" + base_cols)
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if args.baseline else ""))
    for case in cases.split(","):
        ty, shape, n = case.split(":")
        m, k = (int(v) for v in shape.split("x"))
        n = int(n)
        on, off, mine, base = [], [], [], []
        for _ in range(args.runs):
            t_on, lay_on, buft = peer(args.peer, ty, m, k, n, args.threads, "on", args.cold_mb)
            on.append(t_on)
            off.append(peer(args.peer, ty, m, k, n, args.threads, "off", args.cold_mb)[0])
            t, lay, kern = ours(ty, m, k, n, args.threads, args.cold_mb,
                                binary=args.qrepack, isa=args.isa)
            mine.append(t)
            if args.baseline:
                base.append(ours(ty, m, k, n, args.threads, args.cold_mb,
                                 binary=args.baseline, isa=args.isa)[0])
        pick = min if STAT == "min" else statistics.median
        on_m, off_m, ours_m = (pick(v) for v in (on, off, mine))
        on_s = f"{on_m:.3f}" if buft == "CPU_REPACK" else f"- ({on_m:.3f} plain)"
        best = min(on_m, off_m)
        extra = ""
        if base:
            base_m = pick(base)
            extra = f" {base_m:.3f} | {ours_m / base_m:.3f} |"
        print(f"| {ty} | {m}x{k} | {n} | {on_s} | {off_m:.3f} | {ours_m:.3f} | {lay} / {kern} "
              f"| {ours_m / best:.2f} |" + extra, flush=True)


if __name__ == "__main__":
    main()

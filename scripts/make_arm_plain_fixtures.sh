#!/usr/bin/env bash
# Regenerates crates/qrepack/tests/fixtures/arm_plain from ggml's ARM build run under qemu: for
# each type ggml's quantized weights (ggml's row layout) and its mul_mat output with the
# CPU_REPACK buffer off, i.e. ggml's plain vec_dot path, M = 16, K = 256, N = 1..9 and 33
# activation rows. The activations are the stream of crates/qrepack/tests/fixtures/arm
# (x_33x256.bin, X seeded with seed+1); the script checks that ggml's dump equals that file and
# does not copy it again. tests/arm_fixtures.rs reads both.
#
# Needs one build of ../shared/peer/build.sh (see ../shared/arm/README.md; g++-aarch64-linux-gnu):
#   PEER_ARCH=arm CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++ \
#     ARCHFLAGS="-march=armv8.6-a+dotprod+i8mm -ffp-contract=off" WORK=$I8MM_WORK ../shared/peer/build.sh
# run on qemu-aarch64 -cpu max. That build has no FP16 vector arithmetic, so ggml's f16 dot
# products convert to f32 and accumulate in f32 (as its bf16 ones do).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
I8MM_WORK="${I8MM_WORK:-/tmp/armwork/ggml-peer-arm}"
BENCH="${BENCH:-$I8MM_WORK/bin/ggml_mm_bench}"
ROOT="$(cd "$HERE/.." && pwd)"
X="$ROOT/crates/qrepack/tests/fixtures/arm/x_33x256.bin"
OUT="$ROOT/crates/qrepack/tests/fixtures/arm_plain"
M=16
K=256
TYPES="${TYPES:-q2_K q3_K iq4_xs q5_1 bf16 f16 q4_1 q5_0 q4_0 q8_0 iq4_nl q4_K q5_K q6_K}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
[ -x "$BENCH" ] || { echo "no peer binary at $BENCH (build it first, see above)"; exit 1; }
[ -f "$X" ] || { echo "missing $X (scripts/make_arm_fixtures.sh)"; exit 1; }

rm -rf "$OUT"
mkdir -p "$OUT"
for t in $TYPES; do
  dir="$OUT/${t}_m$M"
  mkdir -p "$dir"
  for n in 1 2 3 4 5 6 7 8 9 33; do
    d="$TMP/${t}_n$n"
    qemu-aarch64 -cpu max "$BENCH" --type "$t" --M "$M" --K "$K" --N "$n" --threads 1 \
      --repack off --reps 1 --warmup 0 --cold-mb 0 --dump "$d" >/dev/null 2>&1
    grep -qx 'layout=none' "$d/meta.txt" || { echo "$t n=$n: ggml did not keep rows plain"; exit 1; }
    # the first n rows of the shared 33-row stream
    cmp -s "$d/x_f32.bin" <(head -c $((n * K * 4)) "$X") || { echo "$t n=$n: x differs from $X"; exit 1; }
    if [ "$n" = 1 ]; then
      cp "$d/w_q.bin" "$dir/"
    else
      cmp -s "$d/w_q.bin" "$dir/w_q.bin" || { echo "$t n=$n: w_q differs"; exit 1; }
    fi
    cp "$d/y_f32.bin" "$dir/y_n$n.bin"
  done
done
ls "$OUT"
du -sh "$OUT"

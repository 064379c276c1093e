#!/usr/bin/env bash
# Regenerates crates/qrepack/tests/fixtures/arm from ggml's ARM build (the peer benchmark,
# cross-built for aarch64 and run under qemu-aarch64): ggml's quantized weights, its repacked
# weights, its quantized activations and its mul_mat output, K = 256, M = 12 and 16 weight rows,
# N = 1..9 and 33 activation rows.
#
# Needs two builds of ../shared/peer/build.sh (see ../shared/arm/README.md):
#   I8MM_WORK: PEER_ARCH=arm ARCHFLAGS="-march=armv8.6-a+dotprod+i8mm -ffp-contract=off"  (run on -cpu max)
#   DOT_WORK:  PEER_ARCH=arm ARCHFLAGS="-march=armv8.2-a+dotprod+fp16 -ffp-contract=off" (run on -cpu neoverse-n1)
# The i8mm build chooses q4_0_4x8, q8_0_4x8, iq4_nl_4x4 and q4_K_8x8; the dotprod build
# q4_0_4x4 and q8_0_4x4.
set -euo pipefail
I8MM_BENCH="${I8MM_WORK:-/tmp/armwork/ggml-peer-arm}/bin/ggml_mm_bench"
DOT_BENCH="${DOT_WORK:-/tmp/armwork/ggml-peer-arm-dot}/bin/ggml_mm_bench"
OUT="$(cd "$(dirname "$0")/.." && pwd)/crates/qrepack/tests/fixtures/arm"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
K=256
rm -rf "$OUT"
mkdir -p "$OUT"

dump() { # bench cpu type M N dir
  qemu-aarch64 -cpu "$2" "$1" --type "$3" --M "$4" --K "$K" --N "$5" --threads 1 --repack on \
    --reps 1 --warmup 0 --cold-mb 0 --dump "$6" >/dev/null 2>&1
}

case_() { # bench cpu type M
  local bench=$1 cpu=$2 t=$3 m=$4
  local first="$TMP/${t}_${cpu}_${m}_n33"
  dump "$bench" "$cpu" "$t" "$m" 33 "$first"
  local layout
  layout=$(sed -n 's/^layout=//p' "$first/meta.txt")
  local dir="$OUT/${layout}_m$m"
  mkdir -p "$dir"
  echo "$layout" > "$dir/layout.txt"
  cp "$first/w_q.bin" "$first/w_repacked.bin" "$dir/"
  for n in 1 2 3 4 5 6 7 8 9 33; do
    local d="$TMP/${t}_${cpu}_${m}_n$n"
    [ "$n" = 33 ] || dump "$bench" "$cpu" "$t" "$m" "$n" "$d"
    cmp -s "$d/w_repacked.bin" "$first/w_repacked.bin"
    cp "$d/y_f32.bin" "$dir/y_n$n.bin"
    cp "$d/xq_repacked.bin" "$dir/xq_n$n.bin"
  done
  [ -f "$OUT/x_33x$K.bin" ] || cp "$first/x_f32.bin" "$OUT/x_33x$K.bin"
}

for m in 12 16; do
  case_ "$I8MM_BENCH" max q4_0 "$m"
  case_ "$I8MM_BENCH" max q8_0 "$m"
  case_ "$I8MM_BENCH" max iq4_nl "$m"
  case_ "$DOT_BENCH" neoverse-n1 q4_0 "$m"
  case_ "$DOT_BENCH" neoverse-n1 q8_0 "$m"
done
case_ "$I8MM_BENCH" max q4_K 16
ls -R "$OUT" | head -20
du -sh "$OUT"

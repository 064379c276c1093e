#!/usr/bin/env bash
# Adds to crates/qrepack/tests/fixtures/arm the dumps of ggml's SVE build (the peer benchmark
# cross-built for aarch64 with SVE and i8mm, run under qemu-aarch64 -cpu max,sve256=on): with
# SVE, i8mm and 256-bit vectors ggml repacks Q4_0 matrices whose row count is a multiple of 8 as
# q4_0_8x8 and multiplies them with its SVE kernels, as it does q8_0_4x8 and q4_K_8x8 (GEMM).
# Q4_0: M = 16 and 24, K = 256; Q8_0: M = 12 and 16, K = 256; Q4_K: M = 16 with K = 256 and
# M = 24 with K = 512; N = 1..9 and 33 activation rows (the activations of
# fixtures/arm/x_33x<K>.bin, the same seed).
# ggml's quantized weights, its repacked weights, its quantized activations (ARM rounding,
# quads interleaved by 8, then the leftover rows) and its mul_mat output; tests/arm_fixtures.rs
# reads every directory there.
#
# Needs the SVE build of ../shared/peer/build.sh (see ../shared/arm/README.md):
#   SVE_WORK: PEER_ARCH=arm CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++ \
#             ARCHFLAGS="-march=armv8.6-a+sve+i8mm -ffp-contract=off" WORK=$SVE_WORK build.sh
set -euo pipefail
SVE_WORK="${SVE_WORK:-/tmp/sve-peer}"
BENCH="$SVE_WORK/bin/ggml_mm_bench"
OUT="$(cd "$(dirname "$0")/.." && pwd)/crates/qrepack/tests/fixtures/arm"
CPU="max,sve256=on"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

dump() { # type M N dir
  qemu-aarch64 -cpu "$CPU" "$BENCH" --type "$1" --M "$2" --K "$K" --N "$3" --threads 1 \
    --repack on --reps 1 --warmup 0 --cold-mb 0 --dump "$4" >/dev/null 2>&1
}

case_() { # type M K suffix expected-layout
  local t=$1 m=$2 k=$3 suffix=$4 want=$5
  K=$k
  local first="$TMP/${t}_${m}_${k}_n33"
  dump "$t" "$m" 33 "$first"
  local layout
  layout=$(sed -n 's/^layout=//p' "$first/meta.txt")
  [ "$layout" = "$want" ] || { echo "ggml chose $layout, not $want, for $t M=$m" >&2; exit 1; }
  cmp "$first/x_f32.bin" "$OUT/x_33x$K.bin"   # the activations of the other ARM fixtures
  local dir="$OUT/${layout}_m$m"
  [ "$K" = 256 ] || dir="${dir}_k$K"
  dir="$dir$suffix"
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "$layout" > "$dir/layout.txt"
  cp "$first/w_q.bin" "$first/w_repacked.bin" "$dir/"
  for n in 1 2 3 4 5 6 7 8 9 33; do
    local d="$TMP/${t}_${m}_${k}_n$n"
    [ "$n" = 33 ] || dump "$t" "$m" "$n" "$d"
    cmp -s "$d/w_repacked.bin" "$first/w_repacked.bin"
    cp "$d/y_f32.bin" "$dir/y_n$n.bin"
    cp "$d/xq_repacked.bin" "$dir/xq_n$n.bin"
  done
}

# q4_0_8x8 exists only in this build; q8_0_4x8 and q4_K_8x8 also in the i8mm one, whose
# directories keep their names: these get the suffix _sve (ggml's SVE GEMMs sum in another order).
case_ q4_0 16 256 "" q4_0_8x8
case_ q4_0 24 256 "" q4_0_8x8
case_ q8_0 16 256 _sve q8_0_4x8
case_ q8_0 12 256 _sve q8_0_4x8
case_ q4_K 16 256 _sve q4_K_8x8
case_ q4_K 24 512 _sve q4_K_8x8
du -sh "$OUT"/q4_0_8x8_* "$OUT"/*_sve

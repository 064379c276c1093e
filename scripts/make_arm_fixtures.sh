#!/usr/bin/env bash
# Regenerates crates/qrepack/tests/fixtures/arm from ggml's ARM build (the peer benchmark,
# cross-built for aarch64 and run under qemu-aarch64): ggml's quantized weights, its repacked
# weights, its quantized activations and its mul_mat output, N = 1..9 and 33 activation rows;
# K = 256 with M = 12 and 16 weight rows for the 4-row layouts, and for the K-quant 8-row
# layouts M = 16 with K = 256 and M = 24 with K = 512 (directories *_m24_k512). ggml does not
# repack K-quant matrices whose row count is not a multiple of 8 (it keeps them plain, as
# qrepack does; tests/layouts.rs checks that choice).
#
# Needs two builds of ../shared/peer/build.sh (see ../shared/arm/README.md):
#   I8MM_WORK: PEER_ARCH=arm ARCHFLAGS="-march=armv8.6-a+dotprod+i8mm -ffp-contract=off"  (run on -cpu max)
#   DOT_WORK:  PEER_ARCH=arm ARCHFLAGS="-march=armv8.2-a+dotprod+fp16 -ffp-contract=off" (run on -cpu neoverse-n1)
# The i8mm build chooses q4_0_4x8, q8_0_4x8, iq4_nl_4x4 and q4_K/q5_K/q6_K_8x8; the dotprod
# build q4_0_4x4, q8_0_4x4, mxfp4_4x4 and q4_K/q5_K/q6_K_8x4.
#
# The harness is ../shared/peer/ggml_mm_bench.cpp with scripts/ggml_mm_bench_kquants.patch
# applied (rebuilt here against each build's libggml-peer.a): its --dump quantized the
# activations of Q5_K/Q6_K as Q8_0 and always interleaved Q8_K quads by 8; patched, it uses
# Q8_K for the three K-quants and ggml's lm_ggml_quantize_mat_q8_K_4x4 for the 8x4 layouts.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
I8MM_WORK="${I8MM_WORK:-/tmp/armwork/ggml-peer-arm}"
DOT_WORK="${DOT_WORK:-/tmp/armwork/ggml-peer-arm-dot}"
PEER_SRC="${PEER_SRC:-$HERE/../../shared/peer/ggml_mm_bench.cpp}"
OUT="$(cd "$(dirname "$0")/.." && pwd)/crates/qrepack/tests/fixtures/arm"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cp "$PEER_SRC" "$TMP/ggml_mm_bench.cpp"
(cd "$TMP" && patch -s ggml_mm_bench.cpp < "$HERE/ggml_mm_bench_kquants.patch")
harness() { # work-dir archflags -> binary
  local cpp="$1/src/v1.12.2/package/cpp" bin
  bin="$TMP/bench-$(basename "$1")"
  aarch64-linux-gnu-g++ -O2 $2 -std=gnu++17 -pthread -I"$cpp" -I"$cpp/ggml-cpu" \
    "$TMP/ggml_mm_bench.cpp" "$1/build-1.12.2/libggml-peer.a" -o "$bin" -ldl -lm
  echo "$bin"
}
I8MM_BENCH=$(harness "$I8MM_WORK" "-march=armv8.6-a+dotprod+i8mm -ffp-contract=off")
DOT_BENCH=$(harness "$DOT_WORK" "-march=armv8.2-a+dotprod+fp16 -ffp-contract=off")
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
  [ "$K" = 256 ] || dir="${dir}_k$K"
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
  case_ "$DOT_BENCH" neoverse-n1 mxfp4 "$m"
done
for t in q4_K q5_K q6_K; do
  K=256 case_ "$I8MM_BENCH" max "$t" 16
  K=256 case_ "$DOT_BENCH" neoverse-n1 "$t" 16
  K=512 case_ "$I8MM_BENCH" max "$t" 24
  K=512 case_ "$DOT_BENCH" neoverse-n1 "$t" 24
done
ls -R "$OUT" | head -20
du -sh "$OUT"

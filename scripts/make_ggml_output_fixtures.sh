#!/usr/bin/env bash
# Regenerates crates/qrepack/tests/fixtures/ggml from ggml's own mul_mat (the peer benchmark).
# Needs the peer build: ../shared/peer/build.sh (binary in $WORK/bin, default /tmp/ggml-peer).
#
# The stock harness dumps the activations of every repacked type but Q4_K as Q8_0, while ggml's
# q2_K_8x8 kernels read Q8_K quads; so the harness is rebuilt here with
# scripts/ggml_mm_bench_kquants.patch (as for the ARM fixtures; it names Q2_K too) against the
# peer's libggml-peer.a. For the other types its dumps are byte-identical to the stock one's.
# TYPES="q2_K" LONG_TYPES="" regenerates only those types' directories.
# NEW_TYPES (the grid, ternary and FP4 types, Q1_0, Q2_0) are dumped without repack
# only, with their rows dequantized by ggml (`w_deq.f32`, scripts/make_quant_fixtures.c `deq`),
# and ggml's lookup tables go to fixtures/grids/tables.bin (scripts/dump_ggml_grids.c).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BENCH="${BENCH:-${WORK:-/tmp/ggml-peer}/bin/ggml_mm_bench}"
PEER_ROOT="$(cd "$(dirname "$(readlink -f "$BENCH")")/.." && pwd)"
PEER_LIB="${PEER_LIB:-$PEER_ROOT/build-1.12.2/libggml-peer.a}"
PEER_CPP="${PEER_CPP:-$PEER_ROOT/src/v1.12.2/package/cpp}"
PEER_SRC="${PEER_SRC:-$HERE/../../shared/peer/ggml_mm_bench.cpp}"
TYPES="${TYPES:-q4_0 q4_K iq4_nl q8_0 q5_0 q6_K q4_1 q5_K f16 q3_K iq4_xs q5_1 bf16 q2_K mxfp4}"
# The plain-path types also at 33 activation rows, which reach the per-call tiles and the
# wide GEMMs (ggml keeps these rows plain too).
LONG_TYPES="${LONG_TYPES:-q2_K q3_K iq4_xs q5_1 bf16 f16}"
NEW_TYPES="${NEW_TYPES:-iq2_xxs:16 iq2_xs:17 iq2_s:22 iq3_xxs:18 iq3_s:21 iq1_s:19 iq1_m:29 tq1_0:34 tq2_0:35 mxfp4:39 nvfp4:40 q1_0:41 q2_0:42}"
OUT="$(cd "$(dirname "$0")/.." && pwd)/crates/qrepack/tests/fixtures/ggml"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
cp "$PEER_SRC" "$TMP/ggml_mm_bench.cpp"
(cd "$TMP" && patch -s ggml_mm_bench.cpp < "$HERE/ggml_mm_bench_kquants.patch")
g++ -O2 -march=native -std=gnu++17 -pthread -I"$PEER_CPP" -I"$PEER_CPP/ggml-cpu" \
  "$TMP/ggml_mm_bench.cpp" "$PEER_LIB" -o "$TMP/bench" -ldl -lm
mkdir -p "$OUT"
for t in $TYPES; do
  for r in on off; do
    "$TMP/bench" --type "$t" --M 16 --K 512 --N 7 --threads 1 --repack "$r" --reps 1 --dump "$TMP/${t}_$r" >/dev/null
    mkdir -p "$OUT/${t}_$r"
    cp "$TMP/${t}_$r/w_q.bin" "$TMP/${t}_$r/y_f32.bin" "$OUT/${t}_$r/"
    if [ -f "$TMP/${t}_$r/w_repacked.bin" ]; then
      cp "$TMP/${t}_$r/w_repacked.bin" "$TMP/${t}_$r/xq_repacked.bin" "$OUT/${t}_$r/"
    fi
    grep '^layout=' "$TMP/${t}_$r/meta.txt" > "$OUT/${t}_$r/layout.txt"
  done
  # The activations depend on the seed only: every type's dump has the same.
  cp "$TMP/${t}_on/x_f32.bin" "$OUT/x_16x512x7.bin"
done
for t in $LONG_TYPES; do
  "$TMP/bench" --type "$t" --M 16 --K 512 --N 33 --threads 1 --repack off --reps 1 --dump "$TMP/${t}_n33" >/dev/null
  mkdir -p "$OUT/${t}_n33"
  cp "$TMP/${t}_n33/w_q.bin" "$TMP/${t}_n33/y_f32.bin" "$OUT/${t}_n33/"
  grep '^layout=' "$TMP/${t}_n33/meta.txt" > "$OUT/${t}_n33/layout.txt"
  cp "$TMP/${t}_n33/x_f32.bin" "$OUT/x_16x512x33.bin"
done
gcc -O2 -march=native -ffp-contract=off -std=gnu11 -I"$PEER_CPP" -c "$HERE/make_quant_fixtures.c" -o "$TMP/deq.o"
g++ -pthread "$TMP/deq.o" "$PEER_LIB" -o "$TMP/deq" -ldl -lm
for p in $NEW_TYPES; do
  t="${p%%:*}"
  id="${p##*:}"
  "$TMP/bench" --type "$t" --M 16 --K 512 --N 7 --threads 1 --repack off --reps 1 --dump "$TMP/${t}_off" >/dev/null
  mkdir -p "$OUT/${t}_off"
  cp "$TMP/${t}_off/w_q.bin" "$TMP/${t}_off/y_f32.bin" "$OUT/${t}_off/"
  grep '^layout=' "$TMP/${t}_off/meta.txt" > "$OUT/${t}_off/layout.txt"
  "$TMP/deq" "$id" deq 16 512 "$OUT/${t}_off/w_q.bin" "$OUT/${t}_off/w_deq.f32"
  cp "$TMP/${t}_off/x_f32.bin" "$OUT/x_16x512x7.bin"
done
gcc -std=gnu11 -I"$PEER_CPP" "$HERE/dump_ggml_grids.c" -o "$TMP/dump_grids"
mkdir -p "$OUT/../grids"
"$TMP/dump_grids" "$OUT/../grids/tables.bin"

#!/usr/bin/env bash
# Regenerates crates/qrepack/tests/fixtures/ggml from ggml's own mul_mat (the peer benchmark).
# Needs the peer build: ../shared/peer/build.sh (binary in $WORK/bin, default /tmp/ggml-peer).
#
# The stock harness dumps the activations of every repacked type but Q4_K as Q8_0, while ggml's
# q2_K_8x8 kernels read Q8_K quads; so the harness is rebuilt here with
# scripts/ggml_mm_bench_kquants.patch (as for the ARM fixtures; it names Q2_K too) against the
# peer's libggml-peer.a. For the other types its dumps are byte-identical to the stock one's.
# TYPES="q2_K" LONG_TYPES="" regenerates only those types' directories.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BENCH="${BENCH:-${WORK:-/tmp/ggml-peer}/bin/ggml_mm_bench}"
PEER_ROOT="$(cd "$(dirname "$(readlink -f "$BENCH")")/.." && pwd)"
PEER_LIB="${PEER_LIB:-$PEER_ROOT/build-1.12.2/libggml-peer.a}"
PEER_CPP="${PEER_CPP:-$PEER_ROOT/src/v1.12.2/package/cpp}"
PEER_SRC="${PEER_SRC:-$HERE/../../shared/peer/ggml_mm_bench.cpp}"
TYPES="${TYPES:-q4_0 q4_K iq4_nl q8_0 q5_0 q6_K q4_1 q5_K f16 q3_K iq4_xs q5_1 bf16 q2_K}"
# The plain-path types also at 33 activation rows, which reach the per-call tiles and the
# wide GEMMs (ggml keeps these rows plain too).
LONG_TYPES="${LONG_TYPES:-q2_K q3_K iq4_xs q5_1 bf16 f16}"
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

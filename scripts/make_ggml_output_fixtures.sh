#!/usr/bin/env bash
# Regenerates crates/qrepack/tests/fixtures/ggml from ggml's own mul_mat (the peer benchmark).
# Needs the peer build: ../shared/peer/build.sh (binary in $WORK/bin, default /tmp/ggml-peer).
set -euo pipefail
BENCH="${BENCH:-${WORK:-/tmp/ggml-peer}/bin/ggml_mm_bench}"
OUT="$(cd "$(dirname "$0")/.." && pwd)/crates/qrepack/tests/fixtures/ggml"
TMP="$(mktemp -d)"
mkdir -p "$OUT"
for t in q4_0 q4_K iq4_nl q8_0 q5_0 q6_K q4_1 q5_K f16 q3_K iq4_xs q5_1 bf16; do
  for r in on off; do
    "$BENCH" --type "$t" --M 16 --K 512 --N 7 --threads 1 --repack "$r" --reps 1 --dump "$TMP/${t}_$r" >/dev/null
    mkdir -p "$OUT/${t}_$r"
    cp "$TMP/${t}_$r/w_q.bin" "$TMP/${t}_$r/y_f32.bin" "$OUT/${t}_$r/"
    if [ -f "$TMP/${t}_$r/w_repacked.bin" ]; then
      cp "$TMP/${t}_$r/w_repacked.bin" "$TMP/${t}_$r/xq_repacked.bin" "$OUT/${t}_$r/"
    fi
    grep '^layout=' "$TMP/${t}_$r/meta.txt" > "$OUT/${t}_$r/layout.txt"
  done
done
cp "$TMP/q4_0_on/x_f32.bin" "$OUT/x_16x512x7.bin"
# The plain-path types also at 33 activation rows, which reach the per-call tiles and the
# wide GEMMs (ggml keeps these rows plain too).
for t in q2_K q3_K iq4_xs q5_1 bf16 f16; do
  "$BENCH" --type "$t" --M 16 --K 512 --N 33 --threads 1 --repack off --reps 1 --dump "$TMP/${t}_n33" >/dev/null
  mkdir -p "$OUT/${t}_n33"
  cp "$TMP/${t}_n33/w_q.bin" "$TMP/${t}_n33/y_f32.bin" "$OUT/${t}_n33/"
  grep '^layout=' "$TMP/${t}_n33/meta.txt" > "$OUT/${t}_n33/layout.txt"
done
cp "$TMP/q3_K_n33/x_f32.bin" "$OUT/x_16x512x33.bin"
rm -rf "$TMP"

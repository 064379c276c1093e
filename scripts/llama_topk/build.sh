#!/usr/bin/env bash
# Builds llama_topk (llama.cpp's greedy tokens and top-K logits, the reference side of
# scripts/teacher_forced.py) against the llama.cpp that ../shared/llamacpp/build.sh built.
# Usage: scripts/llama_topk/build.sh [LLAMA_DIR]   (default ${TMPDIR:-/tmp}/llamacpp/src/llama.cpp)
# Output: $LLAMA_DIR/build/bin/llama_topk
set -euo pipefail
LLAMA="${1:-${TMPDIR:-/tmp}/llamacpp/src/llama.cpp}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ -f "$LLAMA/build/bin/libllama.so" ] || { echo "no libllama.so under $LLAMA/build/bin: run ../shared/llamacpp/build.sh first" >&2; exit 1; }
g++ -O2 -std=c++17 -I"$LLAMA/include" -I"$LLAMA/ggml/include" "$HERE/llama_topk.cpp" \
  -L"$LLAMA/build/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA/build/bin" \
  -o "$LLAMA/build/bin/llama_topk"
echo "$LLAMA/build/bin/llama_topk"

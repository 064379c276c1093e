#!/usr/bin/env bash
# llama.cpp's token ids for the tokenizer test's vocabularies and texts, as the fixture
# crates/qrepack-candle/tests/fixtures/llama_cpp_token_ids.txt holds them.
#   QREPACK_TINY_DIR=/tmp/tiny cargo test --release -p qrepack-candle --test tokenizer \
#       write_bpe_files -- --ignored
#   scripts/llama_token_ids.sh /tmp/tiny > crates/qrepack-candle/tests/fixtures/llama_cpp_token_ids.txt
# Needs scripts/llama_topk/build.sh (LLAMA_DIR as there).
set -euo pipefail
DIR="$1"
LLAMA="${LLAMA_DIR:-${TMPDIR:-/tmp}/llamacpp/src/llama.cpp}"
TOPK="$LLAMA/build/bin/llama_topk"
echo "# llama.cpp $(git -C "$LLAMA" log -1 --format=%h 2>/dev/null || echo unknown): pre <TAB> text <TAB> ids"
for f in "$DIR"/tiny-bpe-*.gguf; do
  pre="${f##*/tiny-bpe-}"; pre="${pre%.gguf}"
  i=0
  while IFS= read -r text; do
    # the dot keeps a trailing newline through the command substitution
    t="$(printf '%b.' "$text")"; t="${t%.}"
    ids=$("$TOPK" "$f" "$t" 0 1 | python3 -c 'import json,sys; print(",".join(map(str, json.loads(sys.stdin.readline())["prompt"])))')
    printf '%s\t%d\t%s\n' "$pre" "$i" "$ids"
    i=$((i + 1))
  done < "$DIR/tiny-bpe-texts.txt"
done

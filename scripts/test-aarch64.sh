#!/usr/bin/env bash
# The library's tests for aarch64-unknown-linux-gnu under qemu-aarch64, once per CPU model:
#   max              NEON + dotprod + i8mm + SVE at qemu's default 512-bit length: every NEON
#                    kernel set, each capped below it; the sve set must fall back (i8mm)
#   neoverse-n1      NEON + dotprod: the 4x4 layouts, no i8mm
#   cortex-a72       NEON only: plain layouts with the NEON vec_dots
# then, for the SVE vector lengths, only the unit, kernel and fixture tests (--lib,
# tests/layouts.rs, tests/arm_fixtures.rs), which build every layout once per set the model has:
#   max,sve256=on    the sve set (256-bit SVE with i8mm): q4_0 -> q4_0_8x8 with SVE kernels
#   max,sve128=on    SVE at 128 bits: the sve set must fall back to i8mm
# Each run checks that detection finds the best set the model has (QREPACK_EXPECT_BEST) and tests
# every set it has against scalar and the f64 reference, and against the fixtures from ggml's ARM
# build. Cross toolchain from Debian packages (scripts/aarch64-toolchain.sh).
# Usage: scripts/test-aarch64.sh [cpu-model ...]   (default: all five above; a model given here
# runs every test)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/aarch64-toolchain.sh
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
# Debian's compiler keeps its own build directory, apart from rustup's x86-64 artefacts.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/debian-rust}"
# model -> the best set it must detect
declare -A best=([max]=i8mm [neoverse-n1]=dotprod [cortex-a72]=neon
  [max,sve256=on]=sve [max,sve128=on]=i8mm)
full=("$@")
kernels_only=()
if [ ${#full[@]} -eq 0 ]; then
  full=(max neoverse-n1 cortex-a72)
  kernels_only=("max,sve256=on" "max,sve128=on")
fi
build() {
  PATH=/usr/bin:$PATH /usr/bin/cargo test --release --target aarch64-unknown-linux-gnu -p qrepack "$@"
}
run() { # cpu-model [cargo test arguments]
  local cpu=$1 t0
  shift
  t0=$(date +%s)
  QREPACK_EXPECT_BEST="${best[$cpu]:-}" \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu" build "$@"
  echo "aarch64 tests under qemu -cpu $cpu: $(( $(date +%s) - t0 )) s"
}
start=$(date +%s)
build --no-run
for cpu in "${full[@]}"; do
  run "$cpu"
done
for cpu in "${kernels_only[@]}"; do
  run "$cpu" --lib --test layouts --test arm_fixtures
done
echo "aarch64 total (build + $(( ${#full[@]} + ${#kernels_only[@]} )) models): $(( $(date +%s) - start )) s"

#!/usr/bin/env bash
# The library's tests for aarch64-unknown-linux-gnu under qemu-aarch64, once per CPU model:
#   max          NEON + dotprod + i8mm (+ SVE): every ARM kernel set, and each capped below it
#   neoverse-n1  NEON + dotprod: the 4x4 layouts, no i8mm
#   cortex-a72   NEON only: plain layouts with the NEON vec_dots
# Each run tests every set the model has against scalar and the f64 reference, and against the
# fixtures from ggml's ARM build. Cross toolchain from Debian packages (scripts/aarch64-toolchain.sh).
# Usage: scripts/test-aarch64.sh [cpu-model ...]   (default: max neoverse-n1 cortex-a72)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/aarch64-toolchain.sh
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
# Debian's compiler keeps its own build directory, apart from rustup's x86-64 artefacts.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/debian-rust}"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(max neoverse-n1 cortex-a72)
build() {
  PATH=/usr/bin:$PATH /usr/bin/cargo test --release --target aarch64-unknown-linux-gnu -p qrepack "$@"
}
start=$(date +%s)
build --no-run
for cpu in "${models[@]}"; do
  t0=$(date +%s)
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu" build
  echo "aarch64 tests under qemu -cpu $cpu: $(( $(date +%s) - t0 )) s"
done
echo "aarch64 total (build + ${#models[@]} models): $(( $(date +%s) - start )) s"

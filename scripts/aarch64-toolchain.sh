#!/usr/bin/env bash
# Installs, when missing, what building and testing for aarch64 on an x86-64 Debian 12 machine
# needs: Debian's current Rust (rustc-web, 1.96) with its arm64 standard library and clippy, the
# cross linker, and qemu-user. Debian packages only; idempotent. Then, for example:
#   export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
#   export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max"
#   RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc /usr/bin/cargo test --release \
#     --target aarch64-unknown-linux-gnu -p qrepack
# (never pass -L to qemu: the multiarch loader is the right one).
set -euo pipefail

have() {
  [ -x /usr/bin/rustc ] && /usr/bin/rustc --print target-libdir --target aarch64-unknown-linux-gnu \
      >/dev/null 2>&1 && [ -d "$(/usr/bin/rustc --print target-libdir --target aarch64-unknown-linux-gnu)" ] \
    && [ -x /usr/bin/cargo-clippy ] && command -v aarch64-linux-gnu-gcc >/dev/null \
    && command -v qemu-aarch64 >/dev/null
}

if have; then
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
  rustc-web cargo-web rust-web-clippy libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu \
  libc6-dev-arm64-cross qemu-user >/dev/null
have

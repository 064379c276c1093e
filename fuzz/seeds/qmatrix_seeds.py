#!/usr/bin/env python3
"""Writes seed inputs for the `qmatrix` fuzz target into the folder given (default
`corpus/qmatrix`): every 256-weight type with 1 and 3 rows of 9 and 11 blocks, against 1 and 5
activation rows, the quant bytes random.

Random mutation seldom grows an input to the several kilobytes such rows take, so without these
seeds the batch-1 kernels that work several blocks ahead (past 8 blocks) are rarely reached.
The header bytes follow `fuzz_targets/qmatrix.rs`: type index into `GgmlType::ALL`, layout byte
(0x80: the best layout for the CPU), rows - 1, blocks - 1, column remainder, activation rows - 1.
"""
import os
import random
import sys

# bytes of one block of the 256-weight types, by their name in `GgmlType`
BLOCK_BYTES = {
    "Q2_K": 84, "Q3_K": 110, "Q4_K": 144, "Q5_K": 176, "Q6_K": 210, "IQ2_XXS": 66,
    "IQ2_XS": 74, "IQ3_XXS": 98, "IQ1_S": 50, "IQ3_S": 110, "IQ2_S": 82, "IQ4_XS": 136,
    "IQ1_M": 56, "TQ1_0": 54, "TQ2_0": 66,
}
TYPES_RS = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "qrepack", "src", "types.rs")


def all_types() -> list:
    """The names in `GgmlType::ALL`, in order, read from the source."""
    with open(TYPES_RS) as f:
        text = f.read()
    body = text[text.index("pub const ALL"):]
    body = body[body.index("= [") + 3:body.index("];")]
    return [t.strip().removeprefix("GgmlType::") for t in body.split(",") if t.strip()]


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "corpus/qmatrix"
    os.makedirs(out, exist_ok=True)
    rng = random.Random(7)
    order = all_types()
    for name, block_bytes in BLOCK_BYTES.items():
        index = order.index(name)
        for rows in (1, 3):
            for blocks in (9, 11):
                for n in (1, 5):
                    body = bytes(rng.getrandbits(8) for _ in range(rows * blocks * block_bytes))
                    header = bytes([index, 0x80, rows - 1, blocks - 1, 0, n - 1])
                    with open(os.path.join(out, f"{name}_{rows}x{blocks}_{n}"), "wb") as f:
                        f.write(header + body)


if __name__ == "__main__":
    main()

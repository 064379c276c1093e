//! Q6_K interleaved layouts: ggml's `q6_K_8x8` and `q6_K_8x4` (its ARM layouts,
//! `block_q6_Kx8`, [`BlockQ6Kx8Ggml`]) and qrepack's own `q6_K_8x8_x86`.
//!
//! ggml's (`Q6K8x8`, `Q6K8x4`): the rows' scales, the 16 group scales as `scales[8g + r]`, then
//! each row's 128 `ql` and 64 `qh` bytes, each array in chunks of 8 or 4 bytes taken round-robin
//! from the rows.
//!
//! qrepack's `q6_K_8x8_x86` (`Q6K8x8X86`, its AVX2/AVX-512 layout): eight rows' super-blocks,
//! with the 6-bit quants re-packed so that AVX2 rebuilds them with few shifts and masks.
//!
//! Byte layout of one packed block (1680 bytes = 8 x 210, [`BlockQ6Kx8`]):
//!
//! * `d[8]`: the rows' f16 scales.
//! * `scales[128]`: the signed 8-bit scales of the 16-weight groups, per group: `scales[8g + r]`
//!   is group `g` of row `r`.
//! * `qa`, `qb`, `qc` (512 bytes each): with `u_w` (0..64) the unsigned quant of weight `w` of a
//!   row, each half `H` (0..2) of a row and position `l` (0..32) give four quants
//!   `q_s = u_(128H + 32s + l)`, `s` = 0..4, stored in three bytes at position `n = 32H + l`:
//!   `qa = q0 | (q2 >> 4) << 6`, `qb = q1 | (q3 >> 4) << 6`, `qc = (q2 & 15) | (q3 & 15) << 4`.
//!   So `q0 = qa & 63`, `q1 = qb & 63`, `q2 = (qc & 15) | (qa >> 2) & 48` and
//!   `q3 = qc >> 4 | (qb >> 2) & 48`. Each array holds the rows' 64 bytes in chunks of 8 taken
//!   round-robin from the rows: `qa[64c + 8r + i]` is byte `8c + i` of row `r`; as 32-byte
//!   vectors, vector `2c + h` holds chunk `c` of rows `4h..4h + 4`.
//!
//! Arithmetic: per row and super-block `d_w·d_a·Σ_g sc_g Σ_(i in g) (u_i - 32)·a_i` in exact
//! integers, the same as ggml's `vec_dot_q6_K_q8_K` (activation: Q8_K, four rows interleaved in
//! 8-byte chunks). The `-32` part is `32·Σ_g sc_g·bsum_g` from the activation's group sums.

use bytemuck::Zeroable;

use crate::activation::{ArmQ8KInterleaved, Q8KInterleaved};
use crate::blocks::{BlockQ6K, BlockQ6Kx8, BlockQ6Kx8Ggml};
use crate::layout::q4_k::interleaved_index;
use crate::layout::{deinterleave_quants, interleave_quants, Layout, PackedLayout};
use crate::types::GgmlType;

/// qrepack's `q6_K_8x8_x86` layout (quants re-packed 4 in 3 bytes).
pub struct Q6K8x8X86;

/// ggml's Q6_K layouts, interleaved in chunks of `IL` bytes.
pub struct Q6KArm<const IL: usize>;
/// ggml's `q6_K_8x8` (i8mm on ARM).
pub type Q6K8x8 = Q6KArm<8>;
/// ggml's `q6_K_8x4` (dotprod on ARM).
pub type Q6K8x4 = Q6KArm<4>;

/// The unsigned 6-bit quant (0..64) of weight `e` of row `r` of one of ggml's blocks
/// interleaved by `il`.
#[inline]
pub(crate) fn arm_packed_quant(p: &BlockQ6Kx8Ggml, il: usize, r: usize, e: usize) -> u8 {
    let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
    let low = p.ql[interleaved_index(il, r, 64 * h + 32 * (s % 2) + l)] >> (4 * (s / 2));
    let high = p.qh[interleaved_index(il, r, 32 * h + l)] >> (2 * s);
    (low & 0x0f) | ((high & 3) << 4)
}

impl<const IL: usize> PackedLayout for Q6KArm<IL> {
    const LAYOUT: Layout = if IL == 4 {
        Layout::Q6_K_8x4
    } else {
        Layout::Q6_K_8x8
    };
    const WEIGHT_TYPE: GgmlType = GgmlType::Q6_K;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = IL;
    type Weight = BlockQ6K;
    type Packed = BlockQ6Kx8Ggml;
    type Act = ArmQ8KInterleaved<IL>;

    fn pack(rows: &[BlockQ6K]) -> BlockQ6Kx8Ggml {
        let mut out = BlockQ6Kx8Ggml::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            for g in 0..16 {
                out.scales[8 * g + r] = b.scales[g];
            }
        }
        let ql: Vec<&[u8]> = rows.iter().map(|r| &r.ql[..]).collect();
        interleave_quants(&ql, IL, 0, &mut out.ql);
        let qh: Vec<&[u8]> = rows.iter().map(|r| &r.qh[..]).collect();
        interleave_quants(&qh, IL, 0, &mut out.qh);
        out
    }

    fn unpack(p: &BlockQ6Kx8Ggml, rows: &mut [BlockQ6K]) {
        for (r, b) in rows.iter_mut().enumerate() {
            b.d = p.d[r];
            for g in 0..16 {
                b.scales[g] = p.scales[8 * g + r];
            }
        }
        let mut ql: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.ql[..]).collect();
        deinterleave_quants(&p.ql, IL, 0, &mut ql);
        let mut qh: Vec<&mut [u8]> = rows.iter_mut().map(|r| &mut r.qh[..]).collect();
        deinterleave_quants(&p.qh, IL, 0, &mut qh);
    }
}

const ROWS: usize = 8;

/// The 256 unsigned quants (0..64) of a Q6_K block, in weight order.
#[cfg(test)]
fn quants(b: &BlockQ6K) -> [u8; 256] {
    let mut u = [0u8; 256];
    for (w, q) in u.iter_mut().enumerate() {
        let (h, s, l) = (w / 128, (w % 128) / 32, w % 32);
        let low = (b.ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 0x0f;
        let high = (b.qh[32 * h + l] >> (2 * s)) & 3;
        *q = low | (high << 4);
    }
    u
}

/// Inverse of [`quants`]: the `ql` and `qh` fields.
fn split_quants(u: &[u8; 256], b: &mut BlockQ6K) {
    b.ql = [0; 128];
    b.qh = [0; 64];
    for (w, &q) in u.iter().enumerate() {
        let (h, s, l) = (w / 128, (w % 128) / 32, w % 32);
        b.ql[64 * h + 32 * (s % 2) + l] |= (q & 0x0f) << (4 * (s / 2));
        b.qh[32 * h + l] |= (q >> 4) << (2 * s);
    }
}

/// Index in `qa`/`qb`/`qc` of position `n` (0..64) of row `r`.
#[inline]
fn packed_index(r: usize, n: usize) -> usize {
    64 * (n / 8) + 8 * r + n % 8
}

/// The unsigned quant (0..64) of weight `w` of row `r` of a packed block.
#[inline]
pub(crate) fn packed_quant(p: &BlockQ6Kx8, r: usize, w: usize) -> u8 {
    let (h, s, l) = (w / 128, (w % 128) / 32, w % 32);
    let idx = packed_index(r, 32 * h + l);
    let (a, b, c) = (p.qa[idx], p.qb[idx], p.qc[idx]);
    match s {
        0 => a & 63,
        1 => b & 63,
        2 => (c & 15) | ((a >> 2) & 48),
        _ => (c >> 4) | ((b >> 2) & 48),
    }
}

impl PackedLayout for Q6K8x8X86 {
    const LAYOUT: Layout = Layout::Q6_K_8x8_x86;
    const WEIGHT_TYPE: GgmlType = GgmlType::Q6_K;
    const ROWS: usize = ROWS;
    const INTERLEAVE: usize = 8;
    type Weight = BlockQ6K;
    type Packed = BlockQ6Kx8;
    type Act = Q8KInterleaved;

    /// Position `n = 32h + l` of a row gathers the four weights `128h + 32s + l`: their low
    /// nibbles are the two nibbles of `ql[64h + l]` (s = 0, 2) and of `ql[64h + 32 + l]`
    /// (s = 1, 3), their high bits the four bit pairs of `qh[32h + l]`, so each packed byte is
    /// a few shifts of those three bytes (no 6-bit quant is assembled on the way; this runs
    /// over every weight of a model at load).
    fn pack(rows: &[BlockQ6K]) -> BlockQ6Kx8 {
        let mut out = BlockQ6Kx8::zeroed();
        for (r, b) in rows.iter().enumerate() {
            out.d[r] = b.d;
            for g in 0..16 {
                out.scales[8 * g + r] = b.scales[g];
            }
            // positions n = 8j .. 8j + 8 of the row sit side by side in the packed block
            for j in 0..8 {
                let (h, l) = (j / 4, 8 * (j % 4));
                let eight = |s: &[u8]| -> [u8; 8] { s[..8].try_into().expect("8 bytes") };
                let lo02 = eight(&b.ql[64 * h + l..]);
                let lo13 = eight(&b.ql[64 * h + 32 + l..]);
                let hi = eight(&b.qh[32 * h + l..]);
                let at = packed_index(r, 8 * j);
                for k in 0..8 {
                    // weights s = 0 and 1: low nibble, their high bit pair, then that of s + 2
                    out.qa[at + k] =
                        (lo02[k] & 15) | ((hi[k] & 3) << 4) | (((hi[k] >> 4) & 3) << 6);
                    out.qb[at + k] =
                        (lo13[k] & 15) | (((hi[k] >> 2) & 3) << 4) | (((hi[k] >> 6) & 3) << 6);
                    // weights s = 2 and 3: their low nibbles
                    out.qc[at + k] = (lo02[k] >> 4) | (lo13[k] & 0xf0);
                }
            }
        }
        out
    }

    fn unpack(p: &BlockQ6Kx8, rows: &mut [BlockQ6K]) {
        for (r, b) in rows.iter_mut().enumerate() {
            b.d = p.d[r];
            for g in 0..16 {
                b.scales[g] = p.scales[8 * g + r];
            }
            let mut u = [0u8; 256];
            for (w, q) in u.iter_mut().enumerate() {
                *q = packed_quant(p, r, w);
            }
            split_quants(&u, b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocks::F16Bits;

    #[test]
    fn packed_quants_are_the_rows_quants() {
        let mut s = 11u64;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 33) as u8
        };
        let rows: Vec<BlockQ6K> = (0..ROWS)
            .map(|r| BlockQ6K {
                ql: std::array::from_fn(|_| next()),
                qh: std::array::from_fn(|_| next()),
                scales: std::array::from_fn(|_| next() as i8),
                d: F16Bits::from_f32(0.01 * (r + 1) as f32),
            })
            .collect();
        let p = Q6K8x8X86::pack(&rows);
        for (r, row) in rows.iter().enumerate() {
            let u = quants(row);
            for (w, &q) in u.iter().enumerate() {
                assert_eq!(packed_quant(&p, r, w), q, "row {r} weight {w}");
            }
            let mut back = BlockQ6K::zeroed();
            split_quants(&u, &mut back);
            assert_eq!((back.ql, back.qh), (row.ql, row.qh));
        }
        let mut back = vec![BlockQ6K::zeroed(); ROWS];
        Q6K8x8X86::unpack(&p, &mut back);
        assert_eq!(back, rows);
    }
}

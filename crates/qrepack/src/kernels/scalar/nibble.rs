//! Scalar block product for the 32-weight nibble layouts (Q4_0 and IQ4_NL interleaved): each
//! nibble indexes a 16-entry table of integer weights, one f16 scale per row and block.

use crate::blocks::{BlockQ8_0, F16Bits};

/// Adds one block column (`R` rows interleaved in `IL`-byte chunks) times one Q8_0 block to `acc`.
///
/// Row `j`'s byte `b` sits at `(b / IL) * R * IL + j * IL + b % IL`; its low nibble is weight `b`
/// and its high nibble weight `b + 16`.
#[inline]
pub(crate) fn block_dot<const R: usize, const IL: usize>(
    table: &[i8; 16],
    d: &[F16Bits],
    qs: &[u8],
    a: &BlockQ8_0,
    acc: &mut [f32],
) {
    let da = a.d.to_f32();
    let mut sumi = [0i32; R];
    for (c, chunk) in qs.chunks_exact(IL).enumerate() {
        let j = c % R;
        let base = (c / R) * IL;
        for (i, &byte) in chunk.iter().enumerate() {
            let lo = table[(byte & 0x0f) as usize] as i32;
            let hi = table[(byte >> 4) as usize] as i32;
            sumi[j] += lo * a.qs[base + i] as i32 + hi * a.qs[base + i + 16] as i32;
        }
    }
    for ((o, s), dw) in acc.iter_mut().zip(sumi).zip(d) {
        *o += s as f32 * dw.to_f32() * da;
    }
}

//! Scalar block product for the 32-weight nibble layouts (Q4_0, IQ4_NL and MXFP4 interleaved):
//! each nibble indexes a 16-entry table of integer weights, one scale per row and block (an f16,
//! or MXFP4's E8M0 exponent).

use crate::blocks::BlockQ8_0;

/// Adds one block column (`R` rows interleaved in `IL`-byte chunks) times one Q8_0 block to `acc`;
/// `scale(j)` is row `j`'s scale.
///
/// Row `j`'s byte `b` sits at `(b / IL) * R * IL + j * IL + b % IL`; its low nibble is weight `b`
/// and its high nibble weight `b + 16`.
#[inline]
pub(crate) fn block_dot<const R: usize, const IL: usize>(
    table: &[i8; 16],
    scale: impl Fn(usize) -> f32,
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
    for (j, (o, s)) in acc.iter_mut().zip(sumi).enumerate() {
        *o += s as f32 * scale(j) * da;
    }
}

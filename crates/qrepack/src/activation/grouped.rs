//! Plain Q8_0 rows grouped per weight block, for the weight types whose block spans several
//! Q8_0 blocks (ggml pairs them with Q8_0 all the same): the bytes are plain Q8_0 rows.

use super::{quantize_block_q8_0, ActFormat};
use crate::blocks::BlockQ8_0;

plain_format!(
    /// Plain Q8_0 rows in pairs of blocks (the vec_dot type of NVFP4 and Q2_0, 64-weight blocks).
    PlainQ8_0x2, [BlockQ8_0; 2], 64, |x, out| {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(64)) {
        for (q, c) in b.iter_mut().zip(xs.chunks_exact(32)) {
            *q = quantize_block_q8_0(c);
        }
    }
});
plain_format!(
    /// Plain Q8_0 rows in fours of blocks (the vec_dot type of Q1_0, 128-weight blocks).
    PlainQ8_0x4, [BlockQ8_0; 4], 128, |x, out| {
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(128)) {
        for (q, c) in b.iter_mut().zip(xs.chunks_exact(32)) {
            *q = quantize_block_q8_0(c);
        }
    }
});

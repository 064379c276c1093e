//! Checksums of tensor data ([`fnv1a64`], [`checksum64`]).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

/// 64-bit FNV-1a of `bytes` (the checksum of repack cache tensors).
///
/// ```
/// assert_eq!(qrepack::gguf::fnv1a64(b""), 0xcbf29ce484222325);
/// assert_eq!(qrepack::gguf::fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
/// ```
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Checksum of a repack cache tensor: FNV-1a-style over 8-byte little-endian words in four
/// interleaved lanes (independent multiply chains, so it runs at memory speed), per 1 MiB chunk
/// in parallel; the chunk digests and the length are then combined with FNV-1a. Detects
/// truncation, reordering and any changed byte with overwhelming probability.
///
/// ```
/// use qrepack::gguf::checksum64;
/// assert_ne!(checksum64(&[0; 8]), checksum64(&[0; 16]));
/// assert_ne!(checksum64(b"abcdefgh"), checksum64(b"abcdefgi"));
/// let big = vec![7u8; 3 << 20];
/// let mut changed = big.clone();
/// changed[2 << 20] ^= 1;
/// assert_ne!(checksum64(&big), checksum64(&changed));
/// ```
pub fn checksum64(bytes: &[u8]) -> u64 {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 20;
    let digests: Vec<u64> = bytes.par_chunks(CHUNK).map(chunk_digest).collect();
    let mut h = FNV_OFFSET;
    for d in digests.iter().chain(std::iter::once(&(bytes.len() as u64))) {
        h ^= d;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn chunk_digest(chunk: &[u8]) -> u64 {
    let mut lanes = [FNV_OFFSET, FNV_OFFSET ^ 1, FNV_OFFSET ^ 2, FNV_OFFSET ^ 3];
    let mut blocks = chunk.chunks_exact(32);
    for b in &mut blocks {
        for (lane, w) in lanes.iter_mut().zip(b.chunks_exact(8)) {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            *lane = (*lane ^ u64::from_le_bytes(a)).wrapping_mul(FNV_PRIME);
        }
    }
    let mut h = FNV_OFFSET;
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(FNV_PRIME);
    }
    for &b in blocks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
    }
    h
}

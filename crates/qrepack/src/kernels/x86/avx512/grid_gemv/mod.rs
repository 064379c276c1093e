//! Plain IQ2_S, IQ1_M and IQ3_S (`iq3_s`) rows against Q8_K with `vpdpbusd`: the GEMVs of this
//! set (the one-quad GEMM stays the AVX2 set's, larger batches take the `grid_tiles`).
//!
//! A block is four registers of 64 weights, each eight 8-byte grid points loaded one by one. A
//! grid weight is made the unsigned byte `u = w + bias`: the IQ2_S signs are one bit per
//! weight, so 64 of them load straight into a mask register and `bias - g` replaces `bias + g`
//! under it; IQ1_M's points come from a copy of the grid holding `8 (q + 1)` for each value `q`
//! and `1 + δ` is added under the mask of its positive shifts. One `vpdpbusd` then multiplies
//! the 64 bytes with the activations, starting from `-bias Σ a` of each 4-byte lane, which is
//! worked out once per call with the activations themselves (`prepared_gemv`). For IQ2_S every
//! 4-byte lane lies in one 16-weight scale group, so one `vpmulld` by the scales spread to their
//! lanes (`vpermd` from one vector of the block's 16 odd scales) finishes the register.
//!
//! IQ1_M's registers are the even and the odd points of each half block, so that lanes `2 h`,
//! `2 h + 1` of both registers of a half lie in scale group `h` of that half: two `vpdpbusd`
//! chained and one `vpmulld` per half, the activations put in that order once per call. Its
//! 11-bit indices are made with byte shuffles a few blocks ahead and read back from memory
//! (`prepared_gemv::AHEAD_BLOCKS`): worked out in scalar code per point, as before, they were
//! the limit (4096x4096, one thread, weights hot, shared Zen 4, 2026-12-06: 28 GFLOP/s, 38
//! with the indices ahead; extracted from the register with `vpextrw`, or gathered, no faster).
//! IQ2_S's 10-bit indices are made the same way, a word shuffle and shift of `qh` over the
//! widened `qs` (Zen 5, 2026-12-08: one thread 0.77 -> 0.57 ms, two threads from DRAM 0.39 ->
//! 0.28 ms on 4096x4096).
//!
//! # Exactness
//!
//! A lane's `vpdpbusd` sum is `Σ w·a` of its four weights exactly (`w` is IQ1_M's `8 q + δ`, at
//! most 9 in magnitude, or IQ2_S's grid value, at most 43; `|a| <= 128`), times an odd scale of
//! at most 31 and summed over the block's four registers (IQ1_M: two lanes of a register pair
//! share a scale): below `2^22`, so the lane holds its
//! share of the block's integer sum and converts to `f32` exactly; the type's constant factor
//! (1/8) is a power of two. Only the order of the `f32` products and sums differs from the
//! portable kernels.

use crate::blocks::{BlockIq1M, BlockIq2S, BlockQ8K};
use crate::kernel_api::Kernels;
use crate::kernels::x86::{target_entries, Avx512};

use super::grid_tiles;
use crate::kernels::x86::prepared_gemv;

mod imp {
    use std::arch::x86_64::*;
    use std::mem::MaybeUninit;

    use crate::blocks::{BlockIq1M, BlockIq2S, BlockQ8K, F16Bits};
    use crate::kernels::x86::prepared_gemv::PreparedGemv;
    use crate::quant::grid::iq1_m_scale;
    use crate::quant::grids::{IQ1S_GRID, IQ2S_GRID};

    /// Activation blocks (256 columns each) prepared at a time (8192 columns; 18 KiB of
    /// stack).
    pub(super) const PREP_BLOCKS: usize = 32;

    /// A Q8_K block as four registers, `-bias Σ a` of each of their 4-byte lanes and the
    /// block's scale.
    #[derive(Clone, Copy)]
    pub(super) struct Prepared {
        act: [__m512i; 4],
        neg_bias: [__m512i; 4],
        d: __m512,
    }

    /// A placeholder block.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn empty() -> Prepared {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            Prepared {
                act: [_mm512_setzero_si512(); 4],
                neg_bias: [_mm512_setzero_si512(); 4],
                d: _mm512_setzero_ps(),
            }
        }
    }

    /// `a` with the lane sums for weights stored as `w + BIAS`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI.
    #[inline(always)]
    unsafe fn prepare<const BIAS: i8>(a: &BlockQ8K) -> Prepared {
        // SAFETY: the caller's features; each load reads 64 of the block's 256 quants.
        unsafe {
            let act: [__m512i; 4] =
                std::array::from_fn(|j| _mm512_loadu_si512(a.qs[64 * j..].as_ptr().cast()));
            let neg_bias = act.map(|x| {
                let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(BIAS), x);
                _mm512_sub_epi32(_mm512_setzero_si512(), sum)
            });
            Prepared {
                act,
                neg_bias,
                d: _mm512_set1_ps(a.d),
            }
        }
    }

    /// A 64-byte table of constants as one register.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn table<T: Copy, const N: usize>(t: &[T; N]) -> __m512i {
        const { assert!(std::mem::size_of::<[T; N]>() == 64) };
        // SAFETY: the caller's features; `t` is 64 bytes and `loadu` needs no alignment.
        unsafe { _mm512_loadu_si512(t.as_ptr().cast()) }
    }

    /// The f16 block scale times `factor` times the activations' scale, in every lane.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F and F16C.
    #[inline(always)]
    unsafe fn block_scale(d: F16Bits, factor: f32, p: &Prepared) -> __m512 {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let d = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes(d.0))));
            let d = _mm512_broadcastss_ps(_mm_mul_ss(d, _mm_set_ss(factor)));
            _mm512_mul_ps(d, p.d)
        }
    }

    /// Grid magnitudes `g` with one sign bit per byte as `w + 64`: `64 - g` where the bit is
    /// set, else `64 + g`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 BW.
    #[inline(always)]
    unsafe fn biased(grid: __m512i, signs: u64) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let up = _mm512_add_epi8(grid, _mm512_set1_epi8(64));
            // 128 - (64 + g) wraps to 64 - g.
            _mm512_mask_sub_epi8(up, signs, _mm512_set1_epi8(-128), up)
        }
    }

    /// The odd scales `2 s + 1` of the fields of `bits` bits at `shifts` of `lo` (lanes 0..8)
    /// and `hi` (lanes 8..16).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn odd_fields(lo: u32, hi: u32, shifts: __m512i, bits: i32) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let x = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_set1_epi32(lo as i32)),
                _mm256_set1_epi32(hi as i32),
            );
            let mask = _mm512_set1_epi32((1 << bits) - 1);
            let s = _mm512_and_si512(_mm512_srlv_epi32(x, shifts), mask);
            _mm512_or_si512(_mm512_slli_epi32::<1>(s), _mm512_set1_epi32(1))
        }
    }

    /// The shifts of eight 4-bit fields, twice.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn nibble_shifts() -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28) }
    }

    /// Register `j`'s 64 bytes times the activations, scaled per lane by the entry of
    /// `scales` that `spread` picks, added to `isum`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F, BW and VNNI.
    #[inline(always)]
    unsafe fn scaled_dot(
        isum: __m512i,
        u: __m512i,
        p: &Prepared,
        j: usize,
        scales: __m512i,
        spread: __m512i,
    ) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let dots = _mm512_dpbusd_epi32(p.neg_bias[j], u, p.act[j]);
            let sc = _mm512_permutexvar_epi32(spread, scales);
            _mm512_add_epi32(isum, _mm512_mullo_epi32(dots, sc))
        }
    }

    /// Lane `l` of register `j` takes scale `4 j + l / 4` (one per 16 weights).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn spread16(j: usize) -> __m512i {
        let b = 4 * j as i32;
        let (b1, b2, b3) = (b + 1, b + 2, b + 3);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_setr_epi32(b, b, b, b, b1, b1, b1, b1, b2, b2, b2, b2, b3, b3, b3, b3) }
    }

    /// The `u64` of `b[at..at + 8]`.
    #[inline(always)]
    fn le_u64(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
    }

    /// Eight 8-byte grid points as one register, `point(l)` in bytes `8 l..8 l + 8`.
    ///
    /// Loaded one by one: a gather of them (`vpgatherdq`) measured faster on one thread of the
    /// Zen 4 but did not gain from a second one (IQ1_M 4096x4096, 2 threads, weights from DRAM:
    /// 1.22 ms gathered, 0.60 loaded, 0.82 for the AVX2 kernel).
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn points8(point: impl Fn(usize) -> u64) -> __m512i {
        let p = |l: usize| point(l) as i64;
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe { _mm512_set_epi64(p(7), p(6), p(5), p(4), p(3), p(2), p(1), p(0)) }
    }

    /// The IQ2_S GEMV's blocks.
    pub(super) struct Iq2S;

    /// The word shuffle and shifts that make IQ2_S's 10-bit grid indices in one register: word
    /// `k` takes `qh[k / 4]` shifted so that its bits `2 (k % 4)..+ 2` land on bits 8 and 9.
    #[derive(Clone, Copy)]
    pub(super) struct Iq2SConsts {
        spread: __m512i,
        shifts: __m512i,
    }

    /// `(k / 4, 8 - 2 (k % 4))` for the 32 points `k` of a block.
    const IQ2_S_HIGH_BITS: ([u16; 32], [u16; 32]) = {
        let (mut spread, mut shifts) = ([0u16; 32], [0u16; 32]);
        let mut k = 0;
        while k < 32 {
            spread[k] = (k / 4) as u16;
            shifts[k] = (8 - 2 * (k % 4)) as u16;
            k += 1;
        }
        (spread, shifts)
    };

    impl PreparedGemv for Iq2S {
        type Weight = BlockIq2S;
        type Acc = __m512;
        type Act = BlockQ8K;
        type Prep = Prepared;
        type Consts = Iq2SConsts;
        type Ahead = [u16; 32];

        #[inline(always)]
        unsafe fn empty() -> Prepared {
            // SAFETY: the caller's features.
            unsafe { empty() }
        }

        #[inline(always)]
        unsafe fn consts() -> Iq2SConsts {
            let (spread, shifts) = &IQ2_S_HIGH_BITS;
            // SAFETY: the caller's features.
            let (spread, shifts) = unsafe { (table(spread), table(shifts)) };
            Iq2SConsts { spread, shifts }
        }

        #[inline(always)]
        unsafe fn prepare(a: &BlockQ8K) -> Prepared {
            // SAFETY: the caller's features.
            unsafe { prepare::<64>(a) }
        }

        /// The block's 32 grid indices: worked out per point in scalar code they were most of
        /// the kernel's instructions.
        #[inline(always)]
        unsafe fn ahead(w: &BlockIq2S, c: Iq2SConsts, index: &mut MaybeUninit<[u16; 32]>) {
            // SAFETY: the caller's features; the loads read the block's first 32 `qs` bytes and
            // its 8 `qh` bytes, the store writes the 64 bytes of `index`.
            unsafe {
                let low = _mm512_cvtepu8_epi16(_mm256_loadu_si256(w.qs.as_ptr().cast()));
                let qh = _mm_loadl_epi64(w.qh.as_ptr().cast());
                let qh = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(qh));
                let high = _mm512_sllv_epi16(_mm512_permutexvar_epi16(c.spread, qh), c.shifts);
                // low | (high & 0x300)
                let idx = _mm512_ternarylogic_epi32::<0xf8>(low, high, _mm512_set1_epi16(0x300));
                _mm512_storeu_si512(index.as_mut_ptr().cast(), idx);
            }
        }

        #[inline(always)]
        unsafe fn block(
            w: &BlockIq2S,
            index: &[u16; 32],
            p: &Prepared,
            _: Iq2SConsts,
            acc: __m512,
        ) -> __m512 {
            let sc = u64::from_le_bytes(w.scales);
            // SAFETY: the caller's features; the table reads stay below 1024 (10-bit indices).
            unsafe {
                // Nibble h of the scales weighs weights 16 h..16 h + 16.
                let scales = odd_fields(sc as u32, (sc >> 32) as u32, nibble_shifts(), 4);
                let mut isum = _mm512_setzero_si512();
                for j in 0..4 {
                    let grid = points8(|l| {
                        // A load: see `AHEAD_BLOCKS`.
                        let i = std::ptr::read_volatile(&index[8 * j + l]);
                        *IQ2S_GRID.get_unchecked(usize::from(i))
                    });
                    let u = biased(grid, le_u64(&w.qs, 32 + 8 * j));
                    isum = scaled_dot(isum, u, p, j, scales, spread16(j));
                }
                let d = block_scale(w.d, 0.125, p);
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc)
            }
        }
    }

    /// `2 s + 1` of the 3-bit fields `s` of `2 word` (the low 32 bits) at `shifts + 1`.
    ///
    /// # Safety
    /// The CPU must support AVX-512 F.
    #[inline(always)]
    unsafe fn odd_fields3(word: u64, shifts: __m512i) -> __m512i {
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let s = _mm512_srlv_epi32(_mm512_set1_epi32(word as i32), shifts);
            // (s & 0xe) | 1
            _mm512_ternarylogic_epi32::<0xea>(s, _mm512_set1_epi32(0xe), _mm512_set1_epi32(1))
        }
    }

    /// The IQ1_M GEMV's blocks.
    pub(super) struct Iq1M;

    /// A Q8_K block for IQ1_M: the activations of each weight register in its order (see
    /// [`Iq1M`]), `-9 Σ a` of each 4-byte lane over the register pairs (0, 1) and (2, 3), and the
    /// block's scale times 1/8.
    #[derive(Clone, Copy)]
    pub(super) struct PreparedIq1M {
        act: [__m512i; 4],
        neg_bias: [__m512i; 2],
        d: f32,
    }

    /// The byte shuffles that put the 32 grid indices of an IQ1_M block into 16-bit words in
    /// register order: the low byte from `qs`, the high byte from `qh`.
    #[derive(Clone, Copy)]
    pub(super) struct Iq1MConsts {
        low: __m512i,
        high: __m512i,
    }

    /// Point `l` of register `j`: registers 0 and 1 hold the even and the odd points of the
    /// block's first half, 2 and 3 those of the second.
    const fn iq1_m_point(j: usize, l: usize) -> usize {
        16 * (j / 2) + 2 * l + j % 2
    }

    /// `pshufb` controls (128-bit lane `j` makes register `j`'s eight indices) taking word `l`'s
    /// low byte from `qs[16 (j / 2)..]` and its high byte from `qh` (`-1` zeroes a byte).
    const fn iq1_m_shuffles() -> ([i8; 64], [i8; 64]) {
        let (mut low, mut high) = ([-1i8; 64], [-1i8; 64]);
        let mut j = 0;
        while j < 4 {
            let mut l = 0;
            while l < 8 {
                let p = iq1_m_point(j, l);
                low[16 * j + 2 * l] = (p % 16) as i8;
                high[16 * j + 2 * l + 1] = (p / 2) as i8;
                l += 1;
            }
            j += 1;
        }
        (low, high)
    }

    const IQ1_M_SHUFFLES: ([i8; 64], [i8; 64]) = iq1_m_shuffles();

    /// IQ1_M's grid points with each value `q` (-1, 0, 1) as the byte `8 (q + 1)`.
    static IQ1M_U: [u64; 2048] = {
        let mut t = [0u64; 2048];
        let mut i = 0;
        while i < 2048 {
            let g = IQ1S_GRID[i];
            let mut b = 0;
            while b < 8 {
                let q = ((g >> (8 * b)) as u8 as i8) as i64;
                t[i] |= (((q + 1) * 8) as u64) << (8 * b);
                b += 1;
            }
            i += 1;
        }
        t
    };

    impl PreparedGemv for Iq1M {
        type Weight = BlockIq1M;
        type Acc = __m512;
        type Act = BlockQ8K;
        type Prep = PreparedIq1M;
        type Consts = Iq1MConsts;
        type Ahead = [u16; 32];

        /// The block's 32 grid indices in register order.
        #[inline(always)]
        unsafe fn ahead(w: &BlockIq1M, c: Iq1MConsts, index: &mut MaybeUninit<[u16; 32]>) {
            // SAFETY: the caller's features; the loads read the block's 32 `qs` and 16 `qh`
            // bytes, the store writes the 64 bytes of `index`.
            unsafe {
                let qs = _mm512_castsi256_si512(_mm256_loadu_si256(w.qs.as_ptr().cast()));
                let qs = _mm512_shuffle_i64x2::<0x50>(qs, qs);
                // The odd points' high index bits are the high nibbles.
                let qh = _mm512_broadcast_i32x4(_mm_loadu_si128(w.qh.as_ptr().cast()));
                let qh = _mm512_mask_srli_epi16(qh, 0xff00_ff00, qh, 4);
                let low = _mm512_shuffle_epi8(qs, c.low);
                let high = _mm512_shuffle_epi8(qh, c.high);
                // (low | high) & 0x7ff
                let idx = _mm512_ternarylogic_epi32::<0xa8>(low, high, _mm512_set1_epi16(0x7ff));
                _mm512_storeu_si512(index.as_mut_ptr().cast(), idx);
            }
        }

        #[inline(always)]
        unsafe fn empty() -> PreparedIq1M {
            // SAFETY: register-only intrinsics of the caller's features.
            unsafe {
                PreparedIq1M {
                    act: [_mm512_setzero_si512(); 4],
                    neg_bias: [_mm512_setzero_si512(); 2],
                    d: 0.0,
                }
            }
        }

        #[inline(always)]
        unsafe fn consts() -> Iq1MConsts {
            let (low, high) = &IQ1_M_SHUFFLES;
            // SAFETY: the caller's features.
            let (low, high) = unsafe { (table(low), table(high)) };
            Iq1MConsts { low, high }
        }

        #[inline(always)]
        unsafe fn prepare(a: &BlockQ8K) -> PreparedIq1M {
            // SAFETY: the caller's features; each load reads 64 of the block's 256 quants.
            unsafe {
                let q: [__m512i; 4] =
                    std::array::from_fn(|j| _mm512_loadu_si512(a.qs[64 * j..].as_ptr().cast()));
                // Point p's 8 activations are qword p: the even qwords of each 128 bytes, then
                // the odd ones.
                let even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
                let odd = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
                let act = [
                    _mm512_permutex2var_epi64(q[0], even, q[1]),
                    _mm512_permutex2var_epi64(q[0], odd, q[1]),
                    _mm512_permutex2var_epi64(q[2], even, q[3]),
                    _mm512_permutex2var_epi64(q[2], odd, q[3]),
                ];
                let nine = _mm512_set1_epi8(9);
                let mut neg_bias = [_mm512_setzero_si512(); 2];
                for (h, nb) in neg_bias.iter_mut().enumerate() {
                    let s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nine, act[2 * h]);
                    let s = _mm512_dpbusd_epi32(s, nine, act[2 * h + 1]);
                    *nb = _mm512_sub_epi32(_mm512_setzero_si512(), s);
                }
                PreparedIq1M {
                    act,
                    neg_bias,
                    d: a.d * 0.125,
                }
            }
        }

        /// Registers `j` hold eight points each ([`iq1_m_point`]), so that lanes `2 h`,
        /// `2 h + 1` of registers 0 and 1 (2 and 3) both lie in scale group `h` (`8 + h`): the
        /// registers of a pair share one vector of scales and one `vpmulld`.
        #[inline(always)]
        unsafe fn block(
            w: &BlockIq1M,
            index: &[u16; 32],
            p: &PreparedIq1M,
            _: Iq1MConsts,
            acc: __m512,
        ) -> __m512 {
            // SAFETY: the caller's features; the loads read the block's 32 `qs` and 16 `qh`
            // bytes, the table reads stay below 2048 (11-bit indices).
            unsafe {
                // Bit 3 (7) of `qh[b]`: the shift sign of point 2 b (2 b + 1); clear: positive.
                let qh = _mm_loadu_si128(w.qh.as_ptr().cast());
                let even = _mm_testn_epi8_mask(qh, _mm_set1_epi8(0x08));
                let odd = _mm_testn_epi8_mask(qh, _mm_set1_epi8(-0x80));
                let positive = [even as u8, odd as u8, (even >> 8) as u8, (odd >> 8) as u8];
                let mut u = [_mm512_setzero_si512(); 4];
                for (j, u) in u.iter_mut().enumerate() {
                    let grid = points8(|l| {
                        // A load: see `AHEAD_BLOCKS`.
                        let i = std::ptr::read_volatile(&index[8 * j + l]);
                        *IQ1M_U.get_unchecked(usize::from(i))
                    });
                    // u = 8 q + 9 + δ: 8 (q + 1), plus 2 where the shift is positive.
                    *u = _mm512_mask_add_epi64(grid, positive[j], grid, _mm512_set1_epi8(2));
                }
                let first = _mm512_dpbusd_epi32(p.neg_bias[0], u[0], p.act[0]);
                let first = _mm512_dpbusd_epi32(first, u[1], p.act[1]);
                let second = _mm512_dpbusd_epi32(p.neg_bias[1], u[2], p.act[2]);
                let second = _mm512_dpbusd_epi32(second, u[3], p.act[3]);
                // Scale h: 3 bits at 3 (h % 4) of 16-bit word h / 4; lanes 2 h, 2 h + 1 take
                // scale h of their half. Shifted up by one, `& 0xe | 1` makes `2 s + 1`.
                let sc = u64::from_le_bytes(w.scales) << 1;
                let shifts =
                    _mm512_setr_epi32(0, 0, 3, 3, 6, 6, 9, 9, 16, 16, 19, 19, 22, 22, 25, 25);
                let isum = _mm512_add_epi32(
                    _mm512_mullo_epi32(first, odd_fields3(sc, shifts)),
                    _mm512_mullo_epi32(second, odd_fields3(sc >> 32, shifts)),
                );
                let d = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(u16::from_le_bytes(
                    iq1_m_scale(w).0,
                ))));
                let d = _mm512_broadcastss_ps(_mm_mul_ss(d, _mm_set_ss(p.d)));
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc)
            }
        }
    }
}

target_entries! { "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni";
    fn iq2_s_gemv(w: &[BlockIq2S], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Iq2S, { imp::PREP_BLOCKS }>;
    fn iq1_m_gemv(w: &[BlockIq1M], a: &[BlockQ8K], out: &mut [f32]) => prepared_gemv::gemv_body::<imp::Iq1M, 8>;
}

/// Plain IQ2_S rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row tiles.
pub(crate) fn iq2_s_rows(token: Avx512) -> Kernels<BlockIq2S, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: iq2_s_gemv,
        ..grid_tiles::iq2_s_rows(token)
    }
}

/// Plain IQ1_M rows: the 512-bit GEMV, the AVX2 one-quad GEMM, the 16-row tiles.
pub(crate) fn iq1_m_rows(token: Avx512) -> Kernels<BlockIq1M, BlockQ8K, BlockQ8K> {
    Kernels {
        gemv: iq1_m_gemv,
        ..grid_tiles::iq1_m_rows(token)
    }
}

mod iq3_s;

pub(crate) use iq3_s::iq3_s_rows;

#[cfg(test)]
mod tests;

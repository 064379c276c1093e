//! The IQ1 types' parts of the AVX2 grid kernels: their grid points as unsigned bytes, what a
//! block decodes at once, their groups, and the row bodies that take the shift `δ` out of the
//! bytes (IQ1_S) or add it to them (IQ1_M).

use std::arch::x86_64::*;

use super::*;

/// One block of IQ1 groups: `d·d_a·(Σ_g Σ sc·u·a + Σ_h coef_h·bsum_h)` with the unsigned
/// bytes `u` of the groups and the `i16` factor `coef` (the prepared value) of each
/// 16-weight activation sum.
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
pub(super) unsafe fn shifted_groups<B: GridBlock<Prep: ShiftCoef>, const N: usize>(
    b: &B,
    a: [&BlockQ8K; N],
    acc: &mut [__m256; N],
) {
    // SAFETY: register-only intrinsics of the caller's features; loads go through
    // fixed-size references.
    unsafe {
        let prep = b.prepare();
        let mut isum = [_mm256_setzero_si256(); N];
        for r in 0..N {
            isum[r] = _mm256_madd_epi16(load_bsums(&a[r].bsums), prep.coef());
        }
        for g in 0..8 {
            let (u, _, sc) = b.group(&prep, g);
            for r in 0..N {
                let av = load32(sub::<i8, 32>(&a[r].qs, 32 * g));
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), sc);
                isum[r] = _mm256_add_epi32(isum[r], p);
            }
        }
        scale_rows(b.scale(), a, isum, acc);
    }
}

/// One IQ1_S block with each group's shift `δ` taken out of its bytes: the group's points
/// multiply as `8 q + 9` straight from the table, and `δ - 9` times the group's scale is
/// the factor of its two 16-weight activation sums, since
/// `Σ ls·(8 q + δ)·a = ls·Σ (8 q + 9)·a + (δ - 9)·ls·Σ a`. The group then needs no
/// vector work besides its points (IQ1_S has one shift sign a group; IQ1_M's are per
/// 8 weights, finer than the activation sums).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[inline(always)]
pub(super) unsafe fn iq1_s_groups<const N: usize>(
    b: &BlockIq1S,
    a: [&BlockQ8K; N],
    acc: &mut [__m256; N],
) {
    // SAFETY: register-only intrinsics of the caller's features; loads go through
    // fixed-size references.
    unsafe {
        let odd_scales = b.prepare();
        let coef = iq1_s_shift_coef(b);
        let mut isum = [_mm256_setzero_si256(); N];
        for r in 0..N {
            isum[r] = _mm256_madd_epi16(load_bsums(&a[r].bsums), coef);
        }
        for (g, &scale) in odd_scales.iter().enumerate() {
            let h = usize::from(le_u16(&b.qh, g));
            let index = |l: usize| usize::from(b.qs[4 * g + l]) | (((h >> (3 * l)) & 7) << 8);
            let point = |l: usize| IQ1_GRID_PLUS9[index(l)];
            let u = points64([point(0), point(1), point(2), point(3)]);
            let sc = _mm256_set1_epi16(scale);
            for r in 0..N {
                let av = load32(sub::<i8, 32>(&a[r].qs, 32 * g));
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), sc);
                isum[r] = _mm256_add_epi32(isum[r], p);
            }
        }
        scale_rows(b.scale(), a, isum, acc);
    }
}

/// The factor `(δ - 9)·ls` of each of an IQ1_S block's 16-weight activation sums (`i16` lanes,
/// group `g`'s on sums `2 g` and `2 g + 1`), which takes the shift `δ` out of the points.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
pub(super) unsafe fn iq1_s_shift_coef(b: &BlockIq1S) -> __m256i {
    // SAFETY: register-only intrinsics of the caller's features; the load reads the block's
    // 16 `qh` bytes.
    unsafe {
        // Word g of `qh`: the group's 3-bit scale at 12, its shift sign at 15 (δ = -1 when
        // set, else 1).
        let qh = _mm_loadu_si128(b.qh.as_ptr().cast());
        let sc = _mm_and_si128(_mm_srli_epi16::<12>(qh), _mm_set1_epi16(7));
        let ls = _mm_add_epi16(_mm_add_epi16(sc, sc), _mm_set1_epi16(1));
        let negative = _mm_srai_epi16::<15>(qh);
        // δ - 9: -10 or -8
        let factor = _mm_add_epi16(_mm_set1_epi16(-8), _mm_add_epi16(negative, negative));
        let coef = _mm_mullo_epi16(ls, factor);
        // One factor per group, for both of its 16-weight sums.
        _mm256_set_m128i(
            _mm_unpackhi_epi16(coef, coef),
            _mm_unpacklo_epi16(coef, coef),
        )
    }
}

/// Every IQ1 grid point with each value `q` (in {-1, 0, 1}) as the unsigned byte `8 q + 9`
/// (1, 9 or 17): the point's bytes are then ready for `maddubs` once `δ` is added, or as
/// they are where `δ` goes into the activation sums' factor (IQ1_S), with no per-group
/// sign operation.
static IQ1_GRID_PLUS9: [u64; 2048] = plus9_grid();

const fn plus9_grid() -> [u64; 2048] {
    let mut out = [0u64; 2048];
    let mut i = 0;
    while i < 2048 {
        let mut k = 0;
        while k < 8 {
            let q = (IQ1S_GRID[i] >> (8 * k)) as u8 as i8;
            out[i] |= ((8 * q + 9) as u8 as u64) << (8 * k);
            k += 1;
        }
        i += 1;
    }
    out
}

/// The prepared values of an IQ1 block that `shifted_groups` reads itself.
pub(super) trait ShiftCoef {
    /// The `i16` factor of each 16-weight activation sum (`-9` times its scale).
    fn coef(&self) -> __m256i;
}

impl ShiftCoef for Iq1Prep {
    #[inline(always)]
    fn coef(&self) -> __m256i {
        self.coef
    }
}

/// What an IQ1_M block decodes at once: the 11-bit grid index of each of its 32 points, the
/// odd scales of each 16 weights as the groups' `madd` operands, and the factor of each
/// 16-weight activation sum (`-9` times its scale). Decoding them for the whole block in
/// vector registers took most of the scalar work out of the groups.
#[derive(Clone, Copy)]
pub(in crate::kernels::x86::avx2) struct Iq1Prep {
    index: [u16; 32],
    pub(super) scales: [__m256i; 8],
    coef: __m256i,
    /// The odd scale of each 16 weights (`i16` lane `k` for weights `16 k..16 k + 16`).
    pub(super) ls: __m256i,
}

/// The 3-bit field `k % 4` (bits `3 (k % 4)..`) of 16-bit word `k / 4` of `words`, for the
/// 16 `i16` lanes `k`; `words` holds the four words of the low 128-bit lane's lanes in its
/// bytes 0..8 and those of the high lane's in bytes 8..16.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn fields3(words: __m128i) -> __m256i {
    // SAFETY: register-only intrinsics of the caller's features.
    unsafe {
        let spread = _mm256_shuffle_epi8(
            _mm256_broadcastsi128_si256(words),
            _mm256_setr_epi8(
                0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, //
                12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15,
            ),
        );
        // Field j to the top 3 bits by a multiply (a shift left by 13 - 3 j), then down.
        let up = _mm256_setr_epi16(
            1 << 13,
            1 << 10,
            1 << 7,
            1 << 4,
            1 << 13,
            1 << 10,
            1 << 7,
            1 << 4, //
            1 << 13,
            1 << 10,
            1 << 7,
            1 << 4,
            1 << 13,
            1 << 10,
            1 << 7,
            1 << 4,
        );
        _mm256_srli_epi16::<13>(_mm256_mullo_epi16(spread, up))
    }
}

/// The 16-bit words `w0, w1` and `w2, w3` of `v` (8 bytes, words 0..4) placed as
/// [`fields3`] reads them.
///
/// # Safety
/// The CPU must support SSE2.
#[inline(always)]
unsafe fn word_pairs(v: u64) -> __m128i {
    // SAFETY: register-only intrinsics of the caller's features.
    unsafe {
        let x = _mm_cvtsi64_si128(v as i64);
        // Words 2, 3 to bytes 12..16.
        _mm_or_si128(x, _mm_slli_si128::<8>(x))
    }
}

/// The block's prepared values from its 32 low index bytes, the 3 high bits of each index
/// (`i16` lanes, points 0..16 and 16..32) and the 3-bit scale fields of the 16 halves.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn iq1_prep(qs: &[u8; 32], high: [__m256i; 2], fields: __m256i) -> Iq1Prep {
    // SAFETY: register-only intrinsics of the caller's features; loads go through
    // fixed-size references.
    unsafe {
        let mut index = [0u16; 32];
        for (h, out) in index.chunks_exact_mut(16).enumerate() {
            let low =
                _mm256_cvtepu8_epi16(_mm_loadu_si128(sub::<u8, 16>(qs, 16 * h).as_ptr().cast()));
            let v = _mm256_or_si256(low, _mm256_slli_epi16::<8>(high[h]));
            _mm256_storeu_si256(out.as_mut_ptr().cast(), v);
        }
        let ls = _mm256_add_epi16(_mm256_add_epi16(fields, fields), _mm256_set1_epi16(1));
        Iq1Prep {
            index,
            scales: group_scale_pairs(ls),
            coef: _mm256_mullo_epi16(ls, _mm256_set1_epi16(-9)),
            ls,
        }
    }
}

/// The 3 high index bits of an IQ1_M block's points as `i16` lanes, points 0..16 and 16..32:
/// bits 0..3 of `qh[p / 2]` for an even point p, 4..7 for an odd one (bits 3 and 7 are the
/// shift signs).
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
unsafe fn iq1_m_high_bits(b: &BlockIq1M) -> [__m256i; 2] {
    // SAFETY: register-only intrinsics of the caller's features; the load reads the block's
    // 16 `qh` bytes.
    unsafe {
        let q = _mm256_cvtepu8_epi16(_mm_loadu_si128(b.qh.as_ptr().cast()));
        let seven = _mm256_set1_epi16(7);
        let even = _mm256_and_si256(q, seven);
        let odd = _mm256_and_si256(_mm256_srli_epi16::<4>(q), seven);
        // `unpack` interleaves within 128-bit lanes: points 0..8 | 16..24 and
        // 8..16 | 24..32, put back in order by the lane permutes.
        let lo = _mm256_unpacklo_epi16(even, odd);
        let hi = _mm256_unpackhi_epi16(even, odd);
        [
            _mm256_permute2x128_si256::<0x20>(lo, hi),
            _mm256_permute2x128_si256::<0x31>(lo, hi),
        ]
    }
}

/// The 11-bit grid indices of an IQ1_M block's 32 points, four to a word (point `4 g + l` in
/// bits `16 l..16 l + 16` of word `g`), stored into `index`.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
pub(super) unsafe fn iq1_m_indices(b: &BlockIq1M, index: &mut [u64; 8]) {
    // SAFETY: register-only intrinsics of the caller's features; the loads read 16 of the
    // block's `qs` bytes each, the stores write four of the `index` words each.
    unsafe {
        let high = iq1_m_high_bits(b);
        for (h, out) in index.chunks_exact_mut(4).enumerate() {
            let low = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                sub::<u8, 16>(&b.qs, 16 * h).as_ptr().cast(),
            ));
            let v = _mm256_or_si256(low, _mm256_slli_epi16::<8>(high[h]));
            _mm256_storeu_si256(out.as_mut_ptr().cast(), v);
        }
    }
}

/// The 11-bit grid indices of an IQ1_S block's 32 points, four to a word as
/// [`iq1_m_indices`] writes them: point `4 g + l`'s low byte `qs[4 g + l]`, its 3 high bits at
/// `3 l` of `qh` word `g`.
///
/// # Safety
/// The CPU must support AVX2.
#[inline(always)]
pub(super) unsafe fn iq1_s_indices(b: &BlockIq1S, index: &mut [u64; 8]) {
    // SAFETY: register-only intrinsics of the caller's features; the loads read 16 of the
    // block's `qs` bytes each, the stores write four of the `index` words each.
    unsafe {
        for (h, out) in index.chunks_exact_mut(4).enumerate() {
            let low = _mm256_cvtepu8_epi16(_mm_loadu_si128(
                sub::<u8, 16>(&b.qs, 16 * h).as_ptr().cast(),
            ));
            let high = fields3(word_pairs(le_u64(&b.qh, 8 * h)));
            let v = _mm256_or_si256(low, _mm256_slli_epi16::<8>(high));
            _mm256_storeu_si256(out.as_mut_ptr().cast(), v);
        }
    }
}

/// The four grid points of group `g` as `8 q + 9`, their indices cut from word `g` of `index`
/// (written some blocks earlier, see `prepared_gemv::AHEAD_BLOCKS`, and read from memory as
/// written: LLVM otherwise moves the words' loads up to the block's start and spills them).
///
/// # Safety
/// Every 16-bit field of `index[g]` below 2048 (as [`iq1_m_indices`] writes them).
#[inline(always)]
pub(super) unsafe fn iq1_points_ahead(index: &[u64; 8], g: usize) -> [u64; 4] {
    let word = from_memory(&index[g]);
    let point = |l: usize| {
        let i = (word >> (16 * l)) as usize & 0xffff;
        debug_assert!(i < IQ1_GRID_PLUS9.len());
        // SAFETY: below 2048, the table's length (the caller's contract).
        unsafe { *IQ1_GRID_PLUS9.get_unchecked(i) }
    };
    [point(0), point(1), point(2), point(3)]
}

/// The four grid points of group `g` as `8 q + 9` (indices below 2048 by their mask).
#[inline(always)]
pub(super) fn iq1_points(prep: &Iq1Prep, g: usize) -> [u64; 4] {
    let q = &prep.index[4 * g..4 * g + 4];
    let word =
        u64::from(q[0]) | u64::from(q[1]) << 16 | u64::from(q[2]) << 32 | u64::from(q[3]) << 48;
    let word = opaque(word);
    let point = |l: usize| IQ1_GRID_PLUS9[(word >> (16 * l)) as usize & 0x7ff];
    [point(0), point(1), point(2), point(3)]
}

impl GridBlock for BlockIq1S {
    /// The odd scale of each group. Its indices stay scalar in the groups (3 bits of one
    /// word per point): building them for the whole block as IQ1_M does measured 5 %
    /// slower.
    type Prep = [i16; 8];
    #[inline(always)]
    unsafe fn scale(&self) -> __m128 {
        // SAFETY: the caller's features.
        unsafe { block_scale(self.d, 0.125) }
    }
    #[inline(always)]
    unsafe fn prepare(&self) -> [i16; 8] {
        // Word g of `qh`: the 3 high index bits of point l at 3 l, the group's 3-bit scale
        // at 12, its shift sign at 15.
        std::array::from_fn(|g| odd(((le_u16(&self.qh, g) >> 12) & 7) as u8))
    }
    #[inline(always)]
    unsafe fn group(&self, ls: &[i16; 8], g: usize) -> (__m256i, __m256i, __m256i) {
        let h = usize::from(le_u16(&self.qh, g));
        let index = |l: usize| usize::from(self.qs[4 * g + l]) | (((h >> (3 * l)) & 7) << 8);
        let point = |l: usize| IQ1_GRID_PLUS9[index(l)];
        let points = [point(0), point(1), point(2), point(3)];
        let delta = if h & 0x8000 != 0 { -1 } else { 1 };
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            (
                _mm256_add_epi8(points64(points), _mm256_set1_epi8(delta)),
                _mm256_setzero_si256(),
                _mm256_set1_epi16(ls[g]),
            )
        }
    }
}

impl GridBlock for BlockIq1M {
    type Prep = Iq1Prep;
    #[inline(always)]
    unsafe fn scale(&self) -> __m128 {
        // SAFETY: the caller's features.
        unsafe { block_scale(iq1_m_scale(self), 0.125) }
    }
    #[inline(always)]
    unsafe fn prepare(&self) -> Iq1Prep {
        // SAFETY: register-only intrinsics of the caller's features; loads go through
        // fixed-size references.
        unsafe {
            // Scale of half k (16 weights): 3 bits at 3 (k % 4) of scale word k / 4.
            let fields = fields3(word_pairs(u64::from_le_bytes(self.scales)));
            iq1_prep(&self.qs, iq1_m_high_bits(self), fields)
        }
    }
    #[inline(always)]
    unsafe fn group(&self, prep: &Iq1Prep, g: usize) -> (__m256i, __m256i, __m256i) {
        // The shift signs of the group's four 8-weight runs: bits 3, 7, 11, 15 of its two
        // `qh` bytes, one per 64-bit lane.
        let h = u16::from_le_bytes([self.qh[2 * g], self.qh[2 * g + 1]]);
        // SAFETY: register-only intrinsics of the caller's features.
        unsafe {
            let sel = _mm256_setr_epi64x(0x8, 0x80, 0x800, 0x8000);
            let v = _mm256_and_si256(_mm256_set1_epi16(h as i16), sel);
            // δ: all bits set (-1) where the run's sign is set, else 1
            let delta = _mm256_or_si256(_mm256_cmpeq_epi64(v, sel), _mm256_set1_epi8(1));
            (
                _mm256_add_epi8(points64(iq1_points(prep, g)), delta),
                _mm256_setzero_si256(),
                prep.scales[g],
            )
        }
    }
}

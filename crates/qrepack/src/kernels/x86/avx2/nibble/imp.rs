//! The AVX2 bodies of the 8x8 nibble kernels: byte products, the GEMV and the GEMM.

use super::*;

/// Signed byte products summed to i32 lanes: each i32 holds 4 adjacent products.
///
/// The activations carry the sign (`|a| * (w * sign(a))`, `abs_a = |a|` given): their
/// absolute values are computed once per activation row, where `|w|` would be a second
/// register per weight vector, live across all four rows of a GEMM (and spilled). Needs
/// `w > -128` (negating -128 overflows), which the nibble tables guarantee; no overflow in
/// `maddubs`: `|a| <= 128`, `|w| <= 127`, so a pair sums to at most 32512.
#[inline(always)]
unsafe fn dot_i8_act_sign(w: __m256i, a: __m256i, abs_a: __m256i) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let p = _mm256_maddubs_epi16(abs_a, _mm256_sign_epi8(w, a));
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }
}

/// The same with the weights carrying the sign, for any byte weights (Q8_0 blocks from a
/// file may hold -128); activations are never -128 (their scale maps `amax` to 127).
#[inline(always)]
unsafe fn dot_i8(w: __m256i, a: __m256i) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
        _mm256_madd_epi16(p, _mm256_set1_epi16(1))
    }
}

#[inline(always)]
pub(in crate::kernels::x86) unsafe fn broadcast8(bytes: &[i8]) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        // SAFETY: callers pass slices of at least 8 bytes; read_unaligned has no alignment need.
        _mm256_set1_epi64x(std::ptr::read_unaligned(bytes.as_ptr() as *const i64))
    }
}

#[inline(always)]
unsafe fn load32(bytes: &[u8]) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        // SAFETY: callers pass slices of at least 32 bytes.
        _mm256_loadu_si256(bytes.as_ptr() as *const __m256i)
    }
}

#[inline(always)]
pub(in crate::kernels::x86) unsafe fn f16x8(h: &[F16Bits; 8]) -> __m256 {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        // SAFETY: 8 halves are 16 bytes.
        _mm256_cvtph_ps(_mm_loadu_si128(h.as_ptr() as *const __m128i))
    }
}

/// Eight E8M0 exponents as the halved scales of MXFP4 (`e8m0_half_to_f32`): `2^(e - 128)`,
/// which for `e >= 2` is the exponent field `e - 1`, and for `e` 0 and 1 a subnormal.
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn e8m0_half_x8(e: &[u8; 8]) -> __m256 {
    // SAFETY: callers meet this function's contract (AVX2); `e` is 8 bytes.
    unsafe {
        let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(e.as_ptr() as *const __m128i));
        let one = _mm256_set1_epi32(1);
        let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, one));
        let tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let is_normal = _mm256_cmpgt_epi32(e, one);
        _mm256_castsi256_ps(_mm256_blendv_epi8(tiny, normal, is_normal))
    }
}

/// The weight block decoded to signed bytes: `[lo, hi]` for each of the four vectors.
#[inline(always)]
pub(super) unsafe fn decode(lut: __m256i, qs: &[u8; 128]) -> [[__m256i; 2]; 4] {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let mut out = [[_mm256_setzero_si256(); 2]; 4];
        for (v, o) in out.iter_mut().enumerate() {
            let x = load32(&qs[v * 32..v * 32 + 32]);
            o[0] = _mm256_shuffle_epi8(lut, _mm256_and_si256(x, m4));
            o[1] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(x, 4), m4));
        }
        out
    }
}

/// Row sums of one decoded block against one activation row given as its four 8-byte
/// broadcasts (bytes 0-7, 8-15, 16-23, 24-31). Lanes come out in row order 0 1 4 5 2 3 6 7.
#[inline(always)]
unsafe fn row_sums(w: &[[__m256i; 2]; 4], a: [__m256i; 4], abs: [__m256i; 4]) -> __m256i {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { row_sums_with::<false>(w, a, abs) }
}

/// `row_sums` with the activations carrying the sign (`dot_i8_act_sign`): for weights that
/// are never -128.
#[inline(always)]
unsafe fn row_sums_act_sign(w: &[[__m256i; 2]; 4], a: [__m256i; 4], abs: [__m256i; 4]) -> __m256i {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { row_sums_with::<true>(w, a, abs) }
}

/// `row_sums` with lanes in `PAIRED` order (see `paired`).
#[inline(always)]
unsafe fn row_sums_paired_i8(w: &[[__m256i; 2]; 4], a: [__m256i; 4], abs: [__m256i; 4]) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let (s03, s47) = half_sums::<false>(w, a, abs);
        paired(s03, s47)
    }
}

/// `row_sums_act_sign` with lanes in `PAIRED` order.
#[inline(always)]
unsafe fn row_sums_paired_act_sign(
    w: &[[__m256i; 2]; 4],
    a: [__m256i; 4],
    abs: [__m256i; 4],
) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let (s03, s47) = half_sums::<true>(w, a, abs);
        paired(s03, s47)
    }
}

/// Row sums from the two halves' i32 pairs (lanes 2k, 2k + 1: row k of rows 0-3 or 4-7)
/// without `vphaddd`, which costs several times a `maddubs` on AVX2 cores: each pair is
/// folded onto itself in-lane and a blend takes row k from the first half and row 4 + k from
/// the second, giving lanes in the row order 0 4 1 5 2 6 3 7 (`PAIRED`).
#[inline(always)]
unsafe fn paired(s03: __m256i, s47: __m256i) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let f03 = _mm256_add_epi32(s03, _mm256_shuffle_epi32::<0xb1>(s03));
        let f47 = _mm256_add_epi32(s47, _mm256_shuffle_epi32::<0xb1>(s47));
        _mm256_blend_epi32::<0b1010_1010>(f03, f47)
    }
}

/// Takes row-ordered lanes to `PAIRED` order.
#[inline(always)]
unsafe fn to_paired() -> __m256i {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7) }
}

/// Takes `PAIRED` lanes back to row order.
#[inline(always)]
unsafe fn from_paired() -> __m256i {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7) }
}

#[inline(always)]
unsafe fn row_sums_with<const ACT_SIGN: bool>(
    w: &[[__m256i; 2]; 4],
    a: [__m256i; 4],
    abs: [__m256i; 4],
) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let (s03, s47) = half_sums::<ACT_SIGN>(w, a, abs);
        _mm256_hadd_epi32(s03, s47)
    }
}

/// The i32 pairs of rows 0-3 and of rows 4-7 (lanes 2k and 2k + 1 hold halves of row k).
/// `abs` (`|a|`, see `Q8Quad::abs_broadcasts`) is only read in the activation-sign form.
#[inline(always)]
unsafe fn half_sums<const ACT_SIGN: bool>(
    w: &[[__m256i; 2]; 4],
    a: [__m256i; 4],
    abs: [__m256i; 4],
) -> (__m256i, __m256i) {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        macro_rules! dot {
            ($v:literal, $s:literal, $k:literal) => {
                if ACT_SIGN {
                    dot_i8_act_sign(w[$v][$s], a[$k], abs[$k])
                } else {
                    dot_i8(w[$v][$s], a[$k])
                }
            };
        }
        let s03 = _mm256_add_epi32(
            _mm256_add_epi32(dot!(0, 0, 0), dot!(0, 1, 2)),
            _mm256_add_epi32(dot!(2, 0, 1), dot!(2, 1, 3)),
        );
        let s47 = _mm256_add_epi32(
            _mm256_add_epi32(dot!(1, 0, 0), dot!(1, 1, 2)),
            _mm256_add_epi32(dot!(3, 0, 1), dot!(3, 1, 3)),
        );
        (s03, s47)
    }
}

/// Lane order produced by `row_sums` (and its own inverse).
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn row_order() -> __m256i {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7) }
}

/// An f16 scale broadcast to all lanes (F16C, not the integer widening).
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn f16_splat(h: F16Bits) -> __m256 {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(h.0) as i32));
        _mm256_broadcastss_ps(v)
    }
}

/// `|a|` of four activation vectors.
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn abs4(a: [__m256i; 4]) -> [__m256i; 4] {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        [
            _mm256_abs_epi8(a[0]),
            _mm256_abs_epi8(a[1]),
            _mm256_abs_epi8(a[2]),
            _mm256_abs_epi8(a[3]),
        ]
    }
}

/// The four 8-byte broadcasts of one activation block.
#[inline(always)]
pub(in crate::kernels::x86) unsafe fn act_broadcasts(ab: &BlockQ8_0) -> [__m256i; 4] {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        [
            broadcast8(&ab.qs[0..8]),
            broadcast8(&ab.qs[8..16]),
            broadcast8(&ab.qs[16..24]),
            broadcast8(&ab.qs[24..32]),
        ]
    }
}

/// GEMV over every row group in `w` (`a.len()` blocks each), two groups at a time so that
/// the activation broadcasts, scale and bias are prepared once for both. `$sums` turns a
/// block and the broadcasts into row sums; `$decode` is the matching weight decoding.
macro_rules! gemv_groups {
    ($w:ident, $a:ident, $out:ident, $decode:ident, $sums:ident) => {{
        let order = row_order();
        let nb = $a.len();
        if nb == 0 {
            $out.fill(0.0);
            return;
        }
        let mut groups = $w.chunks_exact(nb).zip($out.chunks_exact_mut(8));
        while let Some((w0, o0)) = groups.next() {
            let mut acc0 = _mm256_setzero_ps();
            if let Some((w1, o1)) = groups.next() {
                let mut acc1 = _mm256_setzero_ps();
                for ((b0, b1), ab) in w0.iter().zip(w1).zip($a) {
                    crate::kernel_api::prefetch_ahead(b0, 2 * nb);
                    crate::kernel_api::prefetch_ahead(b1, 2 * nb);
                    let av = act_broadcasts(ab);
                    // Dropped by the compiler where `$sums` does not read it.
                    let abs = abs4(av);
                    let da = f16_splat(ab.d);
                    let s0 = $sums(&b0.$decode(), av, abs);
                    let d0 = _mm256_mul_ps(_mm256_permutevar8x32_ps(b0.row_scales(), order), da);
                    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), d0, acc0);
                    let s1 = $sums(&b1.$decode(), av, abs);
                    let d1 = _mm256_mul_ps(_mm256_permutevar8x32_ps(b1.row_scales(), order), da);
                    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), d1, acc1);
                }
                // SAFETY: chunks_exact_mut(8) gives 8 floats.
                _mm256_storeu_ps(o1.as_mut_ptr(), _mm256_permutevar8x32_ps(acc1, order));
            } else {
                for (b0, ab) in w0.iter().zip($a) {
                    let av = act_broadcasts(ab);
                    let s0 = $sums(&b0.$decode(), av, abs4(av));
                    let d0 = _mm256_mul_ps(
                        _mm256_permutevar8x32_ps(b0.row_scales(), order),
                        f16_splat(ab.d),
                    );
                    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), d0, acc0);
                }
            }
            // SAFETY: chunks_exact_mut(8) gives 8 floats.
            _mm256_storeu_ps(o0.as_mut_ptr(), _mm256_permutevar8x32_ps(acc0, order));
        }
    }};
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv<P: Nibble8x8>(w: &[P], a: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        // SAFETY (whole fn): every pointer read comes from a fixed-size array field.
        if P::NEVER_MIN_I8 {
            gemv_groups!(w, a, out, decode, row_sums_act_sign)
        } else {
            gemv_groups!(w, a, out, decode, row_sums)
        }
    }
}

/// GEMM of one row group with one quad of activation rows; `$sums`/`$decode` as in
/// `gemv_groups`.
macro_rules! gemm_quad {
    ($w:ident, $a:ident, $out:ident, $decode:ident, $sums:ident) => {
        gemm_quad!($w, $a, $out, $decode, $sums, row_order(), row_order())
    };
    // `$to` takes row-ordered scales to `$sums`' lane order, `$from` takes the
    // accumulators back.
    ($w:ident, $a:ident, $out:ident, $decode:ident, $sums:ident, $to:expr, $from:expr) => {{
        let order = $to;
        let back = $from;
        // Four named accumulators and explicit per-row steps: an array indexed in a loop
        // made the compiler keep them on the stack (a store and reload per row and block).
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut acc2 = _mm256_setzero_ps();
        let mut acc3 = _mm256_setzero_ps();
        for (wb, ab) in $w.iter().zip($a) {
            let wq = wb.$decode();
            let dw = _mm256_permutevar8x32_ps(wb.row_scales(), order);
            let da = ab.scales();
            let qa = ab.quants();
            // Row m's bytes 8k..8k+8 sit at 32k + 8m in the interleaved quad.
            macro_rules! row {
                ($m:literal, $acc:ident, $lane:literal) => {
                    let av = [
                        broadcast8(&qa[8 * $m..8 * $m + 8]),
                        broadcast8(&qa[32 + 8 * $m..40 + 8 * $m]),
                        broadcast8(&qa[64 + 8 * $m..72 + 8 * $m]),
                        broadcast8(&qa[96 + 8 * $m..104 + 8 * $m]),
                    ];
                    let sums = $sums(&wq, av, ab.abs_broadcasts($m, av));
                    let da_m = _mm256_broadcastss_ps(_mm_shuffle_ps::<$lane>(da, da));
                    $acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, da_m), $acc);
                };
            }
            row!(0, acc0, 0x00);
            row!(1, acc1, 0x55);
            row!(2, acc2, 0xaa);
            row!(3, acc3, 0xff);
        }
        assert!($out.len() >= 32);
        for (m, acc_m) in [acc0, acc1, acc2, acc3].iter().enumerate() {
            // SAFETY: `out` holds at least 32 floats (asserted above).
            _mm256_storeu_ps(
                $out.as_mut_ptr().add(8 * m),
                _mm256_permutevar8x32_ps(*acc_m, back),
            );
        }
    }};
}

pub(in crate::kernels::x86) use {gemm_quad, gemv_groups};

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm<P: Nibble8x8, Q: Q8Quad>(w: &[P], a: &[Q], out: &mut [f32]) {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        // SAFETY (whole fn): as in `gemv`; `out` has at least 32 elements (checked inside).
        if P::NEVER_MIN_I8 {
            gemm_quad!(
                w,
                a,
                out,
                decode,
                row_sums_paired_act_sign,
                to_paired(),
                from_paired()
            )
        } else {
            gemm_quad!(
                w,
                a,
                out,
                decode,
                row_sums_paired_i8,
                to_paired(),
                from_paired()
            )
        }
    }
}

/// Q4_0's nibbles as unsigned bytes `q` (weight `q - 8`): ggml stores them xor 8.
#[inline(always)]
unsafe fn decode_unsigned(qs: &[u8; 128]) -> [[__m256i; 2]; 4] {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let flip = _mm256_set1_epi8(0x88u8 as i8);
        let mut out = [[_mm256_setzero_si256(); 2]; 4];
        for (v, o) in out.iter_mut().enumerate() {
            let x = _mm256_xor_si256(load32(&qs[v * 32..v * 32 + 32]), flip);
            o[0] = _mm256_and_si256(x, m4);
            o[1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
        }
        out
    }
}

/// Row sums of unsigned weights (0..=15) times signed activations, `row_sums` lane order.
/// `maddubs` needs no sign fix-up here, and four of its pair sums fit in an i16
/// (4 x 2 x 15 x 128 < 32768), so only two widening `madd`s per activation row remain.
#[inline(always)]
unsafe fn row_sums_unsigned(w: &[[__m256i; 2]; 4], a: [__m256i; 4]) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let (s03, s47) = unsigned_halves(w, a);
        let ones = _mm256_set1_epi16(1);
        _mm256_hadd_epi32(_mm256_madd_epi16(s03, ones), _mm256_madd_epi16(s47, ones))
    }
}

/// Sums of four vectors of signed bytes per 64-bit lane, left in both i32 halves of the
/// lane: for four broadcasts of one row every lane gets the row's sum; for the four vectors
/// of an interleaved quad, lanes `2m` and `2m + 1` get row `m`'s.
#[inline(always)]
unsafe fn lane_sums(v: [__m256i; 4]) -> __m256i {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let s = _mm256_add_epi16(
            _mm256_add_epi16(
                _mm256_maddubs_epi16(ones, v[0]),
                _mm256_maddubs_epi16(ones, v[1]),
            ),
            _mm256_add_epi16(
                _mm256_maddubs_epi16(ones, v[2]),
                _mm256_maddubs_epi16(ones, v[3]),
            ),
        );
        let s = _mm256_madd_epi16(s, _mm256_set1_epi16(1));
        _mm256_add_epi32(s, _mm256_shuffle_epi32::<0xb1>(s))
    }
}

/// `row_sums_unsigned` with the offset taken off: `8 x` the activation block sum, which
/// every lane of `lane_sums` holds for four broadcasts of one row.
#[inline(always)]
unsafe fn row_sums_offset8(w: &[[__m256i; 2]; 4], a: [__m256i; 4], _abs: [__m256i; 4]) -> __m256i {
    // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
    // slices) is the callee's; register-only intrinsics need nothing more.
    unsafe { _mm256_sub_epi32(row_sums_unsigned(w, a), _mm256_slli_epi32(lane_sums(a), 3)) }
}

impl BlockQ4_0x8 {
    #[inline(always)]
    unsafe fn unsigned_quants(&self) -> [[__m256i; 2]; 4] {
        // SAFETY: the enclosing unsafe fn's contract (the kernel set's CPU features, in-bounds
        // slices) is the callee's; register-only intrinsics need nothing more.
        unsafe { decode_unsigned(&self.qs) }
    }
}

/// GEMV for Q4_0 with unsigned nibbles (the block sum is the same for both row groups of a
/// pass, and computed once).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemv_unsigned(w: &[BlockQ4_0x8], a: &[BlockQ8_0], out: &mut [f32]) {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        // SAFETY (whole fn): every pointer read comes from a fixed-size array field.
        gemv_groups!(w, a, out, unsigned_quants, row_sums_offset8)
    }
}

/// Q4_0's quants as unsigned bytes regrouped so that each 32-bit lane holds four bytes of
/// one row: vector `t` has bytes `4t..4t + 4` of all eight rows (lanes in `row_order`),
/// whose low nibbles are weights `4t..4t + 4` and high nibbles `16 + 4t..`. Two shuffles
/// per pair of packed vectors (rows 0-3 and 4-7 of one 8-byte chunk) do it.
#[inline(always)]
unsafe fn decode_unsigned_rows(qs: &[u8; 128]) -> [[__m256i; 2]; 4] {
    // SAFETY: the caller's contract.
    unsafe { nibble_rows::<true>(qs) }
}

/// The nibbles of a packed 8-row block regrouped as [`decode_unsigned_rows`] does, xor 8
/// first where `FLIP` (Q4_0's stored nibbles), as they are otherwise (MXFP4's table indices).
#[inline(always)]
pub(in crate::kernels::x86::avx2) unsafe fn nibble_rows<const FLIP: bool>(
    qs: &[u8; 128],
) -> [[__m256i; 2]; 4] {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let flip = _mm256_set1_epi8(0x88u8 as i8);
        let mut x = [_mm256_setzero_si256(); 4];
        for (v, xv) in x.iter_mut().enumerate() {
            let q = load32(&qs[v * 32..v * 32 + 32]);
            *xv = if FLIP { _mm256_xor_si256(q, flip) } else { q };
        }
        // No closures here: they would not inherit the caller's target features.
        macro_rules! pick {
            ($imm:literal, $a:expr, $b:expr) => {
                _mm256_castps_si256(_mm256_shuffle_ps::<$imm>(
                    _mm256_castsi256_ps($a),
                    _mm256_castsi256_ps($b),
                ))
            };
        }
        // Even dwords (bytes 0-3 of each row's chunk), then odd ones (bytes 4-7).
        let t = [
            pick!(0x88, x[0], x[1]),
            pick!(0xdd, x[0], x[1]),
            pick!(0x88, x[2], x[3]),
            pick!(0xdd, x[2], x[3]),
        ];
        let mut out = [[_mm256_setzero_si256(); 2]; 4];
        for (o, v) in out.iter_mut().zip(t) {
            *o = [
                _mm256_and_si256(v, m4),
                _mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
            ];
        }
        out
    }
}

/// Half `H` of [`nibble_rows::<false>`] (its vectors `2H` and `2H + 1`), each byte looked up
/// in `table`: the stored vectors `2H` and `2H + 1` are all it reads.
#[inline(always)]
pub(in crate::kernels::x86::avx2) unsafe fn nibble_rows_half<const H: usize>(
    qs: &[u8; 128],
    table: __m256i,
) -> [[__m256i; 2]; 2] {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it; the loads read 64 of the 128 bytes.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let x0 = _mm256_castsi256_ps(load32(&qs[64 * H..64 * H + 32]));
        let x1 = _mm256_castsi256_ps(load32(&qs[64 * H + 32..64 * H + 64]));
        let t = [
            _mm256_castps_si256(_mm256_shuffle_ps::<0x88>(x0, x1)),
            _mm256_castps_si256(_mm256_shuffle_ps::<0xdd>(x0, x1)),
        ];
        let mut out = [[_mm256_setzero_si256(); 2]; 2];
        for (o, v) in out.iter_mut().zip(t) {
            *o = [
                _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4)),
                _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)),
            ];
        }
        out
    }
}

/// GEMM for Q4_0 with unsigned nibbles. The offset (`8 x` each activation row's block sum)
/// and the rows' f32 scales come with the activations ([`BlockQ8_0x4Sums`] of
/// `Q8_0SumsInterleaved<8>`), prepared once per call: computing them here, for every row
/// group, cost 17 % of the kernel.
///
/// The weights are regrouped to one row per 32-bit lane (`decode_unsigned_rows`), so a row
/// of activations meets them through 4-byte broadcasts and every lane sums one row: the
/// eight `maddubs` results add up in i16 (8 x 2 x 15 x 128 < 32768) and one widening `madd`
/// finishes, with no horizontal folding (`vphaddd` or shuffles) per activation row. Per-row
/// scalars are broadcast from memory, which costs a load instead of a shuffle.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn gemm_unsigned(w: &[BlockQ4_0x8], a: &[BlockQ8_0x4Sums], out: &mut [f32]) {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        // SAFETY (whole fn): as in `gemv`; `out` has at least 32 elements (asserted below).
        let order = row_order();
        let ones = _mm256_set1_epi16(1);
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut acc2 = _mm256_setzero_ps();
        let mut acc3 = _mm256_setzero_ps();
        for (wb, ab) in w.iter().zip(a) {
            let wq = decode_unsigned_rows(&wb.qs);
            let dw = _mm256_permutevar8x32_ps(
                _mm256_cvtph_ps(_mm_loadu_si128(wb.d.as_ptr() as *const __m128i)),
                order,
            );
            macro_rules! row {
                ($m:literal, $acc:ident) => {
                    // Row m's bytes 4i..4i + 4 sit at 32 (i / 2) + 8m + 4 (i % 2) in the quad.
                    // Row m's bytes 4i..4i + 4 sit at 32 (i / 2) + 8m + 4 (i % 2) in the quad.
                    let q = ab.qs.as_ptr();
                    macro_rules! a4 {
                        ($i:literal) => {
                            _mm256_set1_epi32(std::ptr::read_unaligned(
                                q.add(32 * ($i / 2) + 8 * $m + 4 * ($i % 2)) as *const i32,
                            ))
                        };
                    }
                    macro_rules! p {
                        ($t:literal, $u:literal) => {
                            _mm256_add_epi16(
                                _mm256_maddubs_epi16(wq[$t][0], a4!($t)),
                                _mm256_maddubs_epi16(wq[$t][1], a4!($u)),
                            )
                        };
                    }
                    let s16 = _mm256_add_epi16(
                        _mm256_add_epi16(p!(0, 4), p!(1, 5)),
                        _mm256_add_epi16(p!(2, 6), p!(3, 7)),
                    );
                    let offset = _mm256_castps_si256(_mm256_broadcast_ss(bytemuck::cast_ref(
                        &ab.offsets[$m],
                    )));
                    let sums = _mm256_sub_epi32(_mm256_madd_epi16(s16, ones), offset);
                    let scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(&ab.d[$m]));
                    $acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, $acc);
                };
            }
            row!(0, acc0);
            row!(1, acc1);
            row!(2, acc2);
            row!(3, acc3);
        }
        assert!(out.len() >= 32);
        for (m, acc_m) in [acc0, acc1, acc2, acc3].iter().enumerate() {
            // SAFETY: `out` holds at least 32 floats (asserted above).
            _mm256_storeu_ps(
                out.as_mut_ptr().add(8 * m),
                _mm256_permutevar8x32_ps(*acc_m, order),
            );
        }
    }
}

/// Four i16 partial sums per row of unsigned weights (0..=15) times signed activations:
/// 64-bit lane k holds row k (rows 0-3) and row 4 + k (rows 4-7).
#[inline(always)]
unsafe fn unsigned_halves(w: &[[__m256i; 2]; 4], a: [__m256i; 4]) -> (__m256i, __m256i) {
    // SAFETY: callers meet this function's contract: the CPU has the features of the
    // kernel set that calls it, and the slices are as long as the body reads.
    unsafe {
        let s03 = _mm256_add_epi16(
            _mm256_add_epi16(
                _mm256_maddubs_epi16(w[0][0], a[0]),
                _mm256_maddubs_epi16(w[0][1], a[2]),
            ),
            _mm256_add_epi16(
                _mm256_maddubs_epi16(w[2][0], a[1]),
                _mm256_maddubs_epi16(w[2][1], a[3]),
            ),
        );
        let s47 = _mm256_add_epi16(
            _mm256_add_epi16(
                _mm256_maddubs_epi16(w[1][0], a[0]),
                _mm256_maddubs_epi16(w[1][1], a[2]),
            ),
            _mm256_add_epi16(
                _mm256_maddubs_epi16(w[3][0], a[1]),
                _mm256_maddubs_epi16(w[3][1], a[3]),
            ),
        );
        (s03, s47)
    }
}

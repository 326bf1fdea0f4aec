//! The Q6_K panel (which Q3_K shares): layout, packing, activation
//! preparation and kernel.

use super::*;

/// Q6_K: one panel super-block. Vector `v` of the first 64 holds weights
/// `4v..4v + 4` of each row as unsigned levels 0..63 (the weight plus 32).
pub(super) const Q6K_QS: usize = 0;
/// 16 vectors: d times the scale of sub-block `g` (16 weights), as f32.
pub(super) const Q6K_DSC: usize = Q6K_QS + 64 * VEC;
/// 8 vectors: -32 times the scales of sub-blocks `2p` and `2p + 1` as an
/// i16 pair (the offset of the levels, applied to the activation sums).
pub(super) const Q6K_CORR: usize = Q6K_DSC + 16 * VEC;
/// d as f32.
pub(super) const Q6K_D: usize = Q6K_CORR + 8 * VEC;
/// Bytes of a panel super-block.
pub(super) const Q6K_SB: usize = Q6K_D + VEC;
/// Bytes of a Q6_K block.
pub(super) const Q6K_BYTES: usize = 210;

pub(super) static Q6_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q6K_SB,
    pack: q6k_pack,
    act_bytes: |n| n / QK * Q8K_BYTES,
    prep: q8k_copy,
    run: q6k_run,
    run_pair: None,
    wide: None,
};

/// Q3_K in the Q6_K panel layout and kernel: levels 0..7 (the weight plus
/// 4), d times the 16 signed 6-bit scales, -4 times the scales.
pub(super) static Q3_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q6K_SB,
    pack: q3k_pack,
    act_bytes: |n| n / QK * Q8K_BYTES,
    prep: q8k_copy,
    run: q6k_run,
    run_pair: None,
    wide: None,
};

/// Bytes of a Q3_K block.
const Q3K_BYTES: usize = 110;

fn q3k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q3K_BYTES, out, Q6K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<3>(nb, rows, out, Q3K_BYTES, Q6K_SB, Q6K_QS, 4) };
    for ib in 0..nb {
        let at = ib * Q3K_BYTES;
        let mut d = [0u16; PANEL_ROWS];
        for (dr, x) in d.iter_mut().zip(rows) {
            *dr = u16::from_le_bytes([x[at + 108], x[at + 109]]);
        }
        // SAFETY: as above; the 12 scale bytes at 96 of every row's block
        // ib; panel super-block ib is inside `out`.
        unsafe {
            let sc: [__m128i; PANEL_ROWS] = std::array::from_fn(|r| match rows.get(r) {
                Some(x) => crate::simd::avx2::q3k_scales(x.as_ptr().add(at + 96)),
                None => _mm_setzero_si128(),
            });
            pack_i8_scales(&sc, &d, 4, out.as_mut_ptr().add(ib * Q6K_SB));
        }
    }
}

fn q6k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q6K_BYTES, out, Q6K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<6>(nb, rows, out, Q6K_BYTES, Q6K_SB, Q6K_QS, 4) };
    for ib in 0..nb {
        let mut d = [0u16; PANEL_ROWS];
        for (dr, x) in d.iter_mut().zip(rows) {
            let o = ib * Q6K_BYTES + 208;
            *dr = u16::from_le_bytes([x[o], x[o + 1]]);
        }
        // SAFETY: as above; panel super-block ib is inside `out`.
        unsafe { q6k_pack_scales(rows, ib * Q6K_BYTES, &d, out.as_mut_ptr().add(ib * Q6K_SB)) };
    }
}

/// Packs d * scale, the offset pairs and d of the 16 rows' Q6_K blocks at
/// byte `at` (d given as f16 bits; zeros for missing rows) into the panel
/// super-block at `o`.
///
/// # Safety
/// AVX-512; every row readable for a Q6_K block at `at`; `o` writable for
/// a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q6k_pack_scales(rows: &[&[u8]], at: usize, d: &[u16; PANEL_ROWS], o: *mut u8) {
    let sc: [__m128i; PANEL_ROWS] = std::array::from_fn(|r| match rows.get(r) {
        // SAFETY: the 16 scales at 192 of the block (caller).
        Some(x) => unsafe { _mm_loadu_si128(x.as_ptr().add(at + 192) as *const __m128i) },
        None => _mm_setzero_si128(),
    });
    // SAFETY: `o` holds a panel super-block (caller).
    unsafe { pack_i8_scales(&sc, d, 32, o) };
}

/// Packs the 16 rows' 16 signed scales (`sc[r]`, i8), d (f16 bits) and the
/// offset `off` of their levels into the panel super-block at `o`: d times
/// each scale as f32, `-off` times the scales as i16 pairs, d as f32. The
/// 16 scales of every row are transposed to 4 vectors of one row per lane.
///
/// # Safety
/// AVX-512; `o` writable for a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn pack_i8_scales(sc: &[__m128i; PANEL_ROWS], d: &[u16; PANEL_ROWS], off: i32, o: *mut u8) {
    let m: [__m512i; 16] = std::array::from_fn(|r| _mm512_castsi128_si512(sc[r]));
    let mut t = [0u8; 16 * VEC];
    // SAFETY: t holds 16 vectors, d 16 halves; vectors 0..4 are read back.
    let (sv, d) = unsafe {
        transpose_store(&m, t.as_mut_ptr());
        let sv: [__m512i; 4] = std::array::from_fn(|k| load512(t.as_ptr().add(k * VEC)));
        (
            sv,
            _mm512_cvtph_ps(_mm256_loadu_si256(d.as_ptr() as *const __m256i)),
        )
    };
    // Scale g, sign-extended: byte g % 4 of vector g / 4.
    let scale = |g: usize| {
        let v = _mm512_sll_epi32(sv[g / 4], _mm_cvtsi32_si128(24 - 8 * (g % 4) as i32));
        _mm512_srai_epi32::<24>(v)
    };
    let low16 = _mm512_set1_epi32(0xffff);
    let neg_off = _mm512_set1_epi32(-off);
    // SAFETY: the vectors below lie inside the panel super-block (caller).
    unsafe {
        for g in 0..16 {
            let v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale(g)));
            _mm512_storeu_ps(o.add(Q6K_DSC + g * VEC) as *mut f32, v);
        }
        for q in 0..8 {
            let lo = _mm512_mullo_epi32(neg_off, scale(2 * q));
            let hi = _mm512_mullo_epi32(neg_off, scale(2 * q + 1));
            let v = _mm512_or_si512(_mm512_and_si512(lo, low16), _mm512_slli_epi32::<16>(hi));
            _mm512_storeu_si512(o.add(Q6K_CORR + q * VEC) as *mut __m512i, v);
        }
        _mm512_storeu_ps(o.add(Q6K_D) as *mut f32, d);
    }
}

/// Activations the kernel reads as Q8_K blocks as they are.
pub(super) fn q8k_copy(n: usize, y: &[u8], out: &mut [u8]) {
    let len = n / QK * Q8K_BYTES;
    assert!(
        n % QK == 0 && y.len() >= len && out.len() >= len,
        "panel prep: {n} elements, short slices"
    );
    out[..len].copy_from_slice(&y[..len]);
}

fn q6k_run(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    check_run(n, panel, Q6K_SB, cols, Q8K_BYTES, out);
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { by_cols!(q6k_kernel, n / QK, panel, cols, out) }
}

/// # Safety
/// AVX-512 VNNI; `nb` super-blocks in `panel` and in every column, `C`
/// columns, `C * PANEL_ROWS` results (checked by [`check_run`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q6k_kernel<const C: usize>(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    let mut acc = [_mm512_setzero_ps(); C];
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and Q8_K block ib of every
        // column (checked); every offset below stays inside them.
        unsafe {
            let p = panel.as_ptr().add(ib * Q6K_SB);
            let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr().add(ib * Q8K_BYTES));
            let mut fsum = [_mm512_setzero_ps(); C];
            for g in 0..16 {
                // 16 weights: exact sums, exactly converted.
                let mut isub = [_mm512_setzero_si512(); C];
                for i in 0..4 {
                    let w = load512(p.add(Q6K_QS + (4 * g + i) * VEC));
                    let at = Q8K_QS + 16 * g + 4 * i;
                    for c in 0..C {
                        isub[c] = _mm512_dpbusd_epi32(isub[c], w, bcast4(y[c].add(at)));
                    }
                }
                let dsc = load_ps(p.add(Q6K_DSC + g * VEC));
                for c in 0..C {
                    fsum[c] = _mm512_fmadd_ps(dsc, _mm512_cvtepi32_ps(isub[c]), fsum[c]);
                }
            }
            // The offset: -32 * sum over sub-blocks of scale * (sum of 16 levels).
            let d = load_ps(p.add(Q6K_D));
            for c in 0..C {
                let mut m = _mm512_setzero_si512();
                for q in 0..8 {
                    m = _mm512_dpwssd_epi32(
                        m,
                        load512(p.add(Q6K_CORR + q * VEC)),
                        bcast4(y[c].add(Q8K_BSUMS + 4 * q)),
                    );
                }
                let t = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(m), fsum[c]);
                acc[c] = _mm512_fmadd_ps(bcast_ps(y[c]), t, acc[c]);
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: C * PANEL_ROWS results (checked).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * PANEL_ROWS), *a) };
    }
}

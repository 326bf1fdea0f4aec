//! The Q4_K and Q5_K panels: layouts, packing, activation preparation and
//! kernels.

use super::*;

/// Q4_K: one panel super-block, exactly as many bytes as its 16 rows'
/// blocks. First the rows' 16-byte block headers: d of the 16 rows as f16
/// (row `r` at `2r`),
pub(super) const Q4K_D: usize = 0;
/// then their dmin as f16 (row `r` at 32 + `2r`),
pub(super) const Q4K_DMIN: usize = 32;
/// then 3 vectors: vector `k` holds bytes `4k..4k + 4` of each row's 12
/// bytes of packed 6-bit scales and mins (as ggml's `get_scale_min_k4`
/// reads them: bytes 0..4 scales 0..4, bytes 4..8 mins 0..4, the low bits
/// of scales and mins 4..8 in bytes 8..12 and their top bits in bits 6..8
/// of bytes 0..8).
pub(super) const Q4K_SC: usize = VEC;
/// then 32 vectors: vector `v` holds bytes `4v..4v + 4` of each row's
/// `qs`: its low nibbles are weights `64j + 4i ..` (`v = 8j + i`), its high
/// nibbles the same plus 32.
pub(crate) const Q4K_QS: usize = 4 * VEC;
/// Bytes of a panel super-block (16 Q4_K blocks).
pub(crate) const Q4K_SB: usize = Q4K_QS + 32 * VEC;
/// Bytes of a Q4_K block.
pub(super) const Q4K_BYTES: usize = 144;
const _: () = assert!(Q4K_SB == PANEL_ROWS * Q4K_BYTES);

/// Q5_K: one panel super-block. Vector `v` of the first 64 holds weights
/// `4v..4v + 4` of each row as levels 0..31.
const Q5K_QS: usize = 0;
/// 4 vectors: the mins of sub-blocks `2p` and `2p + 1` as an i16 pair.
const Q5K_MIN: usize = Q5K_QS + 64 * VEC;
/// dmin as f32.
const Q5K_DMIN: usize = Q5K_MIN + 4 * VEC;
/// 8 vectors: d times the scale of sub-block `b` (32 weights), as f32.
const Q5K_DSC: usize = Q5K_DMIN + VEC;
/// Bytes of a panel super-block.
const Q5K_SB: usize = Q5K_DSC + 8 * VEC;
/// Bytes of a Q5_K block.
const Q5K_BYTES: usize = 176;

/// Q4_K / Q5_K activations: per super-block the 256 levels, the 8 sums of
/// 32 as i16, d as f32, padding.
pub(super) const A4_QS: usize = 0;
pub(super) const A4_SUM: usize = 256;
pub(super) const A4_D: usize = 272;
pub(crate) const A4_SB: usize = 288;

/// Q4_K: at most this many columns make a call read each panel byte once
/// (token generation, a matrix x vector, streams the panels from memory).
const Q4K_FEW: usize = 4;
/// Bytes ahead of the super-block being read that such a call asks the
/// cache for: panels of a matrix lie back to back and a thread walks
/// consecutive ones, so the stream runs on into the next panel. Measured
/// best of 2 to 8 KiB on a matrix larger than the last-level cache. The
/// requests go out one cache line per vector read, next to the read: all
/// 36 lines of a super-block asked for at once generated TinyLlama Q4_K_M
/// at 43-45 tokens/s on one thread, one at a time at 52-57 (runs
/// alternated). With more columns (compute-bound, a panel read again for
/// each group of columns) the prefetches measured slower.
pub(super) const Q4K_PREFETCH: usize = 6144;

pub(super) static Q4_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q4K_SB,
    pack: q4k_pack,
    act_bytes: |n| n / QK * A4_SB,
    prep: q4k_prep,
    run: q4k_run,
    run_pair: None,
    wide: None,
};

pub(super) static Q5_K_GEMM: Gemm = Gemm {
    panel_bytes: |n| n / QK * Q5K_SB,
    pack: q5k_pack,
    act_bytes: |n| n / QK * A4_SB,
    prep: q4k_prep,
    run: q5k_run,
    run_pair: None,
    wide: None,
};

fn q4k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q4K_BYTES, out, Q4K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<4>(nb, rows, out, Q4K_BYTES, Q4K_SB, Q4K_QS, 2) };
    for ib in 0..nb {
        // SAFETY: as above; panel super-block ib is inside `out`.
        unsafe { q4k_pack_header(rows, ib * Q4K_BYTES, out.as_mut_ptr().add(ib * Q4K_SB)) };
    }
}

fn q5k_pack(n: usize, rows: &[&[u8]], out: &mut [u8]) {
    check_pack(n, rows, Q5K_BYTES, out, Q5K_SB);
    let nb = n / QK;
    // Every byte of the panel is written below (zeros for missing rows).
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { pack_levels::<5>(nb, rows, out, Q5K_BYTES, Q5K_SB, Q5K_QS, 4) };
    for ib in 0..nb {
        // SAFETY: as above; panel super-block ib is inside `out`.
        unsafe { q5k_pack_scales(rows, ib * Q5K_BYTES, out.as_mut_ptr().add(ib * Q5K_SB)) };
    }
}

/// The first 16 bytes (d, dmin, the 12 bytes of 6-bit scales and mins) of
/// the 16 rows' blocks at byte `at` (zeros for missing rows), transposed to
/// 4 vectors of one row per lane.
///
/// # Safety
/// AVX-512; every row readable for 16 bytes at `at`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn block_headers(rows: &[&[u8]], at: usize) -> [__m512i; 4] {
    let m: [__m512i; 16] = std::array::from_fn(|r| match rows.get(r) {
        Some(x) => {
            // SAFETY: 16 bytes at `at` (caller).
            let v = unsafe { _mm_loadu_si128(x.as_ptr().add(at) as *const __m128i) };
            _mm512_castsi128_si512(v)
        }
        None => _mm512_setzero_si512(),
    });
    let mut t = [0u8; 16 * VEC];
    // SAFETY: t holds 16 vectors; vectors 0..4 are read back.
    unsafe {
        transpose_store(&m, t.as_mut_ptr());
        std::array::from_fn(|k| load512(t.as_ptr().add(k * VEC)))
    }
}

/// Packs the headers of the 16 rows' Q4_K blocks at byte `at` (zeros for
/// missing rows) into the panel super-block at `o`: d and dmin as f16, the
/// scale bytes as they are.
///
/// # Safety
/// AVX-512; every row readable for a Q4_K block at `at`; `o` writable for
/// a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_pack_header(rows: &[&[u8]], at: usize, o: *mut u8) {
    // SAFETY: the block headers (caller).
    let [dd, s0, s1, s2] = unsafe { block_headers(rows, at) };
    // SAFETY: the vectors below lie inside the panel super-block (caller).
    unsafe {
        let d = _mm512_cvtepi32_epi16(dd);
        let dmin = _mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(dd));
        _mm256_storeu_si256(o.add(Q4K_D) as *mut __m256i, d);
        _mm256_storeu_si256(o.add(Q4K_DMIN) as *mut __m256i, dmin);
        for (k, s) in [s0, s1, s2].iter().enumerate() {
            _mm512_storeu_si512(o.add(Q4K_SC + k * VEC) as *mut __m512i, *s);
        }
    }
}

/// Packs d * scale, the mins and dmin of the 16 rows' Q5_K blocks at byte
/// `at` (zeros for missing rows) into the panel super-block at `o`, all
/// rows at once.
///
/// # Safety
/// AVX-512; every row readable for a Q5_K block at `at`; `o` writable for
/// a panel super-block.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")]
unsafe fn q5k_pack_scales(rows: &[&[u8]], at: usize, o: *mut u8) {
    // SAFETY: the block headers (caller).
    let [dd, s0, s1, s2] = unsafe { block_headers(rows, at) };
    let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    let dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(dd)));
    let (m63, m15, ff) = (
        _mm512_set1_epi32(63),
        _mm512_set1_epi32(15),
        _mm512_set1_epi32(255),
    );
    let byte = |v: __m512i, k: usize| {
        _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(8 * k as i32)), ff)
    };
    let mut sc = [_mm512_setzero_si512(); 8];
    let mut mn = [_mm512_setzero_si512(); 8];
    // As scale_min_k4: bytes 0..4 hold scales 0..4 (and the top bits of
    // scales 4..8), bytes 4..8 mins 0..4 (and the top bits of mins 4..8),
    // bytes 8..12 the low bits of scales and mins 4..8.
    for k in 0..4 {
        let (a, b, c) = (byte(s0, k), byte(s1, k), byte(s2, k));
        sc[k] = _mm512_and_si512(a, m63);
        mn[k] = _mm512_and_si512(b, m63);
        sc[k + 4] = _mm512_or_si512(
            _mm512_and_si512(c, m15),
            _mm512_slli_epi32::<4>(_mm512_srli_epi32::<6>(a)),
        );
        mn[k + 4] = _mm512_or_si512(
            _mm512_srli_epi32::<4>(c),
            _mm512_slli_epi32::<4>(_mm512_srli_epi32::<6>(b)),
        );
    }
    // SAFETY: the vectors below lie inside the panel super-block (caller).
    unsafe {
        for (g, s) in sc.iter().enumerate() {
            let v = _mm512_mul_ps(d, _mm512_cvtepi32_ps(*s));
            _mm512_storeu_ps(o.add(Q5K_DSC + g * VEC) as *mut f32, v);
        }
        for q in 0..4 {
            let v = _mm512_or_si512(mn[2 * q], _mm512_slli_epi32::<16>(mn[2 * q + 1]));
            _mm512_storeu_si512(o.add(Q5K_MIN + q * VEC) as *mut __m512i, v);
        }
        _mm512_storeu_ps(o.add(Q5K_DMIN) as *mut f32, dmin);
    }
}

fn q4k_prep(n: usize, y: &[u8], out: &mut [u8]) {
    let nb = n / QK;
    assert!(
        n % QK == 0 && y.len() >= nb * Q8K_BYTES && out.len() >= nb * A4_SB,
        "panel prep: {n} elements, short slices"
    );
    for ib in 0..nb {
        let yb = &y[ib * Q8K_BYTES..(ib + 1) * Q8K_BYTES];
        let o = &mut out[ib * A4_SB..(ib + 1) * A4_SB];
        o[A4_QS..A4_QS + QK].copy_from_slice(&yb[Q8K_QS..Q8K_QS + QK]);
        for j in 0..8 {
            // Sums of 32 levels are at most 4096 in magnitude.
            let s = (q8k_bsum(yb, 2 * j) + q8k_bsum(yb, 2 * j + 1)) as i16;
            o[A4_SUM + 2 * j..A4_SUM + 2 * j + 2].copy_from_slice(&s.to_le_bytes());
        }
        o[A4_D..A4_D + 4].copy_from_slice(&yb[0..4]);
        o[A4_D + 4..A4_SB].fill(0);
    }
}

fn q4k_run(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    check_run(n, panel, Q4K_SB, cols, A4_SB, out);
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { by_cols!(q4k_kernel, n / QK, panel, cols, out) }
}

fn q5k_run(n: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    check_run(n, panel, Q5K_SB, cols, A4_SB, out);
    // SAFETY: installed only on CPUs with AVX-512 VNNI; lengths checked.
    unsafe { by_cols!(q5k_kernel, n / QK, panel, cols, out) }
}

/// # Safety
/// As [`qk_kernel`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_kernel<const C: usize>(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_kernel::<C, false>(nb, panel, cols, out) }
}

/// # Safety
/// As [`qk_kernel`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q5k_kernel<const C: usize>(nb: usize, panel: &[u8], cols: &[&[u8]], out: &mut [f32]) {
    // SAFETY: same contract.
    unsafe { qk_kernel::<C, true>(nb, panel, cols, out) }
}

/// A `VPSHUFB` control that moves byte `k` of every dword to the dword's
/// low byte and zeroes the others.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
fn byte_to_dword(k: i32) -> __m512i {
    let base = _mm512_set4_epi32(
        0x8080_800c_u32 as i32,
        0x8080_8008_u32 as i32,
        0x8080_8004_u32 as i32,
        0x8080_8000_u32 as i32,
    );
    _mm512_add_epi32(base, _mm512_set1_epi32(k))
}

/// A `VPSHUFB` control that moves bytes `2h` and `2h + 1` of every dword
/// to its two i16 halves, zero-extended.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
fn bytes_to_words(h: i32) -> __m512i {
    let base = _mm512_set4_epi32(
        0x800d_800c_u32 as i32,
        0x8009_8008_u32 as i32,
        0x8005_8004_u32 as i32,
        0x8001_8000_u32 as i32,
    );
    _mm512_add_epi32(base, _mm512_set1_epi32(0x0002_0002 * h))
}

/// The scales of a Q4_K panel super-block, decoded for all 16 rows.
#[derive(Clone, Copy)]
struct Q4kScales {
    /// d as f32.
    d: __m512,
    /// d / 16, for the odd sub-blocks: the high nibbles, which the kernel
    /// leaves in place (16 times the level).
    d16: __m512,
    /// Byte `k` of a lane: the row's scale of sub-block `k` (6 bits).
    s03: __m512i,
    /// Byte `k` of a lane: the row's scale of sub-block `4 + k`.
    s47: __m512i,
}

impl Q4kScales {
    /// # Safety
    /// AVX-512; `p` readable for a Q4_K panel super-block.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
    unsafe fn new(p: *const u8) -> Q4kScales {
        // SAFETY: d and scale bytes 0..4 and 8..12 of the super-block (caller).
        let (dh, s0, s2) = unsafe {
            (
                _mm256_loadu_si256(p.add(Q4K_D) as *const __m256i),
                load512(p.add(Q4K_SC)),
                load512(p.add(Q4K_SC + 2 * VEC)),
            )
        };
        let d = _mm512_cvtph_ps(dh);
        let m3f = _mm512_set1_epi8(0x3f);
        // Scales 4..8: the low 4 bits from bytes 8..12, the top 2 bits from
        // bits 6..8 of bytes 0..4.
        let top = _mm512_and_si512(_mm512_srli_epi32::<2>(s0), _mm512_set1_epi8(0x30));
        Q4kScales {
            d,
            d16: _mm512_mul_ps(d, _mm512_set1_ps(1.0 / 16.0)),
            s03: _mm512_and_si512(s0, m3f),
            // (s2 & 0x0f) | top
            s47: _mm512_ternarylogic_epi32::<0xf8>(top, s2, _mm512_set1_epi8(0x0f)),
        }
    }

    /// d times the scale of sub-block `g` (32 weights), as f32 (for the odd
    /// sub-blocks, the high nibbles, divided by 16). d has 11 significant
    /// bits and the scale 6, so every product is exact, as a packed one.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
    fn dsc(&self, g: usize) -> __m512 {
        let s = if g < 4 { self.s03 } else { self.s47 };
        let v = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(s, byte_to_dword(g as i32 % 4)));
        _mm512_mul_ps(if g % 2 == 0 { self.d } else { self.d16 }, v)
    }
}

/// The mins of a Q4_K panel super-block: vector `q` holds those of
/// sub-blocks `2q` and `2q + 1` as an i16 pair; and dmin as f32.
///
/// # Safety
/// AVX-512; `p` readable for a Q4_K panel super-block.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn q4k_mins(p: *const u8) -> ([__m512i; 4], __m512) {
    // SAFETY: dmin and scale bytes 4..12 of the super-block (caller).
    let (dh, s1, s2) = unsafe {
        (
            _mm256_loadu_si256(p.add(Q4K_DMIN) as *const __m256i),
            load512(p.add(Q4K_SC + VEC)),
            load512(p.add(Q4K_SC + 2 * VEC)),
        )
    };
    let m03 = _mm512_and_si512(s1, _mm512_set1_epi8(0x3f));
    // Mins 4..8: the high 4 bits of bytes 8..12, the top 2 bits from bits
    // 6..8 of bytes 4..8.
    let top = _mm512_and_si512(_mm512_srli_epi32::<2>(s1), _mm512_set1_epi8(0x30));
    let m47 =
        _mm512_ternarylogic_epi32::<0xf8>(top, _mm512_srli_epi32::<4>(s2), _mm512_set1_epi8(0x0f));
    let (lo, hi) = (bytes_to_words(0), bytes_to_words(1));
    (
        [
            _mm512_shuffle_epi8(m03, lo),
            _mm512_shuffle_epi8(m03, hi),
            _mm512_shuffle_epi8(m47, lo),
            _mm512_shuffle_epi8(m47, hi),
        ],
        _mm512_cvtph_ps(dh),
    )
}

/// # Safety
/// AVX-512 VNNI; `nb` super-blocks in `panel` and in every column, `C`
/// columns, `C * PANEL_ROWS` results (checked by [`check_run`]).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma")]
unsafe fn qk_kernel<const C: usize, const FIVE: bool>(
    nb: usize,
    panel: &[u8],
    cols: &[&[u8]],
    out: &mut [f32],
) {
    let m4 = _mm512_set1_epi8(0x0f);
    let mf0 = _mm512_set1_epi8(0xf0u8 as i8);
    let sb = if FIVE { Q5K_SB } else { Q4K_SB };
    // Q4_K with few columns reads the panel once, both nibbles of a vector
    // at a time (see below).
    let few = !FIVE && C <= Q4K_FEW;
    let ask = few && crate::simd::stream::software_prefetch();
    let mut acc = [_mm512_setzero_ps(); C];
    for ib in 0..nb {
        // SAFETY: super-block ib of the panel and of every column (checked);
        // every offset below stays inside them.
        unsafe {
            let p = panel.as_ptr().add(ib * sb);
            let ahead = p.wrapping_add(Q4K_PREFETCH);
            if ask {
                // The header's lines here, each vector of levels' as it
                // is read (below): see [`Q4K_PREFETCH`].
                for o in (0..Q4K_QS).step_by(64) {
                    // A prefetch is only a hint: it never faults, so the
                    // address may lie past the panel (the next panel of
                    // the matrix, when there is one).
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(o) as *const i8);
                }
            }
            let y: [*const u8; C] = std::array::from_fn(|c| cols[c].as_ptr().add(ib * A4_SB));
            // d * scale of sub-block g: Q5_K's as packed; Q4_K's decoded
            // next to its use for few columns, all up front for many
            // (which measured faster: there the columns' sums fill the
            // registers).
            let scales = (!FIVE).then(|| Q4kScales::new(p));
            let many = (!FIVE && !few).then(|| {
                let s = scales.unwrap();
                std::array::from_fn::<__m512, 8, _>(|g| s.dsc(g))
            });
            let dsc = |g: usize| match (&many, &scales) {
                (Some(m), _) => m[g],
                (None, Some(s)) => s.dsc(g),
                (None, None) => load_ps(p.add(Q5K_DSC + g * VEC)),
            };
            let mut fsum = [_mm512_setzero_ps(); C];
            for j in 0..4 {
                if few {
                    // Each vector once for both its nibbles, the sums of
                    // a sub-block split over two chains for one column
                    // (one chain of VPDPBUSDs per sub-block waits on their
                    // latency).
                    let chains = if C == 1 { 2 } else { 1 };
                    let mut part = [[[_mm512_setzero_si512(); C]; 2]; 2];
                    for i in 0..8 {
                        let at = Q4K_QS + (8 * j + i) * VEC;
                        if ask {
                            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(at) as *const i8);
                        }
                        let v = load512(p.add(at));
                        // The high nibbles stay in place: 16 times the
                        // level.
                        let w = [_mm512_and_si512(v, m4), _mm512_and_si512(v, mf0)];
                        for (nib, wn) in w.iter().enumerate() {
                            let at = A4_QS + 64 * j + 32 * nib + 4 * i;
                            let ch = &mut part[nib][i % chains];
                            for c in 0..C {
                                ch[c] = _mm512_dpbusd_epi32(ch[c], *wn, bcast4(y[c].add(at)));
                            }
                        }
                    }
                    for (nib, pn) in part.iter().enumerate() {
                        let dsc = dsc(2 * j + nib);
                        for c in 0..C {
                            // The same exact sum as one chain's.
                            let isub = if chains == 2 {
                                _mm512_add_epi32(pn[0][c], pn[1][c])
                            } else {
                                pn[0][c]
                            };
                            fsum[c] = _mm512_fmadd_ps(dsc, _mm512_cvtepi32_ps(isub), fsum[c]);
                        }
                    }
                    continue;
                }
                for nib in 0..2 {
                    // 32 weights: exact sums, exactly converted (below
                    // 2^24 in magnitude, also 16 times a high-nibble sum).
                    let mut isub = [_mm512_setzero_si512(); C];
                    for i in 0..8 {
                        let w = if FIVE {
                            load512(p.add(Q5K_QS + (16 * j + 8 * nib + i) * VEC))
                        } else {
                            let v = load512(p.add(Q4K_QS + (8 * j + i) * VEC));
                            // The high nibbles stay in place: 16 times
                            // the level.
                            if nib == 0 {
                                _mm512_and_si512(v, m4)
                            } else {
                                _mm512_and_si512(v, mf0)
                            }
                        };
                        let at = A4_QS + 64 * j + 32 * nib + 4 * i;
                        for c in 0..C {
                            isub[c] = _mm512_dpbusd_epi32(isub[c], w, bcast4(y[c].add(at)));
                        }
                    }
                    let dsc = dsc(2 * j + nib);
                    for c in 0..C {
                        fsum[c] = _mm512_fmadd_ps(dsc, _mm512_cvtepi32_ps(isub[c]), fsum[c]);
                    }
                }
            }
            let (mins, dmin) = if FIVE {
                (
                    std::array::from_fn(|q| load512(p.add(Q5K_MIN + q * VEC))),
                    load_ps(p.add(Q5K_DMIN)),
                )
            } else {
                q4k_mins(p)
            };
            for c in 0..C {
                let mut m = _mm512_setzero_si512();
                for (q, mq) in mins.iter().enumerate() {
                    m = _mm512_dpwssd_epi32(m, *mq, bcast4(y[c].add(A4_SUM + 4 * q)));
                }
                let t = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(m), fsum[c]);
                acc[c] = _mm512_fmadd_ps(bcast_ps(y[c].add(A4_D)), t, acc[c]);
            }
        }
    }
    for (c, a) in acc.iter().enumerate() {
        // SAFETY: C * PANEL_ROWS results (checked).
        unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(c * PANEL_ROWS), *a) };
    }
}

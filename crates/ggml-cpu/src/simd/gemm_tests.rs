//! Every panel kernel ([`super::Gemm`]) against the scalar row kernels:
//! within f32 rounding of the terms' magnitude on random data, bit-exact
//! whatever the number of columns per call and the rows per panel.

use ggml_core::Type;

use super::tests::{lengths, magnitude, quantize, Rng, TYPES};
use super::{kernels_for, scalar, GEMM_COLS, PAIR_COLS, PANEL_ROWS};
use crate::convert;
use crate::features::available_isas;

/// A panel of the weight rows `xs` (packed over garbage) and the
/// activation rows `ys` prepared for `g` (over garbage too).
pub(super) fn packed(
    g: &super::Gemm,
    n: usize,
    xs: &[Vec<u8>],
    ys: &[Vec<u8>],
) -> (Vec<u8>, Vec<Vec<u8>>) {
    let rows: Vec<&[u8]> = xs.iter().map(|v| &v[..]).collect();
    let mut panel = vec![0xa5u8; (g.panel_bytes)(n)];
    (g.pack)(n, &rows, &mut panel);
    let prepped = ys
        .iter()
        .map(|y| {
            let mut p = vec![0x5au8; (g.act_bytes)(n)];
            (g.prep)(n, y, &mut p);
            p
        })
        .collect();
    (panel, prepped)
}

/// Panel results for `rows` weight rows x all of `ys`, one call per
/// `per_call` columns; indexed [r][c].
fn run_gemm(
    g: &super::Gemm,
    n: usize,
    xs: &[Vec<u8>],
    ys: &[Vec<u8>],
    per_call: usize,
) -> Vec<Vec<f32>> {
    let (panel, prepped) = packed(g, n, xs, ys);
    let mut got = vec![vec![0f32; ys.len()]; xs.len()];
    for (ci, chunk) in prepped.chunks(per_call).enumerate() {
        let cols: Vec<&[u8]> = chunk.iter().map(|v| &v[..]).collect();
        let mut out = vec![f32::NAN; cols.len() * PANEL_ROWS];
        (g.run)(n, &panel, &cols, &mut out);
        for c in 0..cols.len() {
            for (r, row) in got.iter_mut().enumerate() {
                row[ci * per_call + c] = out[c * PANEL_ROWS + r];
            }
        }
    }
    got
}

fn random_rows(ty: Type, n: usize, count: usize, rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..count).map(|_| quantize(ty, &rng.vec(n))).collect()
}

/// `g`, the panel kernel for `ty` (`label` names it in failures), is
/// within f32 rounding of the scalar row kernel at every test length.
pub(super) fn check_against_row_kernels(ty: Type, g: &super::Gemm, label: &str) {
    let vt = super::vec_dot_type(ty).unwrap();
    for n in lengths(ty) {
        let mut rng = Rng(0x9e37_79b9 ^ n as u64);
        let xs = random_rows(ty, n, PANEL_ROWS, &mut rng);
        let ys = random_rows(vt, n, GEMM_COLS + 3, &mut rng);
        let got = run_gemm(g, n, &xs, &ys, GEMM_COLS);
        for (r, x) in xs.iter().enumerate() {
            let mut xf = vec![0f32; n];
            convert::to_f32(ty, x, &mut xf).unwrap();
            for (c, y) in ys.iter().enumerate() {
                let mut want = [0f32];
                scalar::reference_dot(ty, n, &[x], &[y], &mut want);
                let tol = 4e-6 * magnitude(&xf, vt, y) + 1e-6;
                let err = f64::from((got[r][c] - want[0]).abs());
                assert!(
                    err <= tol,
                    "{ty} {label} n={n} ({r},{c}): {} vs {} (tol {tol:e})",
                    got[r][c],
                    want[0]
                );
            }
        }
    }
}

/// `g`'s results do not depend on the columns per call nor on where a row
/// sits in its panel.
pub(super) fn check_tiling_independence(ty: Type, g: &super::Gemm, label: &str) {
    let vt = super::vec_dot_type(ty).unwrap();
    for n in lengths(ty) {
        let mut rng = Rng(0x5151 ^ n as u64);
        let xs = random_rows(ty, n, PANEL_ROWS, &mut rng);
        let ys = random_rows(vt, n, GEMM_COLS, &mut rng);
        let all = run_gemm(g, n, &xs, &ys, GEMM_COLS);
        for per_call in 1..GEMM_COLS {
            assert_eq!(
                run_gemm(g, n, &xs, &ys, per_call),
                all,
                "{ty} {label} n={n} {per_call} columns per call"
            );
        }
        // Three rows alone in a panel, starting at row 5.
        let some = run_gemm(g, n, &xs[5..8], &ys, GEMM_COLS);
        assert_eq!(some[..], all[5..8], "{ty} {label} n={n} partial panel");
    }
}

#[test]
fn panel_kernels_match_the_row_kernels() {
    let mut tested = 0;
    for isa in available_isas() {
        let k = kernels_for(isa).unwrap();
        for &ty in TYPES {
            let Some(g) = k.gemm(ty) else { continue };
            tested += 1;
            check_against_row_kernels(ty, g, &format!("{isa:?}"));
        }
    }
    // x86-64 CPUs with AVX2 have panel kernels for F32, F16, Q4_0, Q5_0,
    // Q8_0, Q4_K, Q6_K and MXFP4, at every level from AVX2 up.
    if crate::features::cpu_features().avx2 {
        let k = kernels_for(crate::features::Isa::Avx2).unwrap();
        for ty in [
            Type::F32,
            Type::F16,
            Type::Q4_0,
            Type::Q5_0,
            Type::Q8_0,
            Type::Q4_K,
            Type::Q6_K,
            Type::MXFP4,
        ] {
            assert!(k.gemm(ty).is_some(), "no AVX2 panel kernel for {ty}");
        }
        assert!(tested >= 8, "only {tested} panel kernels");
    }
}

#[test]
fn panel_results_do_not_depend_on_columns_per_call_or_rows_per_panel() {
    for isa in available_isas() {
        let k = kernels_for(isa).unwrap();
        for &ty in TYPES {
            if let Some(g) = k.gemm(ty) {
                check_tiling_independence(ty, g, &format!("{isa:?}"));
            }
        }
    }
}

#[test]
fn missing_panel_rows_are_zero() {
    for isa in available_isas() {
        let k = kernels_for(isa).unwrap();
        for &ty in TYPES {
            let Some(g) = k.gemm(ty) else { continue };
            let vt = super::vec_dot_type(ty).unwrap();
            let n = lengths(ty)[1];
            let mut rng = Rng(77);
            let xs = random_rows(ty, n, 2, &mut rng);
            let ys = random_rows(vt, n, 2, &mut rng);
            let (panel, prepped) = packed(g, n, &xs, &ys);
            let cols: Vec<&[u8]> = prepped.iter().map(|v| &v[..]).collect();
            let mut out = vec![f32::NAN; 2 * PANEL_ROWS];
            (g.run)(n, &panel, &cols, &mut out);
            for c in 0..2 {
                for r in 2..PANEL_ROWS {
                    assert_eq!(out[c * PANEL_ROWS + r], 0.0, "{ty} {isa:?} row {r} col {c}");
                }
            }
        }
    }
}

/// Weights stored packed by one instruction set are read by another's
/// kernel (a repacked buffer does not say which packed it): every level's
/// panel kernel for a type packs the same bytes and computes the same
/// results, bit for bit.
#[test]
fn panel_layouts_and_results_agree_across_instruction_sets() {
    let kernels: Vec<_> = available_isas()
        .into_iter()
        .map(|isa| kernels_for(isa).unwrap())
        .collect();
    for &ty in TYPES {
        let gemms: Vec<_> = kernels
            .iter()
            .filter_map(|k| Some((k.isa, k.gemm(ty)?)))
            .collect();
        let Some(&(first_isa, first)) = gemms.first() else {
            continue;
        };
        let vt = super::vec_dot_type(ty).unwrap();
        for n in lengths(ty) {
            let mut rng = Rng(0x1234 ^ n as u64);
            let xs = random_rows(ty, n, PANEL_ROWS - 3, &mut rng);
            let ys = random_rows(vt, n, GEMM_COLS, &mut rng);
            let (panel, _) = packed(first, n, &xs, &ys);
            let want = run_gemm(first, n, &xs, &ys, GEMM_COLS);
            for &(isa, g) in &gemms[1..] {
                assert_eq!((g.panel_bytes)(n), (first.panel_bytes)(n), "{ty} n={n}");
                let (p, _) = packed(g, n, &xs, &ys);
                assert!(
                    p == panel,
                    "{ty} n={n}: {isa:?} packs other bytes than {first_isa:?}"
                );
                assert_eq!(
                    run_gemm(g, n, &xs, &ys, GEMM_COLS),
                    want,
                    "{ty} n={n} {isa:?}"
                );
            }
        }
    }
}

/// A stored layout's wide kernel (see [`super::Wide`]) reads what packing
/// the rows for it gives: expanding a stored panel gives those bytes, for
/// full and partial panels; it takes the same prepared columns; and it is
/// within f32 rounding of the row kernels and independent of the tiling.
#[test]
fn wide_kernels_read_expanded_panels_as_their_own() {
    let mut tested = 0;
    for isa in available_isas() {
        let k = kernels_for(isa).unwrap();
        for &ty in TYPES {
            let Some((g, w)) = k.gemm(ty).and_then(|g| Some((g, g.wide?))) else {
                continue;
            };
            tested += 1;
            let label = format!("{isa:?} wide");
            check_against_row_kernels(ty, w.gemm, &label);
            check_tiling_independence(ty, w.gemm, &label);
            let vt = super::vec_dot_type(ty).unwrap();
            for n in lengths(ty) {
                assert_eq!((w.gemm.act_bytes)(n), (g.act_bytes)(n), "{ty} n={n}");
                let mut rng = Rng(0xe4a4d ^ n as u64);
                let ys = random_rows(vt, n, 1, &mut rng);
                for rows in [PANEL_ROWS, 3] {
                    let xs = random_rows(ty, n, rows, &mut rng);
                    let (stored, prep) = packed(g, n, &xs, &ys);
                    let (want, wide_prep) = packed(w.gemm, n, &xs, &ys);
                    assert_eq!(prep, wide_prep, "{ty} {label} n={n}: prepared columns");
                    let mut got = vec![0x3cu8; (w.gemm.panel_bytes)(n)];
                    (w.expand)(n, &stored, &mut got);
                    assert!(
                        got == want,
                        "{ty} {label} n={n}, {rows} rows: expanded bytes"
                    );
                }
            }
        }
    }
    if crate::features::cpu_features().avx2 {
        assert!(tested > 0, "no wide kernel tested");
    }
}

/// Every panel kernel of this CPU, the wide ones included, by type.
fn all_gemms() -> Vec<(String, Type, &'static super::Gemm)> {
    let mut v = Vec::new();
    for isa in available_isas() {
        let k = kernels_for(isa).unwrap();
        for &ty in TYPES {
            let Some(g) = k.gemm(ty) else { continue };
            v.push((format!("{isa:?}"), ty, g));
            if let Some(w) = g.wide {
                v.push((format!("{isa:?} wide"), ty, w.gemm));
            }
        }
    }
    v
}

/// A kernel's `run_pair` gives, for every number of columns, the bits of
/// `run` on each of its two panels: a full one and one of 3 rows.
#[test]
fn pair_kernels_give_the_bits_of_one_panel_at_a_time() {
    let mut tested = 0;
    for (label, ty, g) in all_gemms() {
        let Some(pair) = g.run_pair else { continue };
        tested += 1;
        let vt = super::vec_dot_type(ty).unwrap();
        for n in lengths(ty) {
            let mut rng = Rng(0x9a1 ^ n as u64);
            let xa = random_rows(ty, n, PANEL_ROWS, &mut rng);
            let xb = random_rows(ty, n, 3, &mut rng);
            let ys = random_rows(vt, n, PAIR_COLS, &mut rng);
            let (a, prepped) = packed(g, n, &xa, &ys);
            let (b, _) = packed(g, n, &xb, &ys);
            for nc in 1..=PAIR_COLS {
                let cols: Vec<&[u8]> = prepped[..nc].iter().map(|v| &v[..]).collect();
                let block = nc * PANEL_ROWS;
                let mut want = vec![f32::NAN; 2 * block];
                (g.run)(n, &a, &cols, &mut want[..block]);
                (g.run)(n, &b, &cols, &mut want[block..]);
                let mut got = vec![f32::NAN; 2 * block];
                pair(n, &a, &b, &cols, &mut got);
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{ty} {label} n={n}, {nc} columns");
            }
        }
    }
    if crate::features::is_available(crate::features::Isa::Avx512) {
        assert!(tested > 0, "no pair kernel tested");
    }
}

/// F16 weights give the same bits whether a MUL_MAT reads their stored
/// f16 panels (few columns) or the f32 panels they expand into (many).
#[test]
fn expanded_f16_panels_give_the_stored_panels_bits() {
    for isa in available_isas() {
        let k = kernels_for(isa).unwrap();
        let Some((g, w)) = k.gemm(Type::F16).and_then(|g| Some((g, g.wide?))) else {
            continue;
        };
        for n in lengths(Type::F16) {
            let mut rng = Rng(0xf16 ^ n as u64);
            let xs = random_rows(Type::F16, n, PANEL_ROWS, &mut rng);
            let ys = random_rows(Type::F16, n, GEMM_COLS, &mut rng);
            let stored = run_gemm(g, n, &xs, &ys, GEMM_COLS);
            let wide = run_gemm(w.gemm, n, &xs, &ys, GEMM_COLS);
            assert_eq!(stored, wide, "{isa:?} n={n}");
        }
    }
}

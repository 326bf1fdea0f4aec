//! FLASH_ATTN_EXT on the CPU against ggml-core's reference, with fewer
//! than 64 query rows (ggml's one-query path) and with more (its tiles):
//! head sizes with and without a tail of vector lanes, value heads of
//! another size than key heads, F16 and F32 caches in each combination,
//! keys and values read from a cache-shaped tensor (rows of a head at the
//! stride of all heads), keys whose elements are not adjacent, masks that
//! hide keys, logit softcap and ALiBi.

use ggml_core::conformance::{run_cases, Case, CaseGraph, Check, Fill};
use ggml_core::graph::TensorId;
use ggml_core::{Result, Type};

/// How the keys and values are laid out.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Dense [d, n_kv, heads] tensors.
    Dense,
    /// Views of a cache [d * heads, n_ctx]: each head's rows at the stride
    /// of a whole cache row, as the KV cache holds them.
    Cache,
    /// Keys seen through a permutation: their elements are not adjacent.
    StridedKeys,
}

/// A [d, n_kv, heads] operand in `layout`.
fn operand(
    c: &mut CaseGraph<'_>,
    name: &str,
    ty: Type,
    [d, n_kv, heads]: [usize; 3],
    layout: Layout,
    is_key: bool,
) -> Result<TensorId> {
    match layout {
        Layout::Cache => {
            // Two cells more than the keys in use, as a cache bigger than
            // the context so far.
            let cache = c.rand(name, ty, &[d * heads, n_kv + 2]);
            let es = ty.type_size();
            c.g.view_3d(cache, [d, n_kv, heads], d * heads * es, d * es, 0)
        }
        Layout::StridedKeys if is_key => c.permuted(name, ty, &[d, n_kv, heads], [1, 0, 2, 3]),
        _ => Ok(c.rand(name, ty, &[d, n_kv, heads])),
    }
}

#[allow(clippy::too_many_arguments)]
fn case(
    (kt, vt): (Type, Type),
    (dk, dv): (usize, usize),
    n_q: usize,
    n_kv: usize,
    mask: Option<Fill>,
    softcap: f32,
    max_bias: f32,
    layout: Layout,
) -> Case {
    let name = format!(
        "FLASH_ATTN_EXT one-query k {kt} v {vt} dk {dk} dv {dv} n_q {n_q} n_kv {n_kv} mask {} softcap {softcap} max_bias {max_bias} {layout:?}",
        mask.is_some()
    );
    Case::new(name, Check::Nmse(5e-4), move |c| {
        let q = c.permuted("q", Type::F32, &[dk, n_q, 4], [0, 2, 1, 3])?;
        let k = operand(c, "k", kt, [dk, n_kv, 2], layout, true)?;
        let v = operand(c, "v", vt, [dv, n_kv, 2], layout, false)?;
        let m = mask.map(|f| c.input("mask", Type::F16, &[n_kv, n_q], f));
        c.g.flash_attn_ext(q, k, v, m, 1.0 / (dk as f32).sqrt(), max_bias, softcap)
    })
}

#[test]
fn one_query_attention_matches_the_reference() {
    let mut cases = Vec::new();
    let types = [
        (Type::F16, Type::F16),
        (Type::F32, Type::F32),
        (Type::F16, Type::F32),
        (Type::F32, Type::F16),
    ];
    for kv in types {
        for dims in [(8, 8), (13, 13), (40, 40), (72, 72), (24, 16), (64, 128)] {
            for layout in [Layout::Dense, Layout::Cache, Layout::StridedKeys] {
                cases.push(case(kv, dims, 1, 37, Some(Fill::Mask), 0.0, 0.0, layout));
            }
            cases.push(case(kv, dims, 3, 29, None, 0.0, 0.0, Layout::Cache));
            cases.push(case(
                kv,
                dims,
                2,
                33,
                Some(Fill::Causal),
                30.0,
                0.0,
                Layout::Cache,
            ));
            cases.push(case(
                kv,
                dims,
                1,
                19,
                Some(Fill::Mask),
                0.0,
                4.0,
                Layout::Dense,
            ));
        }
    }
    passes_all(&cases);
}

/// 64 and more query rows (ggml's tiles) against the reference: heads that
/// share key heads (a task's heads then share converted key and value
/// tiles), query tiles whose causal masks hide whole key tiles, and a
/// cache too long for every converted tile to be kept (one tile at a time).
#[test]
fn tiled_attention_matches_the_reference() {
    let mut cases = Vec::new();
    for kv in [(Type::F16, Type::F16), (Type::F32, Type::F32)] {
        for (dims, n_q, n_kv) in [
            ((8, 8), 130, 256),
            ((64, 64), 64, 200),
            ((256, 256), 70, 2200),
        ] {
            cases.push(case(
                kv,
                dims,
                n_q,
                n_kv,
                Some(Fill::Causal),
                0.0,
                0.0,
                Layout::Cache,
            ));
        }
        cases.push(case(
            kv,
            (40, 40),
            128,
            150,
            Some(Fill::Mask),
            30.0,
            4.0,
            Layout::Dense,
        ));
    }
    passes_all(&cases);
}

/// Runs `cases` on the CPU; every one must run and pass.
fn passes_all(cases: &[Case]) {
    let report = run_cases(&ggml_cpu::cpu_device(), cases);
    println!("{report}");
    report.assert_ok();
    assert!(
        report.skipped().is_empty(),
        "skipped: {:#?}",
        report.skipped()
    );
    assert_eq!(report.passed(), cases.len());
}

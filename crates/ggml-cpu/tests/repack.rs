//! Weights stored repacked (`CPU_REPACK`): MUL_MAT over them gives what it
//! gives over the same weights in plain CPU memory, for matrix x vector and
//! matrix x matrix, partial panels and broadcast batches; writes in whole
//! groups of 16 rows pack the same panels as one whole write; anything
//! else (reading the data back, another op, a view, an unsupported
//! tensor, a partial group) is an error that names the problem.

use std::sync::Arc;

use ggml_core::backend::{Backend, Buffer, BufferType, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::{TensorDesc, Type};

mod common;
use common::{weights, Rng};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Places `id` in a new buffer of `buft` (calling `init_tensor` as the
/// allocators do).
fn place(
    g: &mut Graph,
    id: TensorId,
    buft: &Arc<dyn BufferType>,
) -> ggml_core::Result<Arc<dyn Buffer>> {
    let desc = g.desc(id).clone();
    let b = buft.alloc_buffer(buft.alloc_size(&desc).max(1))?;
    b.init_tensor(&desc, 0)?;
    g.node_mut(id).at = Some(Placement {
        buffer: b.clone(),
        offset: 0,
    });
    Ok(b)
}

/// [`place`], then `data` written into the new buffer.
fn place_filled(g: &mut Graph, id: TensorId, buft: &Arc<dyn BufferType>, data: &[u8]) {
    let b = place(g, id, buft).unwrap();
    b.set_tensor(0, data).unwrap();
}

fn repack() -> Arc<dyn BufferType> {
    ggml_cpu::repack_buffer_type()
}

/// A MUL_MAT of `ty` weights [k, m, wb2, wb3] by f32 activations
/// [k, n, xb2, xb3]; whether the repacked type takes the weights.
struct Case {
    g: Graph,
    w: TensorId,
    x: TensorId,
    y: TensorId,
}

fn case(ty: Type, (k, m, n): (usize, usize, usize), wb: [usize; 2], xb: [usize; 2]) -> Case {
    let mut g = Graph::new();
    let w = g.new_tensor("w", ty, &[k, m, wb[0], wb[1]]);
    let x = g.input("x", Type::F32, &[k, n, xb[0], xb[1]]);
    let y = g.mul_mat(w, x).unwrap();
    Case { g, w, x, y }
}

/// The result of the case with the weights in `buft`.
fn run(
    c: &mut Case,
    buft: &Arc<dyn BufferType>,
    wdata: &[u8],
    xdata: &[u8],
    backend: &mut ggml_cpu::CpuBackend,
) -> Vec<f32> {
    let cpu = ggml_cpu::cpu_buffer_type();
    let wb = place(&mut c.g, c.w, buft).unwrap();
    wb.set_tensor(0, wdata).unwrap();
    let xb = place(&mut c.g, c.x, &cpu).unwrap();
    xb.set_tensor(0, xdata).unwrap();
    let yb = place(&mut c.g, c.y, &cpu).unwrap();
    backend.graph_compute(&c.g, &[c.y]).unwrap();
    let mut out = vec![0u8; c.g.desc(c.y).nbytes()];
    yb.get_tensor(0, &mut out).unwrap();
    f32s(&out)
}

/// Every matrix weight type: the repacked type takes those its panel
/// kernels serve on this CPU.
const TYPES: &[Type] = ggml_core::MATMUL_TYPES;

/// True when the repacked type takes `ty` weights for MUL_MAT.
fn accepted(ty: Type) -> bool {
    let c = case(ty, (256, 16, 1), [1, 1], [1, 1]);
    repack().supports_weight(&c.g, c.y, c.w)
}

#[test]
fn repacked_types_follow_the_cpu() {
    let f = ggml_cpu::features::cpu_features();
    let accepted: Vec<Type> = TYPES.iter().copied().filter(|&t| accepted(t)).collect();
    eprintln!("repacked types on this CPU: {accepted:?}");
    if f.avx2 && std::env::var_os("GGML_CPU_ISA").is_none() {
        let stored = [
            Type::F32,
            Type::F16,
            Type::Q4_0,
            Type::Q5_0,
            Type::Q8_0,
            Type::Q4_K,
            Type::Q6_K,
            Type::MXFP4,
        ];
        for t in stored {
            assert!(accepted.contains(&t), "{t} is not stored repacked");
        }
    }
    // The CPU offers the type exactly when it stores something repacked.
    let extra = ggml_cpu::cpu_device().extra_buffer_types();
    assert_eq!(!extra.is_empty(), !accepted.is_empty());
    for b in &extra {
        assert_eq!(b.name(), ggml_cpu::REPACK_NAME);
        assert!(!b.is_host());
        assert!(ggml_cpu::cpu_device().supports_buft(b.as_ref()));
    }
}

#[test]
fn repacked_mul_mat_matches_plain_weights() {
    let mut rng = Rng(0x5eed_1234);
    let mut backend = ggml_cpu::CpuBackend::new(2).unwrap();
    let cpu = ggml_cpu::cpu_buffer_type();
    for ty in TYPES.iter().copied().filter(|&t| accepted(t)) {
        // Matrix x vector and a few columns with a partial panel of rows;
        // many columns (both paths use the panel kernel: bit-identical);
        // weights broadcast over batches.
        let shapes = [
            ((512, 37, 1), [1, 1], [1, 1]),
            ((256, 16, 3), [1, 1], [1, 1]),
            ((512, 33, 20), [1, 1], [1, 1]),
            ((256, 18, 5), [2, 1], [4, 2]),
            ((256, 18, 17), [2, 1], [4, 2]),
        ];
        for ((k, m, n), wb, xb) in shapes {
            let what = format!("{ty} [{k},{m},{wb:?}] x [{k},{n},{xb:?}]");
            let wdata = weights(ty, k, m * wb[0] * wb[1], &mut rng);
            let xs: Vec<f32> = (0..k * n * xb[0] * xb[1]).map(|_| rng.f()).collect();
            let xdata = f32_bytes(&xs);
            let mut c = case(ty, (k, m, n), wb, xb);
            assert!(repack().supports_weight(&c.g, c.y, c.w), "{what}");
            let want = run(&mut c, &cpu, &wdata, &xdata, &mut backend);
            let mut c = case(ty, (k, m, n), wb, xb);
            let got = run(&mut c, &repack(), &wdata, &xdata, &mut backend);
            let scale = want.iter().fold(0f32, |a, v| a.max(v.abs())).max(1e-6);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if n >= 16 {
                    assert_eq!(g.to_bits(), w.to_bits(), "{what}: element {i}");
                } else {
                    assert!(
                        (g - w).abs() <= 1e-5 * scale,
                        "{what}: element {i}: {g} against {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn writes_in_whole_row_groups_pack_the_same_panels() {
    let Some(ty) = [Type::Q8_0, Type::F32].into_iter().find(|&t| accepted(t)) else {
        eprintln!("skipped: this CPU stores nothing repacked");
        return;
    };
    let mut rng = Rng(0xfeed_0001);
    let mut backend = ggml_cpu::CpuBackend::new(1).unwrap();
    let (k, m, n) = (64, 40, 2);
    let wdata = weights(ty, k, 2 * m, &mut rng);
    let xs: Vec<f32> = (0..k * n * 2).map(|_| rng.f()).collect();
    let xdata = f32_bytes(&xs);
    let rb = wdata.len() / (2 * m);
    let mut whole = case(ty, (k, m, n), [2, 1], [2, 1]);
    let want = run(&mut whole, &repack(), &wdata, &xdata, &mut backend);

    // Rows 0..16, 16..40 + the next matrix's 0..16, then the rest.
    let mut c = case(ty, (k, m, n), [2, 1], [2, 1]);
    let buf = place(&mut c.g, c.w, &repack()).unwrap();
    for (r0, r1) in [(0, 16), (16, 56), (56, 80)] {
        buf.set_tensor(r0 * rb, &wdata[r0 * rb..r1 * rb]).unwrap();
    }
    let cpu = ggml_cpu::cpu_buffer_type();
    let xb = place(&mut c.g, c.x, &cpu).unwrap();
    xb.set_tensor(0, &xdata).unwrap();
    let yb = place(&mut c.g, c.y, &cpu).unwrap();
    backend.graph_compute(&c.g, &[c.y]).unwrap();
    let mut out = vec![0u8; 4 * m * n * 2];
    yb.get_tensor(0, &mut out).unwrap();
    assert_eq!(f32s(&out), want);

    // Partial groups and rows are refused, and nothing reads the data back.
    for (at, len, why) in [
        (0, 8 * rb, "whole groups of 16 rows"),
        (16 * rb, 8 * rb, "whole groups of 16 rows"),
        (32 * rb, 16 * rb, "whole groups of 16 rows"),
        (rb / 2, rb, "whole rows"),
        (0, 81 * rb, "past the end"),
    ] {
        let data = vec![0u8; len];
        let e = buf.set_tensor(at, &data).unwrap_err().to_string();
        assert!(e.contains(why) && e.contains("'w'"), "{e}");
    }
    let mut back = vec![0u8; rb];
    let e = buf.get_tensor(0, &mut back).unwrap_err().to_string();
    assert!(e.contains("cannot be read back"), "{e}");
    assert!(buf.memset_tensor(0, 0, rb).is_err());
}

#[test]
fn only_mul_mat_reads_repacked_weights() {
    let Some(ty) = [Type::Q8_0, Type::F32].into_iter().find(|&t| accepted(t)) else {
        eprintln!("skipped: this CPU stores nothing repacked");
        return;
    };
    let mut backend = ggml_cpu::CpuBackend::new(1).unwrap();
    let cpu = ggml_cpu::cpu_buffer_type();
    let (k, m) = (64, 32);
    let wdata = weights(ty, k, m, &mut Rng(7));

    // GET_ROWS of a repacked matrix.
    let mut g = Graph::new();
    let w = g.new_tensor("emb", ty, &[k, m]);
    let idx = g.input("idx", Type::I32, &[1]);
    let y = g.get_rows(w, idx).unwrap();
    assert!(!repack().supports_weight(&g, y, w));
    place_filled(&mut g, w, &repack(), &wdata);
    place_filled(&mut g, idx, &cpu, &[0; 4]);
    place(&mut g, y, &cpu).unwrap();
    let e = backend.graph_compute(&g, &[y]).unwrap_err().to_string();
    assert!(
        e.contains("'emb'") && e.contains(ggml_cpu::REPACK_NAME),
        "{e}"
    );

    // MUL_MAT of a view of it (half its rows).
    let mut g = Graph::new();
    let w = g.new_tensor("w", ty, &[k, m]);
    let nb1 = g.desc(w).nb[1];
    let half = g.view(w, &[k, m / 2], &[nb1], 0).unwrap();
    let x = g.input("x", Type::F32, &[k, 1]);
    let y = g.mul_mat(half, x).unwrap();
    place_filled(&mut g, w, &repack(), &wdata);
    place_filled(&mut g, x, &cpu, &vec![0u8; 4 * k]);
    place(&mut g, y, &cpu).unwrap();
    let e = backend.graph_compute(&g, &[y]).unwrap_err().to_string();
    assert!(e.contains("only MUL_MAT"), "{e}");

    // A tensor that cannot be stored repacked: a vector of i32, and a
    // matrix whose rows are not whole blocks.
    for desc in [
        TensorDesc::new("ids", Type::I32, &[64, 16]),
        TensorDesc::new("odd", Type::F32, &[63, 16]),
    ] {
        let b = repack().alloc_buffer(4096).unwrap();
        let e = b.init_tensor(&desc, 0).unwrap_err().to_string();
        assert!(e.contains(&format!("'{}'", desc.name)), "{e}");
    }
}

//! MUL_MAT_ID on the CPU beyond the conformance suite: an expert id outside
//! the tensor is a clear error, and expert stacks stored repacked
//! (`CPU_REPACK`) compute what they compute in plain memory.

use std::sync::Arc;

use ggml_core::backend::{Backend, Buffer, BufferType, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::Type;

mod common;
use common::{weights, Rng};

/// Gives every node that is not a view its own host buffer.
fn place_all(g: &mut Graph) -> Vec<Arc<dyn Buffer>> {
    let buft = ggml_cpu::cpu_buffer_type();
    let ids: Vec<TensorId> = g.ids().collect();
    let mut bufs = Vec::new();
    for id in ids {
        if g.node(id).view.is_some() || g.node(id).op.is_view() {
            continue;
        }
        let desc = g.desc(id).clone();
        let b = buft.alloc_buffer(buft.alloc_size(&desc).max(1)).unwrap();
        b.clear(0).unwrap();
        g.node_mut(id).at = Some(Placement {
            buffer: b.clone(),
            offset: 0,
        });
        bufs.push(b);
    }
    bufs
}

fn set_i32(g: &Graph, id: TensorId, v: &[i32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let at = g.placement_or_err(id).unwrap();
    at.buffer.set_tensor(at.offset, &bytes).unwrap();
}

#[test]
fn expert_ids_out_of_range_are_an_error() {
    for bad in [4, -1, i32::MAX] {
        let mut g = Graph::new();
        let w = g.new_tensor("exps", Type::Q8_0, &[64, 8, 4]);
        let x = g.input("x", Type::F32, &[64, 1, 3]);
        let ids = g.input("ids", Type::I32, &[2, 3]);
        let y = g.mul_mat_id(w, x, ids).unwrap();
        let _bufs = place_all(&mut g);
        set_i32(&g, ids, &[0, 1, 2, bad, 3, 0]);
        let mut be = ggml_cpu::CpuBackend::new(2).unwrap();
        let err = be.graph_compute(&g, &[y]).unwrap_err().to_string();
        assert!(
            err.contains("MUL_MAT_ID") && err.contains(&format!("expert id {bad}")),
            "{err}"
        );
        assert!(err.contains("token 1"), "{err}");
    }
}

/// The CPU's repacked buffer type, when this CPU stores anything repacked.
fn repack() -> Option<Arc<dyn BufferType>> {
    ggml_cpu::cpu_device()
        .extra_buffer_types()
        .into_iter()
        .next()
}

/// Whether `repack` stores a stack of `ty` experts for MUL_MAT_ID (what
/// it takes depends on the weights alone).
fn takes_experts(repack: &Arc<dyn BufferType>, ty: Type) -> bool {
    let mut g = Graph::new();
    let w = g.new_tensor("exps", ty, &[256, 16, 4]);
    let x = g.input("x", Type::F32, &[256, 1, 1]);
    let ids = g.input("ids", Type::I32, &[1, 1]);
    let y = g.mul_mat_id(w, x, ids).unwrap();
    repack.supports_weight(&g, y, w)
}

/// One MUL_MAT_ID: `ty` experts [k, m, n_expert], activations
/// [k, x_cols, n_tok] (1 column broadcast to every slot, or one per slot),
/// ids [n_used, n_tok].
struct IdCase {
    ty: Type,
    k: usize,
    m: usize,
    n_expert: usize,
    x_cols: usize,
    ids: Vec<i32>,
    n_used: usize,
}

impl IdCase {
    fn n_tok(&self) -> usize {
        self.ids.len() / self.n_used
    }

    /// The result with the experts in `buft` (the rest in CPU memory), or
    /// the error of the computation.
    fn run(
        &self,
        buft: &Arc<dyn BufferType>,
        wdata: &[u8],
        xdata: &[f32],
        be: &mut ggml_cpu::CpuBackend,
    ) -> ggml_core::Result<Vec<f32>> {
        let mut g = Graph::new();
        let w = g.new_tensor("exps", self.ty, &[self.k, self.m, self.n_expert]);
        let x = g.input("x", Type::F32, &[self.k, self.x_cols, self.n_tok()]);
        let ids = g.input("ids", Type::I32, &[self.n_used, self.n_tok()]);
        let y = g.mul_mat_id(w, x, ids).unwrap();
        if buft.name() == ggml_cpu::REPACK_NAME {
            assert!(buft.supports_weight(&g, y, w), "{} experts", self.ty);
        }
        let desc = g.desc(w).clone();
        let wb = buft.alloc_buffer(buft.alloc_size(&desc)).unwrap();
        wb.init_tensor(&desc, 0).unwrap();
        wb.set_tensor(0, wdata).unwrap();
        g.node_mut(w).at = Some(Placement {
            buffer: wb,
            offset: 0,
        });
        let _bufs = common::place(&mut g, &[x, ids, y]);
        let put = |id: TensorId, bytes: &[u8]| {
            let at = g.placement_or_err(id).unwrap();
            at.buffer.set_tensor(at.offset, bytes).unwrap();
        };
        put(
            x,
            &xdata
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>(),
        );
        put(
            ids,
            &self
                .ids
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<_>>(),
        );
        be.graph_compute(&g, &[y])?;
        let at = g.placement_or_err(y).unwrap();
        let mut out = vec![0u8; g.desc(y).nbytes()];
        at.buffer.get_tensor(at.offset, &mut out).unwrap();
        Ok(out
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// Expert weights stored repacked give what they give in plain memory:
/// every type the repacked buffer type takes, one token (generation: one
/// column per selected expert) and many (experts with many columns, and
/// experts nobody chose), a partial last panel, activations broadcast to
/// every slot or one per slot, and one expert chosen twice by a token.
#[test]
fn repacked_experts_match_plain_experts() {
    let Some(repack) = repack() else {
        eprintln!("skipped: this CPU stores nothing repacked");
        return;
    };
    let cpu = ggml_cpu::cpu_buffer_type();
    let mut rng = Rng(0x0e11_7e57);
    let mut be = ggml_cpu::CpuBackend::new(2).unwrap();
    let mut tested = Vec::new();
    for &ty in ggml_core::MATMUL_TYPES {
        if !takes_experts(&repack, ty) {
            continue;
        }
        tested.push(ty);
        // (k, m, n_expert, n_used, x_cols, n_tok)
        let shapes = [
            (256, 37, 6, 3, 1, 1),
            (512, 48, 8, 2, 2, 1),
            (256, 37, 6, 3, 3, 3),
            (256, 40, 8, 4, 1, 40),
            (512, 21, 5, 2, 2, 33),
        ];
        for (k, m, n_expert, n_used, x_cols, n_tok) in shapes {
            let mut ids: Vec<i32> = (0..n_used * n_tok)
                .map(|_| rng.below(n_expert) as i32)
                .collect();
            // The first token picks one expert in two of its slots, and
            // the last expert is never picked.
            if n_used > 1 {
                ids[1] = ids[0];
            }
            for v in &mut ids {
                *v %= n_expert as i32 - 1;
            }
            let c = IdCase {
                ty,
                k,
                m,
                n_expert,
                x_cols,
                ids,
                n_used,
            };
            let what = format!("{ty} [{k},{m},{n_expert}] x [{k},{x_cols},{n_tok}]");
            let wdata = weights(ty, k, m * n_expert, &mut rng);
            let xs: Vec<f32> = (0..k * x_cols * n_tok).map(|_| rng.f()).collect();
            let want = c.run(&cpu, &wdata, &xs, &mut be).unwrap();
            let got = c.run(&repack, &wdata, &xs, &mut be).unwrap();
            let scale = want.iter().fold(0f32, |a, v| a.max(v.abs())).max(1e-6);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * scale,
                    "{what}: element {i}: {g} against {w}"
                );
            }
        }
    }
    eprintln!("repacked expert types on this CPU: {tested:?}");
    assert!(
        !tested.is_empty(),
        "the repacked type takes no expert stack"
    );
}

/// An expert id outside the stack is the same clear error when the experts
/// are stored repacked (nothing is read past the last expert's panels).
#[test]
fn repacked_experts_refuse_ids_out_of_range() {
    let Some(repack) = repack() else {
        eprintln!("skipped: this CPU stores nothing repacked");
        return;
    };
    let Some(ty) = [Type::Q4_K, Type::Q8_0, Type::Q4_0, Type::F16]
        .into_iter()
        .find(|&t| takes_experts(&repack, t))
    else {
        return;
    };
    let mut be = ggml_cpu::CpuBackend::new(2).unwrap();
    let wdata = weights(ty, 256, 16 * 4, &mut Rng(3));
    for bad in [4, -1] {
        let c = IdCase {
            ty,
            k: 256,
            m: 16,
            n_expert: 4,
            x_cols: 1,
            ids: vec![0, bad],
            n_used: 2,
        };
        let xs = vec![0.5f32; 256];
        let err = c
            .run(&repack, &wdata, &xs, &mut be)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("MUL_MAT_ID") && err.contains(&format!("expert id {bad}")),
            "{err}"
        );
    }
}

//! What the generator knows of each architecture it writes: its defaults,
//! its own metadata keys and the tensors of one block, one file each beyond
//! llama and qwen2 (whose block [`super::plan`] writes itself). The
//! architectures themselves are the llama crate's registry
//! ([`llama::Arch`]): an entry here is found by its name, and an
//! architecture without one is refused with a clear error. The tensors
//! around the blocks (token embeddings, output norm and projection) and the
//! value scales are shared with [`super::plan`].

mod deepseek2;
mod gemma2;
mod gemma3;
pub mod gpt_oss;
mod granitehybrid;
mod lfm2;
mod mamba;
mod mamba2;
mod phi3;
mod qwen3;
mod qwen35;
mod rwkv;
mod rwkv6;
mod rwkv7;
pub mod ssm;

use gguf::Metadata;

use super::plan::{Init, TensorPlan, LOGIT_STD, NORM};
use super::shape::{Arch, Shape};

/// What the generator knows about one architecture.
pub struct ArchGen {
    /// `general.architecture`: the name of its entry in llama's registry.
    pub name: &'static str,
    /// Default `attention.layer_norm_rms_epsilon`.
    pub rms_eps: f32,
    /// Default `rope.freq_base`.
    pub rope_freq_base: f32,
    /// Whether attn_q/k/v carry biases by default.
    pub qkv_bias: bool,
    /// Writes the architecture's own keys.
    pub metadata: fn(&Shape, &mut Metadata),
    /// Appends the tensors of block `il`; `None` for llama's block (with
    /// q/k/v biases where the shape asks for them), which [`super::plan`]
    /// writes itself.
    pub block: Option<fn(&mut Block<'_>)>,
}

/// No keys of its own.
pub(super) fn no_metadata(_: &Shape, _: &mut Metadata) {}

/// llama: RMS norm eps 1e-5, rope base 10000, no biases.
static LLAMA: ArchGen = ArchGen {
    name: "llama",
    rms_eps: 1e-5,
    rope_freq_base: 10_000.0,
    qkv_bias: false,
    metadata: no_metadata,
    block: None,
};

/// qwen2: llama's block with q/k/v biases, RMS norm eps 1e-6, rope base
/// 1000000.
static QWEN2: ArchGen = ArchGen {
    name: "qwen2",
    rms_eps: 1e-6,
    rope_freq_base: 1_000_000.0,
    qkv_bias: true,
    metadata: no_metadata,
    block: None,
};

/// Every architecture the generator writes.
static GENERATORS: &[&ArchGen] = &[
    &LLAMA,
    &QWEN2,
    &qwen3::GEN,
    &gemma2::GEN,
    &gemma3::GEN,
    &phi3::GEN,
    &mamba::GEN,
    &mamba2::GEN,
    &granitehybrid::GEN,
    &lfm2::GEN,
    &lfm2::GEN_MOE,
    &deepseek2::GEN,
    &gpt_oss::GEN,
    &qwen35::GEN,
    &rwkv6::GEN,
    &rwkv7::GEN,
];

/// The generator entry of `arch`, or `None` when gen-model cannot write it.
pub fn generator(arch: Arch) -> Option<&'static ArchGen> {
    GENERATORS.iter().copied().find(|g| g.name == arch.name())
}

/// The head width of `shape` where its architecture fixes one apart from
/// `n_embd / n_head` (gpt-oss's heads are 64 wide at any width).
pub fn head_dim(shape: &Shape) -> Option<u32> {
    (shape.arch.name() == gpt_oss::GEN.name).then_some(gpt_oss::HEAD_DIM)
}

/// The names of the architectures the generator writes.
pub fn names() -> impl Iterator<Item = &'static str> {
    GENERATORS.iter().map(|g| g.name)
}

/// One block under construction.
pub struct Block<'a> {
    /// Layer index.
    pub il: u32,
    /// The model.
    pub shape: &'a Shape,
    out: &'a mut Vec<TensorPlan>,
}

impl Block<'_> {
    fn name(&self, s: &str) -> String {
        format!("blk.{}.{s}.weight", self.il)
    }

    /// A norm weight of `n` values, 1 + N(0, 0.1²).
    pub fn norm(&mut self, name: &str, n: u32) {
        let t = TensorPlan::vector(self.name(name), n, NORM);
        self.out.push(t);
    }

    /// An F32 tensor `blk.N.<name>` (the full name: `ssm_a`,
    /// `ssm_conv1d.bias`) of `dims` drawn from `init`, planned F32 (the
    /// quantize rules keep the SSM's convolution, A, D and biases F32).
    pub fn raw(&mut self, name: &str, dims: &[u32], init: Init) {
        self.out.push(TensorPlan {
            name: format!("blk.{}.{name}", self.il),
            dims: dims.iter().map(|&d| u64::from(d)).collect(),
            ty: gguf::GgmlType::F32,
            init,
            wanted: None,
        });
    }

    /// An F32 tensor outside the blocks, by its full name
    /// (`token_embd_norm.weight`), written with this block.
    pub fn outer(&mut self, name: &str, dims: &[u32], init: Init) {
        self.out.push(TensorPlan {
            name: name.to_string(),
            dims: dims.iter().map(|&d| u64::from(d)).collect(),
            ty: gguf::GgmlType::F32,
            init,
            wanted: None,
        });
    }

    /// A norm weight of `n` values around `mean` (std a tenth of it).
    pub fn norm_around(&mut self, name: &str, n: u32, mean: f32) {
        let init = Init {
            mean,
            std: mean / 10.0,
        };
        let t = TensorPlan::vector(self.name(name), n, init);
        self.out.push(t);
    }

    /// A projection of `ne1` rows of `ne0` values, std 1/sqrt(ne0) so its
    /// outputs have the scale of its inputs.
    pub fn matrix(&mut self, name: &str, ne0: u32, ne1: u32) {
        let std = 1.0 / (ne0 as f32).sqrt();
        let t = TensorPlan::matrix(self.name(name), ne0, ne1, std);
        self.out.push(t);
    }

    /// A weight of the stacked matrices `dims` (one per head or expert,
    /// `dims[0]` the row length), std 1/sqrt(`fan_in`), typed like a
    /// projection.
    pub fn stacked(&mut self, name: &str, dims: &[u32], fan_in: u32) {
        let std = 1.0 / (fan_in as f32).sqrt();
        let mut t = TensorPlan::matrix(self.name(name), dims[0], dims[1], std);
        t.dims = dims.iter().map(|&d| u64::from(d)).collect();
        self.out.push(t);
    }

    /// attn_norm and the separate q, k, v and output projections.
    pub fn attention(&mut self) {
        let (e, kv) = (self.shape.n_embd, self.shape.n_embd_kv());
        self.norm("attn_norm", e);
        self.matrix("attn_q", e, e);
        self.matrix("attn_k", e, kv);
        self.matrix("attn_v", e, kv);
        self.matrix("attn_output", e, e);
    }

    /// The norms after attention and after the FFN of Gemma 2 and 3. Their
    /// weights lift the blocks' outputs to the scale of the input
    /// embeddings (tied, so each element has std LOGIT_STD once scaled by
    /// sqrt(n_embd)); with unit weights the embeddings would drown the
    /// blocks and every next token would follow from the last one alone.
    pub fn post_norm(&mut self, name: &str) {
        let e = self.shape.n_embd;
        self.norm_around(name, e, LOGIT_STD);
    }

    /// ffn_norm and the gate, up and down projections.
    pub fn ffn(&mut self) {
        let (e, ff) = (self.shape.n_embd, self.shape.n_ff);
        self.norm("ffn_norm", e);
        self.matrix("ffn_gate", e, ff);
        self.matrix("ffn_up", e, ff);
        self.matrix("ffn_down", ff, e);
    }
}

/// The tensors of every block of `shape`, each appended by `block`.
pub fn blocks(block: fn(&mut Block<'_>), shape: &Shape, out: &mut Vec<TensorPlan>) {
    for il in 0..shape.n_layer {
        let mut b = Block { il, shape, out };
        block(&mut b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_generated_architecture_is_one_llama_loads() {
        for name in names() {
            let known = llama::Arch::from_name(name);
            assert!(known.is_ok(), "{name}: {:?}", known.err());
        }
    }

    #[test]
    fn entries_are_found_by_their_registry_name() {
        for arch in llama::Arch::all() {
            if let Some(g) = generator(arch) {
                assert_eq!(g.name, arch.name());
            }
        }
        assert_eq!(names().count(), GENERATORS.len());
        let mut seen: Vec<&str> = names().collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), GENERATORS.len(), "a name is listed twice");
    }
}

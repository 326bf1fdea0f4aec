//! Mixture-of-experts layouts: the dense model of [`super::plan`] with each
//! layer's FFN replaced by a router (`ffn_gate_inp`, F32 as llama-quantize
//! leaves it) and 3-d expert tensors `ffn_{gate,up,down}_exps`
//! [n_embd, n_ff_exp, n_expert] / [n_ff_exp, n_embd, n_expert].
//!
//! Two layouts, as llama.cpp reads them:
//! * **Mixtral** (`llama` with `llama.expert_count` and
//!   `llama.expert_used_count`): experts as wide as `feed_forward_length`.
//! * **qwen3moe**: the file becomes a `qwen3moe` model (every key of the
//!   base architecture moves to the `qwen3moe.` prefix); attention heads
//!   `head_dim` wide whatever n_embd / n_head is (`attention.key_length` /
//!   `value_length`), per-head `attn_q_norm` / `attn_k_norm`, no q/k/v
//!   biases, experts `expert_feed_forward_length` wide. NeoX rope, RMS eps
//!   and rope base come from the base architecture (qwen2's are Qwen 3's).

use gguf::{GgmlType, Metadata};

use super::mixture::assign_types;
use super::plan::{Init, TensorPlan};
use super::shape::Shape;
use super::types::OutType;
use crate::error::{Error, Result};

/// Norm weights, as the dense plan draws them: 1 + N(0, 0.1²).
const NORM: Init = Init {
    mean: 1.0,
    std: 0.1,
};

/// Which architecture's expert layout to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// `llama` with experts (Mixtral): expert width = `--n-ff`.
    Mixtral,
    /// `qwen3moe`: Qwen 3 attention, expert width = `--n-ff-exp`.
    Qwen3moe,
}

/// The mixture-of-experts flags of `gen-model`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct MoeArgs {
    /// Experts per layer (absent: a dense model).
    #[arg(long)]
    pub n_expert: Option<u32>,
    /// Experts each token uses (default 2).
    #[arg(long)]
    pub n_expert_used: Option<u32>,
    /// Expert layout (default mixtral).
    #[arg(long, value_enum)]
    pub moe_layout: Option<Layout>,
    /// qwen3moe layout: width of one expert (default --n-ff / --n-expert-used).
    #[arg(long)]
    pub n_ff_exp: Option<u32>,
    /// qwen3moe layout: width of one attention head (default 128, as in
    /// every Qwen 3 model).
    #[arg(long)]
    pub moe_head_dim: Option<u32>,
}

impl MoeArgs {
    /// The experts the flags ask for, `None` for a dense model; `shape` is
    /// the resolved dense shape.
    pub fn resolve(&self, shape: &Shape) -> Result<Option<Experts>> {
        let Some(n_expert) = self.n_expert else {
            let stray = [
                ("--n-expert-used", self.n_expert_used.is_some()),
                ("--moe-layout", self.moe_layout.is_some()),
                ("--n-ff-exp", self.n_ff_exp.is_some()),
                ("--moe-head-dim", self.moe_head_dim.is_some()),
            ];
            return match stray.iter().find(|s| s.1) {
                Some((flag, _)) => Err(Error::Usage(format!("{flag} needs --n-expert"))),
                None => Ok(None),
            };
        };
        if super::archs::ssm::is_ssm(shape) {
            return Err(Error::Usage(format!(
                "--n-expert: gen-model writes {} models without experts",
                shape.arch.name()
            )));
        }
        let layout = self.moe_layout.unwrap_or(Layout::Mixtral);
        let n_expert_used = self.n_expert_used.unwrap_or(2);
        let (n_ff_exp, head_dim) = match layout {
            Layout::Mixtral => {
                for (flag, given) in [
                    ("--n-ff-exp", self.n_ff_exp.is_some()),
                    ("--moe-head-dim", self.moe_head_dim.is_some()),
                ] {
                    if given {
                        return Err(Error::Usage(format!(
                            "{flag} is for the qwen3moe layout (Mixtral's experts are --n-ff wide)"
                        )));
                    }
                }
                (shape.n_ff, shape.head_dim())
            }
            Layout::Qwen3moe => (
                self.n_ff_exp.unwrap_or(shape.n_ff / n_expert_used.max(1)),
                self.moe_head_dim.unwrap_or(128),
            ),
        };
        let x = Experts {
            layout,
            n_expert,
            n_expert_used,
            n_ff_exp,
            head_dim,
        };
        x.validate()?;
        Ok(Some(x))
    }
}

/// The experts of a generated model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Experts {
    /// Layout.
    pub layout: Layout,
    /// Experts per layer.
    pub n_expert: u32,
    /// Experts each token uses.
    pub n_expert_used: u32,
    /// Width of one expert's FFN.
    pub n_ff_exp: u32,
    /// Width of an attention head (the dense shape's for Mixtral).
    pub head_dim: u32,
}

impl Experts {
    fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Usage(m));
        if self.n_expert == 0 || self.n_expert > 1024 {
            return bad(format!("--n-expert {} must be 1..=1024", self.n_expert));
        }
        if self.n_expert_used == 0 || self.n_expert_used > self.n_expert {
            return bad(format!(
                "--n-expert-used {} must be 1..=--n-expert ({})",
                self.n_expert_used, self.n_expert
            ));
        }
        if self.n_ff_exp == 0 {
            return bad("the expert width (--n-ff-exp) must be at least 1".into());
        }
        if self.head_dim == 0 || self.head_dim % 2 != 0 {
            return bad(format!(
                "--moe-head-dim {} must be even and at least 2 (rope)",
                self.head_dim
            ));
        }
        Ok(())
    }

    /// The `general.architecture` the file gets.
    pub fn arch_name(&self, shape: &Shape) -> &'static str {
        match self.layout {
            Layout::Mixtral => shape.arch.name(),
            Layout::Qwen3moe => "qwen3moe",
        }
    }

    /// Adds the expert keys to the dense model's metadata `md` (for
    /// qwen3moe, after moving the base architecture's keys to its prefix).
    pub fn edit_metadata(&self, md: &mut Metadata, shape: &Shape) {
        let base = format!("{}.", shape.arch.name());
        let arch = self.arch_name(shape);
        if self.layout == Layout::Qwen3moe {
            let moved: Vec<(String, gguf::Value)> = md
                .iter()
                .filter(|(k, _)| k.starts_with(&base))
                .map(|(k, v)| (format!("{arch}.{}", &k[base.len()..]), v.clone()))
                .collect();
            md.retain(|k, _| !k.starts_with(&base));
            for (k, v) in moved {
                md.set(k, v);
            }
            md.set("general.architecture", arch);
            md.set(format!("{arch}.attention.key_length"), self.head_dim);
            md.set(format!("{arch}.attention.value_length"), self.head_dim);
            md.set(format!("{arch}.rope.dimension_count"), self.head_dim);
            md.set(format!("{arch}.expert_feed_forward_length"), self.n_ff_exp);
        }
        md.set(format!("{arch}.expert_count"), self.n_expert);
        md.set(format!("{arch}.expert_used_count"), self.n_expert_used);
    }

    /// The dense plan with each layer's FFN replaced by the experts (and,
    /// for qwen3moe, Qwen 3's attention tensors).
    /// Types are given again for the edited model (see
    /// [`assign_types`]).
    pub fn edit_plan(
        &self,
        dense: Vec<TensorPlan>,
        shape: &Shape,
        ty: OutType,
    ) -> Result<Vec<TensorPlan>> {
        let e = shape.n_embd;
        let qwen = self.layout == Layout::Qwen3moe;
        let (q_width, kv_width) = (
            self.head_dim * shape.n_head,
            self.head_dim * shape.n_head_kv,
        );
        let mut out = Vec::with_capacity(dense.len() + 2 * shape.n_layer as usize);
        for mut t in dense {
            let Some((il, role)) = layer_role(&t.name) else {
                out.push(t);
                continue;
            };
            let n = |s: &str| format!("blk.{il}.{s}");
            match role {
                "ffn_gate.weight" | "ffn_up.weight" => {}
                "ffn_down.weight" => out.extend(self.experts(il, e)),
                "attn_q.bias" | "attn_k.bias" | "attn_v.bias" if qwen => {}
                "attn_q.weight" if qwen => {
                    out.push(resized(t, e, q_width));
                    out.push(vector(n("attn_q_norm.weight"), self.head_dim));
                }
                "attn_k.weight" if qwen => {
                    out.push(resized(t, e, kv_width));
                    out.push(vector(n("attn_k_norm.weight"), self.head_dim));
                }
                "attn_v.weight" if qwen => out.push(resized(t, e, kv_width)),
                "attn_output.weight" if qwen => {
                    t.init.std = 1.0 / (q_width as f32).sqrt();
                    out.push(resized(t, q_width, e));
                }
                _ => out.push(t),
            }
        }
        assign_types(&mut out, shape, self.arch_name(shape), self.n_expert, ty)?;
        Ok(out)
    }

    /// Router and expert tensors of layer `il`, in the converter's order.
    fn experts(&self, il: u32, e: u32) -> Vec<TensorPlan> {
        let n = |s: &str| format!("blk.{il}.{s}");
        let ff = self.n_ff_exp;
        let proj = 1.0 / (e as f32).sqrt();
        let down = 1.0 / (ff as f32).sqrt();
        let exps = |name: String, ne0: u32, ne1: u32, std: f32| TensorPlan {
            name,
            dims: vec![u64::from(ne0), u64::from(ne1), u64::from(self.n_expert)],
            ty: GgmlType::F32,
            init: Init { mean: 0.0, std },
            wanted: None,
        };
        vec![
            TensorPlan {
                name: n("ffn_gate_inp.weight"),
                dims: vec![u64::from(e), u64::from(self.n_expert)],
                ty: GgmlType::F32,
                init: Init {
                    mean: 0.0,
                    std: proj,
                },
                wanted: None,
            },
            exps(n("ffn_gate_exps.weight"), e, ff, proj),
            exps(n("ffn_up_exps.weight"), e, ff, proj),
            exps(n("ffn_down_exps.weight"), ff, e, down),
        ]
    }
}

/// (layer, name after `blk.N.`) of a per-layer tensor.
fn layer_role(name: &str) -> Option<(u32, &str)> {
    let rest = name.strip_prefix("blk.")?;
    let (il, role) = rest.split_once('.')?;
    Some((il.parse().ok()?, role))
}

/// `t` with `ne0` x `ne1` (its type is given again afterwards).
fn resized(mut t: TensorPlan, ne0: u32, ne1: u32) -> TensorPlan {
    t.dims = vec![u64::from(ne0), u64::from(ne1)];
    t
}

fn vector(name: String, n: u32) -> TensorPlan {
    TensorPlan {
        name,
        dims: vec![u64::from(n)],
        ty: GgmlType::F32,
        init: NORM,
        wanted: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen_model::plan::{find, plan};
    use crate::gen_model::shape::{parse_arch, Preset, ShapeOverrides};

    fn shape(arch: &str) -> Shape {
        let o = ShapeOverrides {
            arch: Some(parse_arch(arch).unwrap()),
            n_embd: Some(256),
            n_head: Some(4),
            n_head_kv: Some(2),
            n_ff: Some(512),
            n_layer: Some(2),
            ..Default::default()
        };
        Shape::resolve(Preset::Stories260k, &o).unwrap()
    }

    #[test]
    fn mixtral_layout() {
        let s = shape("llama");
        let args = MoeArgs {
            n_expert: Some(4),
            ..Default::default()
        };
        let x = args.resolve(&s).unwrap().unwrap();
        let ty: OutType = "q4_k_m".parse().unwrap();
        let p = x.edit_plan(plan(&s, ty).unwrap(), &s, ty).unwrap();
        assert!(p.iter().all(|t| !t.name.ends_with("ffn_gate.weight")));
        assert_eq!(find(&p, "blk.1.ffn_gate_inp.weight").dims, [256, 4]);
        assert_eq!(find(&p, "blk.1.ffn_gate_inp.weight").ty, GgmlType::F32);
        assert_eq!(find(&p, "blk.0.ffn_up_exps.weight").dims, [256, 512, 4]);
        assert_eq!(find(&p, "blk.0.ffn_up_exps.weight").ty, GgmlType::Q4_K);
        assert_eq!(find(&p, "blk.0.ffn_down_exps.weight").dims, [512, 256, 4]);
        // Q4_K_M's extra bits for ffn_down in the last eighth of the layers.
        assert_eq!(find(&p, "blk.0.ffn_down_exps.weight").ty, GgmlType::Q4_K);
        assert_eq!(find(&p, "blk.1.ffn_down_exps.weight").ty, GgmlType::Q6_K);
        let mut md = Metadata::new();
        md.set("llama.block_count", 2u32);
        x.edit_metadata(&mut md, &s);
        assert_eq!(md.get_uint("llama.expert_count").unwrap(), 4);
        assert_eq!(md.get_uint("llama.expert_used_count").unwrap(), 2);
    }

    #[test]
    fn qwen3moe_layout() {
        let s = shape("qwen2");
        let args = MoeArgs {
            n_expert: Some(8),
            n_expert_used: Some(3),
            moe_layout: Some(Layout::Qwen3moe),
            n_ff_exp: Some(96),
            moe_head_dim: Some(128),
        };
        let x = args.resolve(&s).unwrap().unwrap();
        let ty: OutType = "f16".parse().unwrap();
        let p = x.edit_plan(plan(&s, ty).unwrap(), &s, ty).unwrap();
        assert!(p.iter().all(|t| !t.name.ends_with(".bias")));
        assert_eq!(find(&p, "blk.0.attn_q.weight").dims, [256, 512]);
        assert_eq!(find(&p, "blk.0.attn_k.weight").dims, [256, 256]);
        assert_eq!(find(&p, "blk.0.attn_output.weight").dims, [512, 256]);
        assert_eq!(find(&p, "blk.1.attn_k_norm.weight").dims, [128]);
        assert_eq!(find(&p, "blk.1.ffn_gate_exps.weight").dims, [256, 96, 8]);
        let mut md = Metadata::new();
        md.set("general.architecture", "qwen2");
        md.set("qwen2.block_count", 2u32);
        x.edit_metadata(&mut md, &s);
        assert_eq!(md.get_str("general.architecture").unwrap(), "qwen3moe");
        assert_eq!(md.get_uint("qwen3moe.block_count").unwrap(), 2);
        assert!(md.get("qwen2.block_count").is_none());
        assert_eq!(
            md.get_uint("qwen3moe.expert_feed_forward_length").unwrap(),
            96
        );
        assert_eq!(md.get_uint("qwen3moe.attention.key_length").unwrap(), 128);
    }

    #[test]
    fn bad_flags_are_named() {
        let s = shape("llama");
        let e = |a: MoeArgs| a.resolve(&s).unwrap_err().to_string();
        let used = MoeArgs {
            n_expert: Some(4),
            n_expert_used: Some(5),
            ..Default::default()
        };
        assert!(e(used).contains("--n-expert-used"));
        let stray = MoeArgs {
            n_ff_exp: Some(64),
            ..Default::default()
        };
        assert!(e(stray).contains("--n-ff-exp"));
        let mixtral_width = MoeArgs {
            n_expert: Some(4),
            n_ff_exp: Some(64),
            ..Default::default()
        };
        assert!(e(mixtral_width).contains("qwen3moe"));
        assert!(MoeArgs::default().resolve(&s).unwrap().is_none());
    }
}

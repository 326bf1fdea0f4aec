//! What the Mamba-1 and Mamba-2 mixers of the generated models share: the
//! SSM sizes of the released models (derived from the embedding width, as
//! their configs do), the `ssm.*` keys and the mixers' tensors with value
//! scales that keep the scan finite: negative A (`-exp(A_log)` of trained
//! models), small time steps (softplus of a dt bias around -3), D and the
//! gated norm near 1.

use gguf::Metadata;

use super::Block;
use crate::error::{Error, Result};
use crate::gen_model::plan::{Init, NORM};
use crate::gen_model::shape::Shape;

/// Convolution width of every released Mamba model.
pub const D_CONV: u32 = 4;
/// Mamba-1's state size per channel.
pub const MAMBA1_D_STATE: u32 = 16;
/// Mamba-2's state size per head channel.
pub const MAMBA2_D_STATE: u32 = 128;
/// Mamba-2's channels per SSM head.
pub const MAMBA2_HEAD_DIM: u32 = 64;
/// Mamba-2's groups of B and C.
pub const MAMBA2_N_GROUP: u32 = 1;

/// The architectures whose layers (some or all) are SSM mixers.
pub const SSM_ARCHS: &[&str] = &["mamba", "mamba2", "granitehybrid"];

/// True when `shape`'s architecture has SSM mixers.
pub fn is_ssm(shape: &Shape) -> bool {
    SSM_ARCHS.contains(&shape.arch.name())
}

/// The inner width: twice the embedding (llama.cpp requires it).
pub fn d_inner(s: &Shape) -> u32 {
    2 * s.n_embd
}

/// Mamba-1's time-step rank: ceil(n_embd / 16), as the released models.
pub fn dt_rank(s: &Shape) -> u32 {
    s.n_embd.div_ceil(16)
}

/// Mamba-2's SSM heads: the inner width in heads of 64 channels.
pub fn n_ssm_head(s: &Shape) -> u32 {
    d_inner(s) / MAMBA2_HEAD_DIM
}

/// Checks the sizes the SSM layers of `s` derive from its width.
pub fn validate(s: &Shape) -> Result<()> {
    if s.arch.name() != "mamba" && is_ssm(s) && d_inner(s) % MAMBA2_HEAD_DIM != 0 {
        return Err(Error::Usage(format!(
            "--n-embd {}: {} needs a multiple of {} (SSM heads of {} channels over twice the width)",
            s.n_embd,
            s.arch.name(),
            MAMBA2_HEAD_DIM / 2,
            MAMBA2_HEAD_DIM
        )));
    }
    Ok(())
}

/// Writes the `ssm.*` keys of `s`, Mamba-2's (with `ssm.group_count`)
/// unless `mamba1`.
pub fn metadata(s: &Shape, md: &mut Metadata, mamba1: bool) {
    let k = |name: &str| format!("{}.{name}", s.arch.name());
    md.set(k("ssm.conv_kernel"), D_CONV);
    md.set(k("ssm.inner_size"), d_inner(s));
    if mamba1 {
        md.set(k("ssm.state_size"), MAMBA1_D_STATE);
        md.set(k("ssm.time_step_rank"), dt_rank(s));
    } else {
        md.set(k("ssm.state_size"), MAMBA2_D_STATE);
        md.set(k("ssm.time_step_rank"), n_ssm_head(s));
        md.set(k("ssm.group_count"), MAMBA2_N_GROUP);
    }
}

/// The keys of a pure SSM model as llama.cpp's converter writes them:
/// `feed_forward_length` and `attention.head_count` 0, no other attention
/// or rope keys.
pub fn no_attention_keys(s: &Shape, md: &mut Metadata) {
    let k = |name: &str| format!("{}.{name}", s.arch.name());
    md.set(k("feed_forward_length"), 0u32);
    md.set(k("attention.head_count"), 0u32);
    for key in [
        "attention.head_count_kv",
        "rope.dimension_count",
        "rope.freq_base",
    ] {
        md.remove(&k(key));
    }
}

/// Convolution weights: std 1/sqrt(d_conv), outputs of the inputs' scale.
const CONV: Init = Init {
    mean: 0.0,
    std: 0.5,
};
/// Convolution biases.
const CONV_BIAS: Init = Init {
    mean: 0.0,
    std: 0.1,
};
/// dt bias: softplus(-3) = 0.05, steps of the size trained models take.
const DT_BIAS: Init = Init {
    mean: -3.0,
    std: 0.5,
};
/// A = -exp(A_log): trained values lie in [-16, -1]; eight standard
/// deviations from 0, so that no state grows.
const A: Init = Init {
    mean: -4.0,
    std: 0.5,
};

/// The pre-norm and Mamba-1 mixer: `ssm_in` to x and z, the convolution,
/// `ssm_x` to dt, B and C, `ssm_dt` to the channels, A [d_state, d_inner],
/// D, `ssm_out`.
pub fn mamba1_mixer(b: &mut Block<'_>) {
    let s = b.shape;
    let (e, di, ds, r) = (s.n_embd, d_inner(s), MAMBA1_D_STATE, dt_rank(s));
    b.norm("attn_norm", e);
    b.matrix("ssm_in", e, 2 * di);
    b.raw("ssm_conv1d.weight", &[D_CONV, di], CONV);
    b.raw("ssm_conv1d.bias", &[di], CONV_BIAS);
    b.matrix("ssm_x", di, r + 2 * ds);
    b.matrix("ssm_dt", r, di);
    b.raw("ssm_dt.bias", &[di], DT_BIAS);
    b.raw("ssm_a", &[ds, di], A);
    b.raw("ssm_d", &[di], NORM);
    b.matrix("ssm_out", di, e);
}

/// The pre-norm and Mamba-2 mixer: `ssm_in` to z, x, B, C and dt, the
/// convolution over x, B and C, per-head dt bias, A and D, the grouped
/// gated norm, `ssm_out`.
pub fn mamba2_mixer(b: &mut Block<'_>) {
    let s = b.shape;
    let (e, di, ds, g, h) = (
        s.n_embd,
        d_inner(s),
        MAMBA2_D_STATE,
        MAMBA2_N_GROUP,
        n_ssm_head(s),
    );
    let conv_dim = di + 2 * g * ds;
    b.norm("attn_norm", e);
    b.matrix("ssm_in", e, di + conv_dim + h);
    b.raw("ssm_conv1d.weight", &[D_CONV, conv_dim], CONV);
    b.raw("ssm_conv1d.bias", &[conv_dim], CONV_BIAS);
    b.raw("ssm_dt.bias", &[h], DT_BIAS);
    b.raw("ssm_a", &[1, h], A);
    b.raw("ssm_d", &[1, h], NORM);
    b.raw("ssm_norm.weight", &[di / g, g], NORM);
    b.matrix("ssm_out", di, e);
}

#[cfg(test)]
mod tests {
    use gguf::GgmlType;

    use crate::gen_model::plan::{find, plan};
    use crate::gen_model::shape::{parse_arch, Preset, Shape, ShapeOverrides};
    use crate::gen_model::ModelSpec;

    fn dims(p: &[crate::gen_model::plan::TensorPlan], name: &str) -> Vec<u64> {
        find(p, name).dims.clone()
    }

    #[test]
    fn mamba2_370m_has_llama_cpps_shapes() {
        let s = Preset::Mamba2_370m.shape();
        let p = plan(&s, "q8_0".parse().unwrap()).unwrap();
        // 1 token_embd + 48 x 9 + output_norm, tied.
        assert_eq!(p.len(), 1 + 48 * 9 + 1);
        // d_in_proj = 2 d_inner + 2 n_group d_state + n_head.
        assert_eq!(dims(&p, "blk.0.ssm_in.weight"), [1024, 2 * 2048 + 256 + 32]);
        assert_eq!(dims(&p, "blk.0.ssm_conv1d.weight"), [4, 2048 + 256]);
        assert_eq!(dims(&p, "blk.47.ssm_a"), [1, 32]);
        assert_eq!(dims(&p, "blk.47.ssm_d"), [1, 32]);
        assert_eq!(dims(&p, "blk.3.ssm_dt.bias"), [32]);
        assert_eq!(dims(&p, "blk.3.ssm_norm.weight"), [2048, 1]);
        assert_eq!(dims(&p, "blk.3.ssm_out.weight"), [2048, 1024]);
        for t in &p {
            let quantized = t.name.ends_with("ssm_in.weight")
                || t.name.ends_with("ssm_out.weight")
                || t.name == "token_embd.weight";
            assert_eq!(t.ty == GgmlType::F32, !quantized, "{}", t.name);
        }
        // Negative A, small time steps.
        let a = find(&p, "blk.0.ssm_a").init;
        assert!(a.mean + 6.0 * a.std < 0.0);
        let spec = ModelSpec::synthetic(
            Preset::Mamba2_370m,
            &ShapeOverrides::default(),
            "f16".parse().unwrap(),
            1,
            "m",
        )
        .unwrap();
        let md = spec.metadata().unwrap();
        let u = |k: &str| md.get_u32(&format!("mamba2.{k}")).unwrap();
        assert_eq!(u("ssm.inner_size"), 2048);
        assert_eq!(u("ssm.state_size"), 128);
        assert_eq!(u("ssm.time_step_rank"), 32);
        assert_eq!(u("ssm.group_count"), 1);
        assert_eq!(u("ssm.conv_kernel"), 4);
        assert_eq!(u("attention.head_count"), 0);
        assert!(md.get("mamba2.rope.freq_base").is_none());
    }

    #[test]
    fn mamba_130m_has_llama_cpps_shapes() {
        let s = Preset::Mamba130m.shape();
        let p = plan(&s, "q4_k_m".parse().unwrap()).unwrap();
        assert_eq!(p.len(), 1 + 24 * 10 + 1);
        assert_eq!(dims(&p, "blk.0.ssm_in.weight"), [768, 2 * 1536]);
        // dt_rank 48, d_state 16.
        assert_eq!(dims(&p, "blk.0.ssm_x.weight"), [1536, 48 + 32]);
        assert_eq!(dims(&p, "blk.0.ssm_dt.weight"), [48, 1536]);
        assert_eq!(dims(&p, "blk.0.ssm_a"), [16, 1536]);
        assert_eq!(dims(&p, "blk.0.ssm_d"), [1536]);
        assert_eq!(find(&p, "blk.0.ssm_a").ty, GgmlType::F32);
        assert_eq!(find(&p, "blk.0.ssm_conv1d.weight").ty, GgmlType::F32);
        assert_ne!(find(&p, "blk.0.ssm_in.weight").ty, GgmlType::F32);
    }

    #[test]
    fn granite_micro_layers_and_keys() {
        let spec = ModelSpec::synthetic(
            Preset::Granite4HMicro,
            &ShapeOverrides::default(),
            "q4_k_m".parse().unwrap(),
            1,
            "g",
        )
        .unwrap();
        let md = spec.metadata().unwrap();
        let kv = match md.get("granitehybrid.attention.head_count_kv") {
            Some(gguf::Value::Array(gguf::Array::U32(v))) => v.clone(),
            other => panic!("head_count_kv: {other:?}"),
        };
        let attn: Vec<usize> = (0..40).filter(|&i| kv[i] != 0).collect();
        assert_eq!(attn, [5, 15, 25, 35]);
        assert!(attn.iter().all(|&i| kv[i] == 8));
        assert_eq!(
            md.get_bool("granitehybrid.rope.scaling.finetuned").ok(),
            Some(false)
        );
        let p = spec.plan().unwrap();
        assert!(p.iter().any(|t| t.name == "blk.5.attn_q.weight"));
        assert!(!p.iter().any(|t| t.name == "blk.5.ssm_in.weight"));
        assert_eq!(dims(&p, "blk.4.ssm_in.weight"), [2048, 2 * 4096 + 256 + 64]);
        assert_eq!(dims(&p, "blk.4.ffn_down.weight"), [8192, 2048]);
        assert_eq!(dims(&p, "blk.5.attn_k.weight"), [2048, 512]);
    }

    #[test]
    fn widths_that_split_into_no_heads_are_refused() {
        for arch in ["mamba2", "granitehybrid"] {
            let o = ShapeOverrides {
                arch: Some(parse_arch(arch).unwrap()),
                n_embd: Some(48),
                n_head: Some(4),
                n_head_kv: Some(2),
                ..ShapeOverrides::default()
            };
            let e = Shape::resolve(Preset::Stories260k, &o)
                .unwrap_err()
                .to_string();
            assert!(e.contains("--n-embd 48") && e.contains(arch), "{e}");
        }
        // Mamba-1 has no heads: any width.
        let o = ShapeOverrides {
            arch: Some(parse_arch("mamba").unwrap()),
            n_embd: Some(48),
            ..ShapeOverrides::default()
        };
        Shape::resolve(Preset::Stories260k, &o).unwrap();
    }

    #[test]
    fn experts_are_refused() {
        let args = crate::gen_model::moe::MoeArgs {
            n_expert: Some(8),
            n_expert_used: None,
            moe_layout: None,
            n_ff_exp: None,
            moe_head_dim: None,
        };
        for preset in [
            Preset::Mamba130m,
            Preset::Mamba2_370m,
            Preset::Granite4HMicro,
        ] {
            let e = args.resolve(&preset.shape()).unwrap_err().to_string();
            assert!(
                e.contains("--n-expert") && e.contains("without experts"),
                "{e}"
            );
        }
    }
}

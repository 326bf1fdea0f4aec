//! The per-tensor types of a quantized file type: which weights
//! llama-quantize gives more bits than the base type.
//!
//! These are the rules of llama.cpp's `llama_tensor_get_type`
//! (src/llama-quant.cpp) for the file types `--type` offers, on the models
//! this generator writes (llama and qwen2: no falcon, no experts, no fused
//! attn_qkv) and without an importance matrix. `i` is the layer of the
//! tensor and `n` the number of layers; `use_more_bits(i, n)` holds for the
//! first and the last eighth of the layers and every third layer between
//! them (see [`use_more_bits`]).
//!
//! - `output.weight`, or `token_embd.weight` when the model has no
//!   `output.weight` (tied embeddings): Q8_0 when its rows are not a
//!   multiple of the base type's block, else Q6_K; a Q8_0 file keeps Q8_0.
//!   This holds for every quantized file type, Q4_0 to IQ4_NL included.
//! - `attn_v.weight`: Q2_K -> Q4_K with 4 or more query heads per kv head,
//!   else Q3_K; Q3_K_M -> Q5_K in the first 2 layers, else Q4_K; Q3_K_L ->
//!   Q5_K; IQ4_NL -> Q5_K with 4 or more query heads per kv head; Q4_K_M and
//!   Q5_K_M -> Q6_K where `use_more_bits`; Q4_K_S -> Q5_K in the first 4
//!   layers. In a 70B model (llama with 80 layers and grouped-query
//!   attention, qwen2 with 80 layers) a Q3_K or Q4_K result becomes Q5_K.
//! - `ffn_down.weight`: Q2_K -> Q3_K; Q3_K_M -> Q5_K for `i < n/16`, else
//!   Q4_K; Q3_K_L -> Q5_K; Q4_K_M and Q5_K_M -> Q6_K where `use_more_bits`;
//!   Q4_K_S and IQ4_NL -> Q5_K for `i < n/8`.
//! - `attn_output.weight`: Q2_K -> Q3_K; Q3_K_M -> Q4_K; Q3_K_L -> Q5_K.
//! - Every other weight, `token_embd.weight` of an untied model included,
//!   and every weight of Q3_K_S, Q5_K_S and Q6_K files but the output: the
//!   base type.
//!
//! F32, F16 and BF16 files, and pure ones (`llama-quantize --pure`), keep
//! the base type everywhere. The type chosen here still goes through
//! [`storage_type`](super::types::storage_type) when the rows do not fit
//! its block.

use gguf::GgmlType;

use super::shape::Shape;
use super::types::{ftype, OutType};

/// What a weight does, as far as the type rules care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `token_embd.weight`.
    TokenEmbd,
    /// `output.weight`.
    Output,
    /// `blk.N.attn_q.weight`.
    AttnQ,
    /// `blk.N.attn_k.weight`.
    AttnK,
    /// `blk.N.attn_v.weight`.
    AttnV,
    /// `blk.N.attn_output.weight`.
    AttnOutput,
    /// `blk.N.attn_qkv.weight` (fused q/k/v).
    AttnQkv,
    /// `blk.N.ffn_gate.weight`.
    FfnGate,
    /// `blk.N.ffn_up.weight`.
    FfnUp,
    /// `blk.N.ffn_down.weight`.
    FfnDown,
}

/// llama.cpp's `use_more_bits`: the first and last eighth of `n` layers
/// and every third layer between them.
pub fn use_more_bits(i: u32, n: u32) -> bool {
    // Integer arithmetic as in C; `i >= n / 8` wherever the subtraction runs.
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// The type rules of one file type applied to one model.
#[derive(Clone, Copy, Debug)]
pub struct Mixture {
    /// The file type's `llama_ftype`.
    file_type: u32,
    /// The file type's base type.
    base: GgmlType,
    /// Whether the rules apply at all.
    active: bool,
    /// Number of layers (llama.cpp's `n_attention_wv` and `n_ffn_down`:
    /// one attn_v and one ffn_down per layer).
    n_layer: u32,
    /// Query heads per kv head.
    n_gqa: u32,
    /// Whether llama.cpp calls the model 70B.
    is_70b: bool,
    /// No `output.weight`: token_embd takes the output rule.
    tied_output: bool,
}

impl Mixture {
    /// The rules of `ty` for a model of `shape`.
    pub fn new(shape: &Shape, ty: OutType) -> Mixture {
        let is_70b = shape.n_layer == 80
            && match shape.arch.name() {
                "llama" => shape.n_head != shape.n_head_kv,
                "qwen2" => true,
                _ => false,
            };
        Mixture {
            file_type: ty.file_type,
            base: ty.ty,
            active: ty.is_quantized() && !ty.pure,
            n_layer: shape.n_layer,
            n_gqa: shape.n_head / shape.n_head_kv.max(1),
            is_70b,
            tied_output: shape.tied_output,
        }
    }

    /// The type asked for the weight of `role` in layer `il` (ignored
    /// outside the blocks) with rows of `ne0` values, before fall-backs.
    pub fn want(&self, role: Role, il: u32, ne0: u32) -> GgmlType {
        use GgmlType as T;
        let base = self.base;
        if !self.active {
            return base;
        }
        let (ft, n) = (self.file_type, self.n_layer);
        match role {
            Role::Output | Role::TokenEmbd if role == Role::Output || self.tied_output => {
                if u64::from(ne0) % base.block_size() as u64 != 0 {
                    T::Q8_0
                } else if base == T::Q8_0 {
                    base
                } else {
                    T::Q6_K
                }
            }
            Role::AttnV => {
                // llama.cpp counts attn_v tensors in file order, which is
                // layer order here: the count is the layer.
                let t = match ft {
                    ftype::MOSTLY_Q2_K if self.n_gqa >= 4 => T::Q4_K,
                    ftype::MOSTLY_Q2_K => T::Q3_K,
                    ftype::MOSTLY_Q3_K_M if il < 2 => T::Q5_K,
                    ftype::MOSTLY_Q3_K_M => T::Q4_K,
                    ftype::MOSTLY_Q3_K_L => T::Q5_K,
                    ftype::MOSTLY_IQ4_NL if self.n_gqa >= 4 => T::Q5_K,
                    ftype::MOSTLY_Q4_K_M | ftype::MOSTLY_Q5_K_M if use_more_bits(il, n) => T::Q6_K,
                    ftype::MOSTLY_Q4_K_S if il < 4 => T::Q5_K,
                    _ => base,
                };
                // 70B models share each attn_v among 8 query heads: a small
                // tensor that gains much from more bits.
                if self.is_70b && matches!(t, T::Q3_K | T::Q4_K) {
                    T::Q5_K
                } else {
                    t
                }
            }
            Role::FfnDown => match ft {
                ftype::MOSTLY_Q2_K => T::Q3_K,
                ftype::MOSTLY_Q3_K_M if il < n / 16 => T::Q5_K,
                // Q3_K only for falcon outside use_more_bits.
                ftype::MOSTLY_Q3_K_M => T::Q4_K,
                ftype::MOSTLY_Q3_K_L => T::Q5_K,
                ftype::MOSTLY_Q4_K_M | ftype::MOSTLY_Q5_K_M if use_more_bits(il, n) => T::Q6_K,
                // IQ4_NL only without an importance matrix, as here.
                ftype::MOSTLY_Q4_K_S | ftype::MOSTLY_IQ4_NL if il < n / 8 => T::Q5_K,
                _ => base,
            },
            Role::AttnQkv => match ft {
                ftype::MOSTLY_Q3_K_M | ftype::MOSTLY_Q3_K_L => T::Q4_K,
                ftype::MOSTLY_Q4_K_M => T::Q5_K,
                ftype::MOSTLY_Q5_K_M => T::Q6_K,
                _ => base,
            },
            Role::AttnOutput => match ft {
                ftype::MOSTLY_Q2_K => T::Q3_K,
                ftype::MOSTLY_Q3_K_M => T::Q4_K,
                ftype::MOSTLY_Q3_K_L => T::Q5_K,
                _ => base,
            },
            Role::TokenEmbd
            | Role::Output
            | Role::AttnQ
            | Role::AttnK
            | Role::FfnGate
            | Role::FfnUp => base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gen_model::shape::Preset;

    fn layers(n: u32, f: impl Fn(u32) -> bool) -> Vec<u32> {
        (0..n).filter(|&i| f(i)).collect()
    }

    #[test]
    fn more_bits_layers() {
        assert_eq!(
            layers(22, |i| use_more_bits(i, 22)),
            [0, 1, 4, 7, 10, 13, 16, 19, 20, 21]
        );
        assert_eq!(layers(5, |i| use_more_bits(i, 5)), [2, 4]);
        assert_eq!(
            layers(32, |i| use_more_bits(i, 32)),
            [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
        );
        assert_eq!(layers(1, |i| use_more_bits(i, 1)), [0]);
    }

    fn mix(preset: Preset, ty: &str) -> Mixture {
        Mixture::new(&preset.shape(), ty.parse().unwrap())
    }

    #[test]
    fn float_and_pure_files_are_uniform() {
        let roles = [
            Role::TokenEmbd,
            Role::Output,
            Role::AttnV,
            Role::AttnOutput,
            Role::FfnDown,
        ];
        for ty in ["f32", "f16", "bf16"] {
            let m = mix(Preset::Tinyllama1_1b, ty);
            for role in roles {
                assert_eq!(m.want(role, 0, 2048), m.base, "{ty} {role:?}");
            }
        }
        let s = Preset::Tinyllama1_1b.shape();
        let m = Mixture::new(&s, "q4_k_m".parse::<OutType>().unwrap().pure());
        for role in roles {
            assert_eq!(m.want(role, 0, 2048), GgmlType::Q4_K, "{role:?}");
        }
    }

    #[test]
    fn output_rule() {
        use GgmlType as T;
        // Rows of 2048 fit every block: Q6_K, except in a Q8_0 file.
        for (ty, want) in [
            ("q4_0", T::Q6_K),
            ("q5_1", T::Q6_K),
            ("iq4_nl", T::Q6_K),
            ("q3_k_s", T::Q6_K),
            ("q6_k", T::Q6_K),
            ("q8_0", T::Q8_0),
        ] {
            let m = mix(Preset::Tinyllama1_1b, ty);
            assert_eq!(m.want(Role::Output, 0, 2048), want, "{ty}");
            assert_eq!(m.want(Role::TokenEmbd, 0, 2048), m.base, "{ty}");
        }
        // Rows that are not a multiple of the base block: Q8_0.
        assert_eq!(
            mix(Preset::Tinyllama1_1b, "q4_k_m").want(Role::Output, 0, 896),
            T::Q8_0
        );
        assert_eq!(
            mix(Preset::Tinyllama1_1b, "q4_0").want(Role::Output, 0, 896),
            T::Q6_K
        );
        // Tied embeddings: token_embd takes the output rule.
        let q = mix(Preset::Qwen2_0_5b, "q4_0");
        assert_eq!(q.want(Role::TokenEmbd, 0, 896), T::Q6_K);
        assert_eq!(
            mix(Preset::Qwen2_0_5b, "q4_k_m").want(Role::TokenEmbd, 0, 896),
            T::Q8_0
        );
    }

    /// The layers of tinyllama-1.1b (22 layers, 8 query heads per kv head)
    /// whose `role` gets `want` under `ty`.
    fn tinyllama(ty: &str, role: Role, want: GgmlType) -> Vec<u32> {
        let m = mix(Preset::Tinyllama1_1b, ty);
        layers(22, |il| m.want(role, il, 2048) == want)
    }

    #[test]
    fn k_quant_mixtures_on_tinyllama() {
        use GgmlType as T;
        let all: Vec<u32> = (0..22).collect();
        let more = [0, 1, 4, 7, 10, 13, 16, 19, 20, 21];
        for ty in ["q4_k_m", "q5_k_m", "q4_k", "q5_k"] {
            assert_eq!(tinyllama(ty, Role::AttnV, T::Q6_K), more, "{ty}");
            assert_eq!(tinyllama(ty, Role::FfnDown, T::Q6_K), more, "{ty}");
        }
        let base = |ty: &str| mix(Preset::Tinyllama1_1b, ty).base;
        for ty in ["q4_k_m", "q5_k_m", "q4_k_s", "q5_k_s", "q3_k_s", "q6_k"] {
            for role in [Role::AttnQ, Role::AttnK, Role::FfnGate, Role::FfnUp] {
                assert_eq!(tinyllama(ty, role, base(ty)), all, "{ty} {role:?}");
            }
            assert_eq!(tinyllama(ty, Role::AttnOutput, base(ty)), all, "{ty}");
        }
        // Q2_K: 8 query heads per kv head.
        assert_eq!(tinyllama("q2_k", Role::AttnV, T::Q4_K), all);
        assert_eq!(tinyllama("q2_k", Role::FfnDown, T::Q3_K), all);
        assert_eq!(tinyllama("q2_k", Role::AttnOutput, T::Q3_K), all);
        assert_eq!(tinyllama("q2_k", Role::AttnQ, T::Q2_K), all);
        // Q3_K_S: the base type but for the output.
        for role in [Role::AttnV, Role::FfnDown, Role::AttnOutput] {
            assert_eq!(tinyllama("q3_k_s", role, T::Q3_K), all, "{role:?}");
        }
        // Q3_K_M (and its alias q3_k).
        for ty in ["q3_k_m", "q3_k"] {
            assert_eq!(tinyllama(ty, Role::AttnV, T::Q5_K), [0, 1], "{ty}");
            assert_eq!(tinyllama(ty, Role::AttnV, T::Q4_K).len(), 20, "{ty}");
            assert_eq!(tinyllama(ty, Role::FfnDown, T::Q5_K), [0], "{ty}");
            assert_eq!(tinyllama(ty, Role::FfnDown, T::Q4_K).len(), 21, "{ty}");
            assert_eq!(tinyllama(ty, Role::AttnOutput, T::Q4_K), all, "{ty}");
            assert_eq!(tinyllama(ty, Role::FfnUp, T::Q3_K), all, "{ty}");
        }
        // Q3_K_L.
        for role in [Role::AttnV, Role::FfnDown, Role::AttnOutput] {
            assert_eq!(tinyllama("q3_k_l", role, T::Q5_K), all, "{role:?}");
        }
        // Q4_K_S.
        assert_eq!(tinyllama("q4_k_s", Role::AttnV, T::Q5_K), [0, 1, 2, 3]);
        assert_eq!(tinyllama("q4_k_s", Role::FfnDown, T::Q5_K), [0, 1]);
        // Q5_K_S and Q6_K.
        for role in [Role::AttnV, Role::FfnDown] {
            assert_eq!(tinyllama("q5_k_s", role, T::Q5_K), all, "{role:?}");
            assert_eq!(tinyllama("q6_k", role, T::Q6_K), all, "{role:?}");
        }
        // IQ4_NL (no importance matrix).
        assert_eq!(tinyllama("iq4_nl", Role::AttnV, T::Q5_K), all);
        assert_eq!(tinyllama("iq4_nl", Role::FfnDown, T::Q5_K), [0, 1]);
        // The legacy types change only the output.
        for ty in ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"] {
            for role in [Role::AttnV, Role::FfnDown, Role::AttnOutput] {
                assert_eq!(tinyllama(ty, role, base(ty)), all, "{ty} {role:?}");
            }
        }
    }

    #[test]
    fn few_kv_heads_and_70b() {
        use GgmlType as T;
        // stories260k: 2 query heads per kv head.
        let m = mix(Preset::Stories260k, "q2_k");
        assert_eq!(m.want(Role::AttnV, 0, 256), T::Q3_K);
        let m = mix(Preset::Stories260k, "iq4_nl");
        assert_eq!(m.want(Role::AttnV, 0, 256), T::IQ4_NL);

        let mut s = Preset::Llama7b.shape();
        (s.n_layer, s.n_embd, s.n_head, s.n_head_kv) = (80, 8192, 64, 8);
        let m = Mixture::new(&s, "q4_k_m".parse().unwrap());
        // Layer 11 is not a use_more_bits layer: Q4_K, raised to Q5_K.
        assert!(!use_more_bits(11, 80));
        assert_eq!(m.want(Role::AttnV, 11, 8192), T::Q5_K);
        assert_eq!(m.want(Role::AttnV, 0, 8192), T::Q6_K);
        assert_eq!(m.want(Role::FfnDown, 11, 28672), T::Q4_K);
        let m = Mixture::new(&s, "q3_k_s".parse().unwrap());
        assert_eq!(m.want(Role::AttnV, 3, 8192), T::Q5_K);
        // 80 layers without grouped-query attention is llama's 65B.
        s.n_head_kv = 64;
        let m = Mixture::new(&s, "q4_k_m".parse().unwrap());
        assert_eq!(m.want(Role::AttnV, 11, 8192), T::Q4_K);
        // qwen2 with 80 layers is 70B whatever its heads.
        let mut q = Preset::Qwen2_0_5b.shape();
        q.n_layer = 80;
        let m = Mixture::new(&q, "q3_k_s".parse().unwrap());
        assert_eq!(m.want(Role::AttnV, 3, 896), T::Q5_K);
    }
}

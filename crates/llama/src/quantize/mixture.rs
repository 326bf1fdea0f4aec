//! Which type each tensor of a quantized file gets: llama.cpp's rules
//! (`llama_tensor_get_type` in src/llama-quant.cpp) for every file type.
//!
//! In order, for each tensor in file order:
//!
//! 1. Only weights are quantized ([`allows_quantization`]): 2-D or 3-D
//!    tensors whose name ends in `weight`, minus norms, expert gates,
//!    positional embeddings, convolutions and the other small tensors
//!    llama.cpp keeps. Everything else keeps its type.
//! 2. `--token-embedding-type` and `--output-tensor-type` name the type of
//!    those two tensors outright.
//! 3. For a quantized base type: the first `--tensor-type` pattern found in
//!    the name gives the type; else, unless `--pure`, the file type's
//!    mixture ([`Mixture`]) may give the tensor more (or fewer) bits.
//! 4. A type whose block does not divide the rows falls back
//!    ([`fallback`]): 256-blocks to a 32-block type, and what still does not
//!    fit to F16.
//!
//! The mixture counts attn_v-like tensors, and without experts the
//! ffn_down/gate/up tensors, in file order: the count is the layer.

use gguf::GgmlType;
use regex::Regex;

use super::ftype::{ft, Ftype};
use crate::error::{LlamaError, Result};

/// What the rules need to know of a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: u32,
    /// Query heads (of the first layer).
    pub n_head: u32,
    /// Key/value heads (of the first layer).
    pub n_head_kv: u32,
    /// `{arch}.expert_count`, 0 without experts.
    pub n_expert: u32,
}

impl ModelInfo {
    /// Reads the model's facts from its metadata (missing head counts read
    /// as 0, a missing kv head count as the head count).
    pub fn from_metadata(md: &gguf::Metadata) -> Result<ModelInfo> {
        let arch = md
            .get_str("general.architecture")
            .map_err(|e| LlamaError::Metadata(format!("general.architecture: {e}")))?
            .to_string();
        let first = |key: &str| -> Option<u64> {
            let key = format!("{arch}.{key}");
            if let Ok(v) = md.get_uint(&key) {
                return Some(v);
            }
            md.get_array::<u32>(&key)
                .ok()
                .and_then(|a| a.first().map(|&x| u64::from(x)))
                .or_else(|| {
                    md.get_array::<i32>(&key)
                        .ok()
                        .and_then(|a| a.first().map(|&x| x.max(0) as u64))
                })
        };
        let u32_of = |v: u64, what: &str| {
            u32::try_from(v)
                .map_err(|_| LlamaError::Metadata(format!("{arch}.{what} {v} is too large")))
        };
        let n_layer = u32_of(
            md.get_uint(&format!("{arch}.block_count"))
                .map_err(|e| LlamaError::Metadata(format!("{arch}.block_count: {e}")))?,
            "block_count",
        )?;
        let n_head = u32_of(
            first("attention.head_count").unwrap_or(0),
            "attention.head_count",
        )?;
        let n_head_kv = u32_of(
            first("attention.head_count_kv").unwrap_or(u64::from(n_head)),
            "attention.head_count_kv",
        )?;
        let n_expert = u32_of(
            md.get_uint(&format!("{arch}.expert_count")).unwrap_or(0),
            "expert_count",
        )?;
        Ok(ModelInfo {
            arch,
            n_layer,
            n_head,
            n_head_kv,
            n_expert,
        })
    }

    /// Query heads per key/value head (0 without kv heads).
    pub fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    /// Whether llama.cpp sizes the model as 70B (the only size the rules
    /// test).
    pub fn is_70b(&self) -> bool {
        match self.arch.as_str() {
            "llama" => self.n_layer == 80 && self.n_head != self.n_head_kv,
            "qwen2" | "deci" | "olmo" => self.n_layer == 80,
            "jais2" => self.n_layer == 68,
            _ => false,
        }
    }
}

/// A `--tensor-type PATTERN=TYPE` rule: tensors whose name contains a
/// match of the regular expression get the type.
#[derive(Clone, Debug)]
pub struct TensorTypeRule {
    /// The pattern as given (lower case).
    pub pattern: String,
    regex: Regex,
    /// The type.
    pub ty: GgmlType,
}

impl TensorTypeRule {
    /// Parses `PATTERN=TYPE` (the pattern is lower-cased, as llama.cpp
    /// does; the type is a ggml type name such as `q8_0`).
    pub fn parse(s: &str) -> Result<TensorTypeRule> {
        let bad = |why: String| LlamaError::InvalidParam(format!("--tensor-type '{s}': {why}"));
        let (name, ty) = s
            .split_once('=')
            .ok_or_else(|| bad("malformed, expected PATTERN=TYPE".into()))?;
        if name.is_empty() {
            return Err(bad("missing tensor name".into()));
        }
        if ty.is_empty() {
            return Err(bad("missing quantization type".into()));
        }
        let ty = parse_ggml_type(ty)?;
        let pattern = name.to_ascii_lowercase();
        let regex = Regex::new(&pattern).map_err(|e| bad(format!("bad pattern: {e}")))?;
        Ok(TensorTypeRule { pattern, regex, ty })
    }

    fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }
}

/// A ggml type by its name, case-insensitively (`q8_0`, `Q4_K`, `f16`).
pub fn parse_ggml_type(s: &str) -> Result<GgmlType> {
    GgmlType::from_name(s)
        .filter(|t| !t.is_removed())
        .ok_or_else(|| LlamaError::InvalidParam(format!("invalid ggml_type '{s}'")))
}

/// The settings that decide types.
#[derive(Clone, Debug)]
pub struct TypeOptions {
    /// The file type.
    pub ftype: Ftype,
    /// `--pure`: no mixture, every weight in the base type.
    pub pure: bool,
    /// `COPY`: every tensor keeps its type.
    pub only_copy: bool,
    /// `--leave-output-tensor` turns this off: output.weight keeps its type.
    pub quantize_output_tensor: bool,
    /// `--output-tensor-type`.
    pub output_tensor_type: Option<GgmlType>,
    /// `--token-embedding-type`.
    pub token_embedding_type: Option<GgmlType>,
    /// `--tensor-type` rules, the first match wins.
    pub tensor_types: Vec<TensorTypeRule>,
    /// Whether an importance matrix is given (some mixtures differ).
    pub has_imatrix: bool,
}

impl TypeOptions {
    /// The options of a plain `llama-quantize IN OUT TYPE`.
    pub fn new(ftype: Ftype) -> TypeOptions {
        TypeOptions {
            ftype,
            pure: false,
            only_copy: false,
            quantize_output_tensor: true,
            output_tensor_type: None,
            token_embedding_type: None,
            tensor_types: Vec::new(),
            has_imatrix: false,
        }
    }
}

/// A tensor as the rules see it.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its dimensions, ggml order, padded with 1.
    pub ne: [u64; 4],
    /// Its type in the input.
    pub ty: GgmlType,
}

impl TensorRef<'_> {
    /// ggml's `ggml_n_dims`: dimensions up to the last one above 1.
    pub fn n_dims(&self) -> usize {
        (1..4).rev().find(|&i| self.ne[i] > 1).map_or(1, |i| i + 1)
    }
}

/// The type chosen for one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// The type it is written in.
    pub ty: GgmlType,
    /// Whether the rules may change its type at all.
    pub allows_quantization: bool,
    /// Whether its type needs an importance matrix.
    pub requires_imatrix: bool,
    /// The type asked for when it did not fit the rows and `ty` is its
    /// fall-back.
    pub fallback_from: Option<GgmlType>,
    /// Lines llama.cpp warns with for this tensor (a manual override, a
    /// fall-back).
    pub warnings: Vec<String>,
}

/// The broad role of a tensor, from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Category {
    /// token_embd / per_layer_token_embd.
    TokenEmbd,
    /// attn_q.
    AttnQ,
    /// attn_v.
    AttnV,
    /// attn_k.
    AttnK,
    /// fused attn_qkv.
    AttnQkv,
    /// attn_kv_b (MLA).
    AttnKvB,
    /// attn_output.
    AttnOutput,
    /// ffn_up*.
    FfnUp,
    /// ffn_gate*.
    FfnGate,
    /// ffn_down*.
    FfnDown,
    /// output.weight.
    Output,
    /// Anything else.
    Other,
}

impl Category {
    /// llama.cpp's `tensor_get_category`.
    pub fn of(name: &str) -> Category {
        if name == "output.weight" {
            return Category::Output;
        }
        if is_token_embd(name) {
            return Category::TokenEmbd;
        }
        for (needle, cat) in [
            ("attn_qkv.weight", Category::AttnQkv),
            ("attn_kv_b.weight", Category::AttnKvB),
            ("attn_v.weight", Category::AttnV),
            ("attn_k.weight", Category::AttnK),
            ("attn_q.weight", Category::AttnQ),
            ("attn_output.weight", Category::AttnOutput),
            ("ffn_up", Category::FfnUp),
            ("ffn_gate", Category::FfnGate),
            ("ffn_down", Category::FfnDown),
        ] {
            if name.contains(needle) {
                return cat;
            }
        }
        Category::Other
    }

    fn is_attn_v(self) -> bool {
        matches!(
            self,
            Category::AttnV | Category::AttnQkv | Category::AttnKvB
        )
    }
}

fn is_token_embd(name: &str) -> bool {
    name == "token_embd.weight" || name == "per_layer_token_embd.weight"
}

/// Names (substrings) of weights llama.cpp never quantizes.
const KEEP: &[&str] = &[
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
];

/// More names glm5-next keeps.
const KEEP_GLM5_NEXT: &[&str] = &[
    "hc_",
    "indexer.attn_q_b",
    "indexer.attn_k",
    "indexer.proj",
    "indexer_compressor_gate",
    "indexer_compressor_ape",
    "ssm_f_a.weight",
    "ssm_f_b.weight",
    "ssm_g_a.weight",
    "ssm_g_b.weight",
    "ssm_beta.weight",
    "attn_kv_a_mqa.weight",
    "attn_k_b.weight",
    "attn_v_b.weight",
];

/// Whether the rules may give `t` another type (llama.cpp's
/// `tensor_allows_quantization`).
pub fn allows_quantization(opts: &TypeOptions, arch: &str, t: &TensorRef<'_>) -> bool {
    if opts.only_copy || t.n_dims() < 2 {
        return false;
    }
    let name = t.name;
    if !name.ends_with("weight") {
        return false;
    }
    if !opts.quantize_output_tensor && name == "output.weight" {
        return false;
    }
    if KEEP.iter().any(|k| name.contains(k)) {
        return false;
    }
    if arch == "glm5-next" && KEEP_GLM5_NEXT.iter().any(|k| name.contains(k)) {
        return false;
    }
    name != "position_embd.weight" && name != "token_types.weight"
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers
/// and every third layer between them.
pub fn use_more_bits(i: i64, n: i64) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// Whether quantizing a tensor to `ty` needs an importance matrix
/// (llama.cpp's `tensor_requires_imatrix`).
pub fn requires_imatrix(name: &str, ty: GgmlType, ftype: Ftype) -> bool {
    use GgmlType as T;
    if is_token_embd(name) || name == "output.weight" {
        return false;
    }
    match ty {
        T::IQ3_XXS | T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ1_M | T::IQ1_S => true,
        T::Q2_K => ftype == ft::MOSTLY_Q2_K_S,
        _ => false,
    }
}

/// The type a tensor with rows of `ncols` values takes when `want` does
/// not divide them (llama.cpp's `tensor_type_fallback`), with the warning
/// llama.cpp prints; `Ok((want, None))` when it fits.
pub fn fallback(name: &str, ncols: u64, want: GgmlType) -> Result<(GgmlType, Option<String>)> {
    use GgmlType as T;
    let bs = want.block_size() as u64;
    if ncols.is_multiple_of(bs) {
        return Ok((want, None));
    }
    let mut msg = format!(
        "warning: {name:<36} - ncols {ncols:6} not divisible by {bs:3} (required for type {:>7}) ",
        want.name()
    );
    let mut ty = match want {
        T::IQ1_S
        | T::IQ1_M
        | T::IQ2_XXS
        | T::IQ2_XS
        | T::IQ2_S
        | T::IQ3_XXS
        | T::IQ3_S
        | T::IQ4_XS => T::IQ4_NL,
        T::Q2_K | T::Q3_K | T::TQ1_0 | T::TQ2_0 => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        _ if bs <= 32 => want,
        _ => {
            return Err(LlamaError::InvalidParam(format!(
                "no tensor type fallback is defined for type {}",
                want.name()
            )))
        }
    };
    if !ncols.is_multiple_of(ty.block_size() as u64) {
        msg.push_str("(WARNING: must use F16 due to unusual shape) ");
        ty = T::F16;
    }
    msg.push_str(&format!("-> falling back to {:>7}", ty.name()));
    Ok((ty, Some(msg)))
}

/// The counters of one pass over a model's tensors.
#[derive(Clone, Debug)]
pub struct Mixture<'a> {
    model: &'a ModelInfo,
    opts: &'a TypeOptions,
    n_attention_wv: i64,
    n_layer: i64,
    i_attention_wv: i64,
    i_ffn_down: i64,
    i_ffn_gate: i64,
    i_ffn_up: i64,
    tied_embeddings: bool,
    /// Tensors that needed a fall-back so far.
    pub n_fallback: usize,
}

impl<'a> Mixture<'a> {
    /// The rules for `model` whose tensor names are `names`, in file order.
    pub fn new<'n>(
        model: &'a ModelInfo,
        opts: &'a TypeOptions,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Mixture<'a> {
        let mut n_attention_wv = 0;
        let mut tied_embeddings = true;
        for name in names {
            let cat = Category::of(name);
            if cat.is_attn_v() {
                n_attention_wv += 1;
            }
            if cat == Category::Output {
                tied_embeddings = false;
            }
        }
        Mixture {
            model,
            opts,
            n_attention_wv,
            n_layer: i64::from(model.n_layer),
            i_attention_wv: 0,
            i_ffn_down: 0,
            i_ffn_gate: 0,
            i_ffn_up: 0,
            tied_embeddings,
            n_fallback: 0,
        }
    }

    /// The type of the next tensor (called in file order).
    pub fn choose(&mut self, t: &TensorRef<'_>, default_type: GgmlType) -> Result<Choice> {
        let opts = self.opts;
        let allows = allows_quantization(opts, &self.model.arch, t);
        let mut warnings = Vec::new();
        let mut fallback_from = None;
        let ty = if allows {
            self.get_type(t, default_type, &mut warnings, &mut fallback_from)?
        } else {
            t.ty
        };
        Ok(Choice {
            ty,
            allows_quantization: allows,
            fallback_from,
            requires_imatrix: requires_imatrix(t.name, ty, opts.ftype),
            warnings,
        })
    }

    fn get_type(
        &mut self,
        t: &TensorRef<'_>,
        default_type: GgmlType,
        warnings: &mut Vec<String>,
        fallback_from: &mut Option<GgmlType>,
    ) -> Result<GgmlType> {
        let opts = self.opts;
        let cat = Category::of(t.name);
        if let (Some(ty), Category::TokenEmbd) = (opts.token_embedding_type, cat) {
            // per_layer_token_embd follows it unless a --tensor-type names it.
            let named = t.name == "per_layer_token_embd.weight"
                && opts.tensor_types.iter().any(|r| r.matches(t.name));
            if !named {
                return Ok(ty);
            }
        }
        if let (Some(ty), Category::Output) = (opts.output_tensor_type, cat) {
            return Ok(ty);
        }
        let mut ty = default_type;
        if default_type.is_quantized() {
            let mut manual = false;
            if let Some(rule) = opts.tensor_types.iter().find(|r| r.matches(t.name)) {
                if rule.ty != ty {
                    warnings.push(format!(
                        "llama_tensor_get_type: {:<36} - applying manual override: {} -> {}",
                        t.name,
                        ty.name(),
                        rule.ty.name()
                    ));
                    ty = rule.ty;
                }
                manual = true;
            }
            if !manual && !opts.pure {
                ty = self.mixture(t, ty, cat)?;
            }
            let (fb, warning) = fallback(t.name, t.ne[0], ty)?;
            if let Some(w) = warning {
                self.n_fallback += 1;
                warnings.push(w);
                *fallback_from = Some(ty);
            }
            ty = fb;
        }
        Ok(ty)
    }

    /// The layer of an ffn tensor: its count, or with experts the number
    /// in its name.
    fn layer(&self, count: i64, name: &str) -> Result<(i64, i64)> {
        let n = self.n_layer;
        if self.model.n_expert <= 1 {
            return Ok((count, n));
        }
        let i = block_number(name).ok_or_else(|| {
            LlamaError::Tensor(format!("Failed to determine layer for tensor {name}"))
        })?;
        if i < 0 || i >= n {
            return Err(LlamaError::Tensor(format!(
                "Bad layer {i} for tensor {name}. Must be in [0, {n})"
            )));
        }
        Ok((i, n))
    }

    /// llama.cpp's `llama_tensor_get_type_impl`: the mixture of the file
    /// type.
    fn mixture(&mut self, t: &TensorRef<'_>, base: GgmlType, cat: Category) -> Result<GgmlType> {
        use ft::*;
        use GgmlType as T;
        let (m, ftype) = (self.model, self.opts.ftype);
        let arch = m.arch.as_str();
        let falcon = arch == "falcon";
        let has_imatrix = self.opts.has_imatrix;
        let n_gqa = m.n_gqa();
        let n_expert = m.n_expert;
        let name = t.name;
        let mut ty = base;

        if arch == "glm5-next"
            && (name.contains("attn_q_a")
                || name.contains("attn_q_b")
                || name.contains("nextn.eh_proj"))
            && !matches!(ty, T::F32 | T::BF16 | T::F16)
        {
            return Ok(T::Q8_0);
        }

        let iq_low = matches!(
            ftype,
            MOSTLY_IQ2_XXS
                | MOSTLY_IQ2_XS
                | MOSTLY_IQ1_S
                | MOSTLY_IQ2_S
                | MOSTLY_IQ2_M
                | MOSTLY_IQ1_M
        );
        let iq2_sm = matches!(ftype, MOSTLY_IQ2_S | MOSTLY_IQ2_M);

        if cat == Category::Output || (self.tied_embeddings && cat == Category::TokenEmbd) {
            if let Some(o) = self.opts.output_tensor_type {
                ty = o;
            } else if ftype == MOSTLY_MXFP4_MOE
                || falcon
                || !t.ne[0].is_multiple_of(ty.block_size() as u64)
            {
                ty = T::Q8_0;
            } else if matches!(
                ftype,
                MOSTLY_IQ2_XXS
                    | MOSTLY_IQ2_XS
                    | MOSTLY_IQ3_XXS
                    | MOSTLY_IQ1_S
                    | MOSTLY_IQ2_S
                    | MOSTLY_IQ2_M
                    | MOSTLY_IQ1_M
            ) {
                ty = T::Q5_K;
            } else if ty != T::Q8_0 {
                ty = T::Q6_K;
            }
        } else if ftype == MOSTLY_MXFP4_MOE {
            let bailing_expert = arch == "bailingmoe3"
                && matches!(cat, Category::FfnUp | Category::FfnGate | Category::FfnDown);
            ty = if t.ne[2] > 1 && (arch != "bailingmoe3" || bailing_expert) {
                T::MXFP4
            } else {
                T::Q8_0
            };
        } else if cat == Category::TokenEmbd {
            if let Some(e) = self.opts.token_embedding_type {
                ty = e;
            } else if matches!(
                ftype,
                MOSTLY_IQ2_XXS | MOSTLY_IQ2_XS | MOSTLY_IQ1_S | MOSTLY_IQ1_M
            ) {
                ty = T::Q2_K;
            } else if iq2_sm || ftype == MOSTLY_IQ3_XXS {
                ty = T::IQ3_S;
            } else if matches!(ftype, MOSTLY_TQ1_0 | MOSTLY_TQ2_0 | MOSTLY_Q2_0) {
                ty = T::Q4_K;
            }
        } else if iq_low {
            if cat.is_attn_v() {
                ty = if n_gqa >= 4 || n_expert >= 4 {
                    T::Q4_K
                } else if iq2_sm {
                    T::IQ3_S
                } else {
                    T::Q2_K
                };
                self.i_attention_wv += 1;
            } else if n_expert == 8 && cat == Category::AttnK {
                ty = T::Q4_K;
            } else if cat == Category::FfnDown {
                if self.i_ffn_down < self.n_layer / 8 {
                    ty = if iq2_sm { T::IQ3_S } else { T::Q2_K };
                }
                self.i_ffn_down += 1;
            } else if cat == Category::AttnOutput {
                if n_expert == 8 {
                    ty = T::Q5_K;
                } else if matches!(ftype, MOSTLY_IQ1_S | MOSTLY_IQ1_M) {
                    ty = T::IQ2_XXS;
                } else if iq2_sm {
                    ty = T::IQ3_S;
                }
            }
        } else if cat.is_attn_v() {
            let (i, n) = (self.i_attention_wv, self.n_attention_wv);
            if ftype == MOSTLY_Q2_K {
                ty = if n_gqa >= 4 { T::Q4_K } else { T::Q3_K };
            } else if ftype == MOSTLY_Q2_K_S && n_gqa >= 4 {
                ty = T::Q4_K;
            } else if ftype == MOSTLY_IQ3_XXS {
                ty = if n_gqa >= 4 {
                    T::Q4_K
                } else if !has_imatrix {
                    T::IQ3_S
                } else {
                    T::IQ3_XXS
                };
            } else if (matches!(ftype, MOSTLY_IQ3_XS | MOSTLY_IQ3_S) && n_gqa >= 4)
                || ftype == MOSTLY_IQ3_M
            {
                ty = T::Q4_K;
            } else if ftype == MOSTLY_Q3_K_M {
                ty = if i < 2 { T::Q5_K } else { T::Q4_K };
            } else if ftype == MOSTLY_Q3_K_L
                || (matches!(ftype, MOSTLY_IQ4_NL | MOSTLY_IQ4_XS) && n_gqa >= 4)
            {
                ty = T::Q5_K;
            } else if matches!(ftype, MOSTLY_Q4_K_M | MOSTLY_Q5_K_M) && use_more_bits(i, n) {
                ty = T::Q6_K;
            } else if ftype == MOSTLY_Q4_K_S && i < 4 {
                ty = T::Q5_K;
            }
            // In 70B models 8 query heads share each attn_v: a small
            // tensor that gains much from more bits.
            if m.is_70b() && matches!(ty, T::Q3_K | T::Q4_K) {
                ty = T::Q5_K;
            }
            if n_expert == 8 {
                ty = T::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if cat == Category::AttnK {
            if n_expert == 8 {
                ty = T::Q8_0;
            } else if ftype == MOSTLY_IQ3_XS {
                ty = T::IQ3_XXS;
            } else if ftype == MOSTLY_IQ3_XXS {
                ty = T::IQ2_S;
            }
        } else if cat == Category::AttnQ {
            if ftype == MOSTLY_IQ3_XS {
                ty = T::IQ3_XXS;
            } else if ftype == MOSTLY_IQ3_XXS {
                ty = T::IQ2_S;
            }
        } else if cat == Category::FfnDown {
            let (i, n) = self.layer(self.i_ffn_down, name)?;
            if ftype == MOSTLY_Q2_K {
                ty = T::Q3_K;
            } else if ftype == MOSTLY_Q2_K_S {
                if i < n / 8 {
                    ty = T::Q4_K;
                }
            } else if ftype == MOSTLY_IQ3_XXS && !has_imatrix {
                ty = if i < n / 8 { T::Q4_K } else { T::Q3_K };
            } else if ftype == MOSTLY_Q3_K_M {
                ty = if i < n / 16 {
                    T::Q5_K
                } else if !falcon || use_more_bits(i, n) {
                    T::Q4_K
                } else {
                    T::Q3_K
                };
            } else if ftype == MOSTLY_IQ3_M && (i < n / 8 || (n_expert == 8 && use_more_bits(i, n)))
            {
                ty = T::Q4_K;
            } else if ftype == MOSTLY_Q3_K_L {
                ty = if falcon { T::Q4_K } else { T::Q5_K };
            } else if ftype == MOSTLY_Q4_K_M {
                if falcon {
                    ty = if i < n / 16 {
                        T::Q6_K
                    } else if use_more_bits(i, n) {
                        T::Q5_K
                    } else {
                        T::Q4_K
                    };
                } else if use_more_bits(i, n) {
                    ty = T::Q6_K;
                }
            } else if i < n / 8 && matches!(ftype, MOSTLY_IQ4_NL | MOSTLY_IQ4_XS) && !has_imatrix {
                ty = T::Q5_K;
            } else if ftype == MOSTLY_Q5_K_M && use_more_bits(i, n) {
                ty = T::Q6_K;
            } else if ftype == MOSTLY_Q4_K_S && !falcon && i < n / 8 {
                ty = T::Q5_K;
            } else if matches!(ftype, MOSTLY_Q4_0 | MOSTLY_Q5_0) && has_imatrix && i < n / 8 {
                // Guards the first ffn_down layers of Q4_0/Q5_0 with an
                // importance matrix only, so that the plain result stays.
                ty = if ftype == MOSTLY_Q4_0 {
                    T::Q4_1
                } else {
                    T::Q5_1
                };
            }
            self.i_ffn_down += 1;
        } else if cat == Category::AttnOutput {
            if !falcon {
                if n_expert == 8 {
                    if matches!(
                        ftype,
                        MOSTLY_Q2_K
                            | MOSTLY_IQ3_XS
                            | MOSTLY_IQ3_XXS
                            | MOSTLY_Q3_K_S
                            | MOSTLY_Q3_K_M
                            | MOSTLY_IQ4_NL
                            | MOSTLY_Q4_K_S
                            | MOSTLY_Q4_K_M
                            | MOSTLY_IQ3_S
                            | MOSTLY_IQ3_M
                            | MOSTLY_IQ4_XS
                    ) {
                        ty = T::Q5_K;
                    }
                } else {
                    ty = match ftype {
                        MOSTLY_Q2_K => T::Q3_K,
                        MOSTLY_IQ3_XXS => T::IQ3_S,
                        MOSTLY_Q3_K_M => T::Q4_K,
                        MOSTLY_Q3_K_L => T::Q5_K,
                        MOSTLY_IQ3_M => T::Q4_K,
                        _ => ty,
                    };
                }
            } else if ftype == MOSTLY_Q3_K_L {
                ty = T::Q4_K;
            }
        } else if cat == Category::FfnGate || cat == Category::FfnUp {
            let count = if cat == Category::FfnGate {
                self.i_ffn_gate
            } else {
                self.i_ffn_up
            };
            let (i, n) = self.layer(count, name)?;
            if ftype == MOSTLY_IQ3_XS && i >= n / 8 && i < 7 * n / 8 {
                ty = T::IQ3_XXS;
            }
            if cat == Category::FfnGate {
                self.i_ffn_gate += 1;
            } else {
                self.i_ffn_up += 1;
            }
        }
        // A fused attn_qkv is attn_v-like above; llama.cpp's own QKV branch
        // is never reached.
        Ok(ty)
    }
}

/// The layer number of a `blk.N.` name, read as C's `sscanf("blk.%d.")`.
pub fn block_number(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start();
    let (neg, digits) = match rest.as_bytes().first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    let n = digits.bytes().take_while(u8::is_ascii_digit).count();
    let v: i64 = digits[..n].parse().ok()?;
    Some(if neg { -v } else { v })
}

/// llama.cpp's order of a model's tensors: by layer (names outside the
/// blocks first), then by name.
pub fn tensor_order(a: &str, b: &str) -> std::cmp::Ordering {
    let la = block_number(a).unwrap_or(-1);
    let lb = block_number(b).unwrap_or(-1);
    la.cmp(&lb).then_with(|| a.cmp(b))
}

/// The types of a whole model's tensors, given in file order (llama.cpp's
/// `llama_quant_compute_types`), with the fall-back count.
pub fn compute_types(
    model: &ModelInfo,
    opts: &TypeOptions,
    tensors: &[TensorRef<'_>],
) -> Result<(Vec<Choice>, usize)> {
    let default_type = super::ftype::default_type(opts.ftype)?;
    let mut mix = Mixture::new(model, opts, tensors.iter().map(|t| t.name));
    let choices = tensors
        .iter()
        .map(|t| mix.choose(t, default_type))
        .collect::<Result<Vec<_>>>()?;
    Ok((choices, mix.n_fallback))
}

#[cfg(test)]
mod tests {
    use super::*;
    use GgmlType as T;

    fn layers(n: i64, f: impl Fn(i64) -> bool) -> Vec<i64> {
        (0..n).filter(|&i| f(i)).collect()
    }

    #[test]
    fn more_bits_layers() {
        assert_eq!(
            layers(22, |i| use_more_bits(i, 22)),
            [0, 1, 4, 7, 10, 13, 16, 19, 20, 21]
        );
        assert_eq!(layers(5, |i| use_more_bits(i, 5)), [2, 4]);
        assert_eq!(layers(1, |i| use_more_bits(i, 1)), [0]);
    }

    /// A llama model of `n` layers, 2048 wide, in llama.cpp's order.
    fn llama(n: u32, n_head: u32, n_head_kv: u32) -> (ModelInfo, Vec<(String, [u64; 4])>) {
        let info = ModelInfo {
            arch: "llama".into(),
            n_layer: n,
            n_head,
            n_head_kv,
            n_expert: 0,
        };
        let mut t = vec![
            ("output.weight".to_string(), [2048, 32000, 1, 1]),
            ("output_norm.weight".to_string(), [2048, 1, 1, 1]),
            ("token_embd.weight".to_string(), [2048, 32000, 1, 1]),
        ];
        for il in 0..n {
            for (w, ne0) in [
                ("attn_k", 2048),
                ("attn_norm", 2048),
                ("attn_output", 2048),
                ("attn_q", 2048),
                ("attn_v", 2048),
                ("ffn_down", 5632),
                ("ffn_gate", 2048),
                ("ffn_norm", 2048),
                ("ffn_up", 2048),
            ] {
                let ne1 = if w.ends_with("norm") { 1 } else { 256 };
                t.push((format!("blk.{il}.{w}.weight"), [ne0, ne1, 1, 1]));
            }
        }
        (info, t)
    }

    fn types(info: &ModelInfo, t: &[(String, [u64; 4])], opts: &TypeOptions) -> Vec<T> {
        let refs: Vec<TensorRef<'_>> = t
            .iter()
            .map(|(n, ne)| TensorRef {
                name: n,
                ne: *ne,
                ty: T::F32,
            })
            .collect();
        compute_types(info, opts, &refs)
            .unwrap()
            .0
            .into_iter()
            .map(|c| c.ty)
            .collect()
    }

    fn layers_of(t: &[(String, [u64; 4])], ty: &[T], w: &str, want: T) -> Vec<i64> {
        t.iter()
            .zip(ty)
            .filter(|((n, _), &x)| n.contains(w) && x == want)
            .map(|((n, _), _)| block_number(n).unwrap())
            .collect()
    }

    #[test]
    fn q4_k_m_and_q3_k_m_on_a_tinyllama_shape() {
        let (info, t) = llama(22, 32, 4);
        let ty = types(&info, &t, &TypeOptions::new(ft::MOSTLY_Q4_K_M));
        let more = [0, 1, 4, 7, 10, 13, 16, 19, 20, 21];
        assert_eq!(layers_of(&t, &ty, "attn_v", T::Q6_K), more);
        assert_eq!(layers_of(&t, &ty, "ffn_down", T::Q6_K), more);
        assert_eq!(layers_of(&t, &ty, "attn_q", T::Q4_K).len(), 22);
        assert_eq!(&ty[..3], [T::Q6_K, T::F32, T::Q4_K]);
        let ty = types(&info, &t, &TypeOptions::new(ft::MOSTLY_Q3_K_M));
        assert_eq!(layers_of(&t, &ty, "attn_v", T::Q5_K), [0, 1]);
        assert_eq!(layers_of(&t, &ty, "ffn_down", T::Q5_K), [0]);
        assert_eq!(layers_of(&t, &ty, "attn_output", T::Q4_K).len(), 22);
        // --pure: the base type everywhere but in the norms.
        let mut pure = TypeOptions::new(ft::MOSTLY_Q4_K_M);
        pure.pure = true;
        let ty = types(&info, &t, &pure);
        assert!(t
            .iter()
            .zip(&ty)
            .all(|((n, _), &x)| x == if n.contains("norm") { T::F32 } else { T::Q4_K }));
    }

    #[test]
    fn seventy_b_and_overrides() {
        let (info, t) = llama(80, 64, 8);
        assert!(info.is_70b());
        let ty = types(&info, &t, &TypeOptions::new(ft::MOSTLY_Q4_K_M));
        // Layer 11 is no use_more_bits layer: Q4_K, raised to Q5_K.
        assert_eq!(layers_of(&t, &ty, "blk.11.attn_v", T::Q5_K), [11]);
        let mut o = TypeOptions::new(ft::MOSTLY_Q4_K_M);
        o.tensor_types = vec![TensorTypeRule::parse("attn_v=q8_0").unwrap()];
        o.output_tensor_type = Some(T::F16);
        o.token_embedding_type = Some(T::Q4_0);
        let ty = types(&info, &t, &o);
        assert_eq!(layers_of(&t, &ty, "attn_v", T::Q8_0).len(), 80);
        assert_eq!(&ty[..3], [T::F16, T::F32, T::Q4_0]);
        assert!(TensorTypeRule::parse("attn_v").is_err());
        assert!(TensorTypeRule::parse("=q8_0").is_err());
        assert!(TensorTypeRule::parse("attn_v=q9").is_err());
    }

    #[test]
    fn fallbacks() {
        let f = |t, n| fallback("w", n, t).unwrap().0;
        assert_eq!(f(T::Q4_K, 256), T::Q4_K);
        assert_eq!(f(T::Q4_K, 64), T::Q5_0);
        assert_eq!(f(T::Q4_K, 172), T::F16);
        assert_eq!(f(T::Q6_K, 896), T::Q8_0);
        assert_eq!(f(T::Q3_K, 64), T::Q4_0);
        assert_eq!(f(T::IQ4_XS, 64), T::IQ4_NL);
        assert_eq!(f(T::Q5_K, 64), T::Q5_1);
        assert_eq!(f(T::Q4_0, 172), T::F16);
        let (_, w) = fallback("blk.0.ffn_down.weight", 172, T::Q6_K).unwrap();
        assert!(w.unwrap().contains("must use F16"));
        assert!(fallback("w", 100, T::Q8_K).is_err());
    }

    #[test]
    fn names() {
        assert_eq!(block_number("blk.12.attn_q.weight"), Some(12));
        assert_eq!(block_number("output.weight"), None);
        let mut v = [
            "blk.10.a",
            "blk.2.b",
            "token_embd.weight",
            "output.weight",
            "blk.2.a",
        ];
        v.sort_by(|a, b| tensor_order(a, b));
        assert_eq!(
            v,
            [
                "output.weight",
                "token_embd.weight",
                "blk.2.a",
                "blk.2.b",
                "blk.10.a"
            ]
        );
        assert_eq!(Category::of("blk.0.ffn_up_exps.weight"), Category::FfnUp);
        assert_eq!(Category::of("blk.0.attn_qkv.weight"), Category::AttnQkv);
        let o = TypeOptions::new(ft::MOSTLY_Q4_0);
        let r = |name, ne| TensorRef {
            name,
            ne,
            ty: T::F32,
        };
        assert!(!allows_quantization(
            &o,
            "llama",
            &r("blk.0.attn_norm.weight", [8, 8, 1, 1])
        ));
        assert!(!allows_quantization(
            &o,
            "llama",
            &r("blk.0.ffn_gate_inp.weight", [8, 8, 1, 1])
        ));
        assert!(!allows_quantization(
            &o,
            "llama",
            &r("blk.0.attn_q.bias", [8, 8, 1, 1])
        ));
        assert!(!allows_quantization(
            &o,
            "llama",
            &r("blk.0.attn_q.weight", [8, 1, 1, 1])
        ));
        assert!(allows_quantization(
            &o,
            "llama",
            &r("blk.0.attn_q.weight", [8, 8, 1, 1])
        ));
    }
}

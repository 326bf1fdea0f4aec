//! The operations a graph node can carry, with their parameters.

/// Element-wise unary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    /// x * sigmoid(x)
    Silu,
    /// GELU, tanh approximation (ggml's GELU).
    Gelu,
    /// max(x, 0)
    Relu,
    /// -x
    Neg,
    /// tanh(x) (soft-capping of logits).
    Tanh,
    /// 1 / (1 + exp(-x))
    Sigmoid,
    /// e^x (RWKV decays).
    Exp,
    /// ln(1 + exp(x)), or x above 20 (ggml's softplus).
    Softplus,
}

/// Order of ARGSORT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortOrder {
    /// Smallest value first.
    Asc,
    /// Largest value first (top-k routing).
    Desc,
}

/// Gated linear units: `act(gate) * up`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GluOp {
    /// silu(gate) * up
    Swiglu,
    /// gelu(gate) * up
    Geglu,
}

/// Rotary embedding layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Rotate adjacent pairs (x[2i], x[2i+1]) (llama).
    Normal,
    /// Rotate halves (x[i], x[i + n_dims/2]) (GPT-NeoX, qwen2).
    Neox,
}

/// Parameters of ROPE (ggml_rope_ext).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    /// Leading dims of each head that are rotated.
    pub n_dims: usize,
    /// Pair layout.
    pub mode: RopeMode,
    /// Context length the model was trained with (YaRN).
    pub n_ctx_orig: usize,
    /// Base frequency (theta).
    pub freq_base: f32,
    /// Linear position scale (1 / rope scaling factor).
    pub freq_scale: f32,
    /// YaRN extrapolation mix factor (0 disables YaRN).
    pub ext_factor: f32,
    /// YaRN magnitude scale.
    pub attn_factor: f32,
    /// YaRN low correction dim.
    pub beta_fast: f32,
    /// YaRN high correction dim.
    pub beta_slow: f32,
}

impl RopeParams {
    /// Plain rotary embedding with base `freq_base` over `n_dims` dims.
    pub fn new(n_dims: usize, mode: RopeMode, freq_base: f32) -> RopeParams {
        RopeParams {
            n_dims,
            mode,
            n_ctx_orig: 0,
            freq_base,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }
}

/// What a node computes. Parameters live in the variant.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A leaf: a weight, an input or any tensor whose data is set from outside.
    None,
    /// Copy of src0 with the same shape, made contiguous.
    Dup,
    /// Contiguous copy of src0 with this node's shape (same element count).
    Cont,
    /// Copy src0 into src1 (converting the type); the node is a view of src1.
    Cpy,
    /// src0 + src1, src1 broadcast over src0.
    Add,
    /// src0 * src1, src1 broadcast over src0.
    Mul,
    /// src0 * scale.
    Scale(f32),
    /// Rows of src0 picked by the I32 indices in src1.
    GetRows,
    /// x / sqrt(mean(x^2) + eps) over each row.
    RmsNorm {
        /// Epsilon.
        eps: f32,
    },
    /// (x - mean) / sqrt(var + eps) over each row.
    Norm {
        /// Epsilon.
        eps: f32,
    },
    /// src0^T x src1: result[i, j] = dot(row i of src0, row j of src1).
    MulMat,
    /// Rotary embedding of src0 at the I32 positions in src1 (src2: optional
    /// frequency factors).
    Rope(RopeParams),
    /// softmax(src0 * scale + slope * mask) over rows; src1 is the optional
    /// mask, src2 (with a mask only) the optional attention sinks: F32, one
    /// logit per head (src0's dim 2) that joins every row's denominator.
    SoftMax {
        /// Scale applied before the mask.
        scale: f32,
        /// ALiBi maximum bias (0 = no ALiBi).
        max_bias: f32,
    },
    /// Writes the rows of src1 into src0 at the row indices in src2 (I32 or
    /// I64); the node is a view of src0.
    SetRows,
    /// A view of src0 with its own shape, strides and offset.
    View,
    /// src0 with another shape of the same element count (contiguous input).
    Reshape,
    /// src0 with axes permuted: source axis i becomes axis `axes[i]`.
    Permute([usize; 4]),
    /// src0 with the first two axes swapped.
    Transpose,
    /// Element-wise function.
    Unary(UnaryOp),
    /// Gated unit over the two halves of src0's rows, or over src0 and src1.
    Glu {
        /// Which activation.
        op: GluOp,
        /// When true, the second half is the gate.
        swapped: bool,
    },
    /// Index of the largest value of each row (I32).
    Argmax,
    /// One matrix per slot, picked per token: src0 = experts [k, m, n_expert],
    /// src1 = activations [k, n_used or 1, n_tokens], src2 = I32 expert ids
    /// [n_used, n_tokens]; result [m, n_used, n_tokens].
    MulMatId,
    /// Indices (I32) that sort each row of src0; equal values keep their
    /// index order.
    Argsort(SortOrder),
    /// Sum of each row of src0: [1, ne1, ne2, ne3].
    SumRows,
    /// src0 / src1, src1 broadcast over src0.
    Div,
    /// src0 limited to [min, max].
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// Fused attention: softmax(q k^T * scale + mask) v, with src0 = q,
    /// src1 = k, src2 = v, src3 = optional mask, src4 = optional attention
    /// sinks (with a mask only; F32, one logit per query head that joins the
    /// softmax denominator). Result is [d_v, n_head, n_tokens].
    FlashAttnExt {
        /// Scale of q k^T.
        scale: f32,
        /// ALiBi maximum bias.
        max_bias: f32,
        /// Logit soft-capping (0 = off).
        softcap: f32,
    },
    /// src0 and src1 joined along axis `dim` (every other axis equal).
    Concat {
        /// The axis along which src1 follows src0.
        dim: usize,
    },
    /// Depthwise causal convolution (Mamba): src0 = sx
    /// [d_conv - 1 + n_t, d_inner, n_s] (the previous d_conv - 1 inputs of
    /// each channel, then this ubatch's), src1 = c [d_conv, d_inner];
    /// result [d_inner, n_t, n_s] F32 with
    /// `r[ch, t, s] = sum_k sx[t + k, ch, s] * c[k, ch]`.
    SsmConv,
    /// Selective state-space scan (Mamba-1 and Mamba-2): src0 = states s
    /// [d_state, head_dim, n_head, n_slots], src1 = x [head_dim, n_head,
    /// n_t, n_s], src2 = dt [n_head, n_t, n_s], src3 = A [d_state, n_head]
    /// (Mamba-1) or [1, n_head] (Mamba-2), src4 = B and src5 = C
    /// [d_state, n_group, n_t, n_s], src6 = I32 ids [n_s] (the state slot
    /// each sequence starts from). Result: 1-d F32, y [head_dim, n_head,
    /// n_t, n_s] followed by the final states [d_state, head_dim, n_head,
    /// n_s]. softplus(dt) and exp(dt * A) are computed inside, as ggml does.
    SsmScan,
    /// x / max(sqrt(sum(x^2)), eps) over each row (ggml_l2_norm).
    L2Norm {
        /// Lower bound of the norm.
        eps: f32,
    },
    /// RWKV-6 linear attention (ggml_rwkv_wkv6): src0 = k, src1 = v,
    /// src2 = r [S, H, T], src3 = the bonus u [S, H], src4 = the decay
    /// w [S, H, T], src5 = states [S * S * H, n_s]. Result: 2-d F32
    /// [S * H, T + S * n_s], the outputs of the T tokens then the final
    /// states. See `Graph::rwkv_wkv6`.
    RwkvWkv6,
    /// RWKV-7 generalized delta rule (ggml_rwkv_wkv7): src0 = r, src1 = w,
    /// src2 = k, src3 = v, src4 = a, src5 = b [S, H, T], src6 = states
    /// [S * S * H, n_s]. Result as RWKV_WKV6's. See `Graph::rwkv_wkv7`.
    RwkvWkv7,
    /// Gated delta rule (linear attention of Qwen3.5 and Qwen3-Next):
    /// src0 = q and src1 = k [S, H_k, n_t, n_s], src2 = v [S, H_v, n_t,
    /// n_s] with H_k dividing H_v (V head h reads Q/K head h mod H_k),
    /// src3 = g [1 or S, H_v, n_t, n_s] (log decay, per head or per key
    /// element), src4 = beta [1, H_v, n_t, n_s], src5 = the initial states
    /// [S, S, H_v, n_s]. Result F32 [S * H_v, n_t * n_s + S * n_s]: the
    /// outputs [S, H_v, n_t, n_s], then the final states. See
    /// `Graph::gated_delta_net`.
    GatedDeltaNet,
    /// src0 plus the row of src1 that the I32 ids in src2 pick (ggml's
    /// ADD_ID, the per-expert biases of a mixture of experts): src0 [n,
    /// n_used, n_tokens], src1 [n, n_expert], src2 [n_used, n_tokens];
    /// `r[:, e, t] = src0[:, e, t] + src1[:, src2[e, t]]`.
    AddId,
    /// The clamped SwiGLU of gpt-oss (ggml's GLU op SWIGLU_OAI) over src0 =
    /// gate and src1 = up of one shape: with `g = min(gate, limit)` and
    /// `u = clamp(up, -limit, limit)`, `g * sigmoid(alpha * g) * (u + 1)`.
    SwigluOai {
        /// Slope inside the sigmoid.
        alpha: f32,
        /// Clamp of gate (above) and up (both sides).
        limit: f32,
    },
}

impl Op {
    /// ggml's name of the op.
    pub fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Dup => "DUP",
            Op::Cont => "CONT",
            Op::Cpy => "CPY",
            Op::Add => "ADD",
            Op::Mul => "MUL",
            Op::Scale(_) => "SCALE",
            Op::GetRows => "GET_ROWS",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::Norm { .. } => "NORM",
            Op::MulMat => "MUL_MAT",
            Op::Rope(_) => "ROPE",
            Op::SoftMax { .. } => "SOFT_MAX",
            Op::SetRows => "SET_ROWS",
            Op::View => "VIEW",
            Op::Reshape => "RESHAPE",
            Op::Permute(_) => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::Unary(_) => "UNARY",
            Op::Glu { .. } => "GLU",
            Op::Argmax => "ARGMAX",
            Op::MulMatId => "MUL_MAT_ID",
            Op::Argsort(_) => "ARGSORT",
            Op::SumRows => "SUM_ROWS",
            Op::Div => "DIV",
            Op::Clamp { .. } => "CLAMP",
            Op::FlashAttnExt { .. } => "FLASH_ATTN_EXT",
            Op::Concat { .. } => "CONCAT",
            Op::SsmConv => "SSM_CONV",
            Op::SsmScan => "SSM_SCAN",
            Op::L2Norm { .. } => "L2_NORM",
            Op::RwkvWkv6 => "RWKV_WKV6",
            Op::RwkvWkv7 => "RWKV_WKV7",
            Op::GatedDeltaNet => "GATED_DELTA_NET",
            Op::AddId => "ADD_ID",
            Op::SwigluOai { .. } => "SWIGLU_OAI",
        }
    }

    /// True for ops whose result shares its source's memory and computes
    /// nothing (VIEW, RESHAPE, PERMUTE, TRANSPOSE).
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::View | Op::Reshape | Op::Permute(_) | Op::Transpose
        )
    }

    /// True for ops that write into their first or second source's memory
    /// (CPY into src1, SET_ROWS into src0): their node is a view of that source.
    pub fn writes_into_source(&self) -> bool {
        matches!(self, Op::Cpy | Op::SetRows)
    }

    /// True when the op may write its result over its first source (same
    /// layout, element by element), as ggml allows for in-place reuse.
    pub fn can_inplace(&self) -> bool {
        matches!(
            self,
            Op::Add
                | Op::Mul
                | Op::Scale(_)
                | Op::Unary(_)
                | Op::RmsNorm { .. }
                | Op::Norm { .. }
                | Op::Rope(_)
                | Op::SoftMax { .. }
        )
    }
}

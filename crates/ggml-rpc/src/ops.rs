//! Our ops in ggml's numbering (`enum ggml_op` of ggml 0c1e570, 101 ops)
//! and op_params layouts (as ggml.c's builders fill them), both ways.

use ggml_core::{GluOp, Op, RopeMode, RopeParams, SortOrder, UnaryOp};

use crate::error::{Result, RpcError};
use crate::proto::N_OP_PARAMS;

/// ggml op numbers of the ops we know.
pub mod num {
    /// GGML_OP_NONE
    pub const NONE: u32 = 0;
    /// GGML_OP_DUP
    pub const DUP: u32 = 1;
    /// GGML_OP_ADD
    pub const ADD: u32 = 2;
    /// GGML_OP_ADD_ID
    pub const ADD_ID: u32 = 3;
    /// GGML_OP_MUL
    pub const MUL: u32 = 7;
    /// GGML_OP_DIV
    pub const DIV: u32 = 8;
    /// GGML_OP_SUM_ROWS
    pub const SUM_ROWS: u32 = 15;
    /// GGML_OP_ARGMAX
    pub const ARGMAX: u32 = 18;
    /// GGML_OP_NORM
    pub const NORM: u32 = 24;
    /// GGML_OP_RMS_NORM
    pub const RMS_NORM: u32 = 25;
    /// GGML_OP_CONCAT
    pub const CONCAT: u32 = 22;
    /// GGML_OP_MUL_MAT
    pub const MUL_MAT: u32 = 29;
    /// GGML_OP_MUL_MAT_ID
    pub const MUL_MAT_ID: u32 = 30;
    /// GGML_OP_SCALE
    pub const SCALE: u32 = 32;
    /// GGML_OP_CPY
    pub const CPY: u32 = 34;
    /// GGML_OP_CONT
    pub const CONT: u32 = 35;
    /// GGML_OP_RESHAPE
    pub const RESHAPE: u32 = 36;
    /// GGML_OP_VIEW
    pub const VIEW: u32 = 37;
    /// GGML_OP_PERMUTE
    pub const PERMUTE: u32 = 38;
    /// GGML_OP_TRANSPOSE
    pub const TRANSPOSE: u32 = 39;
    /// GGML_OP_GET_ROWS
    pub const GET_ROWS: u32 = 40;
    /// GGML_OP_SET_ROWS
    pub const SET_ROWS: u32 = 42;
    /// GGML_OP_SOFT_MAX
    pub const SOFT_MAX: u32 = 46;
    /// GGML_OP_ROPE
    pub const ROPE: u32 = 48;
    /// GGML_OP_CLAMP
    pub const CLAMP: u32 = 50;
    /// GGML_OP_ARGSORT
    pub const ARGSORT: u32 = 69;
    /// GGML_OP_FLASH_ATTN_EXT
    pub const FLASH_ATTN_EXT: u32 = 74;
    /// GGML_OP_SSM_CONV
    pub const SSM_CONV: u32 = 76;
    /// GGML_OP_SSM_SCAN
    pub const SSM_SCAN: u32 = 77;
    /// GGML_OP_L2_NORM
    pub const L2_NORM: u32 = 28;
    /// GGML_OP_RWKV_WKV6
    pub const RWKV_WKV6: u32 = 82;
    /// GGML_OP_RWKV_WKV7
    pub const RWKV_WKV7: u32 = 84;
    /// GGML_OP_GATED_DELTA_NET
    pub const GATED_DELTA_NET: u32 = 86;
    /// GGML_OP_UNARY
    pub const UNARY: u32 = 91;
    /// GGML_OP_GLU
    pub const GLU: u32 = 100;
    /// GGML_OP_COUNT
    pub const COUNT: u32 = 101;
}

// ggml_unary_op numbers.
const UNARY_NEG: i32 = 2;
const UNARY_TANH: i32 = 4;
const UNARY_RELU: i32 = 6;
const UNARY_SIGMOID: i32 = 7;
const UNARY_GELU: i32 = 8;
const UNARY_EXP: i32 = 13;
const UNARY_SILU: i32 = 10;
const UNARY_SOFTPLUS: i32 = 15;
// ggml_glu_op numbers.
const GLU_GEGLU: i32 = 1;
const GLU_SWIGLU: i32 = 2;
const GLU_SWIGLU_OAI: i32 = 3;
// ggml_sort_order numbers.
const SORT_ASC: i32 = 0;
const SORT_DESC: i32 = 1;
// GGML_ROPE_TYPE_NEOX.
const ROPE_NEOX: i32 = 2;

type Params = [i32; N_OP_PARAMS];

fn f(v: f32) -> i32 {
    v.to_bits() as i32
}

fn pf(p: &Params, i: usize) -> f32 {
    f32::from_bits(p[i] as u32)
}

/// The ggml op number and op_params of `op`. `view_offset` is a VIEW's
/// byte offset in its source (ggml stores it as a size_t in op_params).
pub fn encode(op: &Op, view_offset: usize) -> (u32, Params) {
    let mut p = [0i32; N_OP_PARAMS];
    let n = match op {
        Op::None => num::NONE,
        Op::Dup => num::DUP,
        Op::Cont => num::CONT,
        Op::Cpy => num::CPY,
        Op::Add => num::ADD,
        Op::Mul => num::MUL,
        Op::Scale(s) => {
            // ggml_scale stores { s, b } with b = 0.
            p[0] = f(*s);
            num::SCALE
        }
        Op::GetRows => num::GET_ROWS,
        Op::RmsNorm { eps } => {
            p[0] = f(*eps);
            num::RMS_NORM
        }
        Op::Norm { eps } => {
            p[0] = f(*eps);
            num::NORM
        }
        Op::MulMat => num::MUL_MAT,
        Op::Rope(r) => {
            p[1] = r.n_dims as i32;
            p[2] = match r.mode {
                RopeMode::Normal => 0,
                RopeMode::Neox => ROPE_NEOX,
            };
            p[4] = r.n_ctx_orig as i32;
            p[5] = f(r.freq_base);
            p[6] = f(r.freq_scale);
            p[7] = f(r.ext_factor);
            p[8] = f(r.attn_factor);
            p[9] = f(r.beta_fast);
            p[10] = f(r.beta_slow);
            num::ROPE
        }
        Op::SoftMax { scale, max_bias } => {
            p[0] = f(*scale);
            p[1] = f(*max_bias);
            num::SOFT_MAX
        }
        Op::SetRows => num::SET_ROWS,
        Op::View => {
            let o = view_offset as u64;
            p[0] = o as u32 as i32;
            p[1] = (o >> 32) as u32 as i32;
            num::VIEW
        }
        Op::Reshape => num::RESHAPE,
        Op::Permute(axes) => {
            for (d, &a) in p.iter_mut().zip(axes) {
                *d = a as i32;
            }
            num::PERMUTE
        }
        Op::Transpose => num::TRANSPOSE,
        Op::Unary(u) => {
            p[0] = match u {
                UnaryOp::Silu => UNARY_SILU,
                UnaryOp::Gelu => UNARY_GELU,
                UnaryOp::Relu => UNARY_RELU,
                UnaryOp::Neg => UNARY_NEG,
                UnaryOp::Tanh => UNARY_TANH,
                UnaryOp::Sigmoid => UNARY_SIGMOID,
                UnaryOp::Exp => UNARY_EXP,
                UnaryOp::Softplus => UNARY_SOFTPLUS,
            };
            num::UNARY
        }
        Op::Glu { op, swapped } => {
            p[0] = match op {
                GluOp::Swiglu => GLU_SWIGLU,
                GluOp::Geglu => GLU_GEGLU,
            };
            p[1] = *swapped as i32;
            num::GLU
        }
        Op::Argmax => num::ARGMAX,
        Op::FlashAttnExt {
            scale,
            max_bias,
            softcap,
        } => {
            p[0] = f(*scale);
            p[1] = f(*max_bias);
            p[2] = f(*softcap);
            num::FLASH_ATTN_EXT
        }
        Op::MulMatId => num::MUL_MAT_ID,
        Op::Argsort(order) => {
            p[0] = match order {
                SortOrder::Asc => SORT_ASC,
                SortOrder::Desc => SORT_DESC,
            };
            num::ARGSORT
        }
        Op::SumRows => num::SUM_ROWS,
        Op::Div => num::DIV,
        Op::Clamp { min, max } => {
            p[0] = f(*min);
            p[1] = f(*max);
            num::CLAMP
        }
        Op::Concat { dim } => {
            p[0] = *dim as i32;
            num::CONCAT
        }
        Op::SsmConv => num::SSM_CONV,
        Op::AddId => num::ADD_ID,
        Op::SwigluOai { alpha, limit } => {
            // ggml_swiglu_oai: { op, swapped, alpha, limit }.
            p[0] = GLU_SWIGLU_OAI;
            p[2] = f(*alpha);
            p[3] = f(*limit);
            num::GLU
        }
        Op::SsmScan => {
            // ggml_ssm_scan's K: the states kept, the final ones only.
            p[0] = 1;
            num::SSM_SCAN
        }
        Op::L2Norm { eps } => {
            p[0] = f(*eps);
            num::L2_NORM
        }
        Op::RwkvWkv6 => num::RWKV_WKV6,
        Op::RwkvWkv7 => num::RWKV_WKV7,
        Op::GatedDeltaNet => {
            // ggml_gated_delta_net's K: the states kept, the final ones only.
            p[0] = 1;
            num::GATED_DELTA_NET
        }
    };
    (n, p)
}

/// What a ggml op number with its params means to us; the server builds
/// the node with ggml-core's builders from this, so shapes are checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoded {
    /// A leaf.
    Leaf,
    /// A computed or view op; VIEW carries its byte offset.
    Op(Op, u64),
}

fn unsupported<T>(what: String) -> Result<T> {
    Err(RpcError::Unsupported(what))
}

/// Decodes a ggml op and its params; an op or parameter we cannot run is
/// an error naming it.
pub fn decode(op: u32, p: &Params) -> Result<Decoded> {
    let plain = |o: Op| Ok(Decoded::Op(o, 0));
    match op {
        num::NONE => Ok(Decoded::Leaf),
        num::DUP => plain(Op::Dup),
        num::CONT => plain(Op::Cont),
        num::CPY => plain(Op::Cpy),
        num::ADD => plain(Op::Add),
        num::MUL => plain(Op::Mul),
        num::SCALE => {
            if pf(p, 1) != 0.0 {
                return unsupported(format!("SCALE with bias {} is not supported", pf(p, 1)));
            }
            plain(Op::Scale(pf(p, 0)))
        }
        num::GET_ROWS => plain(Op::GetRows),
        num::RMS_NORM => plain(Op::RmsNorm { eps: pf(p, 0) }),
        num::NORM => plain(Op::Norm { eps: pf(p, 0) }),
        num::MUL_MAT => plain(Op::MulMat),
        num::ROPE => decode_rope(p),
        num::SOFT_MAX => plain(Op::SoftMax {
            scale: pf(p, 0),
            max_bias: pf(p, 1),
        }),
        num::SET_ROWS => plain(Op::SetRows),
        num::VIEW => Ok(Decoded::Op(
            Op::View,
            (p[0] as u32 as u64) | ((p[1] as u32 as u64) << 32),
        )),
        num::RESHAPE => plain(Op::Reshape),
        num::PERMUTE => {
            let mut axes = [0usize; 4];
            for (a, &v) in axes.iter_mut().zip(p.iter()) {
                if !(0..4).contains(&v) {
                    return Err(RpcError::Malformed(format!("PERMUTE axis {v}")));
                }
                *a = v as usize;
            }
            plain(Op::Permute(axes))
        }
        num::TRANSPOSE => plain(Op::Transpose),
        num::UNARY => plain(Op::Unary(match p[0] {
            UNARY_SILU => UnaryOp::Silu,
            UNARY_GELU => UnaryOp::Gelu,
            UNARY_RELU => UnaryOp::Relu,
            UNARY_NEG => UnaryOp::Neg,
            UNARY_TANH => UnaryOp::Tanh,
            UNARY_SIGMOID => UnaryOp::Sigmoid,
            UNARY_EXP => UnaryOp::Exp,
            UNARY_SOFTPLUS => UnaryOp::Softplus,
            u => return unsupported(format!("UNARY op {u} is not supported")),
        })),
        num::ADD_ID => plain(Op::AddId),
        num::GLU if p[0] == GLU_SWIGLU_OAI => {
            if p[1] != 0 {
                return unsupported("GLU SWIGLU_OAI with swapped halves is not supported".into());
            }
            plain(Op::SwigluOai {
                alpha: pf(p, 2),
                limit: pf(p, 3),
            })
        }
        num::GLU => {
            let op = match p[0] {
                GLU_SWIGLU => GluOp::Swiglu,
                GLU_GEGLU => GluOp::Geglu,
                g => return unsupported(format!("GLU op {g} is not supported")),
            };
            plain(Op::Glu {
                op,
                swapped: p[1] != 0,
            })
        }
        num::ARGMAX => plain(Op::Argmax),
        num::FLASH_ATTN_EXT => plain(Op::FlashAttnExt {
            scale: pf(p, 0),
            max_bias: pf(p, 1),
            softcap: pf(p, 2),
        }),
        num::MUL_MAT_ID => plain(Op::MulMatId),
        num::ARGSORT => plain(Op::Argsort(match p[0] {
            SORT_ASC => SortOrder::Asc,
            SORT_DESC => SortOrder::Desc,
            o => return Err(RpcError::Malformed(format!("ARGSORT order {o}"))),
        })),
        num::SUM_ROWS => plain(Op::SumRows),
        num::DIV => plain(Op::Div),
        num::CLAMP => plain(Op::Clamp {
            min: pf(p, 0),
            max: pf(p, 1),
        }),
        num::CONCAT => match usize::try_from(p[0]) {
            Ok(dim) if dim < 4 => plain(Op::Concat { dim }),
            _ => Err(RpcError::Malformed(format!("CONCAT axis {}", p[0]))),
        },
        num::SSM_CONV => plain(Op::SsmConv),
        num::SSM_SCAN => match p[0] {
            1 => plain(Op::SsmScan),
            k => unsupported(format!(
                "SSM_SCAN with {k} state snapshots is not supported (only the final states)"
            )),
        },
        num::L2_NORM => plain(Op::L2Norm { eps: pf(p, 0) }),
        num::RWKV_WKV6 => plain(Op::RwkvWkv6),
        num::RWKV_WKV7 => plain(Op::RwkvWkv7),
        num::GATED_DELTA_NET => match p[0] {
            1 => plain(Op::GatedDeltaNet),
            k => unsupported(format!(
                "GATED_DELTA_NET with {k} state snapshots is not supported (only the final states)"
            )),
        },
        o if o < num::COUNT => unsupported(format!("ggml op {o} is not supported by this server")),
        o => Err(RpcError::Malformed(format!(
            "op number {o} is out of range"
        ))),
    }
}

fn decode_rope(p: &Params) -> Result<Decoded> {
    let mode = match p[2] {
        0 => RopeMode::Normal,
        ROPE_NEOX => RopeMode::Neox,
        m => return unsupported(format!("ROPE mode {m} is not supported")),
    };
    if p[11..16].iter().any(|&v| v != 0) {
        return unsupported("ROPE with sections or offsets is not supported".into());
    }
    if p[1] < 0 || p[4] < 0 {
        return Err(RpcError::Malformed(format!(
            "ROPE n_dims {} n_ctx_orig {}",
            p[1], p[4]
        )));
    }
    Ok(Decoded::Op(
        Op::Rope(RopeParams {
            n_dims: p[1] as usize,
            mode,
            n_ctx_orig: p[4] as usize,
            freq_base: pf(p, 5),
            freq_scale: pf(p, 6),
            ext_factor: pf(p, 7),
            attn_factor: pf(p, 8),
            beta_fast: pf(p, 9),
            beta_slow: pf(p, 10),
        }),
        0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_round_trips() {
        let ops = [
            Op::Dup,
            Op::Cont,
            Op::Cpy,
            Op::Add,
            Op::Mul,
            Op::Scale(0.125),
            Op::GetRows,
            Op::RmsNorm { eps: 1e-5 },
            Op::Norm { eps: 1e-6 },
            Op::MulMat,
            Op::Rope(RopeParams::new(64, RopeMode::Neox, 10000.0)),
            Op::SoftMax {
                scale: 0.5,
                max_bias: 0.0,
            },
            Op::SetRows,
            Op::Reshape,
            Op::Permute([0, 2, 1, 3]),
            Op::Transpose,
            Op::Unary(UnaryOp::Gelu),
            Op::Glu {
                op: GluOp::Swiglu,
                swapped: true,
            },
            Op::Argmax,
            Op::Unary(UnaryOp::Tanh),
            Op::Unary(UnaryOp::Sigmoid),
            Op::MulMatId,
            Op::Argsort(SortOrder::Desc),
            Op::Argsort(SortOrder::Asc),
            Op::SumRows,
            Op::Div,
            Op::Clamp {
                min: -1.0,
                max: 2.5,
            },
            Op::FlashAttnExt {
                scale: 0.1,
                max_bias: 0.0,
                softcap: 30.0,
            },
            Op::Concat { dim: 2 },
            Op::SsmConv,
            Op::SsmScan,
            Op::Unary(UnaryOp::Exp),
            Op::L2Norm { eps: 1e-12 },
            Op::RwkvWkv6,
            Op::RwkvWkv7,
            Op::GatedDeltaNet,
            Op::Unary(UnaryOp::Softplus),
            Op::AddId,
            Op::SwigluOai {
                alpha: 1.702,
                limit: 7.0,
            },
        ];
        for op in ops {
            let (n, p) = encode(&op, 0);
            assert_eq!(decode(n, &p).unwrap(), Decoded::Op(op.clone(), 0), "{op:?}");
        }
        let (n, p) = encode(&Op::View, 0x1_0000_0040);
        assert_eq!(decode(n, &p).unwrap(), Decoded::Op(Op::View, 0x1_0000_0040));
        assert_eq!(decode(0, &[0; 16]).unwrap(), Decoded::Leaf);
    }

    #[test]
    fn unknown_ops_and_params_are_errors() {
        // GGML_OP_ADD1.
        assert!(decode(4, &[0; 16])
            .unwrap_err()
            .to_string()
            .contains("op 4"));
        let mut g = [0; 16];
        (g[0], g[1]) = (GLU_SWIGLU_OAI, 1);
        assert!(decode(num::GLU, &g).is_err(), "swapped SWIGLU_OAI");
        assert!(decode(500, &[0; 16]).is_err());
        let mut p = [0; 16];
        p[0] = 17;
        assert!(decode(num::UNARY, &p).is_err());
        p[0] = 5;
        assert!(decode(num::PERMUTE, &p).is_err());
        assert!(decode(num::CONCAT, &p).is_err());
        p[0] = 2;
        let e = decode(num::SSM_SCAN, &p).unwrap_err().to_string();
        assert!(e.contains("SSM_SCAN") && e.contains("snapshots"), "{e}");
    }
}

//! The list of shader variants: which GLSL source each SPIR-V module is
//! compiled from and with which defines. The generator (`build-spirv`) and
//! the staleness test both read it; the Vulkan backend only sees the names.

use std::fs;
use std::io;
use std::path::Path;

/// Element types the matrix products and row gathers read as their "a"
/// operand: (name in variant names, define selecting the layout).
pub const A_TYPES: &[(&str, &str)] = &[
    ("f32", "A_F32"),
    ("f16", "A_F16"),
    ("q4_0", "A_Q4_0"),
    ("q4_1", "A_Q4_1"),
    ("q5_0", "A_Q5_0"),
    ("q5_1", "A_Q5_1"),
    ("q8_0", "A_Q8_0"),
    ("q2_k", "A_Q2_K"),
    ("q3_k", "A_Q3_K"),
    ("q4_k", "A_Q4_K"),
    ("q5_k", "A_Q5_K"),
    ("q6_k", "A_Q6_K"),
    ("iq4_nl", "A_IQ4_NL"),
    ("iq4_xs", "A_IQ4_XS"),
    ("mxfp4", "A_MXFP4"),
    ("bf16", "A_BF16"),
];

/// Types MUL_MAT's f32 activations are rounded to before the products
/// (`round_act_*`): the dot-product partners of the weight types.
pub const ROUNDINGS: &[&str] = &["q8_0", "q8_1", "q8_k", "bf16", "f16"];

/// Weight types of the fused products with integer dot products
/// (`_idot` variants, for devices with VK_KHR_shader_integer_dot_product).
pub const INT_DOT_TYPES: &[&str] = &["q4_0", "q8_0"];

/// The rounding of b inside the fused matrix x vector products for weights
/// `a` (a name of [`A_TYPES`]): the dot-product partner of the type, as
/// the separate pre-pass uses it, or "none" (f32 weights).
pub fn fused_rounding(a: &str) -> &'static str {
    match a {
        "q4_0" | "q5_0" | "q8_0" | "iq4_nl" | "mxfp4" => "q8_0",
        "q4_1" | "q5_1" => "q8_1",
        "q2_k" | "q3_k" | "q4_k" | "q5_k" | "q6_k" | "iq4_xs" => "q8_k",
        "f16" => "f16",
        "bf16" => "bf16",
        _ => "none",
    }
}

/// Float element types of the element-wise ops: (name, GLSL type).
pub const FLOAT_TYPES: &[(&str, &str)] = &[("f32", "float"), ("f16", "float16_t")];

/// Flags passed to glslc for every variant (part of the source hash).
pub const GLSLC_FLAGS: &[&str] = &["-fshader-stage=compute", "--target-env=vulkan1.2", "-O"];

/// One SPIR-V module: its name, its GLSL source file (in `glsl/`) and the
/// defines it is compiled with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Variant {
    /// Name of the module (`mul_mat_vec_q4_0_f32_sg`), also its file stem.
    pub name: String,
    /// Source file name in `glsl/`.
    pub source: &'static str,
    /// `KEY=VALUE` (or `KEY`) defines.
    pub defines: Vec<String>,
}

fn v(name: String, source: &'static str, defines: &[String]) -> Variant {
    Variant {
        name,
        source,
        defines: defines.to_vec(),
    }
}

fn ty(prefix: &str, name: &str) -> String {
    format!("{prefix}={name}")
}

/// Every variant, sorted by name.
pub fn all() -> Vec<Variant> {
    let mut out = Vec::new();
    copies(&mut out);
    elementwise(&mut out);
    products(&mut out);
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Copies and conversions (float, BF16, quantizing, dequantizing, I32) and
/// the row scatters into the same types.
fn copies(out: &mut Vec<Variant>) {
    for &(an, at) in FLOAT_TYPES {
        for &(dn, dt) in FLOAT_TYPES {
            let mut defs = vec![ty("A_TYPE", at), ty("D_TYPE", dt)];
            if an == dn {
                defs.push("SAME_TYPE".into());
            }
            out.push(v(format!("copy_{an}_{dn}"), "copy.comp", &defs));
            out.push(v(
                format!("set_rows_{an}_{dn}"),
                "set_rows.comp",
                &[ty("A_TYPE", at), ty("D_TYPE", dt)],
            ));
        }
    }
    for &(an, at) in FLOAT_TYPES {
        let bf = [ty("A_TYPE", at), ty("D_TYPE", "uint16_t"), "D_BF16".into()];
        out.push(v(format!("copy_{an}_bf16"), "copy.comp", &bf));
        out.push(v(format!("set_rows_{an}_bf16"), "set_rows.comp", &bf));
    }
    for &(an, at) in FLOAT_TYPES {
        for q in ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"] {
            let d = format!("D_{}", q.to_uppercase());
            for (mode, name) in [("MODE_CPY", "copy"), ("MODE_SET_ROWS", "set_rows")] {
                out.push(v(
                    format!("{name}_{an}_{q}"),
                    "quantize.comp",
                    &[ty("A_TYPE", at), d.clone(), mode.into()],
                ));
            }
        }
    }
    out.push(v(
        "copy_i32_i32".into(),
        "copy.comp",
        &[ty("A_TYPE", "int"), ty("D_TYPE", "int"), "SAME_TYPE".into()],
    ));
    for &(an, ad) in A_TYPES
        .iter()
        .filter(|(n, _)| !matches!(*n, "f32" | "f16" | "bf16"))
    {
        for &(dn, dt) in FLOAT_TYPES {
            out.push(v(
                format!("copy_{an}_{dn}"),
                "dequant_copy.comp",
                &[ad.to_string(), ty("D_TYPE", dt)],
            ));
        }
    }
}

/// The element-wise and row ops: binary, unary, gated units, norms, rope,
/// softmax, the routing rows, fused attention.
fn elementwise(out: &mut Vec<Variant>) {
    for op in ["add", "mul", "div"] {
        for &(an, at) in FLOAT_TYPES {
            for &(bn, bt) in FLOAT_TYPES {
                out.push(v(
                    format!("{op}_{an}_{bn}"),
                    "binary.comp",
                    &[
                        ty("A_TYPE", at),
                        ty("B_TYPE", bt),
                        ty("D_TYPE", at),
                        format!("OP_{}", op.to_uppercase()),
                    ],
                ));
            }
        }
    }
    for &(an, at) in FLOAT_TYPES {
        let td = [ty("A_TYPE", at), ty("D_TYPE", at)];
        for op in [
            "silu", "gelu", "relu", "neg", "tanh", "sigmoid", "exp", "softplus", "scale", "clamp",
        ] {
            let mut defs = td.to_vec();
            defs.push(format!("OP_{}", op.to_uppercase()));
            out.push(v(format!("{op}_{an}"), "unary.comp", &defs));
        }
        for op in ["swiglu", "geglu"] {
            let mut defs = td.to_vec();
            defs.push(format!("OP_{}", op.to_uppercase()));
            out.push(v(format!("{op}_{an}"), "glu.comp", &defs));
        }
        for op in ["rms_norm", "norm"] {
            let mut defs = td.to_vec();
            defs.push(format!("OP_{}", op.to_uppercase()));
            out.push(v(format!("{op}_{an}"), "norm.comp", &defs));
        }
        out.push(v(format!("l2_norm_{an}"), "l2_norm.comp", &td));
        for mode in ["normal", "neox"] {
            let mut defs = td.to_vec();
            defs.push(format!("MODE_{}", mode.to_uppercase()));
            out.push(v(format!("rope_{mode}_{an}"), "rope.comp", &defs));
        }
        for &(mn, mt) in FLOAT_TYPES {
            out.push(v(
                format!("soft_max_{an}_{mn}"),
                "soft_max.comp",
                &[ty("A_TYPE", at), ty("B_TYPE", mt), ty("D_TYPE", "float")],
            ));
        }
    }
    out.push(v(
        "rms_norm_mul_f32".into(),
        "norm.comp",
        &[
            ty("A_TYPE", "float"),
            ty("D_TYPE", "float"),
            "OP_RMS_NORM_MUL".to_string(),
        ],
    ));
    out.push(v("argmax_f32".into(), "argmax.comp", &[]));
    out.push(v("argsort_f32".into(), "argsort.comp", &[]));
    out.push(v("sum_rows_f32".into(), "sum_rows.comp", &[]));
    // CONCAT copies elements bit for bit: one variant per element width.
    out.push(v(
        "concat_b32".into(),
        "concat.comp",
        &[ty("E_TYPE", "uint")],
    ));
    out.push(v(
        "concat_b16".into(),
        "concat.comp",
        &[ty("E_TYPE", "uint16_t")],
    ));
    out.push(v("ssm_conv_f32".into(), "ssm_conv.comp", &[]));
    out.push(v("add_id_f32".into(), "add_id.comp", &[]));
    out.push(v(
        "swiglu_oai_f32".into(),
        "glu.comp",
        &[
            ty("A_TYPE", "float"),
            ty("D_TYPE", "float"),
            "OP_SWIGLU_OAI".to_string(),
        ],
    ));
    out.push(v("ssm_scan_f32".into(), "ssm_scan.comp", &[]));
    out.push(v("wkv6_f32".into(), "wkv6.comp", &[]));
    out.push(v("wkv7_f32".into(), "wkv7.comp", &[]));
    out.push(v("gated_delta_net_f32".into(), "gated_delta_net.comp", &[]));
    for &(kn, kt) in FLOAT_TYPES {
        for &(mn, mt) in FLOAT_TYPES {
            out.push(v(
                format!("flash_attn_{kn}_{mn}"),
                "flash_attn.comp",
                &[ty("KV_TYPE", kt), ty("M_TYPE", mt)],
            ));
        }
    }
}

/// Row gathers, the matrix products (matrix x matrix, matrix x vector, per
/// expert) and the activation roundings before them.
fn products(out: &mut Vec<Variant>) {
    out.push(v("get_rows_i32".into(), "get_rows.comp", &["D_INT".into()]));
    for &(an, ad) in A_TYPES {
        let a = [ad.to_string()];
        out.push(v(format!("get_rows_{an}"), "get_rows.comp", &a));
        out.push(v(format!("mul_mat_{an}_f32"), "mul_mat.comp", &a));
        out.push(v(format!("mul_mat_vec_{an}_f32"), "mul_mat_vec.comp", &a));
        out.push(v(
            format!("mul_mat_vec_{an}_f32_sg"),
            "mul_mat_vec.comp",
            &[ad.to_string(), "SUBGROUP".into()],
        ));
        let id = "MUL_MAT_ID".to_string();
        out.push(v(
            format!("mul_mat_vec_id_{an}_f32"),
            "mul_mat_vec.comp",
            &[ad.to_string(), id.clone()],
        ));
        out.push(v(
            format!("mul_mat_vec_id_{an}_f32_sg"),
            "mul_mat_vec.comp",
            &[ad.to_string(), "SUBGROUP".into(), id],
        ));
    }
    for &(an, ad) in A_TYPES {
        let mut defs = vec![ad.to_string()];
        let r = fused_rounding(an);
        // Variants: plain, with integer dot products (`_idot`), each also
        // with subgroup reductions (`_sg`).
        if r != "none" {
            defs.push(format!("R_{}", r.to_uppercase()));
        }
        let mut kinds = vec![("", defs.clone())];
        if INT_DOT_TYPES.contains(&an) {
            let mut d = defs.clone();
            d.push("INT_DOT".into());
            kinds.push(("_idot", d));
        }
        for (suffix, d) in kinds {
            out.push(v(
                format!("mul_mat_vec_fused_{an}_{r}{suffix}"),
                "mul_mat_vec_fused.comp",
                &d,
            ));
            let mut sg = d.clone();
            sg.push("SUBGROUP".into());
            out.push(v(
                format!("mul_mat_vec_fused_{an}_{r}{suffix}_sg"),
                "mul_mat_vec_fused.comp",
                &sg,
            ));
        }
    }
    for r in ROUNDINGS {
        let def = format!("R_{}", r.to_uppercase());
        out.push(v(format!("round_act_{r}"), "round_act.comp", &[def]));
    }
    let f16b = ["A_F16".to_string(), "B_F16".to_string()];
    out.push(v("mul_mat_f16_f16".into(), "mul_mat.comp", &f16b));
    out.push(v("mul_mat_vec_f16_f16".into(), "mul_mat_vec.comp", &f16b));
    out.push(v(
        "mul_mat_vec_f16_f16_sg".into(),
        "mul_mat_vec.comp",
        &[f16b[0].clone(), f16b[1].clone(), "SUBGROUP".into()],
    ));
    let f16id = [f16b[0].clone(), f16b[1].clone(), "MUL_MAT_ID".into()];
    out.push(v(
        "mul_mat_vec_id_f16_f16".into(),
        "mul_mat_vec.comp",
        &f16id,
    ));
    let mut f16id_sg = f16id.to_vec();
    f16id_sg.push("SUBGROUP".into());
    out.push(v(
        "mul_mat_vec_id_f16_f16_sg".into(),
        "mul_mat_vec.comp",
        &f16id_sg,
    ));
}

/// 64-bit FNV-1a, enough to notice any change of the inputs.
fn fnv1a(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

/// Hash of everything the SPIR-V is generated from: every file in
/// `glsl_dir` (names and contents), the variant list and the glslc flags.
pub fn source_hash(glsl_dir: &Path) -> io::Result<u64> {
    let mut files: Vec<_> = fs::read_dir(glsl_dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<_>>()?;
    files.sort();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for f in files {
        if !f.is_file() {
            continue;
        }
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
        fnv1a(&mut h, name.unwrap_or_default().as_bytes());
        fnv1a(&mut h, &[0]);
        // Line endings do not change the SPIR-V: hash the text without CRs.
        let text: Vec<u8> = fs::read(&f)?.into_iter().filter(|&b| b != b'\r').collect();
        fnv1a(&mut h, &text);
        fnv1a(&mut h, &[0]);
    }
    for v in all() {
        fnv1a(&mut h, v.name.as_bytes());
        fnv1a(&mut h, v.source.as_bytes());
        for d in &v.defines {
            fnv1a(&mut h, d.as_bytes());
            fnv1a(&mut h, &[1]);
        }
        fnv1a(&mut h, &[0]);
    }
    for f in GLSLC_FLAGS {
        fnv1a(&mut h, f.as_bytes());
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_sorted() {
        let all = all();
        for w in all.windows(2) {
            assert!(w[0].name < w[1].name, "{} / {}", w[0].name, w[1].name);
        }
    }
}

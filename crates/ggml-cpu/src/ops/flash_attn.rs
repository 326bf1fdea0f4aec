//! FLASH_ATTN_EXT with ggml's CPU algorithms: prompts of 64 or more query
//! rows in tiles (see [`super::flash_attn_tiled`]); fewer rows one at a
//! time, in one pass over the keys with an online softmax, where Q is
//! converted to K's type (F16 keys: F16 dot products) and with F16 values
//! the weighted sum is accumulated in F16 as ggml does.

use ggml_core::{Result, Type};
use half::f16;
use half::slice::HalfFloatSliceExt;

use super::{alibi_slope, flash_attn_tiled};
use crate::compute::{par_rows, NodeCtx};
use crate::convert;
use crate::simd;

/// Attention of every query row: result [d_v, n_head, n_q, ne3].
pub(crate) fn flash_attn_ext(
    ctx: &NodeCtx<'_>,
    scale: f32,
    max_bias: f32,
    softcap: f32,
) -> Result<()> {
    let (q, k, v, d) = (&ctx.src[0], &ctx.src[1], &ctx.src[2], &ctx.dst);
    if flash_attn_tiled::applies(q, k, v) {
        return flash_attn_tiled::flash_attn_tiled(ctx, scale, max_bias, softcap);
    }
    let mask = ctx.src.get(3);
    let (dk, dv) = (q.ne[0], v.ne[0]);
    let n_kv = k.ne[1];
    let n_head = q.ne[2];
    let rk2 = q.ne[2] / k.ne[2];
    let rk3 = q.ne[3] / k.ne[3];
    let scale = if softcap != 0.0 {
        scale / softcap
    } else {
        scale
    };
    let kernels = simd::kernels();
    // One task unit per (query token, head, batch): the result's rows.
    par_rows(d.n_rows(), n_kv * (dk + dv), |rows, s| {
        let mut q16 = vec![f16::ZERO; dk];
        let mut acc16 = vec![f16::ZERO; dv];
        let mut vrow = vec![0f32; dv];
        let mut tmp = vec![0f32; dv];
        for r in rows {
            let [ih, iq1, iq3] = d.row_index(r);
            // SAFETY: (iq1, ih, iq3) is a query row (d.ne = [dv, n_head, n_q, ne3]).
            let qrow = unsafe { q.read_row([iq1, ih, iq3], false, &mut s.a)? };
            if k.ty == Type::F16 {
                convert::f32_to_f16(qrow, &mut q16);
            }
            let (ik2, ik3) = (ih / rk2, iq3 / rk3);
            let slope = alibi_slope(max_bias, n_head, ih);
            let mrow = match mask {
                Some(m) => {
                    // SAFETY: m.ne1 >= n_q (checked); batch dims wrap.
                    Some(unsafe {
                        m.read_row([iq1, ih % m.ne[2], iq3 % m.ne[3]], false, &mut s.b)?
                    })
                }
                None => None,
            };
            let (mut sum, mut max) = (0f32, f32::NEG_INFINITY);
            let acc32 = &mut s.c;
            acc32.clear();
            acc32.resize(dv, 0.0);
            acc16.fill(f16::ZERO);
            for ic in 0..n_kv {
                let mv = mrow.map_or(0.0, |m| slope * m[ic]);
                if mv == f32::NEG_INFINITY {
                    continue;
                }
                let kp = k.row_ptr([ic, ik2, ik3]);
                let mut sc = if k.ty == Type::F16 && k.dense_rows() {
                    // SAFETY: a dense key row of dk F16 elements inside the
                    // view (2-byte alignment checked), only read.
                    let kr = unsafe { std::slice::from_raw_parts(kp as *const f16, dk) };
                    (kernels.dot_f16)(kr, &q16)
                } else if k.ty == Type::F16 {
                    s.d.resize(dk, 0.0);
                    // SAFETY: a strided key row inside the view.
                    unsafe { k.read_strided(kp, dk, &mut s.d)? };
                    s.d[..dk]
                        .iter()
                        .zip(&q16)
                        .map(|(&a, b)| a * b.to_f32())
                        .sum()
                } else {
                    s.d.resize(dk, 0.0);
                    // SAFETY: a key row inside the view.
                    unsafe { k.read_strided(kp, dk, &mut s.d)? };
                    (kernels.dot_f32)(&s.d[..dk], qrow)
                };
                sc *= scale;
                if softcap != 0.0 {
                    sc = softcap * sc.tanh();
                }
                sc += mv;
                let (mut ms, mut vs) = (1f32, 1f32);
                let vp = v.row_ptr([ic, ik2, ik3]);
                if sc > max {
                    let old = max;
                    max = sc;
                    ms = (old - max).exp();
                    if v.ty == Type::F16 {
                        // acc = f16(f32(acc) * ms), vectorised through f32.
                        acc16.convert_to_f32_slice(&mut tmp);
                        for t in tmp.iter_mut() {
                            *t *= ms;
                        }
                        acc16.convert_from_f32_slice(&tmp);
                    } else {
                        for a in acc32.iter_mut() {
                            *a *= ms;
                        }
                    }
                } else {
                    vs = (sc - max).exp();
                }
                // SAFETY: a value row of dv elements inside the view.
                unsafe { v.read_strided(vp, dv, &mut vrow)? };
                if v.ty == Type::F16 {
                    // acc = f16(f32(acc) + v * vs), as ggml's f16 accumulation.
                    acc16.convert_to_f32_slice(&mut tmp);
                    for (t, &x) in tmp.iter_mut().zip(&vrow) {
                        *t += x * vs;
                    }
                    acc16.convert_from_f32_slice(&tmp);
                } else {
                    for (a, &x) in acc32.iter_mut().zip(&vrow) {
                        *a += x * vs;
                    }
                }
                sum = sum * ms + vs;
            }
            if v.ty == Type::F16 {
                acc16.convert_to_f32_slice(acc32);
            }
            let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            let acc: &[f32] = acc32;
            // SAFETY: each result row is written by one task.
            unsafe {
                d.write_row([ih, iq1, iq3], &mut s.a, |o| {
                    for (o, &a) in o.iter_mut().zip(acc) {
                        *o = a * inv;
                    }
                })?
            };
        }
        Ok(())
    })
}

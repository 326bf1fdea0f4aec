//! FLASH_ATTN_EXT with ggml's CPU algorithms: prompts of 64 or more query
//! rows in tiles (see [`super::flash_attn_tiled`]); fewer rows one at a
//! time, with ggml's online softmax over the keys, where Q is converted to
//! K's type (F16 keys: F16 dot products) and with F16 values the weighted
//! sum is accumulated in F16 as ggml does. Cache rows are read in place
//! where their elements are adjacent (the KV cache's layout).

use ggml_core::{Result, Type};
use half::f16;
use half::slice::HalfFloatSliceExt;

use super::{alibi_slope, flash_attn_tiled};
use crate::compute::{par_rows, NodeCtx, Scratch};
use crate::convert;
use crate::simd::{self, Kernels};
use crate::tensor::View;

/// FLASH_ATTN_EXT's numbers as both algorithms apply them.
#[derive(Clone, Copy)]
pub(crate) struct Params {
    /// The scale of `q . k`, already divided by `softcap` when there is one
    /// (the scores are `softcap * tanh(scale * q . k)`).
    pub scale: f32,
    /// ALiBi's maximum bias (0: none).
    pub max_bias: f32,
    /// The soft cap of the scores (0: none).
    pub softcap: f32,
}

/// Attention of every query row: result [d_v, n_head, n_q, ne3].
pub(crate) fn flash_attn_ext(
    ctx: &NodeCtx<'_>,
    scale: f32,
    max_bias: f32,
    softcap: f32,
) -> Result<()> {
    let p = Params {
        scale: if softcap != 0.0 {
            scale / softcap
        } else {
            scale
        },
        max_bias,
        softcap,
    };
    let (q, k, v, d) = (&ctx.src[0], &ctx.src[1], &ctx.src[2], &ctx.dst);
    if flash_attn_tiled::applies(q, k, v) {
        return flash_attn_tiled::flash_attn_tiled(ctx, p);
    }
    let mask = ctx.src.get(3);
    let sinks = super::oai::sinks(ctx, 4)?;
    let att = OneQuery {
        q,
        k,
        v,
        mask,
        n_head: q.ne[2],
        rk2: q.ne[2] / k.ne[2],
        rk3: q.ne[3] / k.ne[3],
        p,
        kern: simd::kernels(),
    };
    let (dk, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    // One task unit per (query token, head, batch): the result's rows.
    par_rows(d.n_rows(), n_kv * (dk + dv), |rows, s| {
        let mut w = RowScratch::new(dk, dv);
        for r in rows {
            let [ih, iq1, iq3] = d.row_index(r);
            let (mut sum, max) = att.row([iq1, ih, iq3], s, &mut w)?;
            if let Some(k) = &sinks {
                sum = add_sink(k[ih], max, sum, &mut w.acc32);
            }
            let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            let acc = &w.acc32;
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

/// The denominator `sum` of a row whose largest score is `max` with the
/// head's sink logit `sink` joined, as ggml joins it after the keys: when
/// the sink is larger, the weighted sum `acc` and `sum` are rescaled to it.
pub(crate) fn add_sink(sink: f32, max: f32, sum: f32, acc: &mut [f32]) -> f32 {
    if sink > max {
        let ms = (max - sink).exp();
        acc.iter_mut().for_each(|a| *a *= ms);
        sum * ms + 1.0
    } else {
        sum + (sink - max).exp()
    }
}

/// One query row against every key: the operands and settings shared by
/// the rows.
struct OneQuery<'a> {
    q: &'a View,
    k: &'a View,
    v: &'a View,
    mask: Option<&'a View>,
    n_head: usize,
    /// Query heads (and batches) per key head (batch).
    rk2: usize,
    rk3: usize,
    p: Params,
    kern: &'static Kernels,
}

/// Per-task rows of the one-query path.
struct RowScratch {
    q16: Vec<f16>,
    acc16: Vec<f16>,
    /// The weighted sum of the values (as f32 also for an F16 accumulator).
    acc32: Vec<f32>,
    /// The keys the mask does not hide, in order,
    keys: Vec<u32>,
    /// their mask terms,
    terms: Vec<f32>,
    /// and the mask row and slope they are of (query row, mask head and
    /// batch, slope bits): rows of one query token usually share them.
    listed_for: Option<[usize; 4]>,
    /// Per listed key: its score.
    scores: Vec<f32>,
    /// Per listed key: the factor of the sum so far and of its value.
    ms: Vec<f32>,
    vs: Vec<f32>,
    /// Strided value rows, converted.
    v16: Vec<f16>,
    vrow: Vec<f32>,
}

impl RowScratch {
    fn new(dk: usize, dv: usize) -> RowScratch {
        RowScratch {
            q16: vec![f16::ZERO; dk],
            acc16: vec![f16::ZERO; dv],
            acc32: vec![0.0; dv],
            keys: Vec::new(),
            terms: Vec::new(),
            listed_for: None,
            scores: Vec::new(),
            ms: Vec::new(),
            vs: Vec::new(),
            v16: vec![f16::ZERO; dv],
            vrow: vec![0.0; dv],
        }
    }
}

impl OneQuery<'_> {
    /// Attention of query row `[iq1, ih, iq3]`: leaves the unnormalised
    /// weighted sum of the values in `w.acc32` and returns the softmax
    /// denominator and the largest score (-inf when every key is hidden).
    ///
    /// ggml walks the keys once, keeping the running maximum `M`: a key
    /// with a score above `M` rescales the sum by `exp(M_old - s)` and
    /// adds its value with weight 1, any other key adds its value with
    /// weight `exp(s - M)`. Each key thus takes one exponential whose
    /// argument depends only on the scores up to it, so the scores are
    /// computed first, then the arguments (one scalar pass for the running
    /// maximum), then all exponentials at once, vectorised; the values are
    /// summed last, in key order, as ggml does.
    fn row(
        &self,
        [iq1, ih, iq3]: [usize; 3],
        s: &mut Scratch,
        w: &mut RowScratch,
    ) -> Result<(f32, f32)> {
        let q = self.q;
        // SAFETY: (iq1, ih, iq3) is a query row (the result has a row for it).
        let qrow = unsafe { q.read_row([iq1, ih, iq3], false, &mut s.a)? };
        let slope = alibi_slope(self.p.max_bias, self.n_head, ih);
        let listed_for = match self.mask {
            Some(m) => [iq1, ih % m.ne[2], iq3 % m.ne[3], slope.to_bits() as usize],
            None => [usize::MAX; 4],
        };
        if w.listed_for != Some(listed_for) {
            w.listed_for = None;
            self.list_keys(listed_for, slope, &mut s.b, w)?;
            w.listed_for = Some(listed_for);
        }
        let n = w.keys.len();
        w.scores.resize(n, 0.0);
        w.ms.resize(n, 0.0);
        w.vs.resize(n, 0.0);
        let kh = [ih / self.rk2, iq3 / self.rk3];
        self.scores(qrow, kh, &mut s.d, w)?;
        // Scale, cap and mask the scores (one loop per case, so that the
        // plain one is vectorised), then the exponent of each key.
        let (scale, softcap) = (self.p.scale, self.p.softcap);
        if softcap != 0.0 {
            for (sc, &mv) in w.scores.iter_mut().zip(&w.terms) {
                *sc = softcap * (*sc * scale).tanh() + mv;
            }
        } else {
            for (sc, &mv) in w.scores.iter_mut().zip(&w.terms) {
                *sc = *sc * scale + mv;
            }
        }
        let mut max = f32::NEG_INFINITY;
        for (&x, arg) in w.scores.iter().zip(&mut w.ms) {
            if x > max {
                *arg = max - x;
                max = x;
            } else {
                *arg = x - max;
            }
        }
        (self.kern.exp_sum)(&mut w.ms, 0.0);
        // The exponential rescales the sum when the key raised the maximum
        // (its value then counts once), else it weighs the value (and the
        // sum times 1 is the sum: one addition).
        let mut sum = 0f32;
        let mut max = f32::NEG_INFINITY;
        for ((&sc, ms), vs) in w.scores.iter().zip(&mut w.ms).zip(&mut w.vs) {
            let e = *ms;
            if sc > max {
                max = sc;
                (*ms, *vs) = (e, 1.0);
                sum = sum * e + 1.0;
            } else {
                (*ms, *vs) = (1.0, e);
                sum += e;
            }
        }
        self.values(kh, w)?;
        Ok((sum, max))
    }

    /// Lists in `w` the keys that mask row `[iq1, im2, im3, _]` leaves
    /// visible, with their mask terms (`slope` times the mask); every key
    /// with a zero term without a mask.
    fn list_keys(
        &self,
        [iq1, im2, im3, _]: [usize; 4],
        slope: f32,
        buf: &mut Vec<f32>,
        w: &mut RowScratch,
    ) -> Result<()> {
        let n_kv = self.k.ne[1];
        w.keys.clear();
        w.terms.clear();
        match self.mask {
            Some(m) => {
                // SAFETY: m.ne1 >= n_q (checked); batch dims wrap.
                let mrow = unsafe { m.read_row([iq1, im2, im3], false, buf)? };
                w.keys.resize(n_kv, 0);
                w.terms.resize(n_kv, 0.0);
                // Without a branch per key: each key is written at the end
                // of the list, which grows past it when it is visible.
                let (keys, terms) = (&mut w.keys[..], &mut w.terms[..]);
                let mut n = 0;
                for (ic, &x) in mrow[..n_kv].iter().enumerate() {
                    let mv = slope * x;
                    keys[n] = ic as u32;
                    terms[n] = mv;
                    n += usize::from(mv != f32::NEG_INFINITY);
                }
                w.keys.truncate(n);
                w.terms.truncate(n);
            }
            None => {
                w.keys.extend(0..n_kv as u32);
                w.terms.resize(n_kv, 0.0);
            }
        }
        Ok(())
    }

    /// `w.scores[j]`: the dot product of the query with key `w.keys[j]`.
    fn scores(
        &self,
        qrow: &[f32],
        [ik2, ik3]: [usize; 2],
        krow: &mut Vec<f32>,
        w: &mut RowScratch,
    ) -> Result<()> {
        let k = self.k;
        let dk = k.ne[0];
        let f16_keys = k.ty == Type::F16;
        if f16_keys {
            // F16 keys: the dot products are of F16 values, as ggml's.
            convert::f32_to_f16(qrow, &mut w.q16);
        }
        if f16_keys && k.dense_rows() {
            // SAFETY: the key rows of head (ik2, ik3): n_kv rows at stride
            // nb1, each of dk F16 values, inside the view; only read.
            let rows =
                unsafe { std::slice::from_raw_parts(k.row_ptr([0, ik2, ik3]), head_span(k)) };
            (self.kern.dot_f16_rows)(&w.q16, rows, k.nb[1], &w.keys, &mut w.scores);
            return Ok(());
        }
        for (o, &ic) in w.scores.iter_mut().zip(&w.keys) {
            let kp = k.row_ptr([ic as usize, ik2, ik3]);
            *o = if k.dense_rows() {
                // SAFETY: a dense key row of dk F32 elements inside the view
                // (4-byte alignment checked), only read.
                let kr = unsafe { std::slice::from_raw_parts(kp as *const f32, dk) };
                (self.kern.dot_f32)(kr, qrow)
            } else {
                krow.resize(dk, 0.0);
                // SAFETY: a strided key row inside the view.
                unsafe { k.read_strided(kp, dk, krow)? };
                if f16_keys {
                    krow[..dk]
                        .iter()
                        .zip(&w.q16)
                        .map(|(&a, b)| a * b.to_f32())
                        .sum()
                } else {
                    (self.kern.dot_f32)(&krow[..dk], qrow)
                }
            };
        }
        Ok(())
    }

    /// The online softmax's sum of the listed keys' values with the
    /// factors `w.ms` and `w.vs`, into `w.acc32`. With F16 values the sum
    /// is kept in F16 as ggml keeps it.
    fn values(&self, [ik2, ik3]: [usize; 2], w: &mut RowScratch) -> Result<()> {
        let v = self.v;
        let (dv, f16_values, dense) = (v.ne[0], v.ty == Type::F16, v.dense_rows());
        w.acc16.fill(f16::ZERO);
        w.acc32.fill(0.0);
        if f16_values && dense {
            // SAFETY: the value rows of head (ik2, ik3): n_kv rows at stride
            // nb1, each of dv F16 values, inside the view; only read.
            let rows =
                unsafe { std::slice::from_raw_parts(v.row_ptr([0, ik2, ik3]), head_span(v)) };
            (self.kern.attn_values_f16)(&mut w.acc16, rows, v.nb[1], &w.keys, &w.ms, &w.vs);
            w.acc16.convert_to_f32_slice(&mut w.acc32);
            return Ok(());
        }
        for j in 0..w.keys.len() {
            let (ms, vs) = (w.ms[j], w.vs[j]);
            let vp = v.row_ptr([w.keys[j] as usize, ik2, ik3]);
            if f16_values {
                if ms != 1.0 {
                    (self.kern.scale_f16)(&mut w.acc16, ms);
                }
                // SAFETY: a strided value row of dv elements inside the
                // view; F16 values convert to f32 and back exactly.
                unsafe { v.read_strided(vp, dv, &mut w.vrow)? };
                convert::f32_to_f16(&w.vrow, &mut w.v16);
                (self.kern.mad_f16)(&mut w.acc16, &w.v16, vs);
                continue;
            }
            let vr: &[f32] = if dense {
                // SAFETY: a dense value row of dv F32 elements inside the
                // view (4-byte alignment checked), only read.
                unsafe { std::slice::from_raw_parts(vp as *const f32, dv) }
            } else {
                // SAFETY: a strided value row of dv elements inside the view.
                unsafe { v.read_strided(vp, dv, &mut w.vrow)? };
                &w.vrow
            };
            if ms != 1.0 {
                w.acc32.iter_mut().for_each(|a| *a *= ms);
            }
            for (a, &x) in w.acc32.iter_mut().zip(vr) {
                *a += x * vs;
            }
        }
        if f16_values {
            w.acc16.convert_to_f32_slice(&mut w.acc32);
        }
        Ok(())
    }
}

/// Bytes from the first row of a head to the end of its last row (dense
/// rows): the rows of one head of a cache.
fn head_span(t: &View) -> usize {
    (t.ne[1] - 1) * t.nb[1] + t.row_bytes()
}

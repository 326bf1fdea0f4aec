//! ROPE: rotary position embedding, normal and NeoX layouts, with YaRN
//! scaling and frequency factors, computed as ggml does (theta advanced by
//! repeated multiplication, sin/cos of f32 angles).

use ggml_core::{Result, RopeMode, RopeParams};

use super::read_index;
use super::rope_tables::{table, Settings};
use crate::compute::{par_rows, NodeCtx};

fn yarn_corr_dim(n_dims: usize, n_ctx_orig: usize, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// YaRN correction range [start, end] in dims (ggml_rope_yarn_corr_dims).
pub(crate) fn yarn_corr_dims(p: &RopeParams) -> [f32; 2] {
    let start = yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_fast, p.freq_base).floor();
    let end = yarn_corr_dim(p.n_dims, p.n_ctx_orig, p.beta_slow, p.freq_base).ceil();
    [start.max(0.0), end.min(p.n_dims as f32 - 1.0)]
}

fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let y = ((i0 / 2) as f32 - low) / (high - low).max(0.001);
    1.0 - y.clamp(0.0, 1.0)
}

/// What [`rope_cache`] derives from the parameters alone, once per node
/// instead of once per position.
pub(crate) struct Angles {
    /// YaRN's correction range in dims.
    corr: [f32; 2],
    /// The factor from one pair's angle to the next one's.
    theta_scale: f32,
    /// The magnitude of an extrapolation-mixed pair (YaRN only).
    yarn_mscale: f32,
}

impl Angles {
    pub(crate) fn new(p: &RopeParams) -> Angles {
        Angles {
            corr: yarn_corr_dims(p),
            theta_scale: p.freq_base.powf(-2.0 / p.n_dims as f32),
            yarn_mscale: p.attn_factor * (1.0 + 0.1 * (1.0 / p.freq_scale).ln()),
        }
    }
}

/// Fills `cache` with (cos, sin) pairs for the first `n_dims` dims at
/// position `pos`.
pub(crate) fn rope_cache(
    p: &RopeParams,
    a: &Angles,
    pos: f32,
    freq_factors: Option<&[f32]>,
    cache: &mut Vec<f32>,
) {
    cache.clear();
    let mut theta = pos;
    let mut i0 = 0;
    while i0 < p.n_dims {
        let ff = freq_factors.map_or(1.0, |f| f[i0 / 2]);
        let theta_extrap = theta / ff;
        let theta_interp = p.freq_scale * theta_extrap;
        let mut th = theta_interp;
        let mut mscale = p.attn_factor;
        if p.ext_factor != 0.0 {
            let ramp_mix = yarn_ramp(a.corr[0], a.corr[1], i0) * p.ext_factor;
            th = theta_interp * (1.0 - ramp_mix) + theta_extrap * ramp_mix;
            mscale = a.yarn_mscale;
        }
        cache.push(th.cos() * mscale);
        cache.push(th.sin() * mscale);
        theta *= a.theta_scale;
        i0 += 2;
    }
}

/// Rotates one row with a cache from [`rope_cache`].
pub(crate) fn rope_row(p: &RopeParams, cache: &[f32], x: &[f32], out: &mut [f32]) {
    let nd = p.n_dims;
    match p.mode {
        RopeMode::Normal => {
            for i0 in (0..nd).step_by(2) {
                let (c, s) = (cache[i0], cache[i0 + 1]);
                let (x0, x1) = (x[i0], x[i0 + 1]);
                out[i0] = x0 * c - x1 * s;
                out[i0 + 1] = x0 * s + x1 * c;
            }
        }
        RopeMode::Neox => {
            let half = nd / 2;
            for i0 in (0..nd).step_by(2) {
                let ic = i0 / 2;
                let (c, s) = (cache[i0], cache[i0 + 1]);
                let (x0, x1) = (x[ic], x[ic + half]);
                out[ic] = x0 * c - x1 * s;
                out[ic + half] = x0 * s + x1 * c;
            }
        }
    }
    out[nd..].copy_from_slice(&x[nd..]);
}

/// ROPE over [head_dim, n_head, n_tokens, ne3] at the I32 positions of src1.
pub(crate) fn rope(ctx: &NodeCtx<'_>, p: &RopeParams) -> Result<()> {
    let (a, pos, d) = (&ctx.src[0], &ctx.src[1], &ctx.dst);
    let alias = ctx.alias[0];
    let ff: Option<Vec<f32>> = match ctx.src.get(2) {
        Some(f) => {
            let mut buf = Vec::new();
            // SAFETY: row 0 of the factors exists and is only read.
            Some(unsafe { f.read_row([0, 0, 0], true, &mut buf)? }.to_vec())
        }
        None => None,
    };
    let angles = Angles::new(p);
    let settings = Settings::of(p, ff.as_deref());
    par_rows(d.n_rows(), d.ne[0] * 4, |rows, s| {
        let mut cached: Option<usize> = None;
        for r in rows {
            let i = d.row_index(r);
            if cached != Some(i[1]) {
                // SAFETY: pos.ne0 >= a.ne2 (checked), so element i2 exists.
                let pv = unsafe { read_index(pos, [i[1], 0, 0, 0]) };
                table(&settings, p, &angles, pv as f32, ff.as_deref(), &mut s.d);
                cached = Some(i[1]);
            }
            // SAFETY: same shape as the result; aliased rows are copied.
            let x = unsafe { a.read_row(i, alias, &mut s.a)? };
            let cache = &s.d;
            // SAFETY: each result row is written by one task.
            unsafe { d.write_row(i, &mut s.c, |out| rope_row(p, cache, x, out))? };
        }
        Ok(())
    })
}

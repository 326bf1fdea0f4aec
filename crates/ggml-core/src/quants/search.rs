//! The scale search procedures of ggml's reference K-quant quantizers.
//!
//! They are deterministic but sensitive to every rounding step, so each one
//! evaluates its f32 expressions in the same order as ggml (left to right,
//! integer levels converted to f32 where ggml's C promotes them) and uses
//! [`nearest_int`] (round half to even) wherever ggml does.

use super::fp::{nearest_int, signed_absmax};

/// Groups whose largest magnitude is below this are quantized to zero.
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// The scales that `quant` finds for the `G` groups of `S` weights of a
/// super-block (it writes each group's levels into its part of `l`), with
/// the scale of largest magnitude (the first of equal ones) and that
/// magnitude.
pub(crate) fn group_scales<T, const G: usize, const S: usize>(
    x: &[f32],
    l: &mut [T],
    quant: impl Fn(&[f32], &mut [T]) -> f32,
) -> ([f32; G], f32, f32) {
    let mut scales = [0f32; G];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for j in 0..G {
        let s = quant(&x[S * j..S * j + S], &mut l[S * j..S * j + S]);
        scales[j] = s;
        if s.abs() > amax {
            amax = s.abs();
            max_scale = s;
        }
    }
    (scales, max_scale, amax)
}

/// The signed largest value of a group (as `signed_absmax`), or `None`,
/// with the group's levels in `out` zeroed, when its largest magnitude is
/// below [`GROUP_MAX_EPS`].
fn group_max(x: &[f32], out: &mut [i8]) -> Option<f32> {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        out[..x.len()].fill(0);
        return None;
    }
    Some(max)
}

/// Symmetric quantization of `x` to levels `-nmax..nmax` with a scale search
/// weighted by `x^2` (ggml's `make_qx_quants`, rmse_type 1, no importance
/// weights). Writes `l + nmax` into `out` and returns the scale.
pub(crate) fn make_qx_quants(nmax: i32, x: &[f32], out: &mut [i8]) -> f32 {
    make_qx_quants_weighted(nmax, x, None, out)
}

/// [`make_qx_quants`] with importance weights `qw` (one per value) in place
/// of `x^2` when given.
pub(crate) fn make_qx_quants_weighted(
    nmax: i32,
    x: &[f32],
    qw: Option<&[f32]>,
    out: &mut [i8],
) -> f32 {
    let weight = |i: usize, v: f32| qw.map_or(v * v, |w| w[i]);
    let Some(max) = group_max(x, out) else {
        return 0.0;
    };
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);

    let mut iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (i, (o, &v)) in out.iter_mut().zip(x).enumerate() {
        let l = quant(iscale, v);
        *o = (l + nmax) as i8;
        let w = weight(i, v);
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for (i, &v) in x.iter().enumerate() {
            let l = quant(iscale, v);
            let w = weight(i, v);
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = (nmax + quant(iscale, v)) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Asymmetric quantization of `x` to levels `0..=nmax` with a minimum,
/// weighted by `weights`, searching `nstep + 1` scales from
/// `(nmax + rmin) / range` in steps of `rdelta` (ggml's `make_qkx3_quants`
/// with squared errors). Writes the levels into `out`; returns the scale
/// and the negated minimum.
pub(crate) fn make_qkx3_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    out: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max <= min {
        out[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_mad = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_mad += weights[i] * (diff * diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 256];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = l as u8;
            let (w, lf) = (weights[i], l as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut mad = 0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(aux[i]) + this_min - x[i];
                mad += weights[i] * (diff * diff);
            }
            if mad < best_mad {
                out[..n].copy_from_slice(&aux[..n]);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Non-negative quantization of `x` (a super-block's group scales or
/// mins) to levels `0..=nmax` with weights `qw`, a scale search and
/// single-level refinements (ggml's `make_qp_quants`). Writes the levels
/// (as ggml's `uint8_t`) into `out`; returns the scale.
pub(crate) fn make_qp_quants(nmax: i32, x: &[f32], out: &mut [u8], qw: &[f32]) -> f32 {
    let n = x.len();
    let mut max = 0f32;
    for &v in x {
        max = if max > v { max } else { v };
    }
    if max < GROUP_MAX_EPS {
        out[..n].fill(0);
        return 0.0;
    }
    let mut iscale = nmax as f32 / max;
    for i in 0..n {
        out[i] = nearest_int(iscale * x[i]) as u8;
    }
    let scale = 1.0 / iscale;
    let mut best_mse = 0f32;
    for i in 0..n {
        let diff = x[i] - scale * f32::from(out[i]);
        best_mse += qw[i] * diff * diff;
    }
    for is in -4..=4 {
        if is == 0 {
            continue;
        }
        let iscale_is = (0.1 * is as f32 + nmax as f32) / max;
        let scale_is = 1.0 / iscale_is;
        let mut mse = 0f32;
        for i in 0..n {
            let l = nearest_int(iscale_is * x[i]).min(nmax);
            let diff = x[i] - scale_is * l as f32;
            mse += qw[i] * diff * diff;
        }
        if mse < best_mse {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for i in 0..n {
        let l = nearest_int(iscale * x[i]).min(nmax);
        out[i] = l as u8;
        let lf = l as f32;
        sumlx += qw[i] * x[i] * lf;
        suml2 += qw[i] * lf * lf;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for i in 0..n {
            let w = qw[i];
            let li = f32::from(out[i]);
            let mut slx = sumlx - w * x[i] * li;
            let mut sl2 = suml2 - w * li * li;
            if slx > 0.0 && sl2 > 0.0 {
                let new_l = nearest_int(x[i] * sl2 / slx).min(nmax);
                if new_l != i32::from(out[i]) {
                    let nl = new_l as f32;
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if slx * slx * suml2 > sumlx * sumlx * sl2 {
                        out[i] = new_l as u8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Symmetric 3-bit quantization with iterative refinement of single levels
/// (ggml's `make_q3_quants` with `do_rmse`). Writes `l + nmax` into `out`.
pub(crate) fn make_q3_quants(nmax: i32, x: &[f32], out: &mut [i8]) -> f32 {
    let Some(max) = group_max(x, out) else {
        return 0.0;
    };
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (o, &v) in out.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (o, &v) in out.iter_mut().zip(x) {
            let w = v * v;
            let lo = f32::from(*o);
            let mut slx = sumlx - w * v * lo;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * lo * lo;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(*o) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *o = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for o in out[..x.len()].iter_mut() {
        *o += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of the asymmetric scale/min search.
pub(crate) struct Qkx2 {
    /// Highest level.
    pub nmax: i32,
    /// First relative step of the scale search.
    pub rmin: f32,
    /// Step of the scale search.
    pub rdelta: f32,
    /// Number of steps (the search tries `nstep + 1` scales).
    pub nstep: i32,
    /// Weigh absolute rather than squared errors.
    pub use_mad: bool,
}

/// Asymmetric quantization `x ~ scale * l - min` with `l` in `0..=nmax`,
/// searching the scale and refitting scale and min by weighted least squares
/// (ggml's `make_qkx2_quants`). Writes levels into `out`, returns
/// `(scale, min)` with `min >= 0` meaning the subtracted offset.
pub(crate) fn make_qkx2_quants(p: &Qkx2, x: &[f32], weights: &[f32], out: &mut [u8]) -> (f32, f32) {
    let n = x.len();
    let nmax = p.nmax;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        out[..n].fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let err = |d: f32| if p.use_mad { d.abs() } else { d * d };
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
        out[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            aux[i] = l as u8;
            let w = weights[i];
            let lf = l as f32;
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(aux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                out[..n].copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Index of the level of a sorted table closest to `x` (ties and values
/// outside the table as ggml's `best_index_int8`): the reference the IQ4
/// quantizer's branch-free search is checked against.
#[cfg(test)]
pub(crate) fn best_index_int8(values: &[i8], x: f32) -> usize {
    let n = values.len();
    if x <= f32::from(values[0]) {
        return 0;
    }
    if x >= f32::from(values[n - 1]) {
        return n - 1;
    }
    let (mut ml, mut mu) = (0, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < f32::from(values[mav]) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - f32::from(values[mu - 1]) < f32::from(values[mu]) - x {
        mu - 1
    } else {
        mu
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quants::tables::KVALUES_IQ4NL;

    #[test]
    fn best_index_picks_nearest() {
        for i in -1300..1300 {
            let x = i as f32 * 0.1;
            let got = best_index_int8(&KVALUES_IQ4NL, x);
            let dist = |k: usize| (f32::from(KVALUES_IQ4NL[k]) - x).abs();
            for k in 0..16 {
                assert!(dist(got) <= dist(k), "x = {x}: {got} vs {k}");
            }
        }
    }

    #[test]
    fn zero_groups() {
        let mut l = [5i8; 16];
        assert_eq!(make_qx_quants(32, &[0.0; 16], &mut l), 0.0);
        assert_eq!(l, [0; 16]);
        let mut l = [5i8; 16];
        assert_eq!(make_q3_quants(4, &[0.0; 16], &mut l), 0.0);
        assert_eq!(l, [0; 16]);
    }
}

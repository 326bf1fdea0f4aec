//! The state update of SSM_SCAN: one token of one state row, eight state
//! elements a step (sixteen for Mamba-2's usual d_state of 128 and more).

use std::arch::x86_64::*;

use super::act::exp8;
use super::hsum;
use crate::simd::{scalar, Kernels};

/// Installs the SSM kernels.
pub(super) fn install(k: &mut Kernels) {
    k.ssm_step = ssm_step;
    k.ssm_step_decay = ssm_step_decay;
}

#[target_feature(enable = "avx2,fma,f16c")]
fn ssm_step_avx2(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32 {
    let n = s.len().min(b.len()).min(c.len());
    let (vda, vxdt) = (_mm256_set1_ps(da), _mm256_set1_ps(x_dt));
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let (sp, bp, cp) = (s.as_mut_ptr(), b.as_ptr(), c.as_ptr());
    let mut k = 0;
    while k + 16 <= n {
        // SAFETY: elements k..k+16 lie inside all three slices, which are
        // at least `n` long.
        unsafe {
            let s0 = _mm256_fmadd_ps(
                _mm256_loadu_ps(sp.add(k)),
                vda,
                _mm256_mul_ps(_mm256_loadu_ps(bp.add(k)), vxdt),
            );
            let s1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(sp.add(k + 8)),
                vda,
                _mm256_mul_ps(_mm256_loadu_ps(bp.add(k + 8)), vxdt),
            );
            _mm256_storeu_ps(sp.add(k), s0);
            _mm256_storeu_ps(sp.add(k + 8), s1);
            acc0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(cp.add(k)), acc0);
            acc1 = _mm256_fmadd_ps(s1, _mm256_loadu_ps(cp.add(k + 8)), acc1);
        }
        k += 16;
    }
    while k + 8 <= n {
        // SAFETY: elements k..k+8 lie inside all three slices.
        unsafe {
            let s0 = _mm256_fmadd_ps(
                _mm256_loadu_ps(sp.add(k)),
                vda,
                _mm256_mul_ps(_mm256_loadu_ps(bp.add(k)), vxdt),
            );
            _mm256_storeu_ps(sp.add(k), s0);
            acc0 = _mm256_fmadd_ps(s0, _mm256_loadu_ps(cp.add(k)), acc0);
        }
        k += 8;
    }
    let mut sum = hsum(_mm256_add_ps(acc0, acc1));
    for j in k..n {
        let v = s[j] * da + b[j] * x_dt;
        s[j] = v;
        sum += v * c[j];
    }
    sum
}

fn ssm_step(s: &mut [f32], b: &[f32], c: &[f32], da: f32, x_dt: f32) -> f32 {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { ssm_step_avx2(s, b, c, da, x_dt) }
}

#[target_feature(enable = "avx2,fma,f16c")]
fn ssm_step_decay_avx2(s: &mut [f32], a: &[f32], b: &[f32], c: &[f32], dt: f32, x_dt: f32) -> f32 {
    let n = s.len().min(a.len()).min(b.len()).min(c.len());
    let (vdt, vxdt) = (_mm256_set1_ps(dt), _mm256_set1_ps(x_dt));
    let mut acc = _mm256_setzero_ps();
    let (sp, ap, bp, cp) = (s.as_mut_ptr(), a.as_ptr(), b.as_ptr(), c.as_ptr());
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: elements k..k+8 lie inside all four slices.
        unsafe {
            // The same operations as the scalar kernel (exp8 has
            // exp_f32's bits), the update fused.
            let da = exp8(_mm256_mul_ps(vdt, _mm256_loadu_ps(ap.add(k))));
            let v = _mm256_fmadd_ps(
                _mm256_loadu_ps(sp.add(k)),
                da,
                _mm256_mul_ps(_mm256_loadu_ps(bp.add(k)), vxdt),
            );
            _mm256_storeu_ps(sp.add(k), v);
            acc = _mm256_fmadd_ps(v, _mm256_loadu_ps(cp.add(k)), acc);
        }
        k += 8;
    }
    let mut sum = hsum(acc);
    for j in k..n {
        let v = s[j] * scalar::exp_f32(dt * a[j]) + b[j] * x_dt;
        s[j] = v;
        sum += v * c[j];
    }
    sum
}

fn ssm_step_decay(s: &mut [f32], a: &[f32], b: &[f32], c: &[f32], dt: f32, x_dt: f32) -> f32 {
    // SAFETY: installed only on CPUs with AVX2, FMA and F16C.
    unsafe { ssm_step_decay_avx2(s, a, b, c, dt, x_dt) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vector_steps_agree_with_the_scalar_ones() {
        if !std::is_x86_feature_detected!("avx2") || !std::is_x86_feature_detected!("fma") {
            return;
        }
        for n in [1usize, 7, 8, 16, 23, 64, 128, 131] {
            let v = |k: usize, m: f32| ((k * 37 % 11) as f32 - 5.0) * m;
            let (a, b, c): (Vec<f32>, Vec<f32>, Vec<f32>) = (
                (0..n).map(|k| -0.1 - (k % 5) as f32 * 0.3).collect(),
                (0..n).map(|k| v(k, 0.1)).collect(),
                (0..n).map(|k| v(k + 3, 0.07)).collect(),
            );
            let s0: Vec<f32> = (0..n).map(|k| v(k + 1, 0.2)).collect();
            let (mut s1, mut s2) = (s0.clone(), s0.clone());
            let y1 = ssm_step(&mut s1, &b, &c, 0.8, 0.3);
            let y2 = scalar::ssm_step(&mut s2, &b, &c, 0.8, 0.3);
            assert!(
                (y1 - y2).abs() <= 1e-5 * (1.0 + y2.abs()),
                "n {n}: {y1} {y2}"
            );
            for (p, q) in s1.iter().zip(&s2) {
                assert!((p - q).abs() <= 1e-6 * (1.0 + q.abs()), "n {n}");
            }
            let (mut s1, mut s2) = (s0.clone(), s0.clone());
            let y1 = ssm_step_decay(&mut s1, &a, &b, &c, 0.7, 0.3);
            let y2 = scalar::ssm_step_decay(&mut s2, &a, &b, &c, 0.7, 0.3);
            assert!(
                (y1 - y2).abs() <= 1e-5 * (1.0 + y2.abs()),
                "n {n}: {y1} {y2}"
            );
            for (p, q) in s1.iter().zip(&s2) {
                assert!((p - q).abs() <= 1e-6 * (1.0 + q.abs()), "n {n}");
            }
        }
    }
}

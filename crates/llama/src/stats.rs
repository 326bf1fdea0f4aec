//! Summary statistics of repeated measurements, as the benchmark tools
//! report them.

/// Mean and sample standard deviation (0 for one sample, both 0 for none).
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n.max(1.0);
    let var = if xs.len() > 1 {
        xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (m, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_deviation() {
        assert_eq!(mean_std(&[1.0, 2.0, 3.0]), (2.0, 1.0));
        assert_eq!(mean_std(&[4.0]), (4.0, 0.0));
        assert_eq!(mean_std(&[]), (0.0, 0.0));
    }
}

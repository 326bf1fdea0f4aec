//! `--show-statistics`: per weight, statistics of its mean squared
//! activations (sum, extremes, mean, deviation, share of active columns,
//! entropy, share of columns more than one deviation above the mean, and
//! the cosine similarity of its sums with the same weight of the layer
//! before), then their averages per layer weighted by the number of
//! values, in llama.cpp's table and with its f32 arithmetic.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::file::Entry;

/// The statistics of one weight.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorStats {
    /// Weight name.
    pub tensor: String,
    /// Its raw sums (for the cosine similarity).
    sums: Vec<f32>,
    /// Sum of the mean squared activations.
    pub total: f32,
    /// Their mean.
    pub mean: f32,
    /// Largest.
    pub max: f32,
    /// Smallest.
    pub min: f32,
    /// Number of values (matrices with data times columns).
    pub elements: usize,
    /// Standard deviation.
    pub stddev: f32,
    /// Share of values above 1e-5.
    pub active: f32,
    /// Entropy (bits) of the values as a distribution.
    pub entropy: f32,
    /// Share of values more than one deviation above the mean.
    pub zd: f32,
    /// Cosine similarity with the same weight of the previous layer.
    pub cossim: f32,
}

/// The statistics of one entry, or why there are none (no activations).
pub fn tensor_stats(name: &str, e: &Entry) -> Result<TensorStats, String> {
    if e.counts.is_empty() {
        return Err(format!("there are no activations for tensor {name}"));
    }
    if e.sums.len() % e.counts.len() != 0 {
        return Err(format!(
            "activation size mismatch for tensor {name} ({} vs {})",
            e.counts.len(),
            e.sums.len()
        ));
    }
    let per = e.sums.len() / e.counts.len();
    let mut act: Vec<f32> = Vec::with_capacity(e.sums.len());
    for (i, &c) in e.counts.iter().enumerate() {
        if c == 0 {
            continue;
        }
        act.extend(e.sums[i * per..(i + 1) * per].iter().map(|&v| v / c as f32));
    }
    if act.is_empty() {
        return Err(format!("all counts are zero for tensor {name}"));
    }
    let n = act.len() as f32;
    let total = act.iter().fold(0f32, |a, &v| a + v);
    let max = act
        .iter()
        .copied()
        .fold(act[0], |a, v| if v > a { v } else { a });
    let min = act
        .iter()
        .copied()
        .fold(act[0], |a, v| if v < a { v } else { a });
    let mean = total / n;
    let sq = act.iter().fold(0f32, |a, &v| a + v * v);
    let var = sq / n - mean * mean;
    let stddev = var.max(0.0).sqrt();
    let inactive = act.iter().filter(|v| v.abs() <= 1e-5).count();
    let active = 1.0 - inactive as f32 / n;
    let mut entropy = 0f32;
    if total > 0.0 {
        for &a in &act {
            let p = a / total;
            if p > 0.0 {
                entropy -= p * p.log2();
            }
        }
    }
    let mut z = 0usize;
    if stddev > 0.0 {
        z = act.iter().filter(|&&a| (a - mean) / stddev > 1.0).count();
    }
    Ok(TensorStats {
        tensor: name.to_string(),
        sums: e.sums.clone(),
        total,
        mean,
        max,
        min,
        elements: act.len(),
        stddev,
        active,
        entropy,
        zd: z as f32 / act.len() as f32,
        cossim: 0.0,
    })
}

/// `name` with the layer number of its first `blk.N.` lowered by one.
fn previous_layer(name: &str) -> Option<(usize, String)> {
    let mut from = 0;
    while let Some(i) = name[from..].find("blk.") {
        let s = from + i + 4;
        let digits = name[s..].bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && name[s + digits..].starts_with('.') {
            let blk: usize = name[s..s + digits].parse().ok()?;
            let prev = format!("{}{}{}", &name[..s], blk as i64 - 1, &name[s + digits..]);
            return Some((blk, prev));
        }
        from = s;
    }
    None
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |acc, (x, y)| acc + x * y)
}

/// Sets each weight's cosine similarity with the previous layer's.
fn add_cossim(stats: &mut [TensorStats]) {
    let by_name: BTreeMap<String, usize> = stats
        .iter()
        .enumerate()
        .map(|(i, s)| (s.tensor.clone(), i))
        .collect();
    let cs: Vec<f32> = stats
        .iter()
        .map(|s| {
            let Some((_, prev)) = previous_layer(&s.tensor) else {
                return 0.0;
            };
            let Some(&p) = by_name.get(&prev) else {
                return 0.0;
            };
            let (a, b) = (&s.sums, &stats[p].sums);
            dot(a, b) / (dot(a, a).sqrt() * dot(b, b).sqrt())
        })
        .collect();
    for (s, c) in stats.iter_mut().zip(cs) {
        s.cossim = c;
    }
}

/// The layer ("-" outside layers) and short name of a weight, as
/// llama-imatrix prints them.
fn layer_and_name(full: &str) -> (String, String) {
    let parts: Vec<&str> = full.split('.').collect();
    let layer = parts
        .iter()
        .position(|&p| p == "blk")
        .and_then(|i| parts.get(i + 1))
        .map_or("-".to_string(), |s| s.to_string());
    let name = parts
        .iter()
        .position(|&p| p == "weight")
        .filter(|&i| i > 0)
        .map_or(full.to_string(), |i| parts[i - 1].to_string());
    (layer, name)
}

/// The statistics tables of `entries` (titled with `source`), or an error
/// when no entry has activations. Entries without data are reported in
/// `skipped`.
pub fn statistics_table(
    source: &str,
    entries: &BTreeMap<String, Entry>,
    skipped: &mut Vec<String>,
) -> Result<String, String> {
    let mut stats = Vec::new();
    for (name, e) in entries {
        match tensor_stats(name, e) {
            Ok(s) => stats.push(s),
            Err(why) => skipped.push(why),
        }
    }
    if stats.is_empty() {
        return Err(format!("cannot compute statistics for {source}"));
    }
    add_cossim(&mut stats);
    stats.sort_by(|a, b| {
        let (na, nb) = (layer_and_name(&a.tensor).1, layer_and_name(&b.tensor).1);
        na.cmp(&nb).then(b.total.total_cmp(&a.total))
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nComputing statistics for {source} ({} tensors)\n",
        stats.len()
    );
    let _ = writeln!(
        out,
        " Layer\t       Tensor\t          Σ(Act²)\t  Min\t            Max\t           μ\t   σ\t % Active\tN\t   Entropy\tE (norm)\tZD\t  CosSim"
    );
    let _ = writeln!(out, "{}", "=".repeat(169));
    // Per layer: sums weighted by the number of values.
    let mut layers: BTreeMap<i64, (f32, f32, f32, usize)> = BTreeMap::new();
    for s in &stats {
        let (layer, name) = layer_and_name(&s.tensor);
        let blk: i64 = layer.parse().unwrap_or(-1);
        let e_norm = if s.elements > 0 {
            100.0 * (s.entropy / (s.elements as f32).log2())
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "{layer:>5}\t{name:<20}\t{:10.2}\t{:8.4}\t{:11.4}\t{:6.2}\t{:6.2}\t{:8.2}%\t{:6}\t{:10.4}\t{:6.2}%\t{:10.2}%\t{:8.4}",
            s.total,
            s.min,
            s.max,
            s.mean,
            s.stddev,
            s.active * 100.0,
            s.elements,
            s.entropy,
            e_norm,
            100.0 * s.zd,
            s.cossim
        );
        let n = s.elements as f32;
        let l = layers.entry(blk).or_insert((0.0, 0.0, 0.0, 0));
        l.0 += n * s.total;
        l.1 += n * s.zd;
        l.2 += n * s.cossim;
        l.3 += s.elements;
    }
    let n_layers = layers.keys().filter(|&&k| k >= 0).count();
    let _ = writeln!(
        out,
        "\nComputing weighted average statistics per layer ({n_layers} layers)\n"
    );
    let _ = writeln!(out, "  Layer\t     μΣ(Act²)\t      μZD\tμCosSim");
    let _ = writeln!(out, "{}", "=".repeat(48));
    for (&blk, &(bias, zd, cs, n)) in &layers {
        if n == 0 || blk < 0 {
            continue;
        }
        let n = n as f32;
        let _ = writeln!(
            out,
            "{blk:5}\t{:14.2}\t{:10.4}%\t{:6.4}",
            bias / n,
            100.0 * zd / n,
            cs / n
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_a_small_matrix() {
        let e = Entry {
            sums: vec![2.0, 4.0, 0.0, 8.0],
            counts: vec![2],
        };
        let s = tensor_stats("blk.1.ffn_up.weight", &e).unwrap();
        assert_eq!((s.total, s.min, s.max, s.elements), (7.0, 0.0, 4.0, 4));
        assert_eq!(s.active, 0.75);
        assert_eq!(s.zd, 0.25);
        let no = Entry {
            sums: vec![1.0],
            counts: vec![0],
        };
        assert!(tensor_stats("x", &no)
            .unwrap_err()
            .contains("all counts are zero"));
        assert_eq!(
            previous_layer("blk.10.ffn_up.weight").unwrap(),
            (10, "blk.9.ffn_up.weight".to_string())
        );
        assert_eq!(previous_layer("output.weight"), None);
        assert_eq!(
            layer_and_name("blk.3.attn_q.weight"),
            ("3".to_string(), "attn_q".to_string())
        );
        assert_eq!(
            layer_and_name("output.weight"),
            ("-".to_string(), "output".to_string())
        );
        let mut m = BTreeMap::new();
        m.insert("blk.0.ffn_up.weight".to_string(), e.clone());
        m.insert("blk.1.ffn_up.weight".to_string(), e);
        let t = statistics_table("m.gguf", &m, &mut Vec::new()).unwrap();
        assert!(t.contains("(2 tensors)"), "{t}");
        // Identical sums: similarity 1 for layer 1.
        assert!(t.contains("  1.0000\n"), "{t}");
    }
}

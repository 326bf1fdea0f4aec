//! Importance matrices as llama-imatrix writes them: the GGUF format of
//! this llama.cpp (tensors `NAME.in_sum2` and `NAME.counts`, keys
//! `imatrix.datasets`, `imatrix.chunk_count`, `imatrix.chunk_size`) and the
//! older `.dat` format, both read into per-weight mean squared activations.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{LlamaError, Result};
use crate::imatrix::ImatrixFile;

/// An importance matrix: for each weight, one value per input column (per
/// expert for 3-D weights), ready to weight the quantization error.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imatrix {
    /// Values by weight name.
    pub entries: BTreeMap<String, Vec<f32>>,
    /// The texts it was computed on.
    pub datasets: Vec<String>,
    /// Chunks of text it was computed on (0 when the file does not say).
    pub chunk_count: i64,
}

impl Imatrix {
    /// Reads a GGUF imatrix, or an old `.dat` one when the file is not GGUF.
    pub fn load(path: &Path) -> Result<Imatrix> {
        let bytes = std::fs::read(path).map_err(|source| LlamaError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let what = |why: String| {
            LlamaError::InvalidParam(format!(
                "failed to load imatrix from '{}': {why}",
                path.display()
            ))
        };
        if bytes.starts_with(b"GGUF") {
            Imatrix::from_gguf(&bytes).map_err(what)
        } else {
            Imatrix::from_legacy(&bytes).map_err(what)
        }
    }

    /// The GGUF format: sums of squared activations and the token counts
    /// of each expert, divided here (a zero count gives 1).
    pub fn from_gguf(bytes: &[u8]) -> std::result::Result<Imatrix, String> {
        let f = ImatrixFile::from_gguf(bytes)?;
        if !f.has_metadata {
            return Err("missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)".into());
        }
        let mut entries = BTreeMap::new();
        for (name, e) in f.entries {
            let ne0 = e.sums.len() / e.counts.len();
            let mut v = vec![0f32; e.sums.len()];
            for (j, &c) in e.counts.iter().enumerate() {
                let c = c as f32;
                for i in 0..ne0 {
                    v[j * ne0 + i] = if c > 0.0 {
                        e.sums[j * ne0 + i] / c
                    } else {
                        1.0
                    };
                }
            }
            entries.insert(name, v);
        }
        Ok(Imatrix {
            entries,
            datasets: f.datasets,
            chunk_count: i64::from(f.chunk_count),
        })
    }

    /// The old `.dat` format: entries of (name, calls, values already
    /// averaged per call and summed over calls), then optionally the chunk
    /// count and the dataset name.
    pub fn from_legacy(bytes: &[u8]) -> std::result::Result<Imatrix, String> {
        let f = ImatrixFile::from_legacy(bytes)?;
        let entries = f
            .entries
            .into_iter()
            .map(|(name, e)| {
                let ncall = e.counts.first().copied().unwrap_or(0);
                let v = if ncall > 0 {
                    e.sums.iter().map(|s| s / ncall as f32).collect()
                } else {
                    e.sums
                };
                (name, v)
            })
            .collect();
        Ok(Imatrix {
            entries,
            datasets: f.datasets,
            chunk_count: i64::from(f.chunk_count as i32),
        })
    }

    /// Keeps the entries whose names contain one of `include` (when given)
    /// and drops those containing one of `exclude`.
    pub fn filter(&mut self, include: &[String], exclude: &[String]) {
        self.entries
            .retain(|name, _| !exclude.iter().any(|x| name.contains(x.as_str())));
        if !include.is_empty() {
            self.entries
                .retain(|name, _| include.iter().any(|x| name.contains(x.as_str())));
        }
    }

    /// Fails on a value that is not finite.
    pub fn check_finite(&self) -> Result<()> {
        for (name, v) in &self.entries {
            if let Some(x) = v.iter().find(|x| !x.is_finite()) {
                return Err(LlamaError::InvalidParam(format!(
                    "imatrix contains non-finite value {x} (entry {name})"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gguf::GgmlType;

    fn legacy(entries: &[(&str, i32, &[f32])], tail: Option<(i32, &str)>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend((entries.len() as i32).to_le_bytes());
        for (name, ncall, vals) in entries {
            b.extend((name.len() as i32).to_le_bytes());
            b.extend(name.as_bytes());
            b.extend(ncall.to_le_bytes());
            b.extend((vals.len() as i32).to_le_bytes());
            for v in *vals {
                b.extend(v.to_le_bytes());
            }
        }
        if let Some((n, ds)) = tail {
            b.extend(n.to_le_bytes());
            b.extend((ds.len() as i32).to_le_bytes());
            b.extend(ds.as_bytes());
        }
        b
    }

    #[test]
    fn legacy_values_are_divided_by_calls() {
        let b = legacy(
            &[("a.weight", 4, &[8.0, 2.0]), ("b.weight", 0, &[3.0])],
            Some((10, "wiki.txt")),
        );
        let m = Imatrix::from_legacy(&b).unwrap();
        assert_eq!(m.entries["a.weight"], [2.0, 0.5]);
        assert_eq!(m.entries["b.weight"], [3.0]);
        assert_eq!(
            (m.chunk_count, m.datasets.clone()),
            (10, vec!["wiki.txt".to_string()])
        );
        // Truncated files are errors naming what is missing.
        let e = Imatrix::from_legacy(&b[..b.len() - 30]).unwrap_err();
        assert!(e.contains("failed reading"), "{e}");
        assert!(Imatrix::from_legacy(&[0, 0, 0, 0]).is_err());
        assert!(Imatrix::from_legacy(&[]).is_err());
    }

    #[test]
    fn gguf_sums_are_divided_by_counts() {
        let mut md = gguf::Metadata::new();
        let mut ds = gguf::StringArray::new();
        ds.push("t.txt");
        md.set("imatrix.datasets", ds);
        md.set("imatrix.chunk_count", 3u32);
        md.set("imatrix.chunk_size", 512u32);
        let sums = gguf::TensorInfo::new("w.weight.in_sum2", GgmlType::F32, &[2, 2]).unwrap();
        let counts = gguf::TensorInfo::new("w.weight.counts", GgmlType::F32, &[1, 2]).unwrap();
        let mut w = gguf::GgufWriter::new(Vec::new(), &md, &[sums, counts]).unwrap();
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        w.write_tensor("w.weight.in_sum2", &f(&[4.0, 6.0, 1.0, 1.0]))
            .unwrap();
        w.write_tensor("w.weight.counts", &f(&[2.0, 0.0])).unwrap();
        let bytes = w.finish().unwrap();
        let m = Imatrix::from_gguf(&bytes).unwrap();
        assert_eq!(m.entries["w.weight"], [2.0, 3.0, 1.0, 1.0]);
        assert_eq!(m.chunk_count, 3);
        assert_eq!(m.datasets, ["t.txt"]);
    }

    #[test]
    fn filters() {
        let mut m = Imatrix::default();
        for n in [
            "blk.0.attn_q.weight",
            "blk.0.ffn_up.weight",
            "output.weight",
        ] {
            m.entries.insert(n.into(), vec![1.0]);
        }
        m.filter(&[], &["ffn".into()]);
        assert_eq!(m.entries.len(), 2);
        m.filter(&["attn".into()], &[]);
        assert_eq!(
            m.entries.keys().collect::<Vec<_>>(),
            ["blk.0.attn_q.weight"]
        );
    }
}

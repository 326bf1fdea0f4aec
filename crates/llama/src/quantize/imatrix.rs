//! Importance matrices as llama-imatrix writes them: the GGUF format of
//! this llama.cpp (tensors `NAME.in_sum2` and `NAME.counts`, keys
//! `imatrix.datasets`, `imatrix.chunk_count`, `imatrix.chunk_size`) and the
//! older `.dat` format, both read into per-weight mean squared activations.

use std::collections::BTreeMap;
use std::path::Path;

use gguf::GgmlType;

use crate::error::{LlamaError, Result};

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
        let f = gguf::GgufFile::from_bytes(bytes).map_err(|e| e.to_string())?;
        if f.tensors().is_empty() {
            return Err("no data in file".into());
        }
        let md = f.metadata();
        let has = |k: &str| md.contains_key(k);
        if !(has("imatrix.datasets") && has("imatrix.chunk_count") && has("imatrix.chunk_size")) {
            return Err("missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)".into());
        }
        let datasets = md
            .get_str_array("imatrix.datasets")
            .map(|v| v.into_iter().map(str::to_string).collect())
            .unwrap_or_default();
        let chunk_count = md
            .get_uint("imatrix.chunk_count")
            .map_err(|e| e.to_string())? as i64;
        let mut pairs: BTreeMap<String, SumsCounts> = BTreeMap::new();
        for t in f.tensors() {
            let (name, is_sum) = if let Some(n) = t.name.strip_suffix(".in_sum2") {
                (n, true)
            } else if let Some(n) = t.name.strip_suffix(".counts") {
                (n, false)
            } else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            if t.ty != GgmlType::F32 {
                return Err(format!("sums and counts for {name} must be F32"));
            }
            let data = f.tensor_data_in(bytes, t).map_err(|e| e.to_string())?;
            let v: Vec<f32> = data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let slot = pairs.entry(name.to_string()).or_default();
            if is_sum {
                slot.0 = Some(v);
            } else {
                slot.1 = Some(v);
            }
        }
        let mut entries = BTreeMap::new();
        for (name, pair) in pairs {
            let (Some(sums), Some(counts)) = pair else {
                return Err(format!("mismatched sums and counts for {name}"));
            };
            if counts.is_empty() || sums.len() % counts.len() != 0 {
                return Err(format!(
                    "{name}: {} sums do not divide into {} counts",
                    sums.len(),
                    counts.len()
                ));
            }
            let ne0 = sums.len() / counts.len();
            let mut e = vec![0f32; sums.len()];
            for (j, &c) in counts.iter().enumerate() {
                // Counts are stored as floats and read back rounded.
                let c = c.round() as i64 as f32;
                for i in 0..ne0 {
                    e[j * ne0 + i] = if c > 0.0 { sums[j * ne0 + i] / c } else { 1.0 };
                }
            }
            entries.insert(name, e);
        }
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count,
        })
    }

    /// The old `.dat` format: entries of (name, calls, values already
    /// averaged per call and summed over calls), then optionally the chunk
    /// count and the dataset name.
    pub fn from_legacy(bytes: &[u8]) -> std::result::Result<Imatrix, String> {
        let mut r = Reader { b: bytes, at: 0 };
        let n_entries = r.i32().ok_or("no data in file")?;
        if n_entries < 1 {
            return Err("no data in file".into());
        }
        let mut entries = BTreeMap::new();
        for i in 0..n_entries {
            let len = r
                .i32()
                .filter(|&l| l >= 0)
                .ok_or_else(|| format!("failed reading name for entry {}", i + 1))?;
            let raw = r
                .take(len as usize)
                .ok_or_else(|| format!("failed reading name for entry {}", i + 1))?;
            let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
            let name = String::from_utf8_lossy(&raw[..end]).into_owned();
            let ncall = r.i32();
            let nval = r.i32();
            let (Some(ncall), Some(nval)) = (ncall, nval) else {
                return Err(format!("failed reading number of values for entry {i}"));
            };
            if nval < 1 {
                return Err(format!("failed reading number of values for entry {i}"));
            }
            let data = r
                .take(nval as usize * 4)
                .ok_or_else(|| format!("failed reading data for entry {i}"))?;
            let sums = data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let e: Vec<f32> = if ncall > 0 {
                sums.map(|s| s / ncall as f32).collect()
            } else {
                sums.collect()
            };
            entries.insert(name, e);
        }
        let mut out = Imatrix {
            entries,
            datasets: Vec::new(),
            chunk_count: 0,
        };
        if let Some(n) = r.i32() {
            out.chunk_count = i64::from(n);
            if let Some(len) = r.i32().filter(|&l| l > 0) {
                if let Some(raw) = r.take(len as usize) {
                    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
                    out.datasets
                        .push(String::from_utf8_lossy(&raw[..end]).into_owned());
                }
            }
        }
        Ok(out)
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

/// The sums and counts tensors of one entry, as they are found.
type SumsCounts = (Option<Vec<f32>>, Option<Vec<f32>>);

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn i32(&mut self) -> Option<i32> {
        self.take(4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! The files llama-imatrix reads and writes, with their raw contents: the
//! GGUF format of this llama.cpp (per weight `NAME.in_sum2`, the sums of
//! squared activations, [n_cols, n_mat] F32, and `NAME.counts`, the
//! activations summed for each matrix, [1, n_mat] F32; keys `general.type`
//! = `imatrix`, `imatrix.datasets`, `imatrix.chunk_count`,
//! `imatrix.chunk_size`) and the older `.dat` format (per weight its
//! name, a call count and the values averaged per activation times the
//! calls; then the chunk count and the dataset name).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use gguf::{GgmlType, GgufWriter, Metadata, StringArray, TensorInfo};

use crate::error::{LlamaError, Result};

/// Key of the texts an importance matrix was computed on.
pub const KEY_DATASETS: &str = "imatrix.datasets";
/// Key of the number of chunks it was computed on.
pub const KEY_CHUNK_COUNT: &str = "imatrix.chunk_count";
/// Key of the chunk size in tokens.
pub const KEY_CHUNK_SIZE: &str = "imatrix.chunk_size";

/// What was gathered for one weight: the sums of squared activations per
/// column of each of its matrices (one matrix, or one per expert), and the
/// number of activations summed into each matrix.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    /// Sums, matrix after matrix.
    pub sums: Vec<f32>,
    /// Activations per matrix (a single count for a dense weight).
    pub counts: Vec<i64>,
}

/// An importance matrix file as stored.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImatrixFile {
    /// Entries by weight name. From a `.dat` file, the sums are the stored
    /// values (averages times calls) and the single count the calls.
    pub entries: BTreeMap<String, Entry>,
    /// The texts it was computed on.
    pub datasets: Vec<String>,
    /// Chunks it was computed on (0 when the file does not say).
    pub chunk_count: u32,
    /// Tokens per chunk (0 for `.dat` files or when the file does not say).
    pub chunk_size: u32,
    /// Read from the older `.dat` format.
    pub is_legacy: bool,
    /// A GGUF file with all three `imatrix.*` keys.
    pub has_metadata: bool,
}

/// The output format of llama-imatrix (`--output-format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// GGUF, the default.
    #[default]
    Gguf,
    /// The older `.dat` format.
    Dat,
}

impl std::str::FromStr for OutputFormat {
    type Err = LlamaError;
    fn from_str(s: &str) -> Result<OutputFormat> {
        match s {
            "gguf" => Ok(OutputFormat::Gguf),
            "dat" => Ok(OutputFormat::Dat),
            _ => Err(LlamaError::InvalidParam(format!(
                "invalid output format '{s}': expected gguf or dat"
            ))),
        }
    }
}

impl ImatrixFile {
    /// Reads `path`: GGUF when it starts with the GGUF magic, else `.dat`.
    pub fn read(path: &Path) -> Result<ImatrixFile> {
        let bytes = std::fs::read(path).map_err(|source| LlamaError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let parsed = if bytes.starts_with(b"GGUF") {
            ImatrixFile::from_gguf(&bytes)
        } else {
            ImatrixFile::from_legacy(&bytes)
        };
        parsed.map_err(|why| {
            LlamaError::InvalidParam(format!(
                "'{}' is not a valid imatrix file: {why}",
                path.display()
            ))
        })
    }

    /// Parses the GGUF format; counts are rounded to integers as stored.
    pub fn from_gguf(bytes: &[u8]) -> std::result::Result<ImatrixFile, String> {
        let f = gguf::GgufFile::from_bytes(bytes).map_err(|e| e.to_string())?;
        if f.tensors().is_empty() {
            return Err("no data in file".into());
        }
        let md = f.metadata();
        let mut out = ImatrixFile::default();
        if let Ok(v) = md.get_str_array(KEY_DATASETS) {
            out.datasets = v.into_iter().map(str::to_string).collect();
        }
        let uint = |key: &str| -> std::result::Result<u32, String> {
            match md.get(key) {
                None => Ok(0),
                Some(_) => md
                    .get_uint(key)
                    .ok()
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(|| format!("{key} is not a 32-bit unsigned integer")),
            }
        };
        out.has_metadata = [KEY_DATASETS, KEY_CHUNK_COUNT, KEY_CHUNK_SIZE]
            .iter()
            .all(|k| md.contains_key(k));
        out.chunk_count = uint(KEY_CHUNK_COUNT)?;
        out.chunk_size = uint(KEY_CHUNK_SIZE)?;
        type Pair = (Option<Vec<f32>>, Option<Vec<f32>>);
        let mut pairs: BTreeMap<String, Pair> = BTreeMap::new();
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
            let v = f32s(data);
            let slot = pairs.entry(name.to_string()).or_default();
            if is_sum {
                slot.0 = Some(v);
            } else {
                slot.1 = Some(v);
            }
        }
        for (name, pair) in pairs {
            let (Some(sums), Some(counts)) = pair else {
                return Err(format!("mismatched sums and counts for {name}"));
            };
            if counts.is_empty() || sums.len() % counts.len() != 0 {
                return Err(format!(
                    "{name}: {} sums do not divide into {} matrices",
                    sums.len(),
                    counts.len()
                ));
            }
            let counts = counts.iter().map(|&c| c.round() as i64).collect();
            out.entries.insert(name, Entry { sums, counts });
        }
        Ok(out)
    }

    /// Parses the `.dat` format.
    pub fn from_legacy(bytes: &[u8]) -> std::result::Result<ImatrixFile, String> {
        let mut r = Reader { b: bytes, at: 0 };
        let n_entries = r.i32().filter(|&n| n >= 1).ok_or("no data in file")?;
        let mut out = ImatrixFile {
            is_legacy: true,
            ..ImatrixFile::default()
        };
        for i in 0..n_entries {
            let name = r
                .i32()
                .and_then(|len| usize::try_from(len).ok())
                .and_then(|len| r.take(len))
                .ok_or_else(|| format!("failed reading name for entry {}", i + 1))?;
            let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
            let name = String::from_utf8_lossy(&name[..end]).into_owned();
            let (ncall, nval) = match (r.i32(), r.i32()) {
                (Some(c), Some(n)) if n >= 1 => (c, n as usize),
                _ => return Err(format!("failed reading number of values for entry {i}")),
            };
            let data = nval
                .checked_mul(4)
                .and_then(|n| r.take(n))
                .ok_or_else(|| format!("failed reading data for entry {i}"))?;
            out.entries.insert(
                name,
                Entry {
                    sums: f32s(data),
                    counts: vec![i64::from(ncall)],
                },
            );
        }
        // The chunk count and the dataset name are optional.
        if let Some(n) = r.i32() {
            out.chunk_count = n as u32;
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

    /// The GGUF bytes of this matrix: entries in name order, each with a
    /// sum and a count tensor (entries without values are left out).
    pub fn to_gguf(&self) -> Result<Vec<u8>> {
        let mut md = Metadata::new();
        md.set("general.type", "imatrix");
        let mut ds = StringArray::new();
        for d in &self.datasets {
            ds.push(d);
        }
        md.set(KEY_DATASETS, ds);
        md.set(KEY_CHUNK_COUNT, self.chunk_count);
        md.set(KEY_CHUNK_SIZE, self.chunk_size);
        let mut infos = Vec::new();
        let mut data: Vec<Vec<u8>> = Vec::new();
        for (name, e) in &self.entries {
            let nmat = e.counts.len();
            if e.sums.is_empty() || nmat == 0 {
                continue;
            }
            // As ggml, trailing dimensions of 1 are not written.
            let dims = |ne0: usize| -> Vec<u64> {
                if nmat > 1 {
                    vec![ne0 as u64, nmat as u64]
                } else {
                    vec![ne0 as u64]
                }
            };
            let sums = TensorInfo::new(
                format!("{name}.in_sum2"),
                GgmlType::F32,
                &dims(e.sums.len() / nmat),
            )?;
            let counts = TensorInfo::new(format!("{name}.counts"), GgmlType::F32, &dims(1))?;
            infos.extend([sums, counts]);
            data.push(e.sums.iter().flat_map(|v| v.to_le_bytes()).collect());
            data.push(
                e.counts
                    .iter()
                    .flat_map(|&c| (c as f32).to_le_bytes())
                    .collect(),
            );
        }
        let mut w = GgufWriter::new(Vec::new(), &md, &infos)?;
        for (info, bytes) in infos.iter().zip(&data) {
            w.write_tensor(&info.name, bytes)?;
        }
        Ok(w.finish()?)
    }

    /// The `.dat` bytes of this matrix, as llama-imatrix writes them from
    /// raw sums: per entry (those with some data, in name order) the calls
    /// `ceil(max count / chunk_size)` and each value averaged over its
    /// matrix's count times the calls (1 where a matrix has no data);
    /// then the chunk count and the last dataset.
    pub fn to_legacy(&self, chunk_size: u32) -> Vec<u8> {
        let chunk = i64::from(chunk_size.max(1));
        let stored: Vec<(&String, &Entry)> = self
            .entries
            .iter()
            .filter(|(_, e)| !e.counts.is_empty() && e.counts.iter().any(|&c| c != 0))
            .collect();
        let mut b = Vec::new();
        b.extend((stored.len() as i32).to_le_bytes());
        for (name, e) in stored {
            b.extend((name.len() as i32).to_le_bytes());
            b.extend(name.as_bytes());
            let max = e.counts.iter().copied().max().unwrap_or(0);
            let ncall = ((max + chunk - 1) / chunk) as i32;
            b.extend(ncall.to_le_bytes());
            let nval = e.sums.len();
            b.extend((nval as i32).to_le_bytes());
            let per = nval / e.counts.len();
            for (i, &v) in e.sums.iter().enumerate() {
                let c = e.counts[i / per] as f32;
                let (v, c) = if c == 0.0 { (1.0, 1.0) } else { (v, c) };
                b.extend(((v / c) * ncall as f32).to_le_bytes());
            }
        }
        b.extend((self.chunk_count as i32).to_le_bytes());
        let ds = self.datasets.last().map(String::as_str).unwrap_or("");
        b.extend((ds.len() as i32).to_le_bytes());
        b.extend(ds.as_bytes());
        b
    }

    /// Writes the matrix to `path` in `format` (through a temporary file,
    /// so that a failure leaves no partial file under the name).
    pub fn write(&self, path: &Path, format: OutputFormat) -> Result<()> {
        let bytes = match format {
            OutputFormat::Gguf => self.to_gguf()?,
            OutputFormat::Dat => self.to_legacy(self.chunk_size),
        };
        write_atomic(path, &bytes)
    }
}

/// Writes `bytes` to `path` through a temporary file in the same folder.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |p: &Path, source| LlamaError::Io {
        path: p.display().to_string(),
        source,
    };
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".imatrix-{}.tmp", std::process::id()));
    let tmp: PathBuf = path.with_file_name(name);
    let r = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_data()))
        .map_err(|e| io(&tmp, e))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| io(path, e)));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

fn f32s(data: &[u8]) -> Vec<f32> {
    data.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

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

    fn sample() -> ImatrixFile {
        let mut f = ImatrixFile {
            datasets: vec!["a.txt".into(), "b.txt".into()],
            chunk_count: 3,
            chunk_size: 4,
            has_metadata: true,
            ..ImatrixFile::default()
        };
        f.entries.insert(
            "blk.0.ffn_up.weight".into(),
            Entry {
                sums: vec![1.0, 2.0, 3.0, 4.0],
                counts: vec![12],
            },
        );
        f.entries.insert(
            "blk.0.ffn_up_exps.weight".into(),
            Entry {
                sums: vec![2.0, 4.0, 6.0, 8.0],
                counts: vec![5, 0],
            },
        );
        f
    }

    #[test]
    fn gguf_round_trips() {
        let f = sample();
        let bytes = f.to_gguf().unwrap();
        assert_eq!(ImatrixFile::from_gguf(&bytes).unwrap(), f);
        let g = gguf::GgufFile::from_bytes(&bytes).unwrap();
        let names: Vec<&str> = g.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "blk.0.ffn_up.weight.in_sum2",
                "blk.0.ffn_up.weight.counts",
                "blk.0.ffn_up_exps.weight.in_sum2",
                "blk.0.ffn_up_exps.weight.counts"
            ]
        );
        assert_eq!(g.tensors()[2].ne(), [2, 2, 1, 1]);
        assert_eq!(g.metadata().get_str("general.type").unwrap(), "imatrix");
    }

    #[test]
    fn legacy_stores_averages_times_calls() {
        let f = sample();
        let b = f.to_legacy(4);
        let back = ImatrixFile::from_legacy(&b).unwrap();
        assert!(back.is_legacy);
        // 12 activations in chunks of 4: 3 calls; values / 12 * 3.
        let e = &back.entries["blk.0.ffn_up.weight"];
        assert_eq!(e.counts, [3]);
        assert_eq!(e.sums, [0.25, 0.5, 0.75, 1.0]);
        // An expert without data stores 1 * calls.
        let e = &back.entries["blk.0.ffn_up_exps.weight"];
        assert_eq!(e.counts, [2]);
        assert_eq!(e.sums, [0.8, 1.6, 2.0, 2.0]);
        assert_eq!(
            (back.chunk_count, back.datasets.clone()),
            (3, vec!["b.txt".to_string()])
        );
    }

    #[test]
    fn damaged_files_are_errors() {
        let f = sample();
        let b = f.to_legacy(4);
        for cut in [0, 3, 10, 30, 50] {
            assert!(ImatrixFile::from_legacy(&b[..cut]).is_err(), "cut at {cut}");
        }
        let g = f.to_gguf().unwrap();
        assert!(ImatrixFile::from_gguf(&g[..g.len() / 2]).is_err());
        assert!(ImatrixFile::from_gguf(&g[..g.len() - 40]).is_err());
        // A sum without its count.
        let mut md = Metadata::new();
        md.set(KEY_CHUNK_SIZE, 4u32);
        let t = TensorInfo::new("w.in_sum2", GgmlType::F32, &[2, 1]).unwrap();
        let mut w = GgufWriter::new(Vec::new(), &md, &[t]).unwrap();
        w.write_tensor("w.in_sum2", &[0u8; 8]).unwrap();
        let e = ImatrixFile::from_gguf(&w.finish().unwrap()).unwrap_err();
        assert!(e.contains("mismatched sums and counts for w"), "{e}");
    }
}

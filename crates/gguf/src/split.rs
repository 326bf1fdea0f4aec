//! Models split over several files (`PREFIX-00001-of-00003.gguf`, ...), as
//! written by llama.cpp's `gguf-split`: opening them as one tensor set,
//! writing a model as parts, and merging parts into one file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::file::GgufFile;
use crate::format::align_up;
use crate::index::NameIndex;
use crate::metadata::{Metadata, KEY_ALIGNMENT};
use crate::tensor::TensorInfo;
use crate::writer::GgufWriter;

/// Key of the 0-based part number (`u16`).
pub const KEY_SPLIT_NO: &str = "split.no";
/// Key of the number of parts (`u16`).
pub const KEY_SPLIT_COUNT: &str = "split.count";
/// Key of the number of tensors over all parts (`i32`).
pub const KEY_SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// Most parts a split model can have (`split.count` is a `u16`).
pub const MAX_SPLITS: u64 = u16::MAX as u64;

/// The path of part `split_no` (0-based) of `split_count`:
/// `PREFIX-NNNNN-of-MMMMM.gguf` with NNNNN = `split_no + 1`.
pub fn split_path(prefix: &str, split_no: u32, split_count: u32) -> String {
    format!(
        "{prefix}-{:05}-of-{split_count:05}.gguf",
        u64::from(split_no) + 1
    )
}

/// The prefix of `path` when it is the name of part `split_no` (0-based) of
/// `split_count`, `None` when the name does not follow that pattern.
pub fn split_prefix(path: &str, split_no: u32, split_count: u32) -> Option<String> {
    let postfix = format!("-{:05}-of-{split_count:05}.gguf", u64::from(split_no) + 1);
    path.strip_suffix(&postfix).map(str::to_string)
}

/// `metadata` without the `split.*` keys.
fn without_split_keys(metadata: &Metadata) -> Metadata {
    let mut md = metadata.clone();
    md.retain(|k, _| ![KEY_SPLIT_NO, KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT].contains(&k));
    md
}

/// The metadata of part `split_no` of a split model: the first part carries
/// all of `base` (minus any old `split.*` keys), the others only the split
/// keys (and `general.alignment` when `base` sets it); then `split.no`,
/// `split.tensors.count`, `split.count`, in the order `gguf-split` writes them.
pub fn split_metadata(
    base: &Metadata,
    split_no: u16,
    split_count: u16,
    n_tensors: i32,
) -> Metadata {
    let mut md = if split_no == 0 {
        without_split_keys(base)
    } else {
        Metadata::new()
    };
    if split_no != 0 {
        if let Some(a) = base.get(KEY_ALIGNMENT) {
            md.set(KEY_ALIGNMENT, a.clone());
        }
    }
    md.set(KEY_SPLIT_NO, split_no);
    md.set(KEY_SPLIT_TENSORS_COUNT, n_tensors);
    md.set(KEY_SPLIT_COUNT, split_count);
    md
}

/// Limits for each part when writing a split model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitOptions {
    /// Most tensors per part.
    pub max_tensors: Option<usize>,
    /// Most tensor data bytes (padded) per part; a tensor larger than this
    /// gets a part of its own.
    pub max_bytes: Option<u64>,
}

/// Groups consecutive tensors into parts within the limits. Always returns
/// at least one part (empty when there are no tensors).
pub fn plan_split(
    tensors: &[TensorInfo],
    alignment: u64,
    opts: &SplitOptions,
) -> Vec<Range<usize>> {
    let mut parts = Vec::new();
    let (mut start, mut bytes) = (0usize, 0u64);
    for (i, t) in tensors.iter().enumerate() {
        let size = align_up(t.size, alignment).unwrap_or(u64::MAX);
        let n = i - start;
        let full = opts.max_tensors.is_some_and(|m| n >= m.max(1))
            || opts
                .max_bytes
                .is_some_and(|m| bytes.saturating_add(size) > m);
        if n > 0 && full {
            parts.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(size);
    }
    parts.push(start..tensors.len());
    parts
}

/// A model: one file, or all parts of a split model, seen as one tensor set.
#[derive(Debug)]
pub struct GgufModel {
    files: Vec<GgufFile>,
}

fn split_err(msg: impl Into<String>) -> Error {
    Error::Split(msg.into())
}

/// A split key read leniently; `None` when absent.
fn split_key(f: &GgufFile, key: &str) -> Result<Option<u64>> {
    match f.get_uint(key) {
        Ok(v) => Ok(Some(v)),
        Err(Error::KeyNotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

impl GgufModel {
    /// Opens a model by the path of any of its files. When the file has
    /// `split.count > 1`, all parts are opened from the same directory by
    /// the `PREFIX-NNNNN-of-MMMMM.gguf` naming and checked against each
    /// other (`split.no`, `split.count`, `split.tensors.count`, unique
    /// tensor names).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufModel> {
        let path = path.as_ref();
        let file = GgufFile::open(path)?;
        let count = split_key(&file, KEY_SPLIT_COUNT)?.unwrap_or(0);
        if count <= 1 {
            return GgufModel::from_files(vec![file]);
        }
        if count > MAX_SPLITS {
            return Err(split_err(format!(
                "{KEY_SPLIT_COUNT} is {count}, at most {MAX_SPLITS}"
            )));
        }
        let no = split_key(&file, KEY_SPLIT_NO)?.ok_or_else(|| {
            split_err(format!(
                "'{}' has {KEY_SPLIT_COUNT} {count} but no {KEY_SPLIT_NO}",
                path.display()
            ))
        })?;
        if no >= count {
            return Err(split_err(format!(
                "'{}' has {KEY_SPLIT_NO} {no} but {KEY_SPLIT_COUNT} is {count}",
                path.display()
            )));
        }
        let (no, count) = (no as u32, count as u32);
        let name = path
            .to_str()
            .ok_or_else(|| split_err(format!("path '{}' is not UTF-8", path.display())))?;
        let prefix = split_prefix(name, no, count).ok_or_else(|| {
            split_err(format!(
                "'{name}' is part {} of {count} but is not named {}",
                no + 1,
                split_path("PREFIX", no, count)
            ))
        })?;
        let mut first = Some(file);
        let mut files = Vec::with_capacity(count as usize);
        for i in 0..count {
            let f = if i == no {
                first
                    .take()
                    .ok_or_else(|| split_err("internal: part opened twice"))?
            } else {
                let p = split_path(&prefix, i, count);
                GgufFile::open(&p)
                    .map_err(|e| split_err(format!("part {} of {count}: {e}", i + 1)))?
            };
            files.push(f);
        }
        GgufModel::from_files(files)
    }

    /// A model from files already opened, in part order: one unsplit file,
    /// or every part of a split model. Checks the split keys and that
    /// tensor names are unique over all files.
    pub fn from_files(files: Vec<GgufFile>) -> Result<GgufModel> {
        let count = files.len();
        if count == 0 {
            return Err(split_err("no files"));
        }
        let where_ = |f: &GgufFile, i: usize| {
            f.path().map_or_else(
                || format!("part {}", i + 1),
                |p| format!("'{}'", p.display()),
            )
        };
        if count > 1 {
            let total: usize = files.iter().map(|f| f.tensors().len()).sum();
            for (i, f) in files.iter().enumerate() {
                let no = split_key(f, KEY_SPLIT_NO)?;
                if no != Some(i as u64) {
                    return Err(split_err(format!(
                        "{} should be part {} of {count} ({KEY_SPLIT_NO} {i}) but has {KEY_SPLIT_NO} {}",
                        where_(f, i),
                        i + 1,
                        no.map_or("absent".into(), |n| n.to_string())
                    )));
                }
                let c = split_key(f, KEY_SPLIT_COUNT)?;
                if c != Some(count as u64) {
                    return Err(split_err(format!(
                        "{} has {KEY_SPLIT_COUNT} {}, expected {count}",
                        where_(f, i),
                        c.map_or("absent".into(), |n| n.to_string())
                    )));
                }
                if let Some(n) = split_key(f, KEY_SPLIT_TENSORS_COUNT)? {
                    if n != total as u64 {
                        return Err(split_err(format!(
                            "{} has {KEY_SPLIT_TENSORS_COUNT} {n} but the parts hold {total} tensors",
                            where_(f, i)
                        )));
                    }
                }
            }
        }
        let names: Vec<(usize, &str)> = files
            .iter()
            .enumerate()
            .flat_map(|(i, f)| f.tensors().iter().map(move |t| (i, t.name.as_str())))
            .collect();
        if let Err((a, b)) = NameIndex::build(names.len(), |i| names[i].1) {
            return Err(split_err(format!(
                "tensor '{}' appears in {} and in {}",
                names[b].1,
                where_(&files[names[a].0], names[a].0),
                where_(&files[names[b].0], names[b].0)
            )));
        }
        Ok(GgufModel { files })
    }

    /// The files, in part order.
    pub fn files(&self) -> &[GgufFile] {
        &self.files
    }

    /// The model's metadata (that of the first file).
    pub fn metadata(&self) -> &Metadata {
        self.files[0].metadata()
    }

    /// Number of tensors over all files.
    pub fn n_tensors(&self) -> usize {
        self.files.iter().map(|f| f.tensors().len()).sum()
    }

    /// All tensors with the index of the file holding each, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = (usize, &TensorInfo)> + '_ {
        self.files
            .iter()
            .enumerate()
            .flat_map(|(i, f)| f.tensors().iter().map(move |t| (i, t)))
    }

    /// The tensor named `name` and the index of its file.
    pub fn tensor(&self, name: &str) -> Option<(usize, &TensorInfo)> {
        self.files
            .iter()
            .enumerate()
            .find_map(|(i, f)| f.tensor(name).map(|t| (i, t)))
    }

    /// A tensor's bytes, from the mapping of file `file_index`.
    pub fn tensor_data(&self, file_index: usize, info: &TensorInfo) -> Result<&[u8]> {
        self.files
            .get(file_index)
            .ok_or_else(|| Error::TensorNotFound(info.name.clone()))?
            .tensor_data(info)
    }

    fn write_tensors<W: Write>(
        &self,
        out: W,
        md: &Metadata,
        tensors: &[(usize, &TensorInfo)],
    ) -> Result<W> {
        let infos: Vec<TensorInfo> = tensors.iter().map(|(_, t)| (*t).clone()).collect();
        let opts = self.files[0].write_options();
        let mut w = GgufWriter::with_options(out, md, &infos, &opts)?;
        for &(fi, t) in tensors {
            w.write_tensor(&t.name, self.tensor_data(fi, t)?)?;
        }
        w.finish()
    }

    fn check_not_source(&self, path: &Path) -> Result<()> {
        let Ok(target) = path.canonicalize() else {
            return Ok(());
        };
        for f in &self.files {
            if f.path().and_then(|p| p.canonicalize().ok()).as_ref() == Some(&target) {
                return Err(Error::Writer(format!(
                    "refusing to overwrite '{}' while reading from it",
                    path.display()
                )));
            }
        }
        Ok(())
    }

    fn create(&self, path: &Path) -> Result<BufWriter<File>> {
        self.check_not_source(path)?;
        let f = File::create(path).map_err(|source| Error::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(BufWriter::new(f))
    }

    /// Writes the model as parts `PREFIX-NNNNN-of-MMMMM.gguf` within the
    /// limits, with the split keys `gguf-split` writes; returns the paths.
    pub fn write_split(&self, prefix: &str, opts: &SplitOptions) -> Result<Vec<PathBuf>> {
        let base = without_split_keys(self.metadata());
        let all: Vec<(usize, &TensorInfo)> = self.tensors().collect();
        let infos: Vec<TensorInfo> = all.iter().map(|(_, t)| (*t).clone()).collect();
        let parts = plan_split(&infos, base.alignment()?, opts);
        let count = u16::try_from(parts.len())
            .map_err(|_| Error::Writer(format!("{} parts, at most {MAX_SPLITS}", parts.len())))?;
        let n_tensors = i32::try_from(all.len()).map_err(|_| {
            Error::Writer(format!(
                "{} tensors do not fit split.tensors.count",
                all.len()
            ))
        })?;
        let mut paths = Vec::with_capacity(parts.len());
        for (k, range) in parts.into_iter().enumerate() {
            let md = split_metadata(&base, k as u16, count, n_tensors);
            let path = PathBuf::from(split_path(prefix, k as u32, u32::from(count)));
            let out = self.write_tensors(self.create(&path)?, &md, &all[range])?;
            out.into_inner()
                .map_err(|e| Error::Io(e.into_error()))?
                .sync_all()?;
            paths.push(path);
        }
        Ok(paths)
    }

    /// Writes all tensors into one file with the first file's metadata
    /// minus the `split.*` keys.
    pub fn write_merged<W: Write>(&self, out: W) -> Result<W> {
        let md = without_split_keys(self.metadata());
        let all: Vec<(usize, &TensorInfo)> = self.tensors().collect();
        self.write_tensors(out, &md, &all)
    }

    /// [`GgufModel::write_merged`] to a new file at `path`.
    pub fn save_merged(&self, path: impl AsRef<Path>) -> Result<()> {
        let out = self.write_merged(self.create(path.as_ref())?)?;
        out.into_inner()
            .map_err(|e| Error::Io(e.into_error()))?
            .sync_all()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    #[test]
    fn names() {
        assert_eq!(split_path("/m/x", 0, 3), "/m/x-00001-of-00003.gguf");
        assert_eq!(
            split_prefix("/m/x-00002-of-00003.gguf", 1, 3).as_deref(),
            Some("/m/x")
        );
        assert_eq!(split_prefix("/m/x-00002-of-00003.gguf", 0, 3), None);
        assert_eq!(split_prefix("/m/x.gguf", 0, 1), None);
    }

    #[test]
    fn plan() {
        let t = |n: &str, len| TensorInfo::new(n, GgmlType::F32, &[len]).unwrap();
        let ts = vec![t("a", 8), t("b", 8), t("c", 100), t("d", 1)];
        let by_count = plan_split(
            &ts,
            32,
            &SplitOptions {
                max_tensors: Some(3),
                max_bytes: None,
            },
        );
        assert_eq!(by_count, vec![0..3, 3..4]);
        let by_bytes = plan_split(
            &ts,
            32,
            &SplitOptions {
                max_tensors: None,
                max_bytes: Some(100),
            },
        );
        assert_eq!(by_bytes, vec![0..2, 2..3, 3..4]);
        assert_eq!(plan_split(&[], 32, &SplitOptions::default()), vec![0..0]);
        assert_eq!(plan_split(&ts, 32, &SplitOptions::default()), vec![0..4]);
    }
}

//! Gathering the importance matrix while a model runs, as llama.cpp's
//! llama-imatrix does: for every MUL_MAT whose weight is a layer's
//! (`blk.*`, and `output.weight` with `process_output`) and whose
//! activations are F32 with at least 16 rows, the squares of the
//! activations summed per column (per matrix of a 3-D weight), and for
//! every MUL_MAT_ID the squares summed into the expert each token was
//! routed to, with a count per expert. Every `out_freq` chunks the matrix
//! is written to the output, every `save_freq` chunks to a numbered copy.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use ggml_core::backend::Placement;
use ggml_core::{EvalObserver, Graph, Op, TensorId, Type};

use super::file::{Entry, ImatrixFile, OutputFormat};
use crate::error::{LlamaError, Result};
use crate::model::Model;

/// What the collector is told.
#[derive(Clone, Debug)]
pub struct CollectorParams {
    /// Tokens per chunk (the counts are turned into chunks with it).
    pub chunk_size: usize,
    /// Also gather `output.weight`.
    pub process_output: bool,
    /// Write the output every this many chunks (0: only at the end).
    pub out_freq: i32,
    /// Write a numbered copy every this many chunks (0: never).
    pub save_freq: i32,
    /// The output file.
    pub out_file: PathBuf,
    /// Its format.
    pub format: OutputFormat,
    /// The text file the model runs over (recorded as a dataset).
    pub prompt_file: Option<String>,
}

/// The sums and counts gathered so far, plus what was loaded.
#[derive(Debug)]
pub struct Collector {
    params: CollectorParams,
    entries: BTreeMap<String, Entry>,
    datasets: Vec<String>,
    last_chunk: i32,
    /// Activations read back from a backend.
    buf: Vec<u8>,
    /// Expert ids read back.
    ids: Vec<u8>,
    /// The first failure inside a graph computation.
    error: Option<LlamaError>,
}

/// A weight's name without the scheduler's copy decoration
/// (`BACKEND#name#copy` -> `name`).
pub fn weight_name(name: &str) -> &str {
    match name.split_once('#') {
        Some((_, rest)) => rest.split_once('#').map_or(rest, |(n, _)| n),
        None => name,
    }
}

/// Reads the f32 at byte `at` of `data`.
fn f32_at(data: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

fn add_squares(acc: &mut [f32], data: &[u8], at: usize) {
    for (j, a) in acc.iter_mut().enumerate() {
        let x = f32_at(data, at + 4 * j);
        *a += x * x;
    }
}

impl Collector {
    /// An empty collector.
    pub fn new(params: CollectorParams) -> Collector {
        Collector {
            params,
            entries: BTreeMap::new(),
            datasets: Vec::new(),
            last_chunk: 0,
            buf: Vec::new(),
            ids: Vec::new(),
            error: None,
        }
    }

    /// The entries gathered (and loaded) so far.
    pub fn entries(&self) -> &BTreeMap<String, Entry> {
        &self.entries
    }

    /// Chunks gathered so far (the largest count over the chunk size).
    pub fn last_chunk(&self) -> i32 {
        self.last_chunk
    }

    /// Takes the failure that stopped a graph computation, if any.
    pub fn take_error(&mut self) -> Option<LlamaError> {
        self.error.take()
    }

    fn chunk_size(&self) -> i64 {
        self.params.chunk_size.max(1) as i64
    }

    /// Adds the sums and counts of a file, as llama-imatrix's `--in-file`:
    /// a `.dat` file's averages are turned back into sums over
    /// `chunk_size` activations per call.
    pub fn load(&mut self, file: &ImatrixFile) -> Result<()> {
        let chunk = self.chunk_size();
        for (name, entry) in &file.entries {
            let e = self.entries.entry(name.clone()).or_default();
            if file.is_legacy {
                if e.sums.is_empty() {
                    e.sums = vec![0.0; entry.sums.len()];
                    e.counts = vec![0];
                } else if e.sums.len() != entry.sums.len() {
                    return Err(mismatch(name, "sums", entry.sums.len(), e.sums.len()));
                }
                for (a, &v) in e.sums.iter_mut().zip(&entry.sums) {
                    *a += v * chunk as f32;
                }
                let calls = entry.counts.first().copied().unwrap_or(0);
                for c in &mut e.counts {
                    *c += calls * chunk;
                }
            } else {
                if e.sums.is_empty() {
                    e.sums = vec![0.0; entry.sums.len()];
                } else if e.sums.len() != entry.sums.len() {
                    return Err(mismatch(name, "sums", entry.sums.len(), e.sums.len()));
                }
                let n = entry.counts.len();
                if e.counts.is_empty() {
                    e.counts = vec![0; n];
                } else if e.counts.len() == 1 && n > 1 {
                    e.counts = vec![e.counts[0]; n];
                } else if e.counts.len() != n {
                    return Err(mismatch(name, "counts", n, e.counts.len()));
                }
                for (a, &v) in e.sums.iter_mut().zip(&entry.sums) {
                    *a += v;
                }
                for (a, &c) in e.counts.iter_mut().zip(&entry.counts) {
                    *a += c;
                }
            }
        }
        self.datasets.extend(file.datasets.iter().cloned());
        let max = self
            .entries
            .values()
            .flat_map(|e| e.counts.iter().copied())
            .max()
            .unwrap_or(0);
        self.last_chunk = (max / chunk) as i32;
        Ok(())
    }

    /// Checks the loaded entries against `model` before running it: an
    /// entry whose weight has another number of columns or matrices, or
    /// entries none of which names a weight of the model, mean a file of
    /// another model.
    pub fn check_model(&self, model: &Model) -> Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let w = model.weights()?;
        let mut descs: BTreeMap<&str, &ggml_core::TensorDesc> = BTreeMap::new();
        for x in w.layers.iter().flat_map(|l| l.iter()) {
            descs.insert(x.desc.name.as_str(), &x.desc);
        }
        descs.insert(w.output.desc.name.as_str(), &w.output.desc);
        let mut known = 0;
        for (name, e) in &self.entries {
            let Some(d) = descs.get(name.as_str()) else {
                continue;
            };
            known += 1;
            let n_mat = d.ne[2] * d.ne[3];
            let counts_fit = e.counts.len() == 1 || e.counts.len() == n_mat;
            if e.sums.len() != d.ne[0] * n_mat || !counts_fit {
                return Err(LlamaError::InvalidParam(format!(
                    "the importance matrix loaded is of another model: entry {name} has {} values in {} matrices, the model's weight takes {} columns in {n_mat}",
                    e.sums.len(),
                    e.counts.len(),
                    d.ne[0]
                )));
            }
        }
        if known == 0 {
            return Err(LlamaError::InvalidParam(format!(
                "the importance matrix loaded is of another model: none of its {} entries names a weight of the model",
                self.entries.len()
            )));
        }
        Ok(())
    }

    /// The matrix as a file: the loaded datasets then the text's.
    pub fn to_file(&self) -> ImatrixFile {
        let mut datasets = self.datasets.clone();
        if let Some(p) = &self.params.prompt_file {
            datasets.push(p.clone());
        }
        ImatrixFile {
            entries: self.entries.clone(),
            datasets,
            chunk_count: self.last_chunk.max(0) as u32,
            chunk_size: self.params.chunk_size as u32,
            is_legacy: false,
            has_metadata: true,
        }
    }

    /// Entries with matrices that saw no activation, with the share of
    /// their matrices that did (llama-imatrix warns about them).
    pub fn partial_entries(&self) -> Vec<(&str, f32)> {
        self.entries
            .iter()
            .filter_map(|(name, e)| {
                let n = e.counts.len();
                let zeros = e.counts.iter().filter(|&&c| c == 0).count();
                (zeros > 0).then(|| (name.as_str(), 100.0 * (n - zeros) as f32 / n as f32))
            })
            .collect()
    }

    /// Writes the matrix to the output file, or with `n_chunk` to the
    /// numbered copy `OUT.at_N`.
    pub fn save(&self, n_chunk: Option<i32>) -> Result<()> {
        let mut path = self.params.out_file.clone().into_os_string();
        if let Some(n) = n_chunk.filter(|&n| n > 0) {
            path.push(format!(".at_{n}"));
        }
        let path = PathBuf::from(path);
        for (name, share) in self.partial_entries() {
            crate::warn!("save_imatrix: entry '{name:>40}' has partial data ({share:.2}%)");
        }
        self.to_file().write(&path, self.params.format)
    }

    /// Whether the collector wants node `id` (ggml's `ask`).
    pub fn wants(&self, graph: &Graph, id: TensorId) -> bool {
        let node = graph.node(id);
        match node.op {
            Op::MulMatId => true,
            Op::MulMat => {
                let (Some(&w), Some(&x)) = (node.src.first(), node.src.get(1)) else {
                    return false;
                };
                let xd = graph.desc(x);
                if xd.ne[1] < 16 || xd.ty != Type::F32 {
                    return false;
                }
                let name = weight_name(&graph.desc(w).name);
                name.starts_with("blk.") || (self.params.process_output && name == "output.weight")
            }
            _ => false,
        }
    }

    /// Reads the bytes `at` spans for tensor `id`.
    fn read(graph: &Graph, id: TensorId, out: &mut Vec<u8>) -> Result<()> {
        let at: Placement = graph.placement_or_err(id)?;
        let n = graph.desc(id).nbytes();
        out.resize(n, 0);
        at.buffer.get_tensor(at.offset, out)?;
        Ok(())
    }

    /// Gathers node `id`, which the collector wanted, just computed.
    pub fn collect(&mut self, graph: &Graph, id: TensorId) -> Result<()> {
        let node = graph.node(id);
        let (w, x) = (node.src[0], node.src[1]);
        let wname = weight_name(&graph.desc(w).name).to_string();
        let (wd, xd) = (graph.desc(w), graph.desc(x));
        if xd.nb[0] != 4 {
            return Err(LlamaError::InvalidParam(format!(
                "activations of {wname} are not rows of f32"
            )));
        }
        let mut data = std::mem::take(&mut self.buf);
        let r = Self::read(graph, x, &mut data).and_then(|()| {
            if node.op == Op::MulMatId {
                self.collect_experts(graph, &wname, node.src[2], wd.ne[2], xd, &data)
            } else {
                self.collect_dense(&wname, wd.ne, xd, &data)
            }
        });
        self.buf = data;
        r
    }

    fn collect_experts(
        &mut self,
        graph: &Graph,
        wname: &str,
        ids_id: TensorId,
        n_as: usize,
        xd: &ggml_core::TensorDesc,
        data: &[u8],
    ) -> Result<()> {
        let idd = graph.desc(ids_id).clone();
        if xd.ne[3] != 1 {
            return Err(LlamaError::InvalidParam(format!(
                "activations of {wname} have more than 3 dimensions"
            )));
        }
        let mut ids = std::mem::take(&mut self.ids);
        Self::read(graph, ids_id, &mut ids)?;
        let (ne0, n_tokens) = (xd.ne[0], xd.ne[2]);
        let e = self.entries.entry(wname.to_string()).or_default();
        if e.counts.len() == 1 && n_as > 1 {
            // An entry loaded from an older file with one count.
            e.counts = vec![e.counts[0]; n_as];
        }
        if e.sums.is_empty() {
            e.sums = vec![0.0; ne0 * n_as];
            e.counts = vec![0; n_as];
        } else if e.sums.len() != ne0 * n_as {
            self.ids = ids;
            return Err(inconsistent(wname, e.sums.len(), ne0 * n_as));
        } else if e.counts.len() != n_as {
            self.ids = ids;
            return Err(LlamaError::InvalidParam(format!(
                "inconsistent expert count for {wname} ({} vs {n_as})",
                e.counts.len()
            )));
        }
        let mut touched = vec![false; n_as];
        for idx in 0..idd.ne[0] {
            for row in 0..n_tokens {
                let at = row * idd.nb[1] + idx * idd.nb[0];
                let ex = i32::from_le_bytes([ids[at], ids[at + 1], ids[at + 2], ids[at + 3]]);
                let Some(ex) = usize::try_from(ex).ok().filter(|&ex| ex < n_as) else {
                    self.ids = ids;
                    return Err(LlamaError::InvalidParam(format!(
                        "expert id {ex} out of range for {wname} ({n_as} experts)"
                    )));
                };
                let i11 = idx % xd.ne[1];
                e.counts[ex] += 1;
                touched[ex] = true;
                add_squares(
                    &mut e.sums[ex * ne0..(ex + 1) * ne0],
                    data,
                    i11 * xd.nb[1] + row * xd.nb[2],
                );
            }
        }
        self.ids = ids;
        for (ex, _) in touched.iter().enumerate().filter(|(_, &t)| t) {
            if !e.sums[ex * ne0..(ex + 1) * ne0]
                .iter()
                .all(|v| v.is_finite())
            {
                return Err(non_finite(wname));
            }
        }
        let counts = e.counts.clone();
        for c in counts {
            self.advance(c)?;
        }
        Ok(())
    }

    fn collect_dense(
        &mut self,
        wname: &str,
        wne: [usize; 4],
        xd: &ggml_core::TensorDesc,
        data: &[u8],
    ) -> Result<()> {
        let n_mat = wne[2] * wne[3];
        let ne0 = xd.ne[0];
        let e = self.entries.entry(wname.to_string()).or_default();
        // One count per dense weight (an older file may have stored one
        // per matrix, all equal).
        if e.counts.len() > 1 && e.counts.iter().all(|&c| c == e.counts[0]) {
            e.counts.truncate(1);
        }
        if e.sums.is_empty() {
            e.sums = vec![0.0; ne0 * n_mat];
            e.counts = vec![0];
        } else if e.sums.len() != ne0 * n_mat {
            return Err(inconsistent(wname, e.sums.len(), ne0 * n_mat));
        }
        for i3 in 0..xd.ne[3] {
            for i2 in 0..xd.ne[2] {
                let mat = (i3 % wne[3]) * wne[2] + (i2 % wne[2]);
                let acc = &mut e.sums[mat * ne0..(mat + 1) * ne0];
                for row in 0..xd.ne[1] {
                    add_squares(acc, data, row * xd.nb[1] + i2 * xd.nb[2] + i3 * xd.nb[3]);
                }
            }
        }
        if !e.sums.iter().all(|v| v.is_finite()) {
            return Err(non_finite(wname));
        }
        let rows = (xd.ne[1] * xd.ne[2] * xd.ne[3] / n_mat) as i64;
        let mut counts = Vec::with_capacity(e.counts.len());
        for c in &mut e.counts {
            *c += rows;
            counts.push(*c);
        }
        for c in counts {
            self.advance(c)?;
        }
        Ok(())
    }

    /// Moves the chunk counter to `count`'s chunk, writing the output or a
    /// numbered copy when a multiple of their frequency is passed.
    fn advance(&mut self, count: i64) -> Result<()> {
        let n_chunk = (count / self.chunk_size()) as i32;
        if n_chunk <= self.last_chunk {
            return Ok(());
        }
        let step = n_chunk - self.last_chunk;
        self.last_chunk = n_chunk;
        let due = |freq: i32| freq > 0 && (n_chunk % freq) / step == 0;
        if due(self.params.out_freq) {
            self.save(None)?;
        }
        if due(self.params.save_freq) {
            self.save(Some(n_chunk))?;
        }
        Ok(())
    }
}

fn mismatch(name: &str, what: &str, got: usize, have: usize) -> LlamaError {
    LlamaError::InvalidParam(format!(
        "mismatched {what} size for {name}: {got} != {have}"
    ))
}

fn inconsistent(name: &str, have: usize, got: usize) -> LlamaError {
    LlamaError::InvalidParam(format!(
        "inconsistent size for {name} ({have} vs {got}): the importance matrix loaded is of another model"
    ))
}

fn non_finite(name: &str) -> LlamaError {
    LlamaError::InvalidParam(format!("non-finite values detected in {name}"))
}

/// A [`Collector`] shared between the tool and the graph computations it
/// watches (see [`Context::set_eval_observer`](crate::Context::set_eval_observer)).
#[derive(Clone, Debug)]
pub struct SharedCollector(Arc<Mutex<Collector>>);

impl SharedCollector {
    /// Shares `c`.
    pub fn new(c: Collector) -> SharedCollector {
        SharedCollector(Arc::new(Mutex::new(c)))
    }

    /// The collector (a poisoned lock is taken over: the collector stays
    /// consistent between calls).
    pub fn lock(&self) -> MutexGuard<'_, Collector> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The observer to hand to a context.
    pub fn observer(&self) -> Box<dyn EvalObserver> {
        Box::new(self.clone())
    }
}

impl EvalObserver for SharedCollector {
    fn wants(&mut self, graph: &Graph, id: TensorId) -> bool {
        self.lock().wants(graph, id)
    }

    fn observe(&mut self, graph: &Graph, id: TensorId, _at: &Placement) -> bool {
        let mut c = self.lock();
        match c.collect(graph, id) {
            Ok(()) => true,
            Err(e) => {
                c.error.get_or_insert(e);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_the_copy_decoration() {
        assert_eq!(
            weight_name("CPU#blk.0.attn_k.weight#0"),
            "blk.0.attn_k.weight"
        );
        assert_eq!(
            weight_name("CPU#blk.0.attn_k.weight"),
            "blk.0.attn_k.weight"
        );
        assert_eq!(weight_name("blk.0.attn_k.weight"), "blk.0.attn_k.weight");
    }

    fn params(dir: &std::path::Path) -> CollectorParams {
        CollectorParams {
            chunk_size: 4,
            process_output: false,
            out_freq: 0,
            save_freq: 0,
            out_file: dir.join("o.gguf"),
            format: OutputFormat::Gguf,
            prompt_file: Some("t.txt".into()),
        }
    }

    #[test]
    fn loading_adds_sums_and_counts_and_checks_sizes() {
        let dir = std::env::temp_dir();
        let mut c = Collector::new(params(&dir));
        let mut f = ImatrixFile::default();
        f.entries.insert(
            "w".into(),
            Entry {
                sums: vec![1.0, 2.0],
                counts: vec![8],
            },
        );
        f.datasets.push("a.txt".into());
        c.load(&f).unwrap();
        c.load(&f).unwrap();
        assert_eq!(c.entries()["w"].sums, [2.0, 4.0]);
        assert_eq!(c.entries()["w"].counts, [16]);
        assert_eq!(c.last_chunk(), 4);
        // A .dat file: averages times calls, turned back into sums.
        let mut legacy = f.clone();
        legacy.is_legacy = true;
        legacy.entries.get_mut("w").unwrap().counts = vec![2];
        c.load(&legacy).unwrap();
        assert_eq!(c.entries()["w"].sums, [6.0, 12.0]);
        assert_eq!(c.entries()["w"].counts, [16 + 8]);
        let out = c.to_file();
        assert_eq!(out.datasets, ["a.txt", "a.txt", "a.txt", "t.txt"]);
        assert_eq!((out.chunk_count, out.chunk_size), (6, 4));
        // Another model's entry of another size.
        let mut other = f.clone();
        other.entries.get_mut("w").unwrap().sums = vec![1.0; 3];
        let e = c.load(&other).unwrap_err().to_string();
        assert!(e.contains("mismatched sums size for w"), "{e}");
    }
}

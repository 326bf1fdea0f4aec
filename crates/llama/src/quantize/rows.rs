//! Converting one tensor's rows: source bytes to f32, f32 to the new type,
//! in slabs of bounded size, by a fixed number of threads. Work is split
//! into chunks of whole rows (and never across experts); each thread
//! converts a chunk's rows to f32 in a buffer of its own and quantizes
//! them, and each row is quantized on its own, so the bytes are the same
//! for any thread count or slab size.

use gguf::GgmlType;
use rayon::prelude::*;

use crate::error::{LlamaError, Result};
use ggml_core::quants;

/// Elements per unit of work, at least (llama.cpp's `min_chunk_size`).
const MIN_CHUNK: usize = 32 * 512;

/// The threads of a run.
pub(super) struct Pool {
    pool: Option<rayon::ThreadPool>,
}

impl Pool {
    /// `n` threads; 0 takes every core.
    pub(super) fn new(n: usize) -> Result<Pool> {
        let n = if n == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            n
        };
        if n < 2 {
            return Ok(Pool { pool: None });
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .map_err(|e| LlamaError::InvalidParam(format!("cannot start {n} threads: {e}")))?;
        Ok(Pool { pool: Some(pool) })
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(p) => p.install(f),
            None => f(),
        }
    }
}

/// One tensor to convert.
pub(super) struct Job<'a> {
    pub name: &'a str,
    pub src_type: GgmlType,
    pub dst_type: GgmlType,
    pub n_per_row: usize,
    /// Rows of one expert (`ne[1]`): chunks never cross them, each expert
    /// has its own importance values.
    pub rows_per_expert: usize,
    pub n_rows: usize,
    /// `n_per_row` values per expert.
    pub imatrix: Option<&'a [f32]>,
    pub max_buf_size: usize,
}

/// The most bytes of input and output rows held at once for one tensor
/// (below a smaller `--max-buffer-size`). The rows are converted to f32
/// chunk by chunk in each thread, so no whole slab is ever held as f32.
pub(super) const SLAB_BYTES: usize = 16 << 20;

/// Buffers kept across tensors.
#[derive(Default)]
pub(super) struct Buffers {
    out: Vec<u8>,
}

/// Rows per slab for rows of `bytes_per_row` (llama.cpp's count of input,
/// output and f32 bytes) and `io_per_row` (what this one holds).
pub(super) fn slab_rows(
    max_buf_size: usize,
    bytes_per_row: usize,
    io_per_row: usize,
    n_rows: usize,
) -> usize {
    (max_buf_size / bytes_per_row.max(1))
        .min(SLAB_BYTES / io_per_row.max(1))
        .clamp(1, n_rows.max(1))
}

impl Pool {
    /// Converts `src` (the whole tensor) and hands the new bytes to `sink`
    /// slab by slab, then the slab's input to `done`; returns the bytes
    /// written.
    pub(super) fn convert(
        &self,
        job: &Job<'_>,
        src: &[u8],
        bufs: &mut Buffers,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
        done: &dyn Fn(&[u8]),
    ) -> Result<u64> {
        let n = job.n_per_row;
        let bad = |why: String| LlamaError::Tensor(format!("tensor '{}': {why}", job.name));
        if job.src_type != GgmlType::F32 && !quants::can_dequantize(job.src_type) {
            return Err(bad(format!(
                "cannot dequantize/convert tensor type {}",
                job.src_type.name()
            )));
        }
        if quants::needs_imatrix(job.dst_type) && job.imatrix.is_none() {
            return Err(bad(format!(
                "quantizing to {} needs an importance matrix entry for it",
                job.dst_type.name()
            )));
        }
        let with_imatrix = job.imatrix.is_some() && quants::can_quantize_with_imatrix(job.dst_type);
        if !quants::can_quantize(job.dst_type) && !with_imatrix {
            return Err(LlamaError::NotSupported(format!(
                "quantizing to {} (tensor {})",
                job.dst_type.name(),
                job.name
            )));
        }
        let rs_src = quants::row_size(job.src_type, n).map_err(|e| bad(e.to_string()))?;
        let rs_dst = quants::row_size(job.dst_type, n).map_err(|e| bad(e.to_string()))?;
        if src.len() != rs_src * job.n_rows {
            return Err(bad(format!(
                "{} bytes of data, {} rows of {} take {}",
                src.len(),
                job.n_rows,
                job.src_type.name(),
                rs_src * job.n_rows
            )));
        }
        let per_expert = job.rows_per_expert.max(1);
        if let Some(w) = job.imatrix {
            let experts = job.n_rows.div_ceil(per_expert);
            if w.len() != n * experts {
                return Err(bad(format!(
                    "importance matrix of {} values for {experts} experts of {n} columns",
                    w.len()
                )));
            }
        }
        let extra = if job.src_type == GgmlType::F32 {
            0
        } else {
            n * 4
        };
        let slab = slab_rows(
            job.max_buf_size,
            rs_src + rs_dst + extra,
            rs_src + rs_dst,
            job.n_rows,
        );
        let rows_per_chunk = if n >= MIN_CHUNK {
            1
        } else {
            MIN_CHUNK.div_ceil(n)
        };

        let mut total = 0u64;
        let mut first = 0usize;
        while first < job.n_rows {
            let nr = slab.min(job.n_rows - first);
            let src = &src[first * rs_src..(first + nr) * rs_src];
            bufs.out.resize(nr * rs_dst, 0);
            let out = &mut bufs.out[..nr * rs_dst];

            // Chunks of rows, cut at expert boundaries, each with its part
            // of the output.
            let mut chunks = Vec::new();
            let mut r = 0;
            let mut rest = &mut *out;
            while r < nr {
                let global = first + r;
                let len = rows_per_chunk
                    .min(nr - r)
                    .min(per_expert - global % per_expert);
                let (a, b) = std::mem::take(&mut rest).split_at_mut(len * rs_dst);
                chunks.push((r, len, a));
                rest = b;
                r += len;
            }
            // Each thread converts its chunk's rows to f32 in its own
            // buffer, then quantizes them.
            self.run(|| {
                chunks.par_iter_mut().try_for_each_init(
                    Vec::new,
                    |f32s: &mut Vec<f32>, (r, len, dst)| -> Result<()> {
                        let (r, len) = (*r, *len);
                        let global = first + r;
                        f32s.resize(len * n, 0.0);
                        for (y, x) in f32s
                            .chunks_exact_mut(n)
                            .zip(src[r * rs_src..(r + len) * rs_src].chunks_exact(rs_src))
                        {
                            quants::dequantize_row(job.src_type, x, y)
                                .map_err(|e| bad(e.to_string()))?;
                        }
                        let w = job
                            .imatrix
                            .map(|w| &w[(global / per_expert) * n..(global / per_expert + 1) * n]);
                        quants::quantize_rows(job.dst_type, f32s, dst, n, w)
                            .map_err(|e| bad(e.to_string()))?;
                        quants::validate_row_data(job.dst_type, dst)
                            .map_err(|e| bad(format!("quantized data validation failed: {e}")))
                    },
                )
            })?;
            drop(chunks);
            sink(out)?;
            done(src);
            total += out.len() as u64;
            first += nr;
        }
        Ok(total)
    }
}

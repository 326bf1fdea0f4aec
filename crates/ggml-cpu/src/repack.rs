//! The CPU's repacked-weights buffer type, `CPU_REPACK` (as ggml's CPU
//! "extra" buffer type): matrices that MUL_MAT reads as weights, and the
//! expert stacks of MUL_MAT_ID, are stored already packed in the panel
//! layout of their [`Gemm`] kernel, 16 rows to a panel with one row per
//! vector lane, so that every MUL_MAT and MUL_MAT_ID, including the matrix
//! x vector of token generation, runs the panel kernel straight from
//! memory without packing anything.
//!
//! Only types whose panels are exactly as compact as their rows are stored
//! this way (`panel_bytes(n) == 16 x row bytes`): generation reads every
//! weight byte once per token, so a larger layout would cost speed. A
//! matrix whose row count is not a multiple of 16 has its last panel
//! completed with zero rows. Writes (`set_tensor`) take rows in the plain
//! ggml layout, whole groups of 16 rows at a time (a whole tensor always
//! qualifies), and pack them; the data cannot be read back, and only
//! MUL_MAT or MUL_MAT_ID, with the whole tensor as its weights, can
//! compute with it: any other use is an error naming the tensor. A stack
//! of expert matrices [k, m, n_expert] is stored one matrix after the
//! other, each completed to whole panels. Which types qualify depends on
//! the kernels of this CPU: without a panel kernel for the type (no AVX2,
//! or the scalar level chosen through `GGML_CPU_ISA`) nothing is accepted
//! and weights stay in the plain CPU buffer type. The layouts do not depend
//! on the instruction set (AVX-512 VNNI and AVX2 kernels read the same
//! panels).

use std::any::Any;
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use ggml_core::backend::{Buffer, BufferCommon, BufferType, Placement};
use ggml_core::graph::{Graph, TensorId};
use ggml_core::host::{HostBuffer, HostBufferType, HOST_ALIGNMENT};
use ggml_core::{Error, Op, Result, TensorDesc};
use rayon::prelude::*;

use crate::simd::{self, Gemm, PANEL_ROWS};

/// Name of the buffer type.
pub const REPACK_NAME: &str = "CPU_REPACK";

/// The panel kernel whose layout stores `desc` when it can be stored
/// repacked: a dense matrix (or stack of matrices) of a type with a panel
/// kernel whose panels take exactly the bytes of their rows.
pub(crate) fn layout_for(desc: &TensorDesc) -> Option<&'static Gemm> {
    let g = simd::kernels().gemm(desc.ty)?;
    let k = desc.ne[0];
    let bs = desc.ty.block_size();
    let ok = desc.ne.iter().all(|&n| n > 0)
        && k % bs == 0
        && desc.nb == ggml_core::tensor::contiguous_strides(desc.ty, &desc.ne)
        && (g.panel_bytes)(k) == PANEL_ROWS * desc.row_bytes();
    ok.then_some(g)
}

/// Panels of one matrix of `desc`.
fn panels(desc: &TensorDesc) -> usize {
    desc.ne[1].div_ceil(PANEL_ROWS)
}

/// Bytes `desc` takes when stored with `g`'s layout.
fn packed_size(desc: &TensorDesc, g: &Gemm) -> usize {
    panels(desc) * (g.panel_bytes)(desc.ne[0]) * desc.ne[2] * desc.ne[3]
}

/// The repacked weights buffer type.
pub struct RepackBufferType {
    host: Arc<HostBufferType>,
    me: Weak<RepackBufferType>,
}

impl std::fmt::Debug for RepackBufferType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REPACK_NAME)
    }
}

/// The repacked weights buffer type (one per process).
pub fn repack_buffer_type() -> Arc<dyn BufferType> {
    repack_singleton().clone()
}

fn repack_singleton() -> &'static Arc<RepackBufferType> {
    static BUFT: OnceLock<Arc<RepackBufferType>> = OnceLock::new();
    BUFT.get_or_init(|| {
        Arc::new_cyclic(|me| RepackBufferType {
            host: HostBufferType::new(REPACK_NAME, HOST_ALIGNMENT, usize::MAX),
            me: me.clone(),
        })
    })
}

/// True when this CPU stores some type repacked (it has a panel kernel).
pub(crate) fn available() -> bool {
    let k = simd::kernels();
    ggml_core::Type::all().iter().any(|&t| k.gemm(t).is_some())
}

impl BufferType for RepackBufferType {
    fn name(&self) -> &str {
        REPACK_NAME
    }
    fn alignment(&self) -> usize {
        HOST_ALIGNMENT
    }
    fn alloc_size(&self, desc: &TensorDesc) -> usize {
        match layout_for(desc) {
            Some(g) => packed_size(desc, g),
            None => desc.nbytes(),
        }
    }
    fn is_host(&self) -> bool {
        // The CPU can address the memory, but its layout is not ggml's:
        // nothing may copy it as plain tensor data.
        false
    }
    fn alloc_buffer(&self, size: usize) -> Result<Arc<dyn Buffer>> {
        let buft = self
            .me
            .upgrade()
            .ok_or_else(|| Error::Invalid(format!("{REPACK_NAME}: buffer type dropped")))?;
        Ok(Arc::new(RepackBuffer {
            buft,
            mem: self.host.alloc(size)?,
            tensors: Mutex::new(BTreeMap::new()),
        }))
    }
    fn device_name(&self) -> Option<String> {
        Some(crate::CPU_NAME.to_string())
    }
    fn supports_weight(&self, graph: &Graph, node: TensorId, weight: TensorId) -> bool {
        let n = graph.node(node);
        matches!(n.op, Op::MulMat | Op::MulMatId)
            && n.src.first() == Some(&weight)
            && n.src[1..].iter().all(|&s| s != weight)
            && layout_for(graph.desc(weight)).is_some()
    }
}

/// Bumped whenever a tensor is added to a repacked buffer's table: what
/// was derived from the tables before (see [`crate::compute::Plans`]) may
/// no longer hold.
static TABLES_EPOCH: AtomicU64 = AtomicU64::new(0);

/// The current [`TABLES_EPOCH`].
pub(crate) fn tables_epoch() -> u64 {
    TABLES_EPOCH.load(Ordering::Acquire)
}

/// A tensor stored in a repacked buffer.
struct Packed {
    desc: TensorDesc,
    gemm: &'static Gemm,
}

/// A buffer of [`RepackBufferType`]: host memory holding panels, and the
/// layout of every tensor placed in it.
pub struct RepackBuffer {
    buft: Arc<RepackBufferType>,
    mem: Arc<HostBuffer>,
    /// Tensors by offset.
    tensors: Mutex<BTreeMap<usize, Packed>>,
}

impl RepackBuffer {
    /// The panel kernel of the tensor `desc` placed at `offset`, when it is
    /// one of this buffer's tensors as a whole (not a view of one).
    pub(crate) fn packed_at(&self, offset: usize, desc: &TensorDesc) -> Option<&'static Gemm> {
        let t = self.tensors.lock().ok()?;
        let p = t.get(&offset)?;
        (p.desc.ty == desc.ty && p.desc.ne == desc.ne && p.desc.nb == desc.nb).then_some(p.gemm)
    }

    fn err(&self, what: impl std::fmt::Display) -> Error {
        Error::Backend(format!("{REPACK_NAME}: {what}"))
    }
}

impl Buffer for RepackBuffer {
    /// The host buffer's size and usage (the bytes are its bytes).
    fn common(&self) -> &BufferCommon {
        self.mem.common()
    }
    fn buffer_type(&self) -> Arc<dyn BufferType> {
        self.buft.clone()
    }
    fn base(&self) -> Option<NonNull<u8>> {
        self.mem.base()
    }
    fn init_tensor(&self, desc: &TensorDesc, offset: usize) -> Result<()> {
        let gemm = layout_for(desc).ok_or_else(|| {
            self.err(format!(
                "tensor '{}' ({} {:?}) cannot be stored repacked: this CPU has no panel \
                 kernel for its type, or the type's panels are larger than its rows, \
                 or it is not a dense matrix",
                desc.name, desc.ty, desc.ne
            ))
        })?;
        let size = packed_size(desc, gemm);
        if offset.checked_add(size).is_none_or(|e| e > self.size()) {
            return Err(Error::OutOfBounds {
                what: format!("repacked tensor '{}'", desc.name),
                offset,
                end: offset.saturating_add(size),
                size: self.size(),
            });
        }
        let mut t = self
            .tensors
            .lock()
            .map_err(|_| self.err("tensor table poisoned"))?;
        let overlaps = t.iter().any(|(&o, p)| {
            let end = o + packed_size(&p.desc, p.gemm);
            o < offset + size && offset < end && !(o == offset && p.desc == *desc)
        });
        if overlaps {
            return Err(self.err(format!(
                "tensor '{}' at offset {offset} overlaps another tensor",
                desc.name
            )));
        }
        t.insert(
            offset,
            Packed {
                desc: desc.clone(),
                gemm,
            },
        );
        TABLES_EPOCH.fetch_add(1, Ordering::Release);
        Ok(())
    }
    fn set_tensor(&self, offset: usize, data: &[u8]) -> Result<()> {
        let (start, desc, gemm) = {
            let t = self
                .tensors
                .lock()
                .map_err(|_| self.err("tensor table poisoned"))?;
            let (&start, p) = t
                .range(..=offset)
                .next_back()
                .filter(|(&s, p)| offset < s + p.desc.nbytes())
                .ok_or_else(|| self.err(format!("no tensor at offset {offset}")))?;
            (start, p.desc.clone(), p.gemm)
        };
        let rb = desc.row_bytes();
        let rel = offset - start;
        let bad = |why: &str| {
            self.err(format!(
                "write of {} bytes at byte {rel} of tensor '{}': {why}",
                data.len(),
                desc.name
            ))
        };
        if rel + data.len() > desc.nbytes() {
            return Err(bad("past the end of the tensor"));
        }
        if rel % rb != 0 || data.len() % rb != 0 {
            return Err(bad("writes must hold whole rows"));
        }
        let ne1 = desc.ne[1];
        let (r0, r1) = (rel / rb, (rel + data.len()) / rb);
        // Every group of rows a panel holds must lie inside the write.
        let group_start = |r: usize| r - (r % ne1) % PANEL_ROWS;
        let group_end = |r: usize| (group_start(r) + PANEL_ROWS).min(r - r % ne1 + ne1);
        if r0 < r1 && (group_start(r0) != r0 || group_end(r1 - 1) != r1) {
            return Err(bad(
                "writes must hold whole groups of 16 rows of each matrix",
            ));
        }
        let k = desc.ne[0];
        let pb = (gemm.panel_bytes)(k);
        let per_matrix = panels(&desc);
        let mut groups = Vec::new();
        let mut r = r0;
        while r < r1 {
            let e = group_end(r);
            groups.push((r, e));
            r = e;
        }
        let base = self.base().ok_or_else(|| self.err("no memory"))?;
        let dst = base.as_ptr() as usize + start;
        groups.par_iter().for_each(|&(g0, g1)| {
            let (m, i) = (g0 / ne1, g0 % ne1);
            let p = m * per_matrix + i / PANEL_ROWS;
            let mut rows: [&[u8]; PANEL_ROWS] = [&[]; PANEL_ROWS];
            for (j, row) in rows.iter_mut().enumerate().take(g1 - g0) {
                let at = (g0 + j - r0) * rb;
                *row = &data[at..at + rb];
            }
            // SAFETY: panel `p` lies inside the tensor's packed extent,
            // which `init_tensor` checked against the buffer; panels of
            // distinct groups do not overlap, and nothing reads a tensor
            // while it is being written.
            let out = unsafe { std::slice::from_raw_parts_mut((dst + p * pb) as *mut u8, pb) };
            (gemm.pack)(k, &rows[..g1 - g0], out);
        });
        Ok(())
    }
    fn get_tensor(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let _ = out;
        Err(self.err(format!(
            "the data at offset {offset} is stored repacked for the CPU's matrix \
             kernels and cannot be read back"
        )))
    }
    fn memset_tensor(&self, offset: usize, value: u8, size: usize) -> Result<()> {
        let _ = (value, size);
        Err(self.err(format!(
            "cannot fill bytes at offset {offset}: repacked weights are only written whole"
        )))
    }
    fn cpy_tensor(&self, src: &Placement, dst_offset: usize, size: usize) -> Result<bool> {
        let _ = (src, dst_offset, size);
        Ok(false)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

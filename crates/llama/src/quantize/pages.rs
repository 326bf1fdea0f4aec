//! Giving back the resident pages of the input once a slab of it is
//! written, so that a run's resident memory stays near one slab whatever
//! the model's size (llama.cpp unmaps each tensor once it is written).

use gguf::GgufModel;
use memmap2::Mmap;

/// The mapping of one input file, when it is mapped.
pub(super) struct Pages<'a> {
    map: Option<&'a Mmap>,
}

impl<'a> Pages<'a> {
    /// The mapping of part `file` of `model`.
    pub(super) fn of(model: &'a GgufModel, file: usize) -> Pages<'a> {
        Pages {
            map: model.files().get(file).and_then(|f| f.mmap()).map(|m| &**m),
        }
    }

    /// Drops the resident pages under `bytes`, a part of the mapping that
    /// has been read. A later read of them faults the same file bytes back
    /// in, so this only costs time if they are read again. Does nothing
    /// for bytes outside the mapping or where the system refuses.
    pub(super) fn release(&self, bytes: &[u8]) {
        let Some(map) = self.map else { return };
        let base = map.as_ptr() as usize;
        let start = bytes.as_ptr() as usize;
        if bytes.is_empty() || start < base || start + bytes.len() > base + map.len() {
            return;
        }
        #[cfg(unix)]
        {
            // SAFETY: the map is a read-only shared mapping of a file
            // (memmap2's `Mmap::map`). MADV_DONTNEED on such a mapping only
            // drops page-table entries: the next access reads the same
            // bytes from the file, so the slices borrowed from it keep
            // their contents. (It would lose data only on private or
            // anonymous mappings that were written, which this is not.)
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    start - base,
                    bytes.len(),
                )
            };
        }
    }
}

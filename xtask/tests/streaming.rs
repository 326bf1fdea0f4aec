//! gen-model streams: the heap it uses is bounded by its chunk size, not by
//! the size of the model. This binary counts every allocation, so it holds
//! this one test only.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use xtask::gen_model::shape::{Preset, ShapeOverrides};
use xtask::gen_model::{generate, WriteSettings, DEFAULT_CHUNK_BYTES};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = CURRENT.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counters are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `alloc` above with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Counts bytes and drops them.
struct CountingSink(u64);

impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn peak_heap_is_bounded_by_the_chunk_not_the_model() {
    // ~150 MB of f32 tensors, the two largest 65 MB each.
    let o = ShapeOverrides {
        n_vocab: Some(32000),
        n_embd: Some(512),
        n_layer: Some(2),
        n_head: Some(8),
        n_head_kv: Some(4),
        n_ff: Some(1376),
        ..Default::default()
    };
    let spec = common::spec(Preset::Stories260k, o, "f32", 1);
    let before = CURRENT.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let (sink, summary) =
        generate(&spec, &WriteSettings::default(), CountingSink(0)).expect("generate");
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert_eq!(sink.0, summary.file_bytes);
    assert!(
        summary.file_bytes > 140 << 20,
        "model is {} bytes",
        summary.file_bytes
    );
    // One chunk, one f32 row per worker, the header (the vocabulary is
    // ~1 MB) and its encoded copy.
    let bound = DEFAULT_CHUNK_BYTES + (8 << 20);
    eprintln!("model {} bytes, peak heap {peak} bytes", summary.file_bytes);
    assert!(
        peak < bound,
        "peak heap {peak} bytes, expected below {bound}"
    );
}

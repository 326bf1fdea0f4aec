//! gen-model streams: the heap it uses is bounded by its chunk size, not by
//! the size of the model. This binary counts every allocation, so it holds
//! this one test only.

mod common;

use std::io::Write;

use test_support::{peak_during, CountingAlloc};
use xtask::gen_model::shape::{Preset, ShapeOverrides};
use xtask::gen_model::{generate, WriteSettings, DEFAULT_CHUNK_BYTES};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

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
    let mut out = None;
    let peak = peak_during(|| {
        out = Some(generate(&spec, &WriteSettings::default(), CountingSink(0)).expect("generate"));
    });
    let (sink, summary) = out.expect("generated");
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

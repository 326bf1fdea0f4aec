//! Memory on hostile input: with a counting allocator, parsing any file
//! allocates at most a small multiple of the file's own size, whatever
//! counts and lengths it declares. One test in this binary, so that no other
//! test's allocations are counted.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Cursor;
use std::sync::atomic::{AtomicUsize, Ordering};

use gguf::GgufFile;

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = CURRENT.fetch_add(by, Ordering::SeqCst) + by;
    PEAK.fetch_max(now, Ordering::SeqCst);
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged and only updates counters besides.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, passed through.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours, passed through.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::SeqCst);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours, passed through.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Count the moment both blocks may exist.
            grew(new_size);
            CURRENT.fetch_sub(layout.size(), Ordering::SeqCst);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Bytes of peak allocation above the starting level while `f` runs.
fn peak_during(f: impl FnOnce()) -> usize {
    let base = CURRENT.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f();
    PEAK.load(Ordering::SeqCst).saturating_sub(base)
}

/// Allowed peak for parsing a file of `len` bytes: a small multiple of the
/// file plus the stream buffer. The worst case is a file of one-byte keys
/// with one-byte values (14 bytes each on disk, a 48-byte entry in memory,
/// plus vector growth).
fn bound(len: usize) -> usize {
    12 * len + 256 * 1024
}

fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(n_tensors.to_le_bytes());
    b.extend(n_kv.to_le_bytes());
    b
}

/// Files built to be as expensive as possible per byte.
fn adversarial() -> Vec<(&'static str, Vec<u8>)> {
    let n = 20_000u64;
    let mut out = Vec::new();

    // Many one-byte keys with one-byte values.
    let mut b = header(0, n);
    for i in 0..n {
        b.extend(1u64.to_le_bytes());
        b.push(b'a' + (i % 26) as u8);
        b.extend(0u32.to_le_bytes());
        b.push(0);
    }
    // (duplicates make it fail late, after everything is allocated)
    out.push(("tiny kvs", b));

    // Many tensor infos whose data is missing.
    let mut b = header(n, 0);
    for i in 0..n {
        let name = format!("{i}");
        b.extend((name.len() as u64).to_le_bytes());
        b.extend(name.as_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend((i * 32).to_le_bytes());
    }
    out.push(("tiny tensor infos", b));

    // Arrays of empty arrays, and of empty strings.
    let mut b = header(0, 1);
    b.extend(1u64.to_le_bytes());
    b.push(b'k');
    b.extend(9u32.to_le_bytes());
    b.extend(9u32.to_le_bytes());
    b.extend(n.to_le_bytes());
    for _ in 0..n {
        b.extend(0u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
    }
    out.push(("nested empty arrays", b));
    let mut b = header(0, 1);
    b.extend(1u64.to_le_bytes());
    b.push(b'k');
    b.extend(9u32.to_le_bytes());
    b.extend(8u32.to_le_bytes());
    b.extend(n.to_le_bytes());
    for _ in 0..n {
        b.extend(0u64.to_le_bytes());
    }
    out.push(("empty strings", b));

    // Counts claiming far more than the file holds.
    for claim in [u64::MAX, 1 << 40, 1 << 20] {
        out.push(("huge tensor count", header(claim, 0)));
        out.push(("huge kv count", header(0, claim)));
        let mut b = header(0, 1);
        b.extend(1u64.to_le_bytes());
        b.push(b'k');
        b.extend(9u32.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(claim.to_le_bytes());
        b.extend([0u8; 64]);
        out.push(("huge array length", b));
        let mut b = header(0, 1);
        b.extend(claim.to_le_bytes());
        b.extend([b'k'; 64]);
        out.push(("huge key length", b));
    }
    out
}

#[test]
fn parsing_allocates_a_bounded_multiple_of_the_file_size() {
    let mut cases = adversarial();
    let sample = common::sample_file();
    let mut rng = common::Rng(7);
    for _ in 0..300 {
        let mut b = sample.clone();
        let at = rng.below(b.len().saturating_sub(8));
        b[at..at + 8].copy_from_slice(&rng.next_u64().to_le_bytes());
        cases.push(("mutated sample", b));
    }
    if let Some(dir) = common::fixtures() {
        for p in [
            "vocab/ggml-vocab-deepseek-llm.gguf",
            "models/stories260K.gguf",
        ] {
            cases.push(("fixture", std::fs::read(dir.join(p)).expect("fixture")));
        }
    }
    let mut worst = (0.0f64, "");
    for (what, bytes) in &cases {
        for streamed in [false, true] {
            let peak = peak_during(|| {
                let r = if streamed {
                    GgufFile::read_from(Cursor::new(bytes.as_slice()))
                } else {
                    GgufFile::from_bytes(bytes)
                };
                drop(r);
            });
            assert!(
                peak <= bound(bytes.len()),
                "{what} ({} bytes, streamed {streamed}): peak {peak} bytes",
                bytes.len()
            );
            let ratio = peak as f64 / bytes.len() as f64;
            if bytes.len() > 100_000 {
                eprintln!(
                    "{what} ({} bytes, streamed {streamed}): peak {:.2}x",
                    bytes.len(),
                    ratio
                );
                if ratio > worst.0 {
                    worst = (ratio, what);
                }
            }
        }
    }
    eprintln!(
        "worst peak/file-size ratio over files > 100 kB: {:.2} ({})",
        worst.0, worst.1
    );
}

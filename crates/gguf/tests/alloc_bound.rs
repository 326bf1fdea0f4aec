//! Memory on hostile input: with a counting allocator, parsing any file
//! allocates at most a small multiple of the file's own size, whatever
//! counts and lengths it declares. One test in this binary, so that no other
//! test's allocations are counted.

mod common;

use std::io::Cursor;

use gguf::GgufFile;
use test_support::{peak_during, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

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

/// The start of a file of one key `k` holding an array of `count` elements
/// of value type `et`: the elements are the caller's to write.
fn array_kv(et: u32, count: u64) -> Vec<u8> {
    let mut b = header(0, 1);
    b.extend(1u64.to_le_bytes());
    b.push(b'k');
    b.extend(9u32.to_le_bytes());
    b.extend(et.to_le_bytes());
    b.extend(count.to_le_bytes());
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
    let mut b = array_kv(9, n);
    for _ in 0..n {
        b.extend(0u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
    }
    out.push(("nested empty arrays", b));
    let mut b = array_kv(8, n);
    for _ in 0..n {
        b.extend(0u64.to_le_bytes());
    }
    out.push(("empty strings", b));

    // Counts claiming far more than the file holds.
    for claim in [u64::MAX, 1 << 40, 1 << 20] {
        out.push(("huge tensor count", header(claim, 0)));
        out.push(("huge kv count", header(0, claim)));
        let mut b = array_kv(0, claim);
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

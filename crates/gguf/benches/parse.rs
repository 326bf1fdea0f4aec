//! Parsing speed on a large vocabulary (102,400 tokens plus merges).

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};

fn fixture() -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    let p = dir.join("vocab/ggml-vocab-deepseek-llm.gguf");
    p.is_file().then_some(p)
}

fn parse(c: &mut Criterion) {
    let Some(path) = fixture() else {
        eprintln!("skipped: no fixtures");
        return;
    };
    c.bench_function("open ggml-vocab-deepseek-llm.gguf (mmap + parse)", |b| {
        b.iter(|| {
            let f = gguf::GgufFile::open(&path).expect("parse");
            assert_eq!(f.get_array_len("tokenizer.ggml.tokens").ok(), Some(102_400));
            f
        })
    });
    let bytes = std::fs::read(&path).expect("read");
    c.bench_function("parse ggml-vocab-deepseek-llm.gguf from memory", |b| {
        b.iter(|| gguf::GgufFile::from_bytes(&bytes).expect("parse"))
    });
}

criterion_group!(benches, parse);
criterion_main!(benches);

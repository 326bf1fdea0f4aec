//! Arbitrary bytes through every vocabulary of the fixtures (SPM, BPE with
//! each pre-tokenizer there, WPM): tokenize with and without special
//! tokens, then detokenize and read every piece back.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use llama::vocab::Vocab;

const FILES: &[&str] = &[
    "ggml-vocab-llama-spm.gguf",
    "ggml-vocab-gpt-2.gguf",
    "ggml-vocab-bert-bge.gguf",
    "ggml-vocab-phi-3.gguf",
    "ggml-vocab-deepseek-coder.gguf",
    "ggml-vocab-deepseek-llm.gguf",
    "ggml-vocab-falcon.gguf",
    "ggml-vocab-mpt.gguf",
    "ggml-vocab-starcoder.gguf",
    "ggml-vocab-gpt-neox.gguf",
    "ggml-vocab-refact.gguf",
    "ggml-vocab-baichuan.gguf",
];

fn vocabs() -> &'static [Vocab] {
    static V: OnceLock<Vec<Vocab>> = OnceLock::new();
    V.get_or_init(|| {
        let dir = llama_rs_fuzz::fixtures().join("vocab");
        FILES
            .iter()
            .map(|f| {
                let file = gguf::GgufFile::open(dir.join(f)).expect("vocab file");
                Vocab::from_gguf(&file).unwrap_or_else(|e| panic!("{f}: {e}"))
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, text)) = data.split_first() else {
        return;
    };
    let vocabs = vocabs();
    let v = &vocabs[usize::from(sel) % vocabs.len()];
    let add_special = sel & 0x40 != 0;
    let parse_special = sel & 0x80 != 0;
    let ids = v.tokenize_bytes(text, add_special, parse_special);
    let n = v.n_tokens() as i32;
    for &id in &ids {
        assert!(
            (0..n).contains(&id),
            "token {id} outside a vocabulary of {n}"
        );
        let _ = v.token_to_piece(id, parse_special);
    }
    let _ = v.detokenize(&ids, add_special, parse_special);
    if let Ok(s) = std::str::from_utf8(text) {
        assert_eq!(v.tokenize(s, add_special, parse_special), ids);
    }
    // Ids that are not in the vocabulary read as nothing, never a panic.
    let _ = v.detokenize(&[-1, n, i32::MAX, i32::MIN], false, true);
});

//! Every BPE pre-tokenizer name against llama.cpp: the GPT-2 test
//! vocabulary with its `tokenizer.ggml.pre` set to each name, and
//! llama.cpp's tokens for a set of texts (`data/pre_tokenizers.json`,
//! written by `data/pre_tokenizers.py`).

use std::collections::BTreeSet;

use llama::vocab::{PreType, TokenId, Vocab, VocabError};

/// The GPT-2 test vocabulary's metadata, if the fixtures are there.
fn gpt2_metadata() -> Option<gguf::Metadata> {
    let dir = test_support::fixtures_with("vocab")?;
    let path = dir.join("vocab/ggml-vocab-gpt-2.gguf");
    let file = gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Some(file.metadata().clone())
}

fn with_pre(meta: &gguf::Metadata, pre: &str) -> std::result::Result<Vocab, VocabError> {
    let mut meta = meta.clone();
    meta.set("tokenizer.ggml.pre", pre.to_string());
    Vocab::from_metadata(&meta)
}

struct Expected {
    texts: Vec<String>,
    /// Per name, llama.cpp's tokens of each text.
    names: Vec<(String, Vec<Vec<TokenId>>)>,
}

fn expected() -> Expected {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/pre_tokenizers.json"
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let texts = v["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let outputs: Vec<Vec<TokenId>> = v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            o.as_str()
                .unwrap()
                .split_whitespace()
                .map(|t| t.parse().unwrap())
                .collect()
        })
        .collect();
    let names = v["names"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, ids)| {
            let per_text = ids
                .as_array()
                .unwrap()
                .iter()
                .map(|i| outputs[i.as_u64().unwrap() as usize].clone())
                .collect();
            (name.clone(), per_text)
        })
        .collect();
    Expected { texts, names }
}

#[test]
fn every_pre_tokenizer_splits_as_llama_cpp() {
    let Some(meta) = gpt2_metadata() else { return };
    let exp = expected();
    let mut failures = Vec::new();
    for (name, per_text) in &exp.names {
        let vocab = with_pre(&meta, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (text, want) in exp.texts.iter().zip(per_text) {
            // llama-tokenize adds BOS when the vocabulary asks for it.
            let got = vocab.tokenize(text, vocab.add_bos(), true);
            if &got != want {
                failures.push(format!("{name}: {text:?}\n  got  {got:?}\n  want {want:?}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_pre_tokenizer_type_has_reference_tokens() {
    let exp = expected();
    let covered: BTreeSet<String> = exp
        .names
        .iter()
        .map(|(n, _)| format!("{:?}", PreType::from_name(n).unwrap()))
        .collect();
    for pre in PreType::ALL {
        assert!(
            covered.contains(&format!("{pre:?}")),
            "{pre:?} has no name in data/pre_tokenizers.json"
        );
    }
}

#[test]
fn names_llama_cpp_has_and_this_crate_lacks_are_refused_by_name() {
    let Some(meta) = gpt2_metadata() else { return };
    for name in PreType::UNSUPPORTED {
        assert_eq!(PreType::from_name(name), None, "{name}");
        match with_pre(&meta, name) {
            Err(e @ VocabError::UnsupportedPreTokenizer(_)) => {
                let msg = e.to_string();
                assert!(msg.contains(name) && msg.contains("not supported"), "{msg}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    match with_pre(&meta, "no-such-pre") {
        Err(VocabError::UnknownPreTokenizer(n)) => assert_eq!(n, "no-such-pre"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn glm4_and_minicpm5_ignore_merges_like_llama3() {
    let Some(meta) = gpt2_metadata() else { return };
    for (name, ignore) in [
        ("glm4", true),
        ("minicpm5", true),
        ("youtu", true),
        ("falcon-h1", true),
        ("chatglm-bpe", false),
        ("qwen35", false),
        ("gpt-4o", false),
    ] {
        let v = with_pre(&meta, name).unwrap();
        assert_eq!(v.ignore_merges(), ignore, "{name}");
    }
    for (name, clean) in [("gpt-4o", false), ("exaone4", true), ("trillion", false)] {
        assert_eq!(
            with_pre(&meta, name).unwrap().clean_spaces(),
            clean,
            "{name}"
        );
    }
}

//! Tokenizer conformance against llama.cpp's outputs: the vocab-only GGUF
//! files with their test strings, and the stories260K story.

use std::path::{Path, PathBuf};

use llama::vocab::{PreType, TokenAttr, TokenId, Vocab, VocabType};

/// The fixtures folder with its vocabularies (see [`test_support::fixtures`]).
fn fixtures() -> Option<PathBuf> {
    test_support::fixtures_with("vocab")
}

fn open(path: &Path) -> Vocab {
    let file = gguf::GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Vocab::from_gguf(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The test strings and expected ids of `<vocab>.inp` / `<vocab>.out`.
fn cases(gguf_path: &Path) -> Vec<(String, Vec<TokenId>)> {
    let inp = std::fs::read_to_string(gguf_path.with_extension("gguf.inp")).unwrap();
    let out = std::fs::read_to_string(gguf_path.with_extension("gguf.out")).unwrap();
    let mut texts: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    assert_eq!(
        texts.pop(),
        Some(""),
        "the .inp file ends with the separator"
    );
    let lines: Vec<&str> = out.split('\n').collect();
    assert!(lines.len() > texts.len());
    texts
        .iter()
        .zip(lines)
        .map(|(t, l)| {
            (
                t.to_string(),
                l.split_whitespace().map(|s| s.parse().unwrap()).collect(),
            )
        })
        .collect()
}

const WITH_CASES: [&str; 10] = [
    "bert-bge",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gpt-2",
    "llama-spm",
    "mpt",
    "phi-3",
    "refact",
    "starcoder",
];

fn check_cases(name: &str) {
    let Some(dir) = fixtures() else { return };
    let path = dir.join(format!("vocab/ggml-vocab-{name}.gguf"));
    let vocab = open(&path);
    let mut failures = Vec::new();
    let cases = cases(&path);
    assert_eq!(cases.len(), 46, "{name}");
    for (text, expected) in &cases {
        let got = vocab.tokenize(text, false, false);
        if &got != expected {
            failures.push(format!(
                "{text:?}\n  expected {expected:?}\n  got      {got:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn cases_bert_bge() {
    check_cases("bert-bge");
}

#[test]
fn cases_deepseek_coder() {
    check_cases("deepseek-coder");
}

#[test]
fn cases_deepseek_llm() {
    check_cases("deepseek-llm");
}

#[test]
fn cases_falcon() {
    check_cases("falcon");
}

#[test]
fn cases_gpt_2() {
    check_cases("gpt-2");
}

#[test]
fn cases_llama_spm() {
    check_cases("llama-spm");
}

#[test]
fn cases_mpt() {
    check_cases("mpt");
}

#[test]
fn cases_phi_3() {
    check_cases("phi-3");
}

#[test]
fn cases_refact() {
    check_cases("refact");
}

#[test]
fn cases_starcoder() {
    check_cases("starcoder");
}

/// The concatenated pieces of byte-level BPE and SPM tokens give back the
/// input; so does `detokenize` for vocabularies that do not clean spaces.
#[test]
fn round_trip() {
    let Some(dir) = fixtures() else { return };
    for name in WITH_CASES {
        let path = dir.join(format!("vocab/ggml-vocab-{name}.gguf"));
        let vocab = open(&path);
        if vocab.vocab_type() == VocabType::Wpm {
            continue; // lower-cases and strips accents
        }
        for (text, _) in cases(&path) {
            let ids = vocab.tokenize(&text, false, false);
            let mut pieces: Vec<u8> = ids
                .iter()
                .flat_map(|&id| vocab.token_to_piece(id, false))
                .collect();
            if vocab.add_space_prefix() && pieces.first() == Some(&b' ') {
                pieces.remove(0);
            }
            assert_eq!(
                String::from_utf8_lossy(&pieces),
                text,
                "{name}: pieces of {text:?}"
            );
            if !vocab.clean_spaces() {
                assert_eq!(
                    vocab.detokenize_lossy(&ids, false, false),
                    text,
                    "{name}: detokenize {text:?}"
                );
            }
        }
    }
}

#[test]
fn all_vocab_files_build() {
    let Some(dir) = fixtures() else { return };
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir.join("vocab"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 12);
    for path in names {
        let vocab = open(&path);
        assert!(vocab.n_tokens() > 0, "{}", path.display());
        // Every id gives a piece without panicking.
        for id in 0..vocab.n_tokens() as TokenId {
            vocab.token_to_piece(id, true);
        }
    }
}

#[test]
fn vocab_properties() {
    let Some(dir) = fixtures() else { return };
    let v = |name: &str| open(&dir.join(format!("vocab/ggml-vocab-{name}.gguf")));

    let spm = v("llama-spm");
    assert_eq!(spm.vocab_type(), VocabType::Spm);
    assert_eq!(
        (spm.bos(), spm.eos(), spm.unk()),
        (Some(1), Some(2), Some(0))
    );
    assert_eq!(spm.nl(), Some(13));
    assert!(spm.add_bos() && !spm.add_eos() && spm.add_space_prefix());
    assert!(spm.is_eog(2));
    assert_eq!(spm.byte_to_token(b'\n'), Some(13));
    assert_eq!(spm.token_to_byte(13), Some(b'\n'));
    assert_eq!(spm.get_text(1), Some(&b"<s>"[..]));

    let gpt2 = v("gpt-2");
    assert_eq!(gpt2.vocab_type(), VocabType::Bpe);
    assert_eq!(gpt2.pre_type(), PreType::Gpt2);
    assert_eq!(gpt2.n_tokens(), 50257);
    assert_eq!(gpt2.n_merges(), 50000);
    assert_eq!(gpt2.eos(), Some(50256));
    assert!(gpt2.is_eog(50256));
    // llama.cpp tokenizes the text "Ċ" to find the newline token of a BPE
    // vocabulary, which gives the token of its first byte, 'Ä'.
    assert_eq!(gpt2.nl(), Some(128));
    assert!(!gpt2.add_bos());
    assert_eq!(gpt2.find_bpe_rank("Ġ".as_bytes(), b"t"), Some(0));

    // No `pre` key: the default pre-tokenizer.
    let neox = v("gpt-neox");
    assert_eq!(neox.pre_type(), PreType::Default);

    // The baichuan SPM vocabulary builds with its defaults.
    let baichuan = v("baichuan");
    assert_eq!(baichuan.vocab_type(), VocabType::Spm);
    assert_eq!(baichuan.n_tokens(), 64000);

    let phi3 = v("phi-3");
    assert_eq!(phi3.vocab_type(), VocabType::Spm);
    assert!(phi3.is_eog(32000) && phi3.is_eog(32007));
    let end = phi3.text_to_token(b"<|end|>").unwrap();
    assert!(phi3
        .token_attr(end)
        .contains(TokenAttr::CONTROL | TokenAttr::RSTRIP));
    assert!(!phi3.token_attr(1).intersects(TokenAttr::RSTRIP));

    let bert = v("bert-bge");
    assert_eq!(bert.vocab_type(), VocabType::Wpm);
    assert_eq!(
        (bert.bos(), bert.sep(), bert.unk(), bert.pad()),
        (Some(101), Some(102), Some(100), Some(0))
    );
    assert_eq!(bert.n_token_types(), 2);
    let ids = bert.tokenize("Hello world", true, false);
    assert_eq!(ids.first(), Some(&101));
    assert_eq!(ids.last(), Some(&102));
}

/// Special tokens in the text are parsed only when asked.
#[test]
fn parse_special() {
    let Some(dir) = fixtures() else { return };
    let spm = open(&dir.join("vocab/ggml-vocab-llama-spm.gguf"));
    let parsed = spm.tokenize("<s>Hi</s>", true, true);
    assert_eq!(parsed[..2], [1, 1]);
    assert_eq!(parsed.last(), Some(&2));
    let plain = spm.tokenize("<s>Hi</s>", true, false);
    assert_eq!(plain[0], 1);
    assert!(plain[1..].iter().all(|&id| id > 2));
    assert_eq!(spm.detokenize_lossy(&parsed, false, true), "<s><s> Hi</s>");
    assert_eq!(spm.detokenize_lossy(&parsed, true, false), " Hi");

    // phi-3: RSTRIP on its chat markers swallows the following newline.
    let phi3 = open(&dir.join("vocab/ggml-vocab-phi-3.gguf"));
    let a = phi3.tokenize("<|user|>\nHi<|end|>", false, true);
    let b = phi3.tokenize("<|user|>Hi<|end|>", false, true);
    assert_eq!(a, b);
}

/// A JSON array of integers under `"tokens":`, without a JSON parser.
fn json_tokens(json: &str) -> Vec<TokenId> {
    let start = json.find("\"tokens\"").expect("tokens key");
    let open = start + json[start..].find('[').unwrap();
    let close = open + json[open..].find(']').unwrap();
    json[open + 1..close]
        .split(',')
        .map(|s| s.trim().parse().unwrap())
        .collect()
}

#[test]
fn stories260k_story() {
    let Some(dir) = fixtures() else { return };
    let vocab = open(&dir.join("models/stories260K.gguf"));
    let text = std::fs::read_to_string(dir.join("texts/story.txt")).unwrap();
    let expected = json_tokens(
        &std::fs::read_to_string(dir.join("expected/tokenize-stories260K.json")).unwrap(),
    );
    assert_eq!(expected.len(), 2069);
    let got = vocab.tokenize(&text, true, true);
    assert_eq!(got.len(), expected.len());
    assert_eq!(got, expected);
    assert_eq!(
        vocab.tokenize("Once upon a time", true, false),
        [1, 403, 407, 261, 378]
    );
    // Without the BOS the space prefix is removed again and the story comes
    // back; after a BOS llama.cpp keeps the first piece's space.
    assert_eq!(vocab.detokenize_lossy(&got[1..], false, false), text);
    assert_eq!(
        vocab.detokenize_lossy(&got, true, false),
        format!(" {text}")
    );
}

//! Vocabularies built from plain data and from metadata: defaults, the
//! tokenizer algorithms on small hand-made vocabularies, malformed data, and
//! robustness against arbitrary input.

use std::path::PathBuf;

use gguf::{Metadata, StringArray};
use llama::vocab::{
    PreType, SpecialIds, TokenAttr, TokenId, TokenType, Vocab, VocabData, VocabError, VocabType,
};

fn bytes(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// A tiny SPM vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then
/// `pieces` with their scores.
fn spm(pieces: &[(&str, f32)]) -> VocabData {
    let mut tokens = bytes(&["<unk>", "<s>", "</s>"]);
    let mut scores = vec![0.0, 0.0, 0.0];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>").into_bytes());
        scores.push(0.0);
        types.push(6);
    }
    with_pieces("llama", tokens, scores, types, pieces)
}

/// A `model` vocabulary of `tokens` with their `scores` and `types`, then
/// `pieces` as normal tokens with their scores.
fn with_pieces(
    model: &str,
    mut tokens: Vec<Vec<u8>>,
    mut scores: Vec<f32>,
    mut types: Vec<i32>,
    pieces: &[(&str, f32)],
) -> VocabData {
    for (text, score) in pieces {
        tokens.push(text.as_bytes().to_vec());
        scores.push(*score);
        types.push(1);
    }
    VocabData {
        model: model.into(),
        tokens,
        scores: Some(scores),
        token_types: Some(types),
        ..VocabData::default()
    }
}

/// A tiny byte-level BPE vocabulary: every byte, then `extra` tokens and
/// `merges` (in rank order).
fn bpe(extra: &[&str], merges: &[&str], pre: Option<&str>) -> VocabData {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8)
        .map(|b| {
            // GPT-2's byte-to-unicode map.
            let printable = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let cpt = if printable {
                u32::from(b)
            } else {
                0x100
                    + (0..b)
                        .filter(|&x| !matches!(x, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF))
                        .count() as u32
            };
            char::from_u32(cpt).unwrap().to_string().into_bytes()
        })
        .collect();
    tokens.extend(bytes(extra));
    VocabData {
        model: "gpt2".into(),
        pre: pre.map(str::to_string),
        tokens,
        merges: Some(bytes(merges)),
        ..VocabData::default()
    }
}

fn id(v: &Vocab, text: &str) -> TokenId {
    v.text_to_token(text.as_bytes())
        .unwrap_or_else(|| panic!("no token {text:?}"))
}

#[test]
fn spm_merges_by_score() {
    let v = Vocab::from_parts(spm(&[
        ("\u{2581}", -1.0),
        ("a", -2.0),
        ("b", -2.0),
        ("c", -2.0),
        ("ab", -3.0),
        ("bc", -0.5),
        ("\u{2581}a", -4.0),
        ("\u{2581}ab", -0.1),
    ]))
    .unwrap();
    assert_eq!(v.vocab_type(), VocabType::Spm);
    // "bc" (-0.5) merges before "ab" (-3.0) and "▁a" (-4.0); "▁abc" is no
    // token, so "▁a" stays apart.
    assert_eq!(
        v.tokenize("abc", false, false),
        [id(&v, "\u{2581}a"), id(&v, "bc")]
    );
    // "ab" merges first, then "▁" + "ab".
    assert_eq!(v.tokenize("ab", false, false), [id(&v, "\u{2581}ab")]);
    // Add BOS by default; unknown characters fall back to bytes.
    let ids = v.tokenize("é", true, false);
    assert_eq!(ids, [1, id(&v, "\u{2581}"), 3 + 0xC3, 3 + 0xA9]);
    assert_eq!(v.detokenize(&ids, true, false), " é".as_bytes());
    assert_eq!(v.detokenize(&ids[1..], false, false), "é".as_bytes());
    assert_eq!(v.token_to_byte(3 + 0xC3), Some(0xC3));
}

#[test]
fn spm_defaults_and_keys() {
    let v = Vocab::from_parts(spm(&[])).unwrap();
    assert_eq!((v.bos(), v.eos(), v.unk()), (Some(1), Some(2), Some(0)));
    assert!(v.add_bos() && !v.add_eos() && v.add_space_prefix());
    assert_eq!(v.nl(), Some(3 + 10));
    assert!(v.is_eog(2));
    assert_eq!(v.token_type(3), Some(TokenType::Byte));

    let mut d = spm(&[]);
    d.add_bos = Some(false);
    d.add_eos = Some(true);
    d.add_space_prefix = Some(false);
    d.special_ids = SpecialIds {
        eos: Some(1),
        ..SpecialIds::default()
    };
    let v = Vocab::from_parts(d).unwrap();
    assert!(!v.add_bos() && v.add_eos() && !v.add_space_prefix());
    assert_eq!(v.eos(), Some(1));
    assert_eq!(v.tokenize("a", true, false), [3 + b'a' as TokenId, 1]);

    // Defaults that name no token are absent.
    let v = Vocab::from_parts(VocabData {
        model: "llama".into(),
        tokens: bytes(&["x"]),
        ..VocabData::default()
    })
    .unwrap();
    assert_eq!((v.bos(), v.eos(), v.unk()), (None, None, Some(0)));
    // No BOS to add; the three bytes of "▁" have no token and become <unk>.
    assert_eq!(v.tokenize("x", true, false), [0, 0, 0, 0]);
}

#[test]
fn bpe_merges_by_rank() {
    let v = Vocab::from_parts(bpe(
        &["ab", "bc", "abc", "\u{120}x"],
        &["a b", "b c", "ab c", "\u{120} x"],
        Some("gpt-2"),
    ))
    .unwrap();
    assert_eq!(v.vocab_type(), VocabType::Bpe);
    assert_eq!(v.pre_type(), PreType::Gpt2);
    assert_eq!(v.n_merges(), 4);
    assert_eq!(v.tokenize("abc", false, false), [id(&v, "abc")]);
    assert_eq!(
        v.tokenize("bcab x", false, false),
        [id(&v, "bc"), id(&v, "ab"), id(&v, "\u{120}x")]
    );
    assert_eq!(v.find_bpe_rank(b"ab", b"c"), Some(2));
    assert_eq!(v.find_bpe_rank(b"c", b"a"), None);
    let ids = v.tokenize("a\nb é", false, false);
    assert_eq!(v.detokenize(&ids, false, false), "a\nb é".as_bytes());
    // Defaults: no BOS, spaces cleaned on output.
    assert!(!v.add_bos() && v.clean_spaces());
    assert_eq!(
        v.detokenize(&v.tokenize("a , b", false, false), false, false),
        b"a, b"
    );
}

#[test]
fn bpe_without_pre_uses_default_and_llama3_flags() {
    let v = Vocab::from_parts(bpe(&[], &[], None)).unwrap();
    assert_eq!(v.pre_type(), PreType::Default);
    let v = Vocab::from_parts(bpe(&[], &[], Some("llama-bpe"))).unwrap();
    assert_eq!(v.pre_type(), PreType::Llama3);
    assert!(v.ignore_merges() && v.add_bos());
    let v = Vocab::from_parts(bpe(&[], &[], Some("qwen2"))).unwrap();
    assert!(!v.clean_spaces());
}

#[test]
fn user_defined_tokens_split_first() {
    let mut d = bpe(&["<|x|>", "<ctl>"], &[], Some("gpt-2"));
    let n = d.tokens.len();
    let mut types = vec![1; n];
    types[n - 2] = 4; // user-defined
    types[n - 1] = 3; // control
    d.token_types = Some(types);
    let v = Vocab::from_parts(d).unwrap();
    let user = id(&v, "<|x|>");
    let ctl = id(&v, "<ctl>");
    assert!(v.is_user_defined(user) && v.is_control(ctl));
    // User-defined tokens are always split out, control tokens only on request.
    assert_eq!(
        v.tokenize("a<|x|>b", false, false),
        [id(&v, "a"), user, id(&v, "b")]
    );
    assert_eq!(v.tokenize("<ctl>", false, false).len(), 5);
    assert_eq!(v.tokenize("<ctl>", false, true), [ctl]);
    assert_eq!(v.token_to_piece(ctl, false), b"");
    assert_eq!(v.token_to_piece(ctl, true), b"<ctl>");
}

#[test]
fn eog_detected_by_text() {
    let mut d = spm(&[("<|im_end|>", 0.0), ("<|end|>", 0.0)]);
    let n = d.tokens.len();
    let v = Vocab::from_parts(d.clone()).unwrap();
    let im_end = (n - 2) as TokenId;
    assert!(v.is_eog(im_end) && v.is_eog(im_end + 1) && v.is_eog(2));
    assert_eq!(v.eot(), Some(im_end));
    assert!(v.token_attr(im_end).contains(TokenAttr::CONTROL));
    d.special_ids.eot = Some(n as u64 - 1);
    let v = Vocab::from_parts(d).unwrap();
    assert_eq!(v.eot(), Some(im_end + 1));
}

#[test]
fn wpm_greedy_longest_match() {
    let mut tokens = bytes(&["[PAD]", "[UNK]", "[CLS]", "[SEP]"]);
    tokens.extend(bytes(&[
        "\u{2581}hello",
        "\u{2581}he",
        "llo",
        "\u{2581}world",
        "\u{2581}!",
        "\u{2581}cafe",
    ]));
    let d = VocabData {
        model: "bert".into(),
        tokens,
        token_types: Some(vec![3, 3, 3, 3, 1, 1, 1, 1, 1, 1]),
        special_ids: SpecialIds {
            unk: Some(1),
            bos: Some(2),
            sep: Some(3),
            pad: Some(0),
            ..SpecialIds::default()
        },
        ..VocabData::default()
    };
    let v = Vocab::from_parts(d).unwrap();
    assert_eq!(v.vocab_type(), VocabType::Wpm);
    assert_eq!(v.tokenize("Hello World!", true, false), [2, 4, 7, 8, 3]);
    assert_eq!(v.tokenize("CAFÉ xyz", false, false), [9, 1]);
    assert_eq!(
        v.detokenize_lossy(&[4, 7, 8], false, false),
        " hello world!"
    );
}

#[test]
fn wpm_normalizer_options_keep_case_and_accents() {
    let mut tokens = bytes(&["[PAD]", "[UNK]", "[CLS]", "[SEP]"]);
    tokens.extend(bytes(&[
        "\u{2581}cafe",
        "\u{2581}Cafe",
        "\u{2581}café",
        "\u{2581}Café",
    ]));
    let base = VocabData {
        model: "bert".into(),
        tokens,
        token_types: Some(vec![3, 3, 3, 3, 1, 1, 1, 1]),
        special_ids: SpecialIds {
            unk: Some(1),
            ..SpecialIds::default()
        },
        ..VocabData::default()
    };
    let with = |lowercase: Option<bool>, strip: Option<bool>| {
        Vocab::from_parts(VocabData {
            normalizer_lowercase: lowercase,
            normalizer_strip_accents: strip,
            ..base.clone()
        })
        .unwrap()
    };
    // Decomposed and precomposed accents alike; marks go with the accents.
    let text = "Cafe\u{301} Café";
    assert_eq!(with(None, None).tokenize(text, false, false), [4, 4]);
    assert_eq!(with(Some(false), None).tokenize(text, false, false), [1, 7]);
    assert_eq!(
        with(Some(false), Some(true)).tokenize(text, false, false),
        [5, 5]
    );
    assert_eq!(
        with(Some(true), Some(false)).tokenize(text, false, false),
        [1, 6]
    );
}

/// A BPE vocabulary with `extra` tokens of the given types.
fn bpe_typed(extra: &[(&str, i32)]) -> VocabData {
    let names: Vec<&str> = extra.iter().map(|(t, _)| *t).collect();
    let mut d = bpe(&names, &[], Some("gpt-2"));
    let mut types = vec![1; 256];
    types.extend(extra.iter().map(|(_, t)| *t));
    d.token_types = Some(types);
    d
}

#[test]
fn end_of_generation_and_fim_texts_follow_llama_cpp() {
    let d = bpe_typed(&[
        ("</s>", 4),
        ("<|return|>", 3),
        ("<|call|>", 3),
        ("<|end|>", 3),
        ("<unused7>", 3),
        ("<|channel|>", 3),
        ("<fim_prefix>", 1),
        ("<|end_of_text|>", 1),
    ]);
    let v = Vocab::from_parts(d).unwrap();
    let id = |t: &str| v.text_to_token(t.as_bytes()).unwrap();
    // A user-defined `</s>` ends generation and is control too.
    assert!(v.is_eog(id("</s>")));
    assert!(v
        .token_attr(id("</s>"))
        .contains(TokenAttr::CONTROL | TokenAttr::USER_DEFINED));
    // With <|return|> and <|call|>, <|end|> only ends a message.
    assert!(v.is_eog(id("<|return|>")) && v.is_eog(id("<|call|>")));
    assert!(!v.is_eog(id("<|end|>")));
    assert_eq!(v.token_attr(id("<|end|>")), TokenAttr::USER_DEFINED);
    assert!(v.is_unused(id("<unused7>")));
    assert_eq!(v.token_attr(id("<|channel|>")), TokenAttr::USER_DEFINED);
    assert_eq!(v.special().fim_pre, Some(id("<fim_prefix>")));
    // With parse_special off, `</s>` is text now that it is control.
    assert_ne!(v.tokenize("</s>", false, false), [id("</s>")]);
    assert_eq!(v.tokenize("</s>", false, true), [id("</s>")]);

    // Without <|return|>, <|end|> ends generation.
    let v = Vocab::from_parts(bpe_typed(&[("<|end|>", 3), ("<|call|>", 3)])).unwrap();
    assert!(v.is_eog(v.text_to_token(b"<|end|>").unwrap()));
    // Newer end-of-turn texts name the end-of-turn token.
    let v = Vocab::from_parts(bpe_typed(&[("<|end_of_text|>", 1)])).unwrap();
    assert_eq!(v.eot(), v.text_to_token(b"<|end_of_text|>"));
}

#[test]
fn end_of_sentence_is_text_beside_a_tool_response_token() {
    let v = Vocab::from_parts(bpe_typed(&[("</s>", 3), ("<|tool_response>", 3)])).unwrap();
    let s = v.text_to_token(b"</s>").unwrap();
    assert!(!v.is_eog(s));
    assert_eq!(v.token_attr(s), TokenAttr::NORMAL);
    assert!(v.is_eog(v.text_to_token(b"<|tool_response>").unwrap()));
}

/// A tiny Unigram vocabulary: `<pad>`, `</s>`, `<unk>`, then `pieces`.
fn ugm(pieces: &[(&str, f32)], charsmap: Option<Vec<u8>>) -> VocabData {
    let tokens = bytes(&["<pad>", "</s>", "<unk>"]);
    VocabData {
        add_space_prefix: Some(true),
        remove_extra_whitespaces: Some(true),
        precompiled_charsmap: charsmap,
        ..with_pieces("t5", tokens, vec![0.0; 3], vec![3, 3, 2], pieces)
    }
}

/// A character map that only replaces `A` by `a`: a double array whose
/// root has base 0, whose node 0x41 checks `A`, is a leaf and leads to node
/// 0x40, which holds the offset of the replacement "a".
fn charsmap_a() -> Vec<u8> {
    let mut xcda = vec![0u32; 256];
    xcda[0x41] = (1 << 10) | (1 << 8) | 0x41;
    xcda[0x40] = 0;
    let mut map = ((xcda.len() * 4) as u32).to_le_bytes().to_vec();
    for node in xcda {
        map.extend_from_slice(&node.to_le_bytes());
    }
    map.extend_from_slice(b"a\0");
    map
}

#[test]
fn ugm_best_segmentation() {
    let pieces = [
        ("\u{2581}", -2.0),
        ("\u{2581}hello", -5.0),
        ("hello", -3.5),
        ("\u{2581}he", -2.5),
        ("llo", -2.6),
        ("\u{2581}world", -4.0),
        ("\u{2581}a", -1.0),
    ];
    let v = Vocab::from_parts(ugm(&pieces, Some(charsmap_a()))).unwrap();
    assert_eq!(v.vocab_type(), VocabType::Ugm);
    assert_eq!(
        (v.bos(), v.eos(), v.unk(), v.pad()),
        (None, Some(1), Some(2), Some(0))
    );
    assert!(!v.add_bos() && v.add_eos());
    // "▁hello" (-5.0) beats "▁he" + "llo" (-5.1) and "▁" + "hello" (-5.5);
    // extra spaces are merged; EOS is added.
    assert_eq!(v.tokenize("  hello   world ", true, false), [4, 8, 1]);
    // Code points no token covers become one unknown token per run.
    assert_eq!(v.tokenize("xy", false, false), [3, 2]);
    // The character map turns "A" into "a".
    assert_eq!(v.tokenize("A", false, false), [9]);
    assert_eq!(v.detokenize_lossy(&[4, 8, 1], true, false), "hello world");
    assert_eq!(
        v.detokenize_lossy(&[4, 8, 1], false, true),
        "hello world</s>"
    );
}

#[test]
fn no_vocab() {
    let v = Vocab::from_parts(VocabData {
        model: "no_vocab".into(),
        vocab_size: Some(7),
        ..VocabData::default()
    })
    .unwrap();
    assert_eq!(v.vocab_type(), VocabType::NoVocab);
    assert_eq!(v.n_tokens(), 7);
    assert!(v.tokenize("hello", true, true).is_empty());
    assert!(v.detokenize(&[0, 1, 2], false, true).is_empty());
    assert_eq!(v.get_text(0), None);
}

#[test]
fn empty_token_text_gets_a_name() {
    let v = Vocab::from_parts(VocabData {
        model: "llama".into(),
        tokens: bytes(&["a", "", "b"]),
        ..VocabData::default()
    })
    .unwrap();
    assert_eq!(v.get_text(1), Some(&b"[EMPTY_1]"[..]));
}

fn err(d: VocabData) -> String {
    match Vocab::from_parts(d) {
        Ok(_) => panic!("malformed data was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn malformed_data_is_an_error() {
    let mut d = spm(&[]);
    d.token_types.as_mut().unwrap().pop();
    let msg = err(d);
    assert!(
        msg.contains("tokenizer.ggml.token_type") && msg.contains("258") && msg.contains("259"),
        "{msg}"
    );

    let mut d = spm(&[]);
    d.scores.as_mut().unwrap().push(1.0);
    assert!(err(d).contains("tokenizer.ggml.scores"));

    // Out-of-range special ids are ignored with a warning, as llama.cpp does:
    // the default id is kept.
    let mut d = spm(&[]);
    d.special_ids.bos = Some(100_000);
    let v = Vocab::from_parts(d).expect("bad special ids are ignored");
    assert_eq!(v.bos(), Some(1));

    let mut d = spm(&[]);
    d.special_ids.middle = Some(259);
    let v = Vocab::from_parts(d).expect("bad special ids are ignored");
    assert_eq!(v.special().fim_mid, None);

    let mut d = spm(&[]);
    d.tokens.push(b"<s>".to_vec());
    d.scores.as_mut().unwrap().push(0.0);
    d.token_types.as_mut().unwrap().push(1);
    let msg = err(d);
    assert!(
        msg.contains("<s>") && msg.contains("259") && msg.contains("token 1"),
        "{msg}"
    );

    let msg = err(bpe(&["ab"], &["a b", "ab zz"], None));
    assert!(msg.contains("merge 1") && msg.contains("\"zz\""), "{msg}");
    assert!(err(bpe(&[], &["ab"], None)).contains("merge 0"));
    assert!(err(bpe(&[], &[""], None)).contains("merge 0"));

    let mut d = bpe(&[], &[], None);
    d.merges = None;
    assert!(err(d).contains("tokenizer.ggml.merges"));

    assert!(err(bpe(&[], &[], Some("no-such-pre"))).contains("no-such-pre"));
    assert!(err(VocabData {
        model: "nonsense".into(),
        ..VocabData::default()
    })
    .contains("nonsense"));
    assert!(matches!(
        Vocab::from_parts(VocabData {
            model: "rwkv".into(),
            ..VocabData::default()
        }),
        Err(VocabError::RwkvByteMissing(0))
    ));

    let mut d = ugm(&[], None);
    d.precompiled_charsmap = Some(vec![200, 0, 0, 0, 1]);
    assert!(err(d).contains("tokenizer.ggml.precompiled_charsmap"));
}

fn strings(list: &[&str]) -> StringArray {
    let mut a = StringArray::new();
    for s in list {
        a.push(s);
    }
    a
}

#[test]
fn metadata_keys() {
    let mut m = Metadata::new();
    m.set("tokenizer.ggml.model", "llama");
    m.set(
        "tokenizer.ggml.tokens",
        strings(&["<unk>", "<s>", "</s>", "\u{2581}a"]),
    );
    m.set("tokenizer.ggml.scores", vec![0.0f32, 0.0, 0.0, -1.0]);
    m.set("tokenizer.ggml.token_type", vec![2i32, 3, 3, 1]);
    m.set("tokenizer.ggml.add_bos_token", false);
    m.set("tokenizer.ggml.eos_token_id", 1u32);
    m.set("general.name", "Phi3-mini");
    let v = Vocab::from_metadata(&m).unwrap();
    assert!(!v.add_bos());
    assert_eq!(v.eos(), Some(1));
    assert_eq!(v.tokenize("a", false, false), [3]);
    // Phi-3 models strip whitespace after their special tokens.
    assert!(v.token_attr(2).contains(TokenAttr::RSTRIP));
    assert!(!v.token_attr(1).contains(TokenAttr::RSTRIP));

    let mut bad = m.clone();
    bad.set("tokenizer.ggml.scores", vec![0i32, 0, 0, 0]);
    let msg = Vocab::from_metadata(&bad).unwrap_err().to_string();
    assert!(msg.contains("tokenizer.ggml.scores"), "{msg}");

    let mut bad = m.clone();
    bad.set("tokenizer.ggml.add_bos_token", "yes");
    assert!(Vocab::from_metadata(&bad)
        .unwrap_err()
        .to_string()
        .contains("tokenizer.ggml.add_bos_token"));

    let mut bad = m.clone();
    bad.set("tokenizer.ggml.bos_token_id", -1i32);
    assert!(Vocab::from_metadata(&bad)
        .unwrap_err()
        .to_string()
        .contains("tokenizer.ggml.bos_token_id"));

    let mut bad = m.clone();
    bad.remove("tokenizer.ggml.tokens");
    assert!(matches!(
        Vocab::from_metadata(&bad),
        Err(VocabError::MissingKey("tokenizer.ggml.tokens"))
    ));

    let mut bad = m.clone();
    bad.remove("tokenizer.ggml.model");
    assert!(matches!(
        Vocab::from_metadata(&bad),
        Err(VocabError::MissingKey("tokenizer.ggml.model"))
    ));

    let mut nv = Metadata::new();
    nv.set("general.architecture", "llama");
    nv.set("llama.vocab_size", 32u32);
    nv.set("tokenizer.ggml.model", "no_vocab");
    assert_eq!(Vocab::from_metadata(&nv).unwrap().n_tokens(), 32);
}

/// The fixtures folder with its vocabularies (see [`test_support::fixtures`]).
fn fixtures() -> Option<PathBuf> {
    test_support::fixtures_with("vocab")
}

/// Arbitrary bytes, text mixing scripts, whitespace and special-token
/// texts, and arbitrary ids: nothing panics.
#[test]
fn arbitrary_input_never_panics() {
    let Some(dir) = fixtures() else { return };
    let alphabet: Vec<char> = "aZ09 \t\n\r\u{0B}'’.,!?<>|/\\_-éßøΩж漢字한국あ😀\u{2581}\u{3000}\u{200B}\u{FFFD}\u{0301}\u{0}"
        .chars()
        .collect();
    let mut rng = test_support::Rng(0x9E37_79B9_7F4A_7C15);
    for entry in std::fs::read_dir(dir.join("vocab")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension() != Some(std::ffi::OsStr::new("gguf")) {
            continue;
        }
        let file = gguf::GgufFile::open(&path).unwrap();
        let v = Vocab::from_gguf(&file).unwrap();
        let specials: Vec<String> = (0..v.n_tokens() as TokenId)
            .filter(|&i| v.is_control(i) || v.is_user_defined(i))
            .take(8)
            .map(|i| String::from_utf8_lossy(v.get_text(i).unwrap()).into_owned())
            .collect();
        for round in 0..40 {
            let raw: Vec<u8> = (0..rng.next_u64() % 64)
                .map(|_| rng.next_u64() as u8)
                .collect();
            v.tokenize_bytes(&raw, round % 2 == 0, round % 3 == 0);
            let mut text = String::new();
            for _ in 0..rng.next_u64() % 48 {
                if !specials.is_empty() && rng.next_u64() % 8 == 0 {
                    text.push_str(&specials[rng.next_u64() as usize % specials.len()]);
                } else {
                    text.push(alphabet[rng.next_u64() as usize % alphabet.len()]);
                }
            }
            let ids = v.tokenize(&text, round % 2 == 1, round % 4 == 0);
            assert!(
                ids.iter().all(|&i| i >= 0 && (i as usize) < v.n_tokens()),
                "{}: {text:?}",
                path.display()
            );
            v.detokenize(&ids, round % 2 == 0, round % 3 == 0);
            let junk: Vec<TokenId> = (0..16).map(|_| rng.next_u64() as TokenId).collect();
            v.detokenize(&junk, true, true);
            v.token_to_piece(-1, true);
        }
    }
}

/// The hand-made vocabularies, including incomplete ones (no byte tokens,
/// no unknown token), take arbitrary bytes without panicking.
#[test]
fn synthetic_vocabs_never_panic() {
    let mut sparse_bpe = bpe(&["ab"], &["a b"], Some("llama-bpe"));
    sparse_bpe.tokens.retain(|t| t.len() == 1 || t == b"ab");
    let no_unk_wpm = VocabData {
        model: "bert".into(),
        tokens: bytes(&["\u{2581}a"]),
        ..VocabData::default()
    };
    let no_bytes_spm = VocabData {
        model: "llama".into(),
        tokens: bytes(&["\u{2581}", "a"]),
        ..VocabData::default()
    };
    let vocabs: Vec<Vocab> = [
        spm(&[("\u{2581}a", -1.0)]),
        no_bytes_spm,
        bpe(&["ab"], &["a b"], Some("qwen2")),
        sparse_bpe,
        no_unk_wpm,
        ugm(&[("\u{2581}a", -1.0)], Some(charsmap_a())),
        ugm(&[], None),
    ]
    .into_iter()
    .map(|d| Vocab::from_parts(d).unwrap())
    .collect();
    let mut rng = test_support::Rng(42);
    for v in &vocabs {
        for round in 0..200 {
            let raw: Vec<u8> = (0..rng.next_u64() % 40)
                .map(|_| rng.next_u64() as u8)
                .collect();
            let ids = v.tokenize_bytes(&raw, round % 2 == 0, round % 3 == 0);
            assert!(ids.iter().all(|&i| i >= 0 && (i as usize) < v.n_tokens()));
            v.detokenize(&ids, round % 2 == 1, true);
        }
    }
}

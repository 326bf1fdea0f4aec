//! RWKV's world tokenizer against llama.cpp: a world-style vocabulary
//! (`tests/data/rwkv-world-vocab.gguf`, written by the script beside it:
//! token 0 `<s>`, the 256 bytes, then multi-byte tokens, as Python's bytes
//! repr the way llama.cpp's converter stores them) tokenizes texts into
//! the ids llama.cpp 0c1e570 gives (`llama-completion --verbose-prompt
//! --no-escape -f TEXT` on a generated rwkv7 model with this vocabulary),
//! and detokenizes them back.

use std::path::Path;

use llama::vocab::{TokenId, Vocab, VocabType};

/// (text, llama.cpp's ids, special tokens parsed).
const CASES: &[(&[u8], &[TokenId])] = &[
    (
        b"Hello world, the 2024 thing's \"quoted\"  is  here.",
        &[
            273, 270, 276, 261, 33, 292, 33, 259, 267, 280, 33, 35, 114, 118, 112, 117, 102, 101,
            35, 281, 269, 281, 260, 115, 102, 47,
        ],
    ),
    (
        b"def f():\n\treturn 123\r\n\n\nThe end",
        &[
            297, 33, 103, 299, 11, 10, 300, 33, 291, 289, 266, 262, 33, 102, 111, 101,
        ],
    ),
    (
        b"\xe4\xb8\xad\xe6\x96\x87 \xc3\xa9 \xf0\x9f\x98\x80 <s> <|x|> abcde bcd",
        &[
            285, 33, 283, 33, 287, 33, 0, 33, 295, 121, 296, 258, 306, 102, 33, 306,
        ],
    ),
    (
        b"\\\\ back\\slash \x01 tab\t\tand",
        &[
            279, 33, 99, 98, 100, 108, 93, 116, 109, 98, 116, 105, 33, 2, 33, 117, 98, 99, 278, 265,
        ],
    ),
    (
        b"  The  and and    the",
        &[281, 262, 281, 265, 263, 282, 261],
    ),
];

fn vocab() -> Vocab {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/rwkv-world-vocab.gguf");
    let file = gguf::GgufFile::open(&path).unwrap();
    Vocab::from_gguf(&file).unwrap()
}

#[test]
fn world_vocabulary_tokenizes_as_llama_cpp() {
    let v = vocab();
    assert_eq!(v.vocab_type(), VocabType::Rwkv);
    for (text, want) in CASES {
        let got = v.tokenize_bytes(text, true, true);
        assert_eq!(&got, want, "{:?}", String::from_utf8_lossy(text));
        assert_eq!(
            v.detokenize(&got, false, true),
            text.to_vec(),
            "{:?}",
            String::from_utf8_lossy(text)
        );
    }
}

#[test]
fn escaped_texts_give_their_bytes() {
    let v = vocab();
    // Token 1 + b is byte b, stored escaped (`\x00`, `\n`, `\\`, ...).
    for b in 0..=255u8 {
        let id = TokenId::from(b) + 1;
        assert_eq!(v.token_to_piece(id, false), vec![b], "byte {b}");
    }
    assert_eq!(v.token_to_piece(0, false), b"");
    assert_eq!(v.token_to_piece(0, true), b"<s>");
    // Newline: the byte token, as llama.cpp finds it (tokenizing "\n").
    assert_eq!(v.tokenize("\n", false, false), vec![11]);
    // Without special parsing `<s>` is text, and the longest match is
    // still the whole token, as in llama.cpp.
    assert_eq!(v.tokenize("<s>", false, false), vec![0]);
    assert!(v.tokenize("", true, true).is_empty());
}

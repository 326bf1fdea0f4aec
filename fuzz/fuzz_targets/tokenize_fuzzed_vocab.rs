//! Small fuzzed vocabularies of every model kind (SPM, BPE with any
//! pre-tokenizer, WPM, UGM with a fuzzed character map, none): building
//! one is checked (an error or a vocabulary), and a built one tokenizes
//! arbitrary bytes and detokenizes its tokens.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use llama::vocab::{SpecialIds, Vocab, VocabData};

const MODELS: &[&str] = &["llama", "gpt2", "bert", "t5", "no_vocab", "rwkv", "other"];

/// Every pre-tokenizer name the reader knows, and one it does not.
const PRES: &[&str] = &[
    "default",
    "llama3",
    "llama-bpe",
    "deepseek-llm",
    "deepseek-coder",
    "deepseek-v3",
    "falcon",
    "mpt",
    "starcoder",
    "gpt-2",
    "phi-2",
    "jina-es",
    "roberta-bpe",
    "refact",
    "command-r",
    "qwen2",
    "stablelm2",
    "olmo",
    "dbrx",
    "smaug-bpe",
    "poro-chat",
    "chatglm-bpe",
    "viking",
    "jais",
    "tekken",
    "smollm",
    "codeshell",
    "bloom",
    "gpt3-finnish",
    "exaone",
    "chameleon",
    "minerva-7b",
    "gpt-4o",
    "llama4",
    "superbpe",
    "trillion",
    "bailingmoe",
    "seed-coder",
    "grok-2",
    "hunyuan",
    "kimi-k2",
    "qwen35",
    "minimax-m2",
    "exaone4",
    "megrez",
    "nonsense",
];

#[derive(Arbitrary, Debug)]
struct Input {
    model: u8,
    pre: Option<u8>,
    tokens: Vec<Vec<u8>>,
    scores: Option<Vec<f32>>,
    types: Option<Vec<i32>>,
    merges: Option<Vec<(u8, u8)>>,
    raw_merges: Option<Vec<Vec<u8>>>,
    bos: Option<u8>,
    eos: Option<u8>,
    unk: Option<u8>,
    sep: Option<u8>,
    pad: Option<u8>,
    add_bos: Option<bool>,
    add_eos: Option<bool>,
    add_space_prefix: Option<bool>,
    remove_extra_whitespaces: Option<bool>,
    charsmap: Option<Vec<u8>>,
    /// Keep the scores and types as given (usually fitted to the tokens,
    /// as real files have them).
    raw_lengths: bool,
    vocab_size: Option<u64>,
    add_special: bool,
    parse_special: bool,
    text: Vec<u8>,
}

fuzz_target!(|input: Input| {
    if input.tokens.len() > 256 {
        return;
    }
    let tokens = input.tokens;
    let n = tokens.len();
    let (mut scores, mut types) = (input.scores, input.types);
    if !input.raw_lengths {
        if let Some(s) = &mut scores {
            s.resize(n, 0.0);
        }
        if let Some(t) = &mut types {
            t.resize(n, 1);
            t.iter_mut().for_each(|x| *x = x.rem_euclid(7));
        }
    }
    // Merges of two existing tokens, as real files have, plus raw ones.
    let mut merges: Option<Vec<Vec<u8>>> = input.merges.map(|m| {
        m.iter()
            .filter_map(|&(a, b)| {
                let a = tokens.get(usize::from(a))?;
                let b = tokens.get(usize::from(b))?;
                let mut s = a.clone();
                s.push(b' ');
                s.extend_from_slice(b);
                Some(s)
            })
            .collect()
    });
    if let Some(raw) = input.raw_merges {
        merges.get_or_insert_with(Vec::new).extend(raw);
    }
    let id = |v: Option<u8>| v.map(u64::from);
    let data = VocabData {
        model: MODELS[usize::from(input.model) % MODELS.len()].to_string(),
        pre: input
            .pre
            .map(|p| PRES[usize::from(p) % PRES.len()].to_string()),
        tokens,
        scores,
        token_types: types,
        merges,
        special_ids: SpecialIds {
            bos: id(input.bos),
            eos: id(input.eos),
            unk: id(input.unk),
            sep: id(input.sep),
            pad: id(input.pad),
            ..SpecialIds::default()
        },
        add_bos: input.add_bos,
        add_eos: input.add_eos,
        add_space_prefix: input.add_space_prefix,
        remove_extra_whitespaces: input.remove_extra_whitespaces,
        vocab_size: input.vocab_size,
        precompiled_charsmap: input.charsmap,
        ..VocabData::default()
    };
    let Ok(v) = Vocab::from_parts(data) else {
        return;
    };
    let ids = v.tokenize_bytes(&input.text, input.add_special, input.parse_special);
    let n = v.n_tokens() as i32;
    for &id in &ids {
        assert!(
            (0..n).contains(&id),
            "token {id} outside a vocabulary of {n}"
        );
        let _ = v.token_to_piece(id, input.parse_special);
    }
    let _ = v.detokenize(&ids, input.add_special, input.parse_special);
});

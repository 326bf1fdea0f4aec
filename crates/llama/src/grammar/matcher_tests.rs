//! The grammar stage on hand-made vocabularies: which tokens it allows and
//! how accepted tokens advance it.

use std::sync::Arc;

use super::*;
use crate::sampling::{Candidates, Sampler};

/// A grammar stage over `pieces` (token id = index), with `eog` the
/// end-of-generation tokens.
fn stage(grammar: &str, pieces: &[&[u8]], eog: &[i32]) -> GrammarSampler {
    let tokens = TokenPieces::new(pieces.iter().map(|p| p.to_vec()).collect(), eog);
    let g = Grammar::parse_with_pieces(grammar, &tokens).unwrap();
    GrammarSampler::with_tokens(Arc::new(g), Arc::new(tokens), false, &[]).unwrap()
}

/// The ids the stage leaves above `-inf` among all `n` tokens.
fn allowed(s: &mut GrammarSampler, n: usize) -> Vec<i32> {
    let mut c = Candidates::from_logits(&vec![0.0; n]);
    s.apply(&mut c);
    c.data
        .iter()
        .filter(|t| t.logit != f32::NEG_INFINITY)
        .map(|t| t.id)
        .collect()
}

#[test]
fn tokens_may_span_rules() {
    let pieces: &[&[u8]] = &[b"x", b"xy", b"yz", b"z", b"xyzq", b"xyz"];
    let mut s = stage("root ::= a b\na ::= \"x\"\nb ::= \"y\" \"z\"", pieces, &[]);
    assert_eq!(allowed(&mut s, pieces.len()), vec![0, 1, 5]);
    s.try_accept(1).unwrap();
    assert_eq!(allowed(&mut s, pieces.len()), vec![3]);
    s.try_accept(3).unwrap();
    assert!(s.can_end());
    assert_eq!(allowed(&mut s, pieces.len()), Vec::<i32>::new());
}

#[test]
fn code_points_cut_across_tokens() {
    // "é" = C3 A9; "€" = E2 82 AC.
    let pieces: &[&[u8]] = &[
        &[0xc3],
        &[0xa9],
        &[0xa9, b'!'],
        "é".as_bytes(),
        &[0xe2],
        b"!",
        &[0xe2, 0x82],
    ];
    let mut s = stage("root ::= \"é\" \"!\"", pieces, &[]);
    // A lead byte that could become "é" passes; one that cannot does not.
    assert_eq!(allowed(&mut s, pieces.len()), vec![0, 3]);
    s.try_accept(0).unwrap();
    assert_eq!(allowed(&mut s, pieces.len()), vec![1, 2]);
    s.try_accept(2).unwrap();
    assert!(s.can_end());

    // A class with a range: the cut code point must be able to land in it.
    let mut s = stage("root ::= [\\u20a0-\\u20cf]", pieces, &[]);
    assert_eq!(allowed(&mut s, pieces.len()), vec![4, 6]);
    s.try_accept(6).unwrap();
    // E2 82 A9 is U+20A9, in the class; nothing may follow it.
    assert_eq!(allowed(&mut s, pieces.len()), vec![1]);
}

#[test]
fn end_of_generation_only_where_the_grammar_may_end() {
    let pieces: &[&[u8]] = &[b"</s>", b"a", b"b"];
    let mut s = stage("root ::= \"a\"+ \"b\"?", pieces, &[0]);
    assert_eq!(allowed(&mut s, 3), vec![1]);
    assert_eq!(s.try_accept(0), Err(GrammarError::EarlyEnd(0)));
    s.try_accept(1).unwrap();
    assert_eq!(allowed(&mut s, 3), vec![0, 1, 2]);
    s.try_accept(2).unwrap();
    assert_eq!(allowed(&mut s, 3), vec![0]);
    s.try_accept(0).unwrap();
}

#[test]
fn negated_classes_and_any_char() {
    let pieces: &[&[u8]] = &[b"a", b"q", b"\n", "ж".as_bytes(), b"qa", b"."];
    let mut s = stage("root ::= [^a-c\\n]+", pieces, &[]);
    assert_eq!(allowed(&mut s, pieces.len()), vec![1, 3, 5]);
    let mut s = stage("root ::= . \"a\"", pieces, &[]);
    assert_eq!(allowed(&mut s, pieces.len()), vec![0, 1, 2, 3, 4, 5]);
    s.try_accept(2).unwrap();
    assert_eq!(allowed(&mut s, pieces.len()), vec![0]);
}

#[test]
fn token_references_match_ids_not_text() {
    // Token 3 and token 4 have the same text; only 3 is the reference.
    let pieces: &[&[u8]] = &[b"a", b"b", b"</s>", b"<tool>", b"<tool>", b"ab"];
    let mut s = stage("root ::= \"a\" <[3]> !<[0]>", pieces, &[2]);
    assert_eq!(allowed(&mut s, 6), vec![0]);
    s.try_accept(0).unwrap();
    assert_eq!(allowed(&mut s, 6), vec![3]);
    assert!(matches!(
        s.clone().try_accept(4),
        Err(GrammarError::Rejected { token: 4, .. })
    ));
    s.try_accept(3).unwrap();
    // Any token but 0 (end of generation only once the grammar may end).
    assert_eq!(allowed(&mut s, 6), vec![1, 3, 4, 5]);
    s.try_accept(5).unwrap();
    assert_eq!(allowed(&mut s, 6), vec![2]);

    // By text: the token whose piece is the text.
    let mut s = stage("root ::= <tool> \"a\"", pieces, &[2]);
    assert_eq!(allowed(&mut s, 6), vec![3]);
    // A token cannot run from characters into a token reference.
    let mut s = stage("root ::= \"a\" <[1]>", pieces, &[2]);
    assert_eq!(allowed(&mut s, 6), vec![0]);
}

#[test]
fn empty_and_nul_pieces_are_refused() {
    let pieces: &[&[u8]] = &[b"", b"\0a", b"a", b"a\0b"];
    let mut s = stage("root ::= [a-z]*", pieces, &[]);
    // "a\0b" counts as "a", as llama.cpp reads pieces as C strings.
    assert_eq!(allowed(&mut s, 4), vec![2, 3]);
}

#[test]
fn a_token_the_grammar_cannot_take_is_an_error() {
    let pieces: &[&[u8]] = &[b"a", b"b"];
    let mut s = stage("root ::= \"a\" \"b\"", pieces, &[]);
    let e = s.try_accept(1).unwrap_err();
    assert_eq!(
        e,
        GrammarError::Rejected {
            token: 1,
            piece: "b".into()
        }
    );
    // The stage is as it was.
    assert_eq!(allowed(&mut s, 2), vec![0]);
    assert!(s.try_accept(7).is_err());
    assert!(s.try_accept(-1).is_err());
    // Through the sampler interface the error is kept and nothing passes.
    Sampler::accept(&mut s, 1);
    assert!(s.error().is_some());
    assert!(allowed(&mut s, 2).is_empty());
    Sampler::reset(&mut s);
    assert!(s.error().is_none());
    assert_eq!(allowed(&mut s, 2), vec![0]);
}

#[test]
fn candidates_already_out_stay_out() {
    let pieces: &[&[u8]] = &[b"a", b"b", b"c"];
    let mut s = stage("root ::= [a-c]", pieces, &[]);
    let mut c = Candidates::from_logits(&[1.0, f32::NEG_INFINITY, 3.0]);
    s.apply(&mut c);
    let logits: Vec<f32> = c.data.iter().map(|t| t.logit).collect();
    assert_eq!(logits, vec![1.0, f32::NEG_INFINITY, 3.0]);
}

#[test]
fn alternatives_and_shared_prefixes() {
    let pieces: &[&[u8]] = &[b"true", b"tr", b"ue", b"false", b"t", b"n", b"null"];
    let mut s = stage("root ::= \"true\" | \"false\" | \"null\"", pieces, &[]);
    assert_eq!(allowed(&mut s, 7), vec![0, 1, 3, 4, 5, 6]);
    s.try_accept(1).unwrap();
    assert_eq!(allowed(&mut s, 7), vec![2]);
}

#[test]
fn ascii_class_agrees_with_match_char() {
    let text = concat!(
        "root ::= [a] [^b] [a-z] [^a-zA-Z0-9_] [x-] . [^\"\\\\\\x7F\\x00-\\x1F] ",
        "[a-c0-9\\u00e9-\\u0100] [^\\u0080-\\uFFFF] [\\x7F-\\u0200] [z-a] [^]\n"
    );
    let g = Grammar::parse(text).unwrap();
    let mut checked = 0;
    // Walk the rules item by item: a class spans several elements.
    let mut pos = 0u32;
    while (pos as usize) < g.elements.len() {
        if !g.elements[pos as usize].starts_char() {
            pos += 1;
            continue;
        }
        let (mask, after) = super::matcher::ascii_class(&g, pos);
        for c in 0..128u32 {
            let (ok, end) = super::matcher::match_char(&g, pos, c);
            assert_eq!(mask >> c & 1 != 0, ok, "item at {pos}, code point {c}");
            assert_eq!(after, end);
        }
        checked += 1;
        pos = after;
    }
    assert!(checked >= 10, "only {checked} classes checked");
}

//! Lazy grammars and the grammar stage in a sampling chain.

use std::sync::Arc;

use super::*;
use crate::sampling::{Candidates, Greedy, Sampler, SamplerChain, TempExt};

const PIECES: &[&[u8]] = &[
    b"</s>", b"hi", b" {", b"ab", b"}", b"X", b"<call>", b"{", b"ok: {",
];

fn tokens() -> Arc<TokenPieces> {
    Arc::new(TokenPieces::new(
        PIECES.iter().map(|p| p.to_vec()).collect(),
        &[0],
    ))
}

fn lazy(triggers: &[GrammarTrigger]) -> GrammarSampler {
    let g = Grammar::parse("root ::= \"{\" [a-z]* \"}\"").unwrap();
    GrammarSampler::with_tokens(Arc::new(g), tokens(), true, triggers).unwrap()
}

fn allowed(s: &mut GrammarSampler) -> Vec<i32> {
    let mut c = Candidates::from_logits(&vec![0.0; PIECES.len()]);
    s.apply(&mut c);
    c.data
        .iter()
        .filter(|t| t.logit != f32::NEG_INFINITY)
        .map(|t| t.id)
        .collect()
}

#[test]
fn a_word_trigger_feeds_the_text_from_the_word_on() {
    let mut s = lazy(&[GrammarTrigger::Word("{".into())]);
    assert_eq!(s.trigger_patterns(), vec![r"\{"]);
    assert!(s.awaiting_trigger());
    assert_eq!(allowed(&mut s).len(), PIECES.len());
    s.try_accept(1).unwrap();
    s.try_accept(5).unwrap();
    assert!(s.awaiting_trigger());
    // " {": the grammar gets "{", without the space before it.
    s.try_accept(2).unwrap();
    assert!(!s.awaiting_trigger());
    assert_eq!(allowed(&mut s), vec![1, 3, 4]);
    s.try_accept(3).unwrap();
    s.try_accept(4).unwrap();
    assert_eq!(allowed(&mut s), vec![0]);
}

#[test]
fn a_token_trigger_feeds_the_token() {
    let g = Grammar::parse("root ::= <[6]> \"{\" \"}\"").unwrap();
    let mut s =
        GrammarSampler::with_tokens(Arc::new(g), tokens(), true, &[GrammarTrigger::Token(6)])
            .unwrap();
    s.try_accept(1).unwrap();
    assert!(s.awaiting_trigger());
    s.try_accept(6).unwrap();
    assert!(!s.awaiting_trigger());
    assert_eq!(allowed(&mut s), vec![7]);
}

#[test]
fn a_pattern_trigger_starts_at_its_first_capture() {
    let mut s = lazy(&[GrammarTrigger::Pattern(r"ok: (\{)".into())]);
    s.try_accept(1).unwrap();
    assert!(s.awaiting_trigger());
    // The trigger's match starts inside "ok: {"; the grammar gets "{".
    s.try_accept(8).unwrap();
    assert!(!s.awaiting_trigger());
    assert_eq!(allowed(&mut s), vec![1, 3, 4]);
}

#[test]
fn a_full_pattern_must_match_all_the_text() {
    let mut s = lazy(&[GrammarTrigger::PatternFull(r"\s*(\{)[\s\S]*".into())]);
    s.try_accept(1).unwrap();
    // "hi {": the text does not start with the pattern.
    s.try_accept(2).unwrap();
    assert!(s.awaiting_trigger());

    let mut s = lazy(&[GrammarTrigger::PatternFull(r"\s*(\{)[\s\S]*".into())]);
    s.try_accept(2).unwrap();
    assert!(!s.awaiting_trigger());
    // Replayed text that does not fit the grammar is an error.
    let mut s = lazy(&[GrammarTrigger::PatternFull(r"(hi)[\s\S]*".into())]);
    assert!(matches!(
        s.try_accept(1),
        Err(GrammarError::Rejected { .. })
    ));
}

#[test]
fn a_lazy_grammar_needs_a_trigger_and_valid_patterns() {
    let g = Arc::new(Grammar::parse("root ::= \"a\"").unwrap());
    let e = GrammarSampler::with_tokens(Arc::clone(&g), tokens(), true, &[]).unwrap_err();
    assert_eq!(e, GrammarError::NoTriggers);
    let e = GrammarSampler::with_tokens(g, tokens(), true, &[GrammarTrigger::Pattern("[".into())])
        .unwrap_err();
    assert!(matches!(e, GrammarError::BadTrigger { .. }), "{e}");
}

#[test]
fn restart_waits_for_the_trigger_again() {
    let mut s = lazy(&[GrammarTrigger::Word("{".into())]);
    s.try_accept(7).unwrap();
    assert!(!s.awaiting_trigger());
    s.restart();
    assert!(s.awaiting_trigger());
}

/// A greedy chain (temperature 0 then greedy pick) with the grammar stage.
fn chain(grammar: &str) -> SamplerChain {
    let mut c = SamplerChain::new();
    c.add(TempExt::new(0.0, 0.0, 1.0));
    c.add(Greedy::new());
    let g = Grammar::parse(grammar).unwrap();
    c.set_grammar(Some(
        GrammarSampler::with_tokens(Arc::new(g), tokens(), false, &[]).unwrap(),
    ));
    c
}

#[test]
fn the_chain_resamples_when_its_pick_does_not_fit() {
    let mut c = chain("root ::= \"{\" [a-z]* \"}\"");
    // The best token ("hi") does not fit; "{" (token 7) is the best that does.
    let mut logits = vec![0.0; PIECES.len()];
    logits[1] = 5.0;
    logits[7] = 1.0;
    logits[2] = 0.5;
    let t = c.sample(&logits);
    assert_eq!(t, 7);
    c.try_accept(t).unwrap();
    // The best token fits: it is taken as is.
    logits[3] = 9.0;
    assert_eq!(c.sample(&logits), 3);
    c.try_accept(3).unwrap();
    logits[4] = 0.1;
    assert_eq!(c.sample(&logits), 3);
    logits[3] = -1.0;
    logits[1] = -1.0;
    assert_eq!(c.sample(&logits), 4);
    c.try_accept(4).unwrap();
    // Done: only the end of generation is left.
    assert_eq!(c.sample(&logits), 0);
    c.try_accept(0).unwrap();
    assert!(c.try_accept(3).is_err());
}

#[test]
fn prompt_tokens_do_not_reach_the_grammar() {
    let mut c = chain("root ::= \"X\"");
    c.accept_prompt(1);
    c.accept_prompt(3);
    let mut logits = vec![0.0; PIECES.len()];
    logits[1] = 3.0;
    assert_eq!(c.sample(&logits), 5);
    c.try_accept(5).unwrap();
    c.reset();
    assert_eq!(c.sample(&logits), 5);
}

#[test]
fn nested_ambiguous_repetitions_are_refused_not_stalled() {
    // Each `+` on a `+` multiplies the ways to split the text read so
    // far: the stacks would grow without bound with every token.
    let text = format!("root ::= [a-z]{}", "+".repeat(60));
    let g = Grammar::parse(&text).unwrap();
    let pieces: Vec<Vec<u8>> = (b'a'..=b'z').map(|b| vec![b]).collect();
    let toks = Arc::new(TokenPieces::new(pieces, &[]));
    let mut s = GrammarSampler::with_tokens(Arc::new(g), toks, false, &[]).unwrap();
    let mut refused = None;
    for i in 0..64 {
        if let Err(e) = s.try_accept(i % 26) {
            refused = Some(e);
            break;
        }
    }
    match refused {
        Some(GrammarError::TooAmbiguous { limit, .. }) => assert_eq!(limit, matcher::MAX_STACKS),
        other => panic!("expected the stack limit, got {other:?}"),
    }
    // A refused token leaves the grammar as it was: it still takes text.
    let mut c = Candidates::from_logits(&[0.0; 26]);
    s.apply(&mut c);
    assert!(c.data.iter().any(|t| t.logit.is_finite()));
}

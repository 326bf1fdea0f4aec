//! The grammar stage over a real vocabulary (stories260K's SPM tokens):
//! token references by text, lazy triggers fed with real token pieces, and
//! the chain built from sampling parameters.

use llama::grammar::{Grammar, GrammarError, GrammarSampler, GrammarTrigger};
use llama::sampling::{Candidates, Sampler, SamplerChain, SamplingParams};
use llama::vocab::Vocab;

fn vocab() -> Vocab {
    let path = test_support::workspace_root().join("models/stories260K.gguf");
    Vocab::from_gguf(&gguf::GgufFile::open(&path).unwrap()).unwrap()
}

/// The tokens the stage lets through, of all the vocabulary's.
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
fn token_references_by_text_use_the_tokenizer() {
    let v = vocab();
    let g = Grammar::parse_with_vocab("root ::= <s> \"a\"", &v).unwrap();
    assert_eq!(g.rule(0).unwrap()[0].value, 1);
    let e = Grammar::parse_with_vocab("root ::= <two words>", &v).unwrap_err();
    assert!(e.to_string().contains("not exactly one token"), "{e}");
}

#[test]
fn the_stage_allows_exactly_the_pieces_that_fit() {
    let v = vocab();
    let n = v.n_tokens();
    let mut s = GrammarSampler::new("root ::= \" \"? [0-9]+", &v).unwrap();
    let ok = allowed(&mut s, n);
    assert!(!ok.is_empty());
    for id in 0..n as i32 {
        let piece = v.token_to_piece(id, true);
        // A piece fits when it starts a string of the grammar.
        let body = piece.strip_prefix(b" ").unwrap_or(&piece);
        let fits = !piece.is_empty() && !v.is_eog(id) && body.iter().all(u8::is_ascii_digit);
        assert_eq!(
            ok.contains(&id),
            fits,
            "token {id} {:?}",
            String::from_utf8_lossy(&piece)
        );
    }
}

#[test]
fn a_lazy_grammar_starts_at_its_trigger_word() {
    let v = vocab();
    let n = v.n_tokens();
    let g = "root ::= \"(\" [a-z ]* \")\"";
    let mut s =
        GrammarSampler::from_vocab(g, &v, true, &[GrammarTrigger::Word("(".into())]).unwrap();
    let tokens = v.tokenize("Tom said (hello there", false, false);
    for &t in &tokens {
        if s.awaiting_trigger() {
            // Nothing is constrained before the trigger.
            assert_eq!(allowed(&mut s, n).len(), n);
        }
        s.try_accept(t).unwrap();
    }
    assert!(!s.awaiting_trigger());
    // Inside the parentheses: letters, spaces or the closing one.
    for id in allowed(&mut s, n) {
        let piece = v.token_to_piece(id, true);
        assert!(
            piece
                .iter()
                .all(|&b| b.is_ascii_lowercase() || b == b' ' || b == b')'),
            "{:?}",
            String::from_utf8_lossy(&piece)
        );
    }
    let close = v.tokenize(")", false, false);
    let bad = v.tokenize("X", false, false);
    assert!(s.clone().try_accept(*bad.last().unwrap()).is_err());
    for &t in &close {
        s.try_accept(t).unwrap();
    }
    assert!(s.can_end());
}

#[test]
fn chains_from_parameters() {
    let v = vocab();
    let mut p = SamplingParams {
        temp: 0.0,
        grammar: "root ::= [a-z".into(),
        ..SamplingParams::default()
    };
    let e = SamplerChain::from_params_with_vocab(&p, &v).unwrap_err();
    assert!(
        matches!(
            e,
            GrammarError::Parse {
                line: 1,
                column: 10,
                ..
            }
        ),
        "{e}"
    );
    p.grammar = "root ::= \"a\"".into();
    p.grammar_lazy = true;
    assert_eq!(
        SamplerChain::from_params_with_vocab(&p, &v).unwrap_err(),
        GrammarError::NoTriggers
    );
    p.grammar_triggers = vec![GrammarTrigger::Token(1)];
    let c = SamplerChain::from_params_with_vocab(&p, &v).unwrap();
    assert!(c.grammar().unwrap().awaiting_trigger());
    p.grammar.clear();
    assert!(SamplerChain::from_params_with_vocab(&p, &v)
        .unwrap()
        .grammar()
        .is_none());
}

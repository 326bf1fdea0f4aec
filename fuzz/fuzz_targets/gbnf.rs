//! GBNF grammars: the parser on fuzzed text, and a parsed grammar's
//! matcher fed fuzzed text byte by byte (one token per byte value).

#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use llama::grammar::{Grammar, GrammarSampler, TokenPieces};

/// One token per byte value, and token 256 the end of generation.
fn byte_tokens() -> Arc<TokenPieces> {
    static T: OnceLock<Arc<TokenPieces>> = OnceLock::new();
    T.get_or_init(|| {
        let mut pieces: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        pieces.push(Vec::new());
        Arc::new(TokenPieces::new(pieces, &[256]))
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    // The grammar, then (after the first NUL) the text to match.
    let (grammar, text) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(grammar) = std::str::from_utf8(grammar) else {
        return;
    };
    let tokens = byte_tokens();
    let Ok(g) = Grammar::parse_with_pieces(grammar, &tokens) else {
        return;
    };
    // Printing never fails (its output is for reading, like llama.cpp's
    // print_grammar: generated rule names and escapes are not GBNF).
    let _ = g.to_gbnf();
    let Ok(mut s) = GrammarSampler::with_tokens(Arc::new(g), tokens, false, &[]) else {
        return;
    };
    for &b in text.iter().take(256) {
        if s.try_accept(i32::from(b)).is_err() {
            return;
        }
    }
    let _ = s.can_end();
    // Which tokens may come next.
    let mut c = llama::sampling::Candidates::from_logits(&[0.0; 257]);
    s.constrain(&mut c);
});

//! Whether a draft model can propose tokens for a target, checked as
//! llama.cpp does: the same vocabulary type, BOS/EOS settings and ids,
//! sizes within 128 tokens, and the same text for every token from id 5 on.

use crate::batch::Token;
use crate::error::{LlamaError, Result};
use crate::vocab::Vocab;

/// Largest difference of vocabulary sizes a draft may have.
pub const VOCAB_MAX_SIZE_DIFFERENCE: usize = 128;
/// Token texts are compared from this id on.
pub const VOCAB_CHECK_START_TOKEN_ID: usize = 5;

/// Why a draft vocabulary cannot serve the target's, if it cannot.
pub fn check_vocab_compatible(tgt: &Vocab, dft: &Vocab) -> Result<()> {
    let bad = |m: String| Err(LlamaError::InvalidParam(format!("draft model: {m}")));
    if tgt.vocab_type() != dft.vocab_type() {
        return bad(format!(
            "vocabulary type {:?} does not match the target's {:?}",
            dft.vocab_type(),
            tgt.vocab_type()
        ));
    }
    if tgt.add_bos() != dft.add_bos() || (tgt.add_bos() && tgt.bos() != dft.bos()) {
        return bad(format!(
            "BOS tokens must match the target's (add: {} - {}, id: {:?} - {:?})",
            tgt.add_bos(),
            dft.add_bos(),
            tgt.bos(),
            dft.bos()
        ));
    }
    if tgt.add_eos() != dft.add_eos() || (tgt.add_eos() && tgt.eos() != dft.eos()) {
        return bad(format!(
            "EOS tokens must match the target's (add: {} - {}, id: {:?} - {:?})",
            tgt.add_eos(),
            dft.add_eos(),
            tgt.eos(),
            dft.eos()
        ));
    }
    let (nt, nd) = (tgt.n_tokens(), dft.n_tokens());
    if nt.abs_diff(nd) > VOCAB_MAX_SIZE_DIFFERENCE {
        return bad(format!(
            "vocabulary of {nd} tokens is too far from the target's {nt} (at most {VOCAB_MAX_SIZE_DIFFERENCE} apart)"
        ));
    }
    for i in VOCAB_CHECK_START_TOKEN_ID..nt.min(nd) {
        let id = i as Token;
        if tgt.get_text(id) != dft.get_text(id) {
            return bad(format!(
                "token {i} is '{}' in the draft and '{}' in the target",
                String::from_utf8_lossy(dft.get_text(id).unwrap_or_default()),
                String::from_utf8_lossy(tgt.get_text(id).unwrap_or_default())
            ));
        }
    }
    Ok(())
}

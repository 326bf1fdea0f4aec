//! The acceptance rule (llama.cpp's `common_sampler_sample_and_accept_n`):
//! the target decoded the last sampled token and the proposal in one batch;
//! row `i` is sampled as plain decoding would sample it and accepted into
//! the sampler; while it equals proposal `i` the next row follows. The
//! result is the accepted proposals and one token more: the first that
//! differs, or the one after the whole proposal.

use crate::batch::Token;
use crate::error::Result;
use crate::sampling::SamplerChain;

/// Samples rows `0..=draft.len()` (their logits from `logits(i)`) while
/// they agree with `draft`; returns the sampled tokens: `draft`'s accepted
/// prefix and one more. Every returned token is accepted by `sampler`.
pub fn sample_and_accept<'a>(
    sampler: &mut SamplerChain,
    draft: &[Token],
    mut logits: impl FnMut(usize) -> Result<&'a [f32]>,
) -> Result<Vec<Token>> {
    let mut out = Vec::with_capacity(draft.len() + 1);
    for i in 0..=draft.len() {
        let t = sampler.sample(logits(i)?);
        if t >= 0 {
            sampler.try_accept(t)?;
        }
        out.push(t);
        if draft.get(i) != Some(&t) {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SamplingParams;

    fn onehot(n: usize, at: usize) -> Vec<f32> {
        let mut v = vec![0.0; n];
        v[at] = 5.0;
        v
    }

    fn greedy() -> SamplerChain {
        let p = SamplingParams {
            temp: 0.0,
            ..SamplingParams::default()
        };
        SamplerChain::from_params(&p, 10)
    }

    #[test]
    fn keeps_the_agreeing_prefix_and_one_more() {
        let rows: Vec<Vec<f32>> = [3, 4, 9, 1].iter().map(|&t| onehot(10, t)).collect();
        let read = |i: usize| Ok(rows[i].as_slice());
        // All three proposals agree: the fourth row adds one token.
        assert_eq!(
            sample_and_accept(&mut greedy(), &[3, 4, 9], read).unwrap(),
            vec![3, 4, 9, 1]
        );
        // The second differs: the target's token replaces it.
        assert_eq!(
            sample_and_accept(&mut greedy(), &[3, 5, 9], read).unwrap(),
            vec![3, 4]
        );
        // No proposal: plain decoding.
        assert_eq!(
            sample_and_accept(&mut greedy(), &[], read).unwrap(),
            vec![3]
        );
    }
}

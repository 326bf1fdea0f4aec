//! ROPE's (cos, sin) tables kept across nodes. The queries and keys of
//! every layer rotate by the same positions with the same settings, so a
//! thread computes the table of a position once and copies it for the
//! nodes after (ggml computes it again in each node: for a head of 256
//! dims that is 256 sines and cosines per token and node). Each thread
//! keeps the tables of a few sets of settings (models alternate sets, as
//! Gemma's local and global layers do), up to a bound on memory; the
//! numbers are those [`rope_cache`] computes.

use std::cell::RefCell;
use std::collections::HashMap;

use ggml_core::RopeParams;

use super::rope::{rope_cache, Angles};

/// Sets of settings a thread keeps tables for (the oldest goes first).
const SETS: usize = 4;
/// Most values a thread keeps per set: a ubatch of 512 positions of 256
/// dims.
const VALUES: usize = 1 << 17;

/// What a table depends on besides the position: the bits of every
/// setting [`rope_cache`] reads and of the frequency factors.
#[derive(Clone, PartialEq, Debug)]
pub(crate) struct Settings {
    bits: [u64; 8],
    factors: Option<Vec<u32>>,
}

impl Settings {
    pub(crate) fn of(p: &RopeParams, freq_factors: Option<&[f32]>) -> Settings {
        Settings {
            bits: [
                p.n_dims as u64,
                p.n_ctx_orig as u64,
                p.freq_base.to_bits().into(),
                p.freq_scale.to_bits().into(),
                p.ext_factor.to_bits().into(),
                p.attn_factor.to_bits().into(),
                p.beta_fast.to_bits().into(),
                p.beta_slow.to_bits().into(),
            ],
            factors: freq_factors.map(|f| f.iter().map(|x| x.to_bits()).collect()),
        }
    }
}

/// The tables of one set of settings, by position bits.
struct Set {
    settings: Settings,
    tables: HashMap<u32, Box<[f32]>>,
}

thread_local! {
    static KEPT: RefCell<Vec<Set>> = const { RefCell::new(Vec::new()) };
}

/// Fills `cache` as [`rope_cache`] does for `pos` (with `settings` made of
/// `p` and `freq_factors`), from the thread's kept table when it has one.
pub(crate) fn table(
    settings: &Settings,
    p: &RopeParams,
    a: &Angles,
    pos: f32,
    freq_factors: Option<&[f32]>,
    cache: &mut Vec<f32>,
) {
    KEPT.with_borrow_mut(|sets| {
        let i = match sets.iter().position(|s| s.settings == *settings) {
            Some(i) => i,
            None => {
                if sets.len() == SETS {
                    sets.remove(0);
                }
                sets.push(Set {
                    settings: settings.clone(),
                    tables: HashMap::new(),
                });
                sets.len() - 1
            }
        };
        let set = &mut sets[i];
        if let Some(t) = set.tables.get(&pos.to_bits()) {
            cache.clear();
            cache.extend_from_slice(t);
            return;
        }
        rope_cache(p, a, pos, freq_factors, cache);
        if (set.tables.len() + 1) * cache.len() > VALUES {
            set.tables.clear();
        }
        set.tables.insert(pos.to_bits(), cache.as_slice().into());
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_core::RopeMode;

    /// A table from the kept ones equals a fresh one, and settings that
    /// differ in any value, or in their frequency factors, do not share.
    #[test]
    fn kept_tables_equal_fresh_ones_of_their_own_settings() {
        let mut variants = Vec::new();
        let base = RopeParams::new(8, RopeMode::Neox, 10000.0);
        variants.push((base, None));
        let mut p = base;
        p.freq_base = 1e6;
        variants.push((p, None));
        let mut p = base;
        p.freq_scale = 0.5;
        variants.push((p, None));
        let mut p = base;
        p.ext_factor = 1.0;
        p.n_ctx_orig = 4096;
        p.beta_fast = 32.0;
        p.beta_slow = 1.0;
        variants.push((p, None));
        p.attn_factor = 0.5;
        variants.push((p, None));
        variants.push((base, Some(vec![1.0, 2.0, 4.0, 8.0])));
        variants.push((base, Some(vec![1.0, 2.0, 4.0, 16.0])));
        let mut p = base;
        p.n_dims = 6;
        variants.push((p, None));
        let (mut got, mut want) = (Vec::new(), Vec::new());
        // More sets than are kept, twice over: every table is made, then
        // kept or made again.
        for _ in 0..2 {
            for (p, ff) in &variants {
                for pos in [0.0f32, 1.0, 7.0, 1.0, 300.0] {
                    let a = Angles::new(p);
                    table(
                        &Settings::of(p, ff.as_deref()),
                        p,
                        &a,
                        pos,
                        ff.as_deref(),
                        &mut got,
                    );
                    rope_cache(p, &a, pos, ff.as_deref(), &mut want);
                    assert_eq!(
                        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        "{p:?} {ff:?} at {pos}"
                    );
                }
            }
        }
    }
}

//! The sampler chain through its public items: llama.cpp's default chain,
//! determinism, temperature 0 as arg-max, penalties across steps, edge cases.

use crate::sampling::{
    Candidates, Dist, Greedy, Penalties, Sampler, SamplerChain, SamplerKind, SamplingParams, TopK,
    DEFAULT_SEED, TOKEN_NULL,
};
use test_support::greedy_token;
use test_support::Rng;

/// `n` logits in [-10, 10), in steps of 0.001.
fn logits(gen: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| gen.below(20_000) as f32 / 1000.0 - 10.0)
        .collect()
}

fn params(seed: u32) -> SamplingParams {
    SamplingParams {
        seed,
        ..SamplingParams::default()
    }
}

#[test]
fn defaults_are_llama_cpp_common_defaults() {
    let p = SamplingParams::default();
    assert_eq!(p.seed, DEFAULT_SEED);
    assert_eq!(DEFAULT_SEED, 0xFFFF_FFFF);
    assert_eq!(
        (p.temp, p.top_k, p.top_p, p.min_p, p.typ_p),
        (0.8, 40, 0.95, 0.05, 1.0)
    );
    assert_eq!(p.penalty_last_n, 64);
    assert_eq!(
        (p.penalty_repeat, p.penalty_freq, p.penalty_present),
        (1.0, 0.0, 0.0)
    );
    assert_eq!((p.dynatemp_range, p.dynatemp_exponent), (0.0, 1.0));
    assert_eq!(p.min_keep, 0);
    assert!(p.logit_bias.is_empty());
    assert_eq!(p.samplers, SamplerKind::DEFAULT_ORDER);
}

#[test]
fn default_chain_order() {
    let chain = SamplerChain::from_params(&params(1), 100);
    assert_eq!(
        chain.names(),
        [
            "penalties",
            "top-k",
            "typical",
            "top-p",
            "min-p",
            "temp-ext",
            "dist"
        ]
    );
    let with_bias = SamplingParams {
        logit_bias: vec![(3, -1.0)],
        ..params(1)
    };
    let chain = SamplerChain::from_params(&with_bias, 100);
    assert_eq!(chain.names()[0], "logit-bias");
    assert_eq!(chain.len(), 8);
}

#[test]
fn custom_order_from_names_and_chars() {
    let order: Vec<SamplerKind> = "min_p;temperature"
        .split(';')
        .filter_map(SamplerKind::from_name)
        .collect();
    let p = SamplingParams {
        samplers: order,
        ..params(1)
    };
    assert_eq!(
        SamplerChain::from_params(&p, 10).names(),
        ["min-p", "temp-ext", "dist"]
    );
    let seq: Vec<SamplerKind> = "ekypmt"
        .chars()
        .filter_map(SamplerKind::from_char)
        .collect();
    assert_eq!(seq, SamplerKind::DEFAULT_ORDER);
    assert_eq!(SamplerKind::from_name("nucleus"), Some(SamplerKind::TopP));
    assert_eq!(SamplerKind::from_name("dry"), None);
    for k in SamplerKind::DEFAULT_ORDER {
        assert_eq!(SamplerKind::from_name(k.name()), Some(k));
    }
}

#[test]
fn temp_zero_is_argmax() {
    let mut gen = Rng(12345);
    for seed in [0, 1, 42, DEFAULT_SEED] {
        let p = SamplingParams {
            temp: 0.0,
            ..params(seed)
        };
        let mut chain = SamplerChain::from_params(&p, 500);
        for _ in 0..50 {
            let logits = logits(&mut gen, 500);
            assert_eq!(chain.sample(&logits), greedy_token(&logits));
        }
    }
}

#[test]
fn temp_zero_with_top_k_disabled_is_argmax() {
    let mut gen = Rng(99);
    let p = SamplingParams {
        temp: 0.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        ..params(5)
    };
    let mut chain = SamplerChain::from_params(&p, 3000);
    for _ in 0..10 {
        let logits = logits(&mut gen, 3000);
        assert_eq!(chain.sample(&logits), greedy_token(&logits));
    }
}

#[test]
fn greedy_chain_is_argmax() {
    let mut chain = SamplerChain::new();
    chain.add(Greedy::new());
    let mut gen = Rng(7);
    for _ in 0..20 {
        let logits = logits(&mut gen, 64);
        assert_eq!(chain.sample(&logits), greedy_token(&logits));
    }
}

#[test]
fn fixed_seed_is_reproducible() {
    let run = |seed: u32| -> Vec<i32> {
        let mut chain = SamplerChain::from_params(&params(seed), 256);
        let mut gen = Rng(2024);
        (0..100)
            .map(|_| {
                let t = chain.sample(&logits(&mut gen, 256));
                chain.accept(t);
                t
            })
            .collect()
    };
    let a = run(42);
    assert_eq!(a, run(42));
    assert_ne!(a, run(43));
}

#[test]
fn reset_restarts_the_stream() {
    let mut chain = SamplerChain::from_params(&params(9), 32);
    let logits: Vec<f32> = (0..32).map(|i| (i % 5) as f32 * 0.3).collect();
    let a: Vec<i32> = (0..50).map(|_| chain.sample(&logits)).collect();
    chain.reset();
    let b: Vec<i32> = (0..50).map(|_| chain.sample(&logits)).collect();
    assert_eq!(a, b);
    assert_eq!(chain.seed(), 9);
}

#[test]
fn default_seed_reports_a_real_seed() {
    let chain = SamplerChain::from_params(&SamplingParams::default(), 10);
    let _ = chain.seed(); // random; must merely exist
    assert_eq!(SamplerChain::new().seed(), DEFAULT_SEED);
}

#[test]
fn sampling_follows_the_distribution() {
    // No truncation, temperature 1: frequencies follow softmax(logits).
    let p = SamplingParams {
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        temp: 1.0,
        ..params(77)
    };
    let mut chain = SamplerChain::from_params(&p, 3);
    let probs = [0.6f32, 0.3, 0.1];
    let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
    let mut counts = [0usize; 3];
    let n = 50_000;
    for _ in 0..n {
        let t = chain.sample(&logits);
        counts[usize::try_from(t).unwrap()] += 1;
    }
    for (c, p) in counts.iter().zip(probs) {
        assert!((*c as f32 / n as f32 - p).abs() < 0.01, "{counts:?}");
    }
}

#[test]
fn top_k_one_always_picks_the_max() {
    let p = SamplingParams {
        top_k: 1,
        ..params(3)
    };
    let mut chain = SamplerChain::from_params(&p, 100);
    let mut gen = Rng(5);
    for _ in 0..30 {
        let logits = logits(&mut gen, 100);
        assert_eq!(chain.sample(&logits), greedy_token(&logits));
    }
}

#[test]
fn penalties_steer_away_from_accepted_tokens() {
    // Token 0 leads by a little; a strong presence penalty after accepting it
    // hands the arg-max to token 1.
    let p = SamplingParams {
        temp: 0.0,
        penalty_present: 5.0,
        ..params(1)
    };
    let mut chain = SamplerChain::from_params(&p, 3);
    let logits = [2.0, 1.5, -1.0];
    assert_eq!(chain.sample(&logits), 0);
    chain.accept(0);
    assert_eq!(chain.sample(&logits), 1);
    chain.reset();
    assert_eq!(chain.sample(&logits), 0);
}

#[test]
fn penalty_window_of_context_size() {
    let p = SamplingParams {
        penalty_last_n: -1,
        ..SamplingParams::default()
    }
    .with_n_ctx(4096);
    assert_eq!(p.penalty_last_n, 4096);
    let p = SamplingParams::default().with_n_ctx(4096);
    assert_eq!(p.penalty_last_n, 64);
}

#[test]
fn logit_bias_can_ban_the_argmax() {
    let p = SamplingParams {
        temp: 0.0,
        logit_bias: vec![(2, f32::NEG_INFINITY)],
        ..params(1)
    };
    let mut chain = SamplerChain::from_params(&p, 4);
    assert_eq!(chain.sample(&[0.0, 1.0, 5.0, 2.0]), 3);
}

#[test]
fn probabilities_of_the_last_sample() {
    let p = SamplingParams {
        top_k: 2,
        ..params(11)
    };
    let mut chain = SamplerChain::from_params(&p, 4);
    let t = chain.sample(&[0.0, 3.0, 1.0, 2.9]);
    let c = chain.candidates();
    assert!(c.len() <= 2);
    assert_eq!(c.selected_token(), Some(t));
    let sum: f32 = c.data.iter().map(|d| d.p).sum();
    assert!((sum - 1.0).abs() < 1e-5);
}

#[test]
fn edge_cases_do_not_panic() {
    let mut chain = SamplerChain::from_params(&params(1), 0);
    assert_eq!(chain.sample(&[]), TOKEN_NULL);

    // All NaN: a valid token all the same.
    let t = chain.sample(&[f32::NAN; 5]);
    assert!((0..5).contains(&t));

    // NaN next to real logits: never chosen.
    let greedy = SamplingParams {
        temp: 0.0,
        ..params(1)
    };
    let mut chain2 = SamplerChain::from_params(&greedy, 3);
    assert_eq!(chain2.sample(&[f32::NAN, -1.0, f32::NAN]), 1);

    // Infinities.
    assert_eq!(chain2.sample(&[f32::NEG_INFINITY, f32::INFINITY, 0.0]), 1);
    let t = chain.sample(&[f32::NEG_INFINITY; 3]);
    assert!((0..3).contains(&t));

    // k larger than the vocabulary, extreme p values, huge min_keep.
    let odd_params = SamplingParams {
        top_k: 1_000_000,
        top_p: -3.0,
        min_p: 7.0,
        typ_p: f32::NAN,
        min_keep: usize::MAX,
        temp: f32::INFINITY,
        dynatemp_range: 2.0,
        dynatemp_exponent: f32::NAN,
        penalty_repeat: 0.0,
        penalty_freq: f32::NAN,
        penalty_last_n: i32::MIN,
        logit_bias: vec![(i32::MAX, 1.0), (i32::MIN, 1.0)],
        ..params(2)
    };
    let mut odd = SamplerChain::from_params(&odd_params, 4);
    for _ in 0..10 {
        let t = odd.sample(&[0.5, 0.1, -2.0, 3.0]);
        assert!((0..4).contains(&t));
        odd.accept(t);
    }
    // A token outside the vocabulary is accepted without harm.
    odd.accept(-7);
    odd.accept(i32::MAX);
}

#[test]
fn chain_without_selector_returns_null() {
    let mut chain = SamplerChain::new();
    chain.add(TopK::new(2));
    assert_eq!(chain.sample(&[1.0, 2.0, 3.0]), TOKEN_NULL);
    assert!(SamplerChain::new().is_empty());
}

#[test]
fn chain_get_remove_and_nesting() {
    let mut inner = SamplerChain::new();
    inner.add(TopK::new(1));
    let mut chain = SamplerChain::new();
    chain
        .add(Penalties::new(8, 1.1, 0.0, 0.0))
        .add(inner)
        .add(Dist::new(4));
    assert_eq!(chain.names(), ["penalties", "chain", "dist"]);
    assert_eq!(chain.get(1).map(|s| s.name()), Some("chain"));
    assert!(chain.get(3).is_none());
    assert_eq!(chain.sample(&[0.0, 4.0, 1.0]), 1);
    let removed = chain.remove(0);
    assert_eq!(
        removed.map(|s| s.name().to_string()),
        Some("penalties".into())
    );
    assert!(chain.remove(5).is_none());
    assert_eq!(chain.len(), 2);

    // The chain is itself a sampler.
    let mut c = Candidates::from_logits(&[0.0, 4.0, 1.0]);
    Sampler::apply(&mut chain, &mut c);
    assert_eq!(c.selected_token(), Some(1));
}

/// Settings whose chain always ends on the arg-max take the scan instead of
/// the candidate list: the same token as the list, on logits with ties,
/// NaN and infinities; settings that can pick another token keep the list.
#[test]
fn the_arg_max_scan_picks_what_the_chain_picks() {
    let greedy = SamplingParams {
        temp: 0.0,
        ..params(7)
    };
    let mut gen = Rng(2024);
    for case in 0..300 {
        let n = 1 + gen.below(300);
        let mut l = logits(&mut gen, n);
        // Ties, NaN, infinities.
        match case % 5 {
            0 => l.iter_mut().for_each(|x| *x = x.round()),
            1 => l[gen.below(n)] = f32::NAN,
            2 => l.iter_mut().for_each(|x| *x = f32::NAN),
            3 => l[gen.below(n)] = f32::INFINITY,
            _ => l[gen.below(n)] = f32::NEG_INFINITY,
        }
        let mut fast = SamplerChain::from_params(&greedy, n);
        assert!(fast.argmax);
        let mut slow = SamplerChain::from_params(&greedy, n);
        slow.argmax = false;
        assert_eq!(fast.sample(&l), slow.sample(&l), "case {case}: {l:?}");
    }
    assert_eq!(
        SamplerChain::from_params(&greedy, 0).sample(&[]),
        TOKEN_NULL
    );
    // Settings that can leave out the arg-max, or sample.
    for p in [
        SamplingParams {
            typ_p: 0.5,
            ..greedy.clone()
        },
        SamplingParams {
            penalty_repeat: 1.3,
            ..greedy.clone()
        },
        SamplingParams {
            logit_bias: vec![(3, -5.0)],
            ..greedy.clone()
        },
        SamplingParams {
            dynatemp_range: 0.5,
            ..greedy.clone()
        },
        SamplingParams {
            samplers: vec![SamplerKind::TopK],
            ..greedy.clone()
        },
        params(7),
    ] {
        assert!(!SamplerChain::from_params(&p, 10).argmax, "{p:?}");
    }
    // A chain changed after it was built samples through its list.
    let mut changed = SamplerChain::from_params(&greedy, 10);
    changed.add(TopK::new(1));
    assert!(!changed.argmax);
}

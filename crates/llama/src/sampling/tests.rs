//! Unit tests of each sampler on small hand-checked distributions.

use super::*;

fn cands(logits: &[f32]) -> Candidates {
    Candidates::from_logits(logits)
}

fn ids(c: &Candidates) -> Vec<i32> {
    c.data.iter().map(|t| t.id).collect()
}

fn logits_of(probs: &[f32]) -> Vec<f32> {
    probs.iter().map(|p| p.ln()).collect()
}

// --- candidates and helpers ---

#[test]
fn from_logits_numbers_tokens_and_clears_nan() {
    let c = cands(&[0.5, f32::NAN, -1.0]);
    assert_eq!(ids(&c), [0, 1, 2]);
    assert_eq!(c.data[1].logit, f32::NEG_INFINITY);
    assert!(!c.sorted);
    assert_eq!(c.selected, None);
}

#[test]
fn sort_is_descending_with_ties_by_id() {
    let mut c = cands(&[1.0, 3.0, 2.0, 3.0, f32::NEG_INFINITY]);
    c.sort();
    assert_eq!(ids(&c), [1, 3, 2, 0, 4]);
    assert!(c.sorted);
}

#[test]
fn softmax_normalises() {
    let mut c = cands(&logits_of(&[0.2, 0.5, 0.3]));
    c.softmax();
    assert_eq!(ids(&c), [1, 2, 0]);
    let p: Vec<f32> = c.data.iter().map(|t| t.p).collect();
    for (got, want) in p.iter().zip([0.5, 0.3, 0.2]) {
        assert!((got - want).abs() < 1e-6, "{p:?}");
    }
}

#[test]
fn softmax_of_all_neg_inf_is_uniform() {
    let mut c = cands(&[f32::NEG_INFINITY; 4]);
    c.softmax_unsorted();
    assert!(c.data.iter().all(|t| t.p == 0.25));
}

#[test]
fn softmax_with_pos_inf_shares_between_the_infinite() {
    let mut c = cands(&[f32::INFINITY, 1.0, f32::INFINITY]);
    c.softmax_unsorted();
    let p: Vec<f32> = c.data.iter().map(|t| t.p).collect();
    assert_eq!(p, [0.5, 0.0, 0.5]);
}

#[test]
fn partial_sort_agrees_with_full_sort() {
    let logits: Vec<f32> = (0..3000)
        .map(|i| ((i * 7919) % 1000) as f32 / 100.0)
        .collect();
    let mut full = cands(&logits);
    full.sort();
    let mut part = cands(&logits);
    sort_top(&mut part.data, 256);
    assert_eq!(ids(&full)[..256], ids(&part)[..256]);
}

// --- mt19937 ---

#[test]
fn mt19937_matches_the_standard() {
    // The C++ standard requires the 10000th draw of a default-seeded
    // (5489) std::mt19937 to be 4123659995.
    let mut rng = Mt19937::new(5489);
    assert_eq!(rng.next_u32(), 3_499_211_612);
    for _ in 1..9999 {
        rng.next_u32();
    }
    assert_eq!(rng.next_u32(), 4_123_659_995);
}

#[test]
#[allow(clippy::excessive_precision)] // the digits as the reference printed them
fn mt19937_uniform_matches_libstdcxx() {
    // std::uniform_real_distribution<double>(0, 1) over std::mt19937(1234)
    // with GNU libstdc++.
    let mut rng = Mt19937::new(1234);
    let want = [
        0.49766366630595166,
        0.81783844288953322,
        0.61211189358442275,
        0.77135991905474999,
    ];
    for w in want {
        assert_eq!(rng.next_f64(), w);
    }
}

#[test]
fn mt19937_reseed_restarts() {
    let mut rng = Mt19937::new(7);
    let a: Vec<u32> = (0..700).map(|_| rng.next_u32()).collect();
    rng.seed(7);
    let b: Vec<u32> = (0..700).map(|_| rng.next_u32()).collect();
    assert_eq!(a, b);
}

#[test]
fn resolve_seed_keeps_explicit_seeds() {
    assert_eq!(resolve_seed(42), 42);
    assert_eq!(resolve_seed(0), 0);
}

// --- greedy ---

#[test]
fn greedy_takes_argmax_lowest_index_on_ties() {
    let mut c = cands(&[1.0, 3.0, 3.0, 2.0]);
    Greedy::new().apply(&mut c);
    assert_eq!(c.selected, Some(1));
    assert_eq!(c.selected_token(), Some(1));
}

#[test]
fn greedy_on_empty_selects_nothing() {
    let mut c = cands(&[]);
    Greedy::new().apply(&mut c);
    assert_eq!(c.selected, None);
    assert_eq!(c.selected_token(), None);
}

#[test]
fn greedy_ignores_nan() {
    let mut c = cands(&[f32::NAN, 0.5, f32::NAN]);
    Greedy::new().apply(&mut c);
    assert_eq!(c.selected, Some(1));
    // NaN placed by hand, not through from_logits.
    let mut c = Candidates {
        data: vec![
            TokenData {
                id: 0,
                logit: f32::NAN,
                p: 0.0,
            },
            TokenData {
                id: 1,
                logit: -3.0,
                p: 0.0,
            },
        ],
        ..Default::default()
    };
    Greedy::new().apply(&mut c);
    assert_eq!(c.selected, Some(1));
}

// --- dist ---

#[test]
fn dist_matches_llama_cpp_draws() {
    // Picks of llama.cpp's dist procedure (std::mt19937(42) with
    // std::uniform_real_distribution<double>, GNU libstdc++) on these logits.
    let logits = [1.0, 2.0, 0.5, -1.0, 1.5];
    let want = [4, 1, 4, 1, 1, 0, 1, 1, 0, 2, 0, 3, 4, 0, 4, 2, 2, 0, 0, 1];
    let mut d = Dist::new(42);
    for w in want {
        let mut c = cands(&logits);
        d.apply(&mut c);
        assert_eq!(c.selected, Some(w));
    }
}

#[test]
fn dist_is_reproducible_and_resets() {
    let logits = logits_of(&[0.1, 0.2, 0.3, 0.4]);
    let draw = |d: &mut Dist| -> Vec<usize> {
        (0..100)
            .map(|_| {
                let mut c = cands(&logits);
                d.apply(&mut c);
                c.selected.unwrap_or(usize::MAX)
            })
            .collect()
    };
    let mut a = Dist::new(1234);
    let mut b = Dist::new(1234);
    let first = draw(&mut a);
    assert_eq!(first, draw(&mut b));
    a.reset();
    assert_eq!(first, draw(&mut a));
    assert_eq!(a.seed(), Some(1234));
    assert_ne!(first, draw(&mut Dist::new(4321)));
}

#[test]
fn dist_follows_the_distribution() {
    let probs = [0.5f32, 0.3, 0.15, 0.05];
    let logits = logits_of(&probs);
    let mut d = Dist::new(7);
    let mut counts = [0usize; 4];
    let n = 100_000;
    for _ in 0..n {
        let mut c = cands(&logits);
        d.apply(&mut c);
        counts[c.selected.unwrap_or(0)] += 1;
    }
    for (count, p) in counts.iter().zip(probs) {
        let freq = *count as f32 / n as f32;
        assert!((freq - p).abs() < 0.01, "{counts:?}");
    }
}

#[test]
fn dist_leaves_normalised_probabilities() {
    let mut c = cands(&logits_of(&[0.25, 0.75]));
    Dist::new(3).apply(&mut c);
    assert!((c.data[0].p - 0.25).abs() < 1e-6);
    assert!((c.data[1].p - 0.75).abs() < 1e-6);
}

#[test]
fn dist_edge_cases() {
    let mut d = Dist::new(1);
    let mut c = cands(&[]);
    d.apply(&mut c);
    assert_eq!(c.selected, None);

    let mut c = cands(&[-5.0]);
    d.apply(&mut c);
    assert_eq!(c.selected, Some(0));
    assert_eq!(c.data[0].p, 1.0);

    // Never picks a candidate of probability 0.
    for _ in 0..200 {
        let mut c = cands(&[f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY]);
        d.apply(&mut c);
        assert_eq!(c.selected, Some(1));
    }

    // All NaN (by hand): still a valid selection.
    let mut c = Candidates {
        data: vec![
            TokenData {
                id: 0,
                logit: f32::NAN,
                p: 0.0
            };
            3
        ],
        ..Default::default()
    };
    d.apply(&mut c);
    assert!(c.selected.is_some_and(|i| i < 3));
}

#[test]
fn dist_default_seed_is_random_but_valid() {
    let mut d = Dist::new(DEFAULT_SEED);
    let mut c = cands(&[0.0, 1.0]);
    d.apply(&mut c);
    assert!(c.selected.is_some());
    assert!(d.seed().is_some());
}

// --- temperature ---

#[test]
fn temp_divides_logits() {
    let mut c = cands(&[1.0, -2.0, 0.5]);
    Temp::new(0.5).apply(&mut c);
    let l: Vec<f32> = c.data.iter().map(|t| t.logit).collect();
    assert_eq!(l, [2.0, -4.0, 1.0]);
}

#[test]
fn temp_zero_or_negative_keeps_only_the_max() {
    for t in [0.0, -1.0, f32::NAN] {
        let mut c = cands(&[1.0, 3.0, 3.0, 2.0]);
        Temp::new(t).apply(&mut c);
        let l: Vec<f32> = c.data.iter().map(|t| t.logit).collect();
        let ninf = f32::NEG_INFINITY;
        assert_eq!(l, [ninf, 3.0, ninf, ninf], "temp {t}");
        assert_eq!(c.len(), 4);
    }
    // Empty list: nothing to do.
    let mut c = cands(&[]);
    Temp::new(0.0).apply(&mut c);
    assert!(c.is_empty());
}

#[test]
fn temp_ext_without_range_is_plain_temp() {
    let mut a = cands(&[1.0, -2.0, 0.5]);
    let mut b = a.clone();
    TempExt::new(0.7, 0.0, 1.0).apply(&mut a);
    Temp::new(0.7).apply(&mut b);
    assert_eq!(a, b);
}

#[test]
fn temp_ext_scales_by_entropy() {
    let logits = [2.0f32, 1.0, 0.0];
    let (temp, delta, exponent) = (1.0f32, 0.5f32, 1.0f32);
    let mut c = cands(&logits);
    TempExt::new(temp, delta, exponent).apply(&mut c);

    // By hand: normalised entropy of softmax([2, 1, 0]) maps into [0.5, 1.5].
    let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
    let p: Vec<f64> = logits.iter().map(|&l| f64::from(l).exp() / z).collect();
    let h: f64 = p.iter().map(|p| -p * p.ln()).sum();
    let dyn_temp = 0.5 + 1.0 * (h / 3f64.ln());
    assert_eq!(ids(&c), [0, 1, 2]);
    for (t, &l) in c.data.iter().zip(&logits) {
        assert!((f64::from(t.logit) - f64::from(l) / dyn_temp).abs() < 1e-5);
    }
    let sum: f32 = c.data.iter().map(|t| t.p).sum();
    assert!((sum - 1.0).abs() < 1e-6);
    assert!(c.data[0].p > c.data[1].p && c.data[1].p > c.data[2].p);
}

#[test]
fn temp_ext_zero_entropy_with_zero_min_temp_keeps_max() {
    let ninf = f32::NEG_INFINITY;
    let mut c = cands(&[ninf, 0.0, ninf]);
    TempExt::new(0.5, 1.0, 1.0).apply(&mut c);
    assert_eq!(c.data[0].id, 1);
    let p: Vec<f32> = c.data.iter().map(|t| t.p).collect();
    assert_eq!(p, [1.0, 0.0, 0.0]);
}

#[test]
fn temp_ext_single_candidate_is_untouched() {
    let mut c = cands(&[3.0]);
    TempExt::new(1.0, 0.5, 1.0).apply(&mut c);
    assert_eq!(c.data[0].logit, 3.0);
}

// --- top-k ---

#[test]
fn top_k_keeps_k_sorted() {
    let mut c = cands(&[0.1, 0.5, 0.3, 0.9, 0.2]);
    TopK::new(2).apply(&mut c);
    assert_eq!(ids(&c), [3, 1]);
    assert!(c.sorted);
}

#[test]
fn top_k_non_positive_is_a_no_op() {
    for k in [0, -1] {
        let mut c = cands(&[0.1, 0.5, 0.3]);
        TopK::new(k).apply(&mut c);
        assert_eq!(ids(&c), [0, 1, 2]);
        assert!(!c.sorted);
    }
}

#[test]
fn top_k_larger_than_the_list_keeps_all() {
    let mut c = cands(&[0.1, 0.5, 0.3]);
    TopK::new(10).apply(&mut c);
    assert_eq!(ids(&c), [1, 2, 0]);
    let mut c = cands(&[]);
    TopK::new(10).apply(&mut c);
    assert!(c.is_empty());
}

#[test]
fn top_k_on_sorted_input_truncates() {
    let mut c = cands(&[0.1, 0.5, 0.3]);
    c.sort();
    TopK::new(1).apply(&mut c);
    assert_eq!(ids(&c), [1]);
}

#[test]
fn top_k_large_vocab_matches_full_sort() {
    let logits: Vec<f32> = (0..5000).map(|i| ((i * 31) % 97) as f32).collect();
    let mut full = cands(&logits);
    full.sort();
    let mut c = cands(&logits);
    TopK::new(40).apply(&mut c);
    assert_eq!(ids(&c), ids(&full)[..40]);
}

// --- top-p ---

#[test]
fn top_p_keeps_until_the_mass_reaches_p() {
    let logits = logits_of(&[0.1, 0.5, 0.15, 0.25]);
    let mut c = cands(&logits);
    TopP::new(0.7, 0).apply(&mut c);
    assert_eq!(ids(&c), [1, 3]); // 0.5, then 0.75 >= 0.7
    let mut c = cands(&logits);
    TopP::new(0.8, 0).apply(&mut c);
    assert_eq!(ids(&c), [1, 3, 2]); // 0.9 >= 0.8
    assert!(c.sorted);
}

#[test]
fn top_p_boundary_is_inclusive() {
    // Equal logits give exactly 0.25 each: 0.25 + 0.25 == 0.5 stops there.
    let mut c = cands(&[0.0; 4]);
    TopP::new(0.5, 0).apply(&mut c);
    assert_eq!(ids(&c), [0, 1]);
}

#[test]
fn top_p_respects_min_keep() {
    let mut c = cands(&logits_of(&[0.1, 0.5, 0.15, 0.25]));
    TopP::new(0.1, 3).apply(&mut c);
    assert_eq!(c.len(), 3);
}

#[test]
fn top_p_out_of_range() {
    let logits = logits_of(&[0.1, 0.5, 0.4]);
    let mut c = cands(&logits);
    TopP::new(1.0, 0).apply(&mut c);
    assert_eq!(ids(&c), [0, 1, 2]);
    let mut c = cands(&logits);
    TopP::new(1.5, 0).apply(&mut c);
    assert_eq!(c.len(), 3);
    // p <= 0: the first candidate already reaches it.
    let mut c = cands(&logits);
    TopP::new(-0.5, 0).apply(&mut c);
    assert_eq!(ids(&c), [1]);
    let mut c = cands(&logits);
    TopP::new(f32::NAN, 0).apply(&mut c);
    assert_eq!(c.len(), 3);
    let mut c = cands(&[]);
    TopP::new(0.5, 0).apply(&mut c);
    assert!(c.is_empty());
}

#[test]
fn top_p_large_unsorted_list() {
    // Flat enough that the first 256 sorted candidates do not reach p.
    let logits: Vec<f32> = (0..3000).map(|i| ((i * 13) % 101) as f32 / 50.0).collect();
    let mut c = cands(&logits);
    TopP::new(0.9, 0).apply(&mut c);
    let mut want = cands(&logits);
    want.softmax_unsorted();
    want.sort();
    let mut cum = 0.0f32;
    let n = want.data.iter().take_while(|t| {
        let before = cum;
        cum += t.p;
        before < 0.9
    });
    let n = n.count();
    assert!(n > 256);
    assert_eq!(ids(&c), ids(&want)[..n]);
}

// --- min-p ---

#[test]
fn min_p_keeps_relative_probability_above_p() {
    // Relative to the largest: 1, 0.5, 0.04, 0.1.
    let logits = logits_of(&[0.5, 0.25, 0.02, 0.05]);
    let mut c = cands(&logits);
    MinP::new(0.05, 0).apply(&mut c);
    assert_eq!(ids(&c), [0, 1, 3]); // unsorted path keeps the order
    assert!(!c.sorted);

    let mut c = cands(&logits);
    c.sort();
    MinP::new(0.05, 0).apply(&mut c);
    assert_eq!(ids(&c), [0, 1, 3]);

    let mut c = cands(&logits);
    MinP::new(0.6, 0).apply(&mut c);
    assert_eq!(ids(&c), [0]);
}

#[test]
fn min_p_respects_min_keep() {
    let logits = logits_of(&[0.5, 0.25, 0.02, 0.05]);
    let mut c = cands(&logits);
    MinP::new(0.6, 3).apply(&mut c);
    assert_eq!(ids(&c), [0, 1, 3]);
    assert!(c.sorted);
}

#[test]
fn min_p_out_of_range() {
    let logits = logits_of(&[0.5, 0.25, 0.25]);
    for p in [0.0, -1.0] {
        let mut c = cands(&logits);
        MinP::new(p, 0).apply(&mut c);
        assert_eq!(c.len(), 3);
    }
    // p > 1: only the largest passes (the first always does).
    let mut c = cands(&logits);
    MinP::new(2.0, 0).apply(&mut c);
    assert_eq!(ids(&c), [0]);
    let mut c = cands(&logits);
    MinP::new(f32::NAN, 0).apply(&mut c);
    assert_eq!(c.len(), 3);
    let mut c = cands(&[f32::NEG_INFINITY; 3]);
    MinP::new(0.1, 0).apply(&mut c);
    assert_eq!(c.len(), 3);
    let mut c = cands(&[]);
    MinP::new(0.1, 0).apply(&mut c);
    assert!(c.is_empty());
}

// --- typical ---

#[test]
fn typical_keeps_the_most_typical_tokens() {
    // H = 1.0297; |surprise - H| = 0.336 (0.5), 0.174 (0.3), 0.580 (0.2):
    // order 0.3, 0.5, 0.2.
    let logits = logits_of(&[0.5, 0.3, 0.2]);
    let mut c = cands(&logits);
    Typical::new(0.5, 0).apply(&mut c);
    assert_eq!(ids(&c), [1, 0]); // 0.3, then 0.8 > 0.5
    assert!(!c.sorted);

    let mut c = cands(&logits);
    Typical::new(0.2, 0).apply(&mut c);
    assert_eq!(ids(&c), [1]);

    let mut c = cands(&logits);
    Typical::new(0.2, 3).apply(&mut c);
    assert_eq!(ids(&c), [1, 0, 2]);
}

#[test]
fn typical_boundary_is_exclusive() {
    // Uniform: 0.25 each, 0.5 is not > 0.5, so a third is kept.
    let mut c = cands(&[0.0; 4]);
    Typical::new(0.5, 0).apply(&mut c);
    assert_eq!(c.len(), 3);
}

#[test]
fn typical_out_of_range_and_zero_probabilities() {
    let logits = logits_of(&[0.5, 0.3, 0.2]);
    let mut c = cands(&logits);
    Typical::new(1.0, 0).apply(&mut c);
    assert_eq!(ids(&c), [0, 1, 2]);
    let mut c = cands(&[]);
    Typical::new(0.5, 0).apply(&mut c);
    assert!(c.is_empty());
    // A banned token (-inf) neither poisons the entropy nor comes first.
    let mut c = cands(&[0.0, f32::NEG_INFINITY, 0.0]);
    Typical::new(0.9, 0).apply(&mut c);
    assert_eq!(ids(&c), [0, 2]);
}

// --- penalties ---

#[test]
fn penalties_arithmetic() {
    let mut pen = Penalties::new(64, 2.0, 0.5, 0.25);
    for t in [1, 1, 2] {
        pen.accept(t);
    }
    assert_eq!((pen.count(1), pen.count(2), pen.count(0)), (2, 1, 0));
    let mut c = cands(&[1.0, 2.0, -1.0, 0.5]);
    c.sorted = true;
    pen.apply(&mut c);
    let l: Vec<f32> = c.data.iter().map(|t| t.logit).collect();
    // id 1: 2 / 2 - (2 * 0.5 + 0.25); id 2: -1 * 2 - (0.5 + 0.25)
    assert_eq!(l, [1.0, -0.25, -2.75, 0.5]);
    assert!(!c.sorted);
}

#[test]
fn penalties_repeat_divides_positive_and_multiplies_non_positive() {
    let mut pen = Penalties::new(8, 1.5, 0.0, 0.0);
    pen.accept(0);
    pen.accept(1);
    pen.accept(2);
    let mut c = cands(&[3.0, -3.0, 0.0]);
    pen.apply(&mut c);
    let l: Vec<f32> = c.data.iter().map(|t| t.logit).collect();
    assert_eq!(l, [2.0, -4.5, 0.0]);
}

#[test]
fn penalties_same_in_vocab_order_and_reordered() {
    let mut pen = Penalties::new(16, 1.3, 0.2, 0.1);
    for t in [4, 0, 4, 7, 2, 4] {
        pen.accept(t);
    }
    let logits = [0.3, -1.0, 2.0, 0.0, 1.5, -0.5, 0.7, 3.0];
    let mut in_order = cands(&logits);
    pen.apply(&mut in_order);
    let mut reordered = cands(&logits);
    reordered.sort();
    pen.apply(&mut reordered);
    reordered.data.sort_by_key(|t| t.id);
    assert_eq!(in_order.data, reordered.data);
    assert_eq!(in_order.data[4].logit, 1.5 / 1.3 - (3.0 * 0.2 + 0.1));
}

#[test]
fn penalties_window_slides() {
    let mut pen = Penalties::new(2, 1.0, 1.0, 0.0);
    for t in [5, 5, 6] {
        pen.accept(t);
    }
    assert_eq!((pen.count(5), pen.count(6)), (1, 1));
    pen.accept(7);
    assert_eq!((pen.count(5), pen.count(6), pen.count(7)), (0, 1, 1));
    pen.reset();
    assert_eq!(pen.count(6), 0);
}

#[test]
fn penalties_disabled() {
    let logits = [1.0, 2.0, -1.0];
    // Neutral values.
    let mut pen = Penalties::new(64, 1.0, 0.0, 0.0);
    pen.accept(1);
    let mut c = cands(&logits);
    pen.apply(&mut c);
    assert_eq!(c, cands(&logits));
    // last_n 0 or negative: nothing is remembered.
    for n in [0, -1] {
        let mut pen = Penalties::new(n, 2.0, 1.0, 1.0);
        pen.accept(1);
        assert_eq!(pen.count(1), 0);
        let mut c = cands(&logits);
        pen.apply(&mut c);
        assert_eq!(c, cands(&logits));
    }
}

// --- logit bias ---

#[test]
fn logit_bias_adds_to_listed_tokens() {
    let mut lb = LogitBias::new(
        4,
        vec![(2, 1.5), (0, f32::NEG_INFINITY), (99, 5.0), (-3, 5.0)],
    );
    let mut c = cands(&[0.0, 1.0, 2.0, 3.0]);
    lb.apply(&mut c);
    let l: Vec<f32> = c.data.iter().map(|t| t.logit).collect();
    assert_eq!(l, [f32::NEG_INFINITY, 1.0, 3.5, 3.0]);
    assert_eq!(lb.n_vocab(), 4);
}

#[test]
fn logit_bias_finds_tokens_in_reordered_lists() {
    let mut lb = LogitBias::new(4, vec![(1, -2.0), (3, 1.0)]);
    let mut c = cands(&[0.0, 1.0, 2.0, 3.0]);
    c.sort(); // ids 3, 2, 1, 0
    lb.apply(&mut c);
    let got: Vec<(i32, f32)> = c.data.iter().map(|t| (t.id, t.logit)).collect();
    assert_eq!(got, [(3, 4.0), (2, 2.0), (1, -1.0), (0, 0.0)]);
}

#[test]
fn logit_bias_empty_is_a_no_op() {
    let mut lb = LogitBias::new(3, vec![]);
    let mut c = cands(&[0.0, 1.0, 2.0]);
    lb.apply(&mut c);
    assert_eq!(c, cands(&[0.0, 1.0, 2.0]));
}

// --- names ---

#[test]
fn sampler_names_match_llama_cpp() {
    let names = [
        Greedy::new().name().to_string(),
        Dist::new(0).name().to_string(),
        Temp::new(1.0).name().to_string(),
        TempExt::new(1.0, 0.0, 1.0).name().to_string(),
        TopK::new(1).name().to_string(),
        TopP::new(1.0, 0).name().to_string(),
        MinP::new(0.0, 0).name().to_string(),
        Typical::new(1.0, 0).name().to_string(),
        Penalties::new(0, 1.0, 0.0, 0.0).name().to_string(),
        LogitBias::new(0, vec![]).name().to_string(),
    ];
    let want = [
        "greedy",
        "dist",
        "temp",
        "temp-ext",
        "top-k",
        "top-p",
        "min-p",
        "typical",
        "penalties",
        "logit-bias",
    ];
    assert_eq!(names, want);
}

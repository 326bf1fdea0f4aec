//! Graph reuse on stories260K (CPU): a ubatch of the previous one's shape
//! runs the previous graph again, any change of shape (a padding step of
//! the attended cells, another batch size) builds a new one, and the
//! numbers are exactly those of a context that builds every graph, across
//! several sequences and after changes to the cache (clear, removal,
//! context shift).

mod common;

use common::fixtures;
use llama::{Batch, Context, ContextParams, Model, Perf};
use test_support::greedy_token;

fn load(fx: &std::path::Path) -> Model {
    common::load_on_cpu(&fx.join("models/stories260K.gguf"))
}

fn params(reuse: bool) -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_seq_max: 4,
        n_threads: 2,
        n_threads_batch: 2,
        graph_reuse: reuse,
        ..ContextParams::default()
    }
}

/// Builds and reuses since `before`.
fn delta(ctx: &Context<'_>, before: Perf) -> (usize, usize) {
    (
        ctx.perf.n_graph_builds - before.n_graph_builds,
        ctx.perf.n_graph_reuses - before.n_graph_reuses,
    )
}

/// Cells attended after a token at `pos` was stored (one sequence, cells
/// in position order): the padded prefix, at least one padding step.
fn n_kv_at(pos: i32) -> usize {
    (pos as usize + 1).div_ceil(32).max(1) * 32
}

#[test]
fn decode_reuses_the_graph_until_the_shape_changes() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let mut ctx = Context::new(&model, params(true)).unwrap();
    assert!(ctx.graph_reuse());
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    let p0 = ctx.perf;
    ctx.decode(&Batch::get_one(&prompt)).unwrap();
    assert_eq!(delta(&ctx, p0), (1, 0), "the prompt builds its graph");
    let mut tok = greedy_token(ctx.logits_ith(-1).unwrap());
    // Single tokens: a new graph on the first one (the prompt's had another
    // shape) and whenever the attended cells reach the next padding step.
    let mut last_n_kv = None;
    for pos in prompt.len() as i32..70 {
        let before = ctx.perf;
        ctx.decode(&Batch::get_one(&[tok])).unwrap();
        let n_kv = n_kv_at(pos);
        let want = if last_n_kv == Some(n_kv) {
            (0, 1)
        } else {
            (1, 0)
        };
        assert_eq!(delta(&ctx, before), want, "token at position {pos}");
        last_n_kv = Some(n_kv);
        tok = greedy_token(ctx.logits_ith(-1).unwrap());
    }
    // Another batch size builds; going back to single tokens builds again,
    // then reuses.
    let before = ctx.perf;
    ctx.decode(&Batch::get_one(&[tok, tok])).unwrap();
    assert_eq!(delta(&ctx, before), (1, 0), "a batch of two");
    for want in [(1, 0), (0, 1), (0, 1)] {
        let before = ctx.perf;
        ctx.decode(&Batch::get_one(&[tok])).unwrap();
        assert_eq!(delta(&ctx, before), want, "single tokens after the pair");
    }
    // A token that asks for no logits still computes its row and drops
    // it: the same graph.
    let before = ctx.perf;
    let mut b = Batch::new();
    b.add(tok, ctx.seq_pos_max(0) + 1, &[0], false);
    ctx.decode(&b).unwrap();
    assert_eq!(delta(&ctx, before), (0, 1));
}

#[test]
fn reuse_off_builds_every_graph() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let mut ctx = Context::new(&model, params(false)).unwrap();
    assert!(!ctx.graph_reuse());
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    ctx.decode(&Batch::get_one(&prompt)).unwrap();
    for _ in 0..10 {
        ctx.decode(&Batch::get_one(&[5])).unwrap();
    }
    assert_eq!((ctx.perf.n_graph_builds, ctx.perf.n_graph_reuses), (11, 0));
}

/// One step of a scripted session over several sequences.
enum Step {
    /// A batch of (token, sequence) pairs, each at its sequence's next
    /// position, all asking for logits.
    Batch(Vec<(i32, i32)>),
    /// Removes positions `[p0, ..)` of a sequence.
    Rm(i32, i32),
    /// Shifts a sequence's positions from `p0` on by `delta`.
    Shift(i32, i32, i32),
    /// Clears the cache.
    Clear,
}

/// Runs `steps` and returns the logits of every batch, in order, with the
/// context's final counters.
fn session(model: &Model, reuse: bool, steps: &[Step]) -> (Vec<Vec<f32>>, Perf) {
    let mut ctx = Context::new(model, params(reuse)).unwrap();
    let mut out = Vec::new();
    for s in steps {
        match s {
            Step::Batch(toks) => {
                let mut b = Batch::new();
                for &(t, seq) in toks {
                    let next = ctx.seq_pos_max(seq) + 1;
                    // tokens of one sequence in one batch follow each other
                    let earlier = b.seq_ids.iter().filter(|s| s[0] == seq).count() as i32;
                    b.add(t, next + earlier, &[seq], true);
                }
                ctx.decode(&b).unwrap();
                out.push(ctx.logits().to_vec());
            }
            Step::Rm(seq, p0) => assert!(ctx.seq_rm(*seq, *p0, -1)),
            Step::Shift(seq, p0, d) => ctx.seq_add(*seq, *p0, -1, *d),
            Step::Clear => ctx.kv_clear(),
        }
    }
    (out, ctx.perf)
}

/// A server-like session: two sequences decoded in pairs, a third joins,
/// one leaves, a context shift, a removal, a clear.
fn script(model: &Model) -> Vec<Step> {
    let a = model.vocab.tokenize("Once upon a time", true, true);
    let b = model.vocab.tokenize("The dog ran to the park", true, true);
    let mut steps = Vec::new();
    let mut first: Vec<(i32, i32)> = a.iter().map(|&t| (t, 0)).collect();
    first.extend(b.iter().map(|&t| (t, 1)));
    steps.push(Step::Batch(first));
    for k in 0..12 {
        steps.push(Step::Batch(vec![(300 + k, 0), (200 + k, 1)]));
    }
    // A third sequence joins: its prompt, then batches of three.
    steps.push(Step::Batch(vec![(1, 2), (403, 2), (407, 2)]));
    for k in 0..8 {
        steps.push(Step::Batch(vec![(310 + k, 0), (210 + k, 1), (100 + k, 2)]));
    }
    // Sequence 1 leaves; the others go on in pairs.
    steps.push(Step::Rm(1, 0));
    for k in 0..6 {
        steps.push(Step::Batch(vec![(320 + k, 0), (110 + k, 2)]));
    }
    // Context shift of sequence 0: drop positions 4.. 8, move the rest down.
    steps.push(Step::Rm(0, 4));
    steps.push(Step::Batch(vec![(330, 0), (120, 2)]));
    steps.push(Step::Shift(2, 2, -1));
    for k in 0..4 {
        steps.push(Step::Batch(vec![(340 + k, 0), (130 + k, 2)]));
    }
    steps.push(Step::Clear);
    steps.push(Step::Batch(a.iter().map(|&t| (t, 3)).collect()));
    for k in 0..4 {
        steps.push(Step::Batch(vec![(350 + k, 3)]));
    }
    steps
}

#[test]
fn several_sequences_and_cache_changes_give_the_same_numbers() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let steps = script(&model);
    let (want, off) = session(&model, false, &steps);
    let (got, on) = session(&model, true, &steps);
    assert_eq!(off.n_graph_reuses, 0);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            g == w,
            "batch {i}: logits with reuse differ from a fresh graph's"
        );
    }
    // The pairs, the triples and the single tokens reuse (after the clear
    // too, where the shape holds); each change of batch size and the shift
    // build.
    assert!(on.n_graph_reuses >= 25, "{on:?}");
    assert_eq!(
        on.n_graph_builds + on.n_graph_reuses,
        off.n_graph_builds,
        "every ubatch is counted once"
    );
}

#[test]
fn a_clear_keeps_the_graph_and_a_shift_builds_a_new_one() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let mut ctx = Context::new(&model, params(true)).unwrap();
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    ctx.decode(&Batch::get_one(&prompt)).unwrap();
    ctx.decode(&Batch::get_one(&[5])).unwrap();
    ctx.decode(&Batch::get_one(&[6])).unwrap();
    assert_eq!(ctx.perf.n_graph_reuses, 1);
    // After a clear the single-token graph has the same shape (one padding
    // step of cells): it runs again, with a fresh context's numbers.
    ctx.kv_clear();
    let before = ctx.perf;
    ctx.decode(&Batch::get_one(&[1])).unwrap();
    assert_eq!(delta(&ctx, before), (0, 1), "after a clear");
    let mut fresh = Context::new(&model, params(true)).unwrap();
    fresh.decode(&Batch::get_one(&[1])).unwrap();
    assert!(
        ctx.logits_ith(-1).unwrap() == fresh.logits_ith(-1).unwrap(),
        "logits after a clear against a fresh context's"
    );
    ctx.decode(&Batch::get_one(&[7])).unwrap();
    // A shift runs its own graph on the scheduler: the next ubatch builds.
    ctx.seq_add(0, 1, -1, 3);
    let before = ctx.perf;
    ctx.decode(&Batch::get_one(&[8])).unwrap();
    assert_eq!(delta(&ctx, before), (1, 0), "after a shift");
    let before = ctx.perf;
    ctx.decode(&Batch::get_one(&[9])).unwrap();
    assert_eq!(delta(&ctx, before), (0, 1));
}

#[test]
fn swapped_caches_build_a_new_graph() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let a_toks = model.vocab.tokenize("Once upon a time", true, true);
    let b_toks = model.vocab.tokenize("The dog ran", true, true);
    let mut a = Context::new(&model, params(true)).unwrap();
    let mut b = Context::new(&model, params(true)).unwrap();
    // Both contexts keep a single-token graph over their own caches.
    for (ctx, toks) in [(&mut a, &a_toks), (&mut b, &b_toks)] {
        ctx.decode(&Batch::get_one(toks)).unwrap();
        ctx.decode(&Batch::get_one(&[5])).unwrap();
    }
    // The caches change hands: each context continues the other's text.
    std::mem::swap(&mut a.mem, &mut b.mem);
    let before = a.perf;
    a.decode(&Batch::get_one(&[6])).unwrap();
    let got = a.logits_ith(-1).unwrap().to_vec();
    // What a fresh context computes for the same text.
    let mut fresh = Context::new(&model, params(false)).unwrap();
    fresh.decode(&Batch::get_one(&b_toks)).unwrap();
    fresh.decode(&Batch::get_one(&[5])).unwrap();
    fresh.decode(&Batch::get_one(&[6])).unwrap();
    assert!(
        got == fresh.logits_ith(-1).unwrap(),
        "logits after the swap"
    );
    assert_eq!(
        delta(&a, before),
        (1, 0),
        "the kept graph names the old caches"
    );
}

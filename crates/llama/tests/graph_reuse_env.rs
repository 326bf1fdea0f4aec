//! `LLAMA_GRAPH_REUSE_DISABLE` turns graph reuse off whatever the context
//! parameters say. A binary of its own: the variable is process-wide and
//! would change the other tests' contexts.

mod common;

use common::fixtures;
use llama::context::GRAPH_REUSE_DISABLE_ENV;
use llama::{Batch, Context, ContextParams, Model};

#[test]
fn the_environment_switch_turns_reuse_off() {
    let Some(fx) = fixtures() else { return };
    let model = common::load_on_cpu(&fx.join("models/stories260K.gguf"));
    let run = |model: &Model| {
        let mut ctx = Context::new(
            model,
            ContextParams {
                n_ctx: 64,
                n_threads: 1,
                ..ContextParams::default()
            },
        )
        .unwrap();
        ctx.decode(&Batch::get_one(&[1, 403, 407])).unwrap();
        for t in [5, 6, 7] {
            ctx.decode(&Batch::get_one(&[t])).unwrap();
        }
        (
            ctx.graph_reuse(),
            ctx.perf.n_graph_builds,
            ctx.perf.n_graph_reuses,
        )
    };
    // Values as llama.cpp reads them (atoi): a leading integer other than
    // 0 disables, 0 and text keep reuse on.
    for (value, disabled) in [("1", true), ("0", false), ("2", true), ("no", false)] {
        std::env::set_var(GRAPH_REUSE_DISABLE_ENV, value);
        let (reuse, builds, reuses) = run(&model);
        assert_eq!(reuse, !disabled, "{GRAPH_REUSE_DISABLE_ENV}={value}");
        let want = if disabled { (4, 0) } else { (2, 2) };
        assert_eq!((builds, reuses), want, "{GRAPH_REUSE_DISABLE_ENV}={value}");
    }
    std::env::remove_var(GRAPH_REUSE_DISABLE_ENV);
    assert_eq!(run(&model), (true, 2, 2), "unset");
}

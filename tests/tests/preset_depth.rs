//! Every `xtask gen-model` preset at its real depth (the layer count, layer
//! pattern and per-layer tensors of the model it names) but narrow, so that
//! the test stays fast: each one loads, decodes a 64-token prompt in one
//! batch and then one token at a time. The scheduler's node limit, the
//! memories and the graph builders are sized from the depth, which tiny
//! fixtures of two or three layers do not reach.

use llama::{Batch, Context, Model};
use tests::{cpu_params, reference_ctx, scratch_dir};
use xtask::gen_model::shape::{Preset, Shape, ShapeOverrides};
use xtask::gen_model::types::OutType;
use xtask::gen_model::{generate_file, ModelSpec, WriteSettings};

/// Prompt length: one batch, as a prompt is decoded.
const N_PROMPT: usize = 64;
/// Tokens generated one at a time after the prompt.
const N_GEN: usize = 2;

#[test]
fn every_preset_decodes_at_its_real_depth() {
    let dir = scratch_dir("preset_depth");
    let ty: OutType = "f32".parse().expect("type");
    for &preset in Preset::all() {
        let name = preset.name();
        let real = Shape::resolve(preset, &ShapeOverrides::default()).expect("preset shape");
        // 128 wide, or the nearest width above with whole attention heads of
        // an even size.
        let n_embd = 128u32.div_ceil(2 * real.n_head) * 2 * real.n_head;
        let overrides = ShapeOverrides {
            n_vocab: Some(512),
            n_embd: Some(n_embd),
            n_ff: Some(256),
            n_ctx: Some(256),
            ..ShapeOverrides::default()
        };
        let spec = ModelSpec::synthetic(preset, &overrides, ty, 7, name.to_string())
            .unwrap_or_else(|e| panic!("{name}: spec: {e}"));
        let path = dir.join(format!("{name}.gguf"));
        generate_file(&spec, &WriteSettings::default(), &path)
            .unwrap_or_else(|e| panic!("{name}: gen-model: {e}"));
        let model = Model::load(&path, &cpu_params()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut ctx = Context::new(&model, reference_ctx(N_PROMPT + N_GEN))
            .unwrap_or_else(|e| panic!("{name}: context: {e}"));
        let prompt: Vec<i32> = (0..N_PROMPT as i32).map(|i| 3 + (i * 37) % 500).collect();
        ctx.decode(&Batch::get_one(&prompt))
            .unwrap_or_else(|e| panic!("{name}: prompt of {N_PROMPT} tokens: {e}"));
        for step in 0..N_GEN {
            let logits = ctx.logits_ith(-1).expect("logits");
            assert!(
                logits.iter().all(|v| v.is_finite()),
                "{name}: step {step}: logits not finite"
            );
            let tok = tests::argmax(logits) as i32;
            ctx.decode(&Batch::get_one(&[tok]))
                .unwrap_or_else(|e| panic!("{name}: step {step}: {e}"));
        }
        drop(ctx);
        drop(model);
        std::fs::remove_file(&path).ok();
    }
}

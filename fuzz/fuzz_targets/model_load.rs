//! A model loaded from a fuzzed GGUF file on the CPU, up to its first
//! graph: a context of a few cells (whose creation builds and reserves the
//! worst-case graphs) and the decode of one token. Every refusal must be an
//! error, never a panic, a hang or an allocation beyond the file's size.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::{Batch, Context, Model};

fuzz_target!(|data: &[u8]| {
    llama_rs_fuzz::init_backends();
    let path = llama_rs_fuzz::scratch_file("model.gguf", data);
    let Ok(model) = Model::load(&path, &llama_rs_fuzz::cpu_params()) else {
        return;
    };
    let Ok(mut ctx) = Context::new(&model, llama_rs_fuzz::tiny_context()) else {
        return;
    };
    if model.hparams.n_vocab == 0 {
        return;
    }
    let mut batch = Batch::new();
    batch.add(0, 0, &[0], true);
    if ctx.decode(&batch).is_ok() {
        let n = ctx.logits_ith(-1).map(<[f32]>::len).unwrap_or(0);
        assert_eq!(n, model.hparams.n_vocab, "one row of logits per output");
    }
});

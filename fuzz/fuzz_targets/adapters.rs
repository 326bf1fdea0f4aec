//! LoRA adapters and control vectors read from fuzzed GGUF files and
//! checked against stories260K (architecture, pairs, shapes, ranks, layer
//! numbers, widths): every refusal an error.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::adapter::{ControlVector, Directions, LoraAdapter};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, file)) = data.split_first() else {
        return;
    };
    let model = llama_rs_fuzz::stories();
    if sel & 1 == 0 {
        let path = llama_rs_fuzz::scratch_file("lora.gguf", file);
        if let Ok(a) = LoraAdapter::load(model, &path) {
            assert!(a.belongs_to(model));
        }
    } else {
        let path = llama_rs_fuzz::scratch_file("cvec.gguf", file);
        let strength = f32::from(sel >> 1) / 16.0;
        if let Ok(d) = Directions::read(&path, strength) {
            let _ = ControlVector::new(model, &d, "fuzzed");
        }
    }
});

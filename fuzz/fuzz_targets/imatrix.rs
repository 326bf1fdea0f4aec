//! Importance-matrix files, GGUF and the old binary format, from fuzzed
//! bytes; a file that reads is then filtered and checked for finite sums.

#![no_main]

use libfuzzer_sys::fuzz_target;
use llama::quantize::imatrix::Imatrix;

fuzz_target!(|data: &[u8]| {
    for read in [Imatrix::from_gguf, Imatrix::from_legacy] {
        if let Ok(mut m) = read(data) {
            let _ = m.check_finite();
            m.filter(&["blk.0".to_string()], &["attn".to_string()]);
        }
    }
});

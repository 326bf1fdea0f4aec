//! llama-cli's `--context-shift`: generation goes on past the context and
//! prints what llama.cpp's llama-completion prints for the same settings
//! (tests/data/context_shift); without the flag it stops when the context
//! is full.

mod common;

use std::process::Command;

use common::fixtures;

fn run(extra: &[&str]) -> Vec<u8> {
    let fx = fixtures().expect("fixtures");
    let model = fx.join("models/stories260K.gguf");
    let out = Command::new(env!("CARGO_BIN_EXE_llama-cli"))
        .args(["-m", model.to_str().unwrap(), "-p", "Once upon a time"])
        .args(["-n", "350", "-c", "256", "--temp", "0", "-t", "2"])
        .args(["-no-cnv", "--log-disable"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn context_shift_equals_llama_completion() {
    if fixtures().is_none() {
        return;
    }
    let want = include_bytes!("data/context_shift/stories260K_c256_n350.txt");
    let want = want.strip_suffix(b"\n\n").expect("complete output");
    let ours = run(&["--context-shift"]);
    let ours = ours.strip_suffix(b"\n").unwrap_or(&ours);
    assert_eq!(String::from_utf8_lossy(ours), String::from_utf8_lossy(want));
    // Without the flag: the same text up to the full context, then a stop.
    let short = run(&[]);
    let short = short.strip_suffix(b"\n").unwrap_or(&short);
    assert!(short.len() < want.len());
    assert!(want.starts_with(short));
}

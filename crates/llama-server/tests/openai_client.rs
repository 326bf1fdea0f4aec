//! The official `openai` Python client against our server: runs
//! `openai_client.py` (models, chat and text completions streamed and not,
//! embeddings, a bad request) on the stories260K fixture. Skipped when
//! Python cannot import `openai`, unless `REQUIRE_OPENAI_CLIENT=1`.

use std::path::Path;
use std::process::Command;

use test_support::{fixtures, required};

#[test]
fn official_openai_client() {
    let Some(fx) = fixtures() else { return };
    let has_client = Command::new("python3")
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_client {
        assert!(
            !required("REQUIRE_OPENAI_CLIENT"),
            "python3 cannot import openai (pip install openai)"
        );
        eprintln!("skipped: python3 cannot import openai");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py");
    let status = Command::new("python3")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_llama-server"))
        .arg(fx.join("models").join("stories260K.gguf"))
        .status()
        .expect("python3 runs");
    assert!(status.success(), "openai_client.py failed: {status}");
}

//! The official `openai` Python client against our server: runs
//! `openai_client.py` (models, chat and text completions streamed and not,
//! embeddings, a bad request) on the stories260K fixture. Skipped when
//! Python cannot import `openai`, unless `REQUIRE_OPENAI_CLIENT=1`.

#[path = "common/python.rs"]
mod python;

use python::{available, run_script, runs};
use test_support::fixtures;

#[test]
fn official_openai_client() {
    let Some(fx) = fixtures() else { return };
    let have = runs("python3", &["-c", "import openai"]);
    if available(
        have,
        "REQUIRE_OPENAI_CLIENT",
        "python3 cannot import openai (pip install openai)",
        "python3 cannot import openai",
    ) {
        run_script("openai_client.py", &fx);
    }
}

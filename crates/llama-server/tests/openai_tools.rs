//! A whole tool round trip with the official `openai` Python client
//! (`openai_tools.py`: tools, `tool_calls` streamed and not, a `tool`
//! message, the final answer) on the stories260K fixture under Qwen 3's
//! template. Skipped when Python cannot import `openai`, unless
//! `REQUIRE_OPENAI_CLIENT=1`.

#[path = "common/python.rs"]
mod python;

use python::{available, run_script, runs};
use test_support::fixtures;

#[test]
fn official_openai_client_tool_round_trip() {
    let Some(fx) = fixtures() else { return };
    let have = runs("python3", &["-c", "import openai"]);
    if available(
        have,
        "REQUIRE_OPENAI_CLIENT",
        "python3 cannot import openai (pip install openai)",
        "python3 cannot import openai",
    ) {
        run_script("openai_tools.py", &fx);
    }
}

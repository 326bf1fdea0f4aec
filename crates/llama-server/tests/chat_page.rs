//! The built-in chat page in headless Chromium: runs `chat_page.py`, which
//! loads the page, lets it send one message and waits through Chromium's
//! DevTools protocol until the streamed reply has ended. Skipped when
//! `chromium` or Python's `websocket` module is missing, unless
//! `REQUIRE_CHROMIUM=1`.

#[path = "common/python.rs"]
mod python;

use python::{available, run_script, runs};
use test_support::fixtures;

#[test]
fn chat_page_streams_a_reply_in_chromium() {
    let Some(fx) = fixtures() else { return };
    let have = runs("chromium", &["--version"]) && runs("python3", &["-c", "import websocket"]);
    if available(
        have,
        "REQUIRE_CHROMIUM",
        "needs Debian's chromium and Python's websocket-client (pip install websocket-client)",
        "no chromium or no python3 websocket-client",
    ) {
        run_script("chat_page.py", &fx);
    }
}

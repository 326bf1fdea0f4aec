//! The built-in chat page in headless Chromium: runs `chat_page.py`, which
//! loads the page, lets it send one message and waits through Chromium's
//! DevTools protocol until the streamed reply has ended. Skipped when
//! `chromium` or Python's `websocket` module is missing, unless
//! `REQUIRE_CHROMIUM=1`.

use std::path::Path;
use std::process::{Command, Stdio};

use test_support::{fixtures, required};

fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn chat_page_streams_a_reply_in_chromium() {
    let Some(fx) = fixtures() else { return };
    let have = runs("chromium", &["--version"]) && runs("python3", &["-c", "import websocket"]);
    if !have {
        assert!(
            !required("REQUIRE_CHROMIUM"),
            "needs Debian's chromium and Python's websocket-client (pip install websocket-client)"
        );
        eprintln!("skipped: no chromium or no python3 websocket-client");
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat_page.py");
    let status = Command::new("python3")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_llama-server"))
        .arg(fx.join("models").join("stories260K.gguf"))
        .status()
        .expect("python3 runs");
    assert!(status.success(), "chat_page.py failed: {status}");
}

//! Helpers of the integration tests: fixtures and rpc-server processes.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The fixtures folder, or `None` after printing "skipped: no fixtures"
/// (a failure instead with `REQUIRE_FIXTURES=1`).
pub fn fixtures() -> Option<PathBuf> {
    let dir = match std::env::var_os("LLAMA_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
    };
    if dir.join("models").is_dir() {
        return Some(dir);
    }
    if std::env::var("REQUIRE_FIXTURES").is_ok_and(|v| v == "1") {
        panic!("fixtures not found at {}", dir.display());
    }
    eprintln!("skipped: no fixtures");
    None
}

/// An rpc-server child process on a free loopback port; killed on drop.
pub struct ServerProc {
    /// The process.
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub endpoint: String,
}

impl ServerProc {
    /// Starts `rpc-server -p 0` with `extra` arguments and waits for its port.
    pub fn start(extra: &[&str]) -> ServerProc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rpc-server"))
            .args(["-H", "127.0.0.1", "-p", "0", "-t", "2"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start rpc-server");
        let out = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(out).lines();
        let endpoint = loop {
            let line = lines
                .next()
                .expect("rpc-server exited before listening")
                .expect("read stdout");
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.trim().to_string();
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        ServerProc { child, endpoint }
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

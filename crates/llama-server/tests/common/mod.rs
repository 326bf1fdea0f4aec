//! A server on a loopback port with a fixture model, and a small HTTP/1.1
//! client (requests with `Connection: close`, chunked replies decoded).

#![allow(dead_code)]

use llama_server::args::ServerArgs;
use llama_server::Server;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub use test_support::fixtures;

pub mod reference;

/// Starts a server on `model` (a file under fixtures/models) with extra flags.
pub async fn start(model: &str, flags: &str) -> Option<Server> {
    let dir = fixtures()?;
    let mut argv = vec![
        "-m".to_string(),
        dir.join("models").join(model).display().to_string(),
    ];
    argv.extend(["--log-disable", "-t", "2"].map(String::from));
    argv.extend(flags.split_whitespace().map(String::from));
    let args = ServerArgs::parse(argv).expect("flags");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = Server::start(&args, listener).unwrap();
    server.wait_ready().await.expect("server ready");
    Some(server)
}

/// A reply.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The `data:` payloads of a server-sent event stream.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: ").map(str::to_string))
            .collect()
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends a request; `extra` is raw header lines.
pub async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    extra: &str,
) -> Reply {
    let s = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
        body.len()
    );
    // The body goes out while the reply is read: a server may answer (a
    // body too large) and close before taking all of it.
    let (mut r, mut w) = s.into_split();
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    let writer = tokio::spawn(async move {
        let _ = w.write_all(&out).await;
        w
    });
    let mut raw = Vec::new();
    r.read_to_end(&mut raw).await.unwrap();
    drop(writer.await);
    parse_reply(&raw)
}

pub async fn post(addr: std::net::SocketAddr, path: &str, body: &Value) -> Reply {
    request(addr, "POST", path, body.to_string().as_bytes(), "").await
}

pub async fn get(addr: std::net::SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, b"", "").await
}

pub fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no header end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            l.split_once(": ")
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&b[..eol]).unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + size).min(b.len());
        out.extend_from_slice(&b[start..end]);
        b = &b[(end + 2).min(b.len())..];
    }
    out
}

/// Resident memory of this process in bytes (Linux), if known.
pub fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

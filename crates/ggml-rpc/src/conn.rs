//! A client connection to one server: framing, the handshake, timeouts and
//! traffic counters. Calls are serialised by a mutex; after any failure the
//! connection is marked broken and every later call fails at once with the
//! first error, so a half-read response never desynchronises the stream.

use std::io::{BufReader, BufWriter};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Result, RpcError};
use crate::proto::{self, Cmd, CONN_CAPS_SIZE};

/// Bytes sent to all servers by this process.
static BYTES_SENT: AtomicU64 = AtomicU64::new(0);
/// Bytes received from all servers by this process.
static BYTES_RECEIVED: AtomicU64 = AtomicU64::new(0);
/// Socket timeout in seconds for connects, reads and writes.
static TIMEOUT_S: AtomicU64 = AtomicU64::new(300);

/// (sent, received) bytes of RPC traffic of this process so far.
pub fn traffic() -> (u64, u64) {
    (
        BYTES_SENT.load(Ordering::Relaxed),
        BYTES_RECEIVED.load(Ordering::Relaxed),
    )
}

/// Sets the socket timeout of connections made from now on: a server that
/// stops answering for this long is reported as an error (default 300 s).
pub fn set_timeout(timeout: Duration) {
    TIMEOUT_S.store(timeout.as_secs().max(1), Ordering::Relaxed);
}

struct Io {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
    broken: Option<String>,
    last: Option<Cmd>,
}

/// A connection to one RPC server.
pub struct Conn {
    endpoint: String,
    io: Mutex<Io>,
    frees: AtomicU64,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Conn({})", self.endpoint)
    }
}

/// Splits `host:port` (the port after the last colon).
pub fn parse_endpoint(endpoint: &str) -> Result<(String, u16)> {
    let bad = || {
        RpcError::Rejected(format!(
            "invalid RPC endpoint '{endpoint}': expected host:port"
        ))
    };
    let (host, port) = endpoint.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

impl Conn {
    /// Connects to `host:port` and performs the HELLO handshake.
    pub fn connect(endpoint: &str) -> Result<Conn> {
        let (host, port) = parse_endpoint(endpoint)?;
        let timeout = Duration::from_secs(TIMEOUT_S.load(Ordering::Relaxed));
        let io_err = |what: &str, source| RpcError::Io {
            endpoint: endpoint.to_string(),
            what: what.to_string(),
            source,
        };
        let addrs: Vec<_> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| io_err("resolving the host", e))?
            .collect();
        let mut last = None;
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| {
            io_err(
                "connecting",
                last.unwrap_or_else(|| std::io::Error::other("no address")),
            )
        })?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .map_err(|e| io_err("setting timeouts", e))?;
        let r = BufReader::with_capacity(
            1 << 16,
            stream.try_clone().map_err(|e| io_err("cloning", e))?,
        );
        let w = BufWriter::with_capacity(1 << 16, stream);
        let conn = Conn {
            endpoint: endpoint.to_string(),
            io: Mutex::new(Io {
                r,
                w,
                broken: None,
                last: None,
            }),
            frees: AtomicU64::new(0),
        };
        let rsp = conn.call(Cmd::Hello, &[0; CONN_CAPS_SIZE], Some(4 + CONN_CAPS_SIZE))?;
        let (major, minor, patch) = (rsp[0], rsp[1], rsp[2]);
        if major != proto::PROTO_VERSION.0 || minor > proto::PROTO_VERSION.1 {
            return Err(RpcError::Version {
                endpoint: endpoint.to_string(),
                major,
                minor,
                patch,
            });
        }
        Ok(conn)
    }

    /// The `host:port` this connection goes to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// How many FREE_BUFFER commands were sent (a freed buffer voids the
    /// server's stored graph).
    pub fn frees(&self) -> u64 {
        self.frees.load(Ordering::Relaxed)
    }

    /// Sends a request; with `expect = Some(n)`, waits for a response of
    /// exactly `n` bytes and returns it.
    pub fn call(&self, cmd: Cmd, body: &[u8], expect: Option<usize>) -> Result<Vec<u8>> {
        let mut io = self.io.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = &io.broken {
            return Err(RpcError::Rejected(format!(
                "RPC {}: connection unusable after an earlier error: {e}",
                self.endpoint
            )));
        }
        if cmd == Cmd::FreeBuffer {
            self.frees.fetch_add(1, Ordering::Relaxed);
        }
        let res = Self::exchange(&mut io, cmd, body, expect);
        let prev = io.last.replace(cmd);
        res.map_err(|e| {
            let what = match (e.kind(), prev) {
                (std::io::ErrorKind::UnexpectedEof, _)
                | (std::io::ErrorKind::ConnectionReset, _)
                | (std::io::ErrorKind::BrokenPipe, _) => format!(
                    "{cmd:?}: the server closed the connection{}",
                    match prev {
                        Some(p) if !p.has_response() => format!(
                            " (it may have rejected the preceding {p:?}; see the server's log)"
                        ),
                        _ => " (it stopped or rejected the request; see its log)".into(),
                    }
                ),
                (std::io::ErrorKind::WouldBlock, _) | (std::io::ErrorKind::TimedOut, _) => {
                    format!("{cmd:?}: no answer within the timeout")
                }
                _ => format!("{cmd:?}"),
            };
            io.broken = Some(format!("{what}: {e}"));
            RpcError::Io {
                endpoint: self.endpoint.clone(),
                what,
                source: e,
            }
        })
    }

    fn exchange(
        io: &mut Io,
        cmd: Cmd,
        body: &[u8],
        expect: Option<usize>,
    ) -> std::io::Result<Vec<u8>> {
        proto::write_request(&mut io.w, cmd, body)?;
        BYTES_SENT.fetch_add(9 + body.len() as u64, Ordering::Relaxed);
        let Some(n) = expect else {
            return Ok(Vec::new());
        };
        let len = proto::read_len(&mut io.r)?;
        if len != n as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("response of {len} bytes, expected {n}"),
            ));
        }
        let out = proto::read_body(&mut io.r, len)?;
        BYTES_RECEIVED.fetch_add(8 + len, Ordering::Relaxed);
        Ok(out)
    }
}

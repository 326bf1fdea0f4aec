//! The RPC server: serves local devices to one client at a time.
//!
//! Each client gets a [`Session`] holding its buffers; when the client
//! disconnects or sends anything that breaks the protocol, the session is
//! dropped (its buffers freed) and the next client is served. Buffers are
//! named on the wire by opaque handles and given virtual base addresses
//! that never overlap, so a tensor's `data` is checked against exactly one
//! buffer and never used as a pointer.

use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ggml_core::{Backend, Buffer, Device, Graph, Placement, TensorDesc, TensorId, Type};

use crate::error::{Result, RpcError};
use crate::proto::{self, Cmd, GraphMsg, Reader, RpcTensor, CONN_CAPS_SIZE, RPC_TENSOR_SIZE};
use crate::server_graph::{self, Resolved};

/// Largest GRAPH_COMPUTE body accepted (about 900k tensors).
pub const MAX_GRAPH_BYTES: u64 = 256 << 20;
/// Largest tensor (dense bytes) a message may describe.
pub const MAX_TENSOR_BYTES: u64 = 1 << 40;
/// Gap between the virtual address ranges of two buffers.
const BASE_GAP: u64 = 1 << 16;
/// Longest a client may take to send the rest of a frame once its command
/// byte has come, or to take a response: a client that stalls or vanishes
/// mid-frame is dropped after this, and the next client is served.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(30);

/// The devices a server serves, with their execution streams.
pub struct Server {
    devices: Vec<Arc<dyn Device>>,
    backends: Vec<Box<dyn Backend>>,
    cache_dir: Option<PathBuf>,
    mem_limit: Option<u64>,
    frame_timeout: Duration,
}

impl Server {
    /// A server for `devices`, computing with `n_threads` threads, with the
    /// weight cache in `cache_dir` when given.
    pub fn new(
        devices: Vec<Arc<dyn Device>>,
        n_threads: usize,
        cache_dir: Option<PathBuf>,
    ) -> Result<Server> {
        if devices.is_empty() {
            return Err(RpcError::Rejected("no device to serve".into()));
        }
        let mut backends = Vec::with_capacity(devices.len());
        for d in &devices {
            let mut b = d.init_backend()?;
            b.set_n_threads(n_threads.max(1));
            backends.push(b);
        }
        if let Some(dir) = &cache_dir {
            std::fs::create_dir_all(dir).map_err(|source| RpcError::Io {
                endpoint: dir.display().to_string(),
                what: "creating the cache folder".into(),
                source,
            })?;
        }
        Ok(Server {
            devices,
            backends,
            cache_dir,
            mem_limit: None,
            frame_timeout: FRAME_TIMEOUT,
        })
    }

    /// Limits the bytes of buffers a client may hold at once (`--mem`): an
    /// allocation past it is refused to that client, as an allocation the
    /// device cannot make, and the memory the server reports is at most
    /// the limit.
    pub fn with_mem_limit(mut self, bytes: Option<u64>) -> Server {
        self.mem_limit = bytes;
        self
    }

    /// Sets the time a client may take to finish a frame or to read a
    /// response ([`FRAME_TIMEOUT`] by default; at least a millisecond).
    pub fn with_frame_timeout(mut self, timeout: Duration) -> Server {
        self.frame_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The limit of [`Server::with_mem_limit`].
    pub fn mem_limit(&self) -> Option<u64> {
        self.mem_limit
    }

    /// The devices served.
    pub fn devices(&self) -> &[Arc<dyn Device>] {
        &self.devices
    }

    /// Accepts clients forever, one at a time.
    pub fn run(&mut self, listener: &TcpListener) -> Result<()> {
        loop {
            let (stream, peer) = listener.accept().map_err(|source| RpcError::Io {
                endpoint: "listener".into(),
                what: "accepting a client".into(),
                source,
            })?;
            eprintln!("rpc-server: accepted client {peer}");
            match self.serve_client(stream) {
                Ok(()) => eprintln!("rpc-server: client {peer} closed the connection"),
                Err(e) => eprintln!("rpc-server: dropped client {peer}: {e}"),
            }
        }
    }

    /// Serves one client until it disconnects (`Ok`) or breaks the
    /// protocol (`Err`, after which the connection is closed).
    pub fn serve_client(&mut self, stream: TcpStream) -> Result<()> {
        let _ = stream.set_nodelay(true);
        // Waiting for the next command may last (a client between two
        // decodes), but not the rest of a frame nor taking a response.
        let t = Some(self.frame_timeout);
        if let Err(source) = stream
            .set_read_timeout(t)
            .and_then(|_| stream.set_write_timeout(t))
        {
            return Err(RpcError::Io {
                endpoint: "client".into(),
                what: "setting its timeouts".into(),
                source,
            });
        }
        let r = BufReader::with_capacity(
            1 << 16,
            stream.try_clone().map_err(|source| RpcError::Io {
                endpoint: "client".into(),
                what: "clone".into(),
                source,
            })?,
        );
        let w = BufWriter::with_capacity(1 << 16, stream);
        self.serve(r, w)
    }

    /// Serves the command frames read from `r` (a client's byte stream),
    /// writing the responses to `w`, until `r` ends (`Ok`) or a frame
    /// breaks the protocol (`Err`). [`Server::serve_client`] runs this on
    /// a connection; it also serves recorded or generated frames in
    /// process.
    pub fn serve(&mut self, mut r: impl Read, mut w: impl Write) -> Result<()> {
        let io_err = |what: &str| {
            let what = what.to_string();
            move |source| RpcError::Io {
                endpoint: "client".into(),
                what,
                source,
            }
        };
        let mut session = Session::new(self);
        let mut first = true;
        loop {
            let mut cmd = [0u8; 1];
            match r.read(&mut cmd) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
                // The socket's timeout between two frames: keep waiting.
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock
                            | std::io::ErrorKind::TimedOut
                            | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    continue
                }
                Err(e) => return Err(io_err("reading a command")(e)),
            }
            let cmd = Cmd::from_u8(cmd[0])
                .ok_or_else(|| RpcError::Malformed(format!("unknown command {}", cmd[0])))?;
            if first != (cmd == Cmd::Hello) {
                return Err(RpcError::Malformed(format!(
                    "{cmd:?}: HELLO must come first and only once"
                )));
            }
            first = false;
            let len = proto::read_len(&mut r).map_err(io_err("reading a length"))?;
            session.check_len(cmd, len)?;
            let body = proto::read_body(&mut r, len).map_err(io_err("reading a body"))?;
            if let Some(resp) = session.handle(cmd, &body)? {
                proto::write_response(&mut w, &resp).map_err(io_err("writing a response"))?;
            }
        }
    }
}

struct SrvBuffer {
    buf: Arc<dyn Buffer>,
    base: u64,
    size: u64,
}

/// One client's state: its buffers and last graph per device.
pub struct Session<'a> {
    server: &'a mut Server,
    buffers: HashMap<u64, SrvBuffer>,
    /// Bytes of all `buffers`.
    held: u64,
    next_handle: u64,
    next_base: u64,
    stored: Vec<Option<(Graph, Vec<TensorId>)>>,
}

fn rejected<T>(msg: String) -> Result<T> {
    Err(RpcError::Rejected(msg))
}

/// ggml_nbytes with overflow checks; `None` when it overflows.
fn nbytes_checked(t: &RpcTensor, ty: Type) -> Option<u64> {
    if t.ne.contains(&0) {
        return Some(0);
    }
    let bs = ty.block_size() as u64;
    let ts = ty.type_size() as u64;
    let mut n = if bs == 1 {
        ts.checked_add((t.ne[0] as u64 - 1).checked_mul(t.nb[0] as u64)?)?
    } else {
        (t.ne[0] as u64).checked_mul(t.nb[0] as u64)? / bs
    };
    for i in 1..4 {
        n = n.checked_add((t.ne[i] as u64 - 1).checked_mul(t.nb[i] as u64)?)?;
    }
    Some(n)
}

impl<'a> Session<'a> {
    /// A session with no buffers.
    pub fn new(server: &'a mut Server) -> Session<'a> {
        let n = server.devices.len();
        Session {
            server,
            buffers: HashMap::new(),
            held: 0,
            next_handle: 1,
            next_base: 1 << 20,
            stored: (0..n).map(|_| None).collect(),
        }
    }

    /// Checks a request's declared length before any byte of it is read.
    pub fn check_len(&self, cmd: Cmd, len: u64) -> Result<()> {
        let max = match cmd.fixed_request_size() {
            Some(n) if len == n as u64 => return Ok(()),
            Some(n) => {
                return Err(RpcError::Malformed(format!(
                    "{cmd:?} body of {len} bytes, expected {n}"
                )))
            }
            None if cmd == Cmd::GraphCompute => MAX_GRAPH_BYTES,
            None => {
                let largest = self.buffers.values().map(|b| b.size).max().unwrap_or(0);
                largest + RPC_TENSOR_SIZE as u64 + 9
            }
        };
        if len > max {
            return Err(RpcError::Malformed(format!(
                "{cmd:?} body of {len} bytes exceeds the limit of {max}"
            )));
        }
        Ok(())
    }

    fn device(&self, dev: u32) -> Result<usize> {
        let n = self.server.devices.len();
        if (dev as usize) < n {
            Ok(dev as usize)
        } else {
            rejected(format!("device {dev} does not exist (serving {n})"))
        }
    }

    fn buffer(&self, handle: u64) -> Result<&SrvBuffer> {
        self.buffers
            .get(&handle)
            .ok_or_else(|| RpcError::Rejected(format!("unknown buffer {handle:#x}")))
    }

    /// Checks a tensor's type, sizes and memory against this session.
    pub fn resolve(&self, t: &RpcTensor) -> Result<Resolved> {
        let name = t.name_str();
        let ty = Type::from_u32(t.ty)
            .filter(|ty| !ty.is_removed() && ty.block_size() > 0 && ty.type_size() > 0)
            .ok_or_else(|| RpcError::Malformed(format!("tensor '{name}': type {}", t.ty)))?;
        if t.ne[0] as usize % ty.block_size() != 0 {
            return Err(RpcError::Malformed(format!(
                "tensor '{name}': ne[0] = {} is not a multiple of the block size of {ty}",
                t.ne[0]
            )));
        }
        let nbytes = nbytes_checked(t, ty)
            .ok_or_else(|| RpcError::Malformed(format!("tensor '{name}': size overflows")))?;
        // The bytes it would take densely: strides of 0 could otherwise make
        // a tensor of 2^128 elements fit in a few bytes and spin a kernel.
        let dense =
            t.ne.iter()
                .try_fold(1u64, |acc, &n| acc.checked_mul(n as u64))
                .and_then(|n| (n / ty.block_size() as u64).checked_mul(ty.type_size() as u64))
                .filter(|&d| d <= MAX_TENSOR_BYTES)
                .ok_or_else(|| {
                    RpcError::Malformed(format!("tensor '{name}': {:?} elements is too many", t.ne))
                })?;
        let desc = TensorDesc {
            name: name.clone(),
            ty,
            ne: t.ne.map(|v| v as usize),
            nb: t.nb.map(|v| v as usize),
        };
        if t.buffer == 0 {
            if t.data != 0 {
                return rejected(format!("tensor '{name}' has data but no buffer"));
            }
            return Ok(Resolved { desc, at: None });
        }
        let b = self.buffer(t.buffer)?;
        let off = t.data.wrapping_sub(b.base);
        if dense > b.size {
            return rejected(format!(
                "tensor '{name}' of {dense} bytes cannot be in buffer {:#x} of {}",
                t.buffer, b.size
            ));
        }
        if t.data < b.base || off > b.size || nbytes > b.size - off {
            return rejected(format!(
                "tensor '{name}' ({nbytes} bytes at {:#x}) is outside buffer {:#x} [{:#x}, {:#x})",
                t.data,
                t.buffer,
                b.base,
                b.base + b.size
            ));
        }
        Ok(Resolved {
            desc,
            at: Some(Placement {
                buffer: b.buf.clone(),
                offset: off as usize,
            }),
        })
    }

    /// The buffer and offset of `t.data + offset` with room for `size`
    /// bytes in the buffer, as llama.cpp's server checks data commands.
    fn region(&self, t: &RpcTensor, offset: u64, size: u64) -> Result<(Arc<dyn Buffer>, usize)> {
        let r = self.resolve(t)?;
        let at = r.at.ok_or_else(|| {
            RpcError::Rejected(format!("tensor '{}' has no buffer", t.name_str()))
        })?;
        let b = self.buffer(t.buffer)?;
        let start = (at.offset as u64).checked_add(offset);
        match start {
            Some(s) if s < b.size && size <= b.size - s => Ok((at.buffer, s as usize)),
            _ => rejected(format!(
                "region of {size} bytes at offset {offset} of tensor '{}' is outside its buffer",
                t.name_str()
            )),
        }
    }

    /// Handles one request; `Some` is the response body.
    pub fn handle(&mut self, cmd: Cmd, body: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut r = Reader::new(body);
        let out = match cmd {
            Cmd::Hello => {
                r.bytes(CONN_CAPS_SIZE)?;
                let (ma, mi, pa) = proto::PROTO_VERSION;
                let mut rsp = vec![ma, mi, pa, 0];
                // Plain TCP: no transport upgrade is offered.
                rsp.extend_from_slice(&[0; CONN_CAPS_SIZE]);
                Some(rsp)
            }
            Cmd::DeviceCount => Some((self.server.devices.len() as u32).to_le_bytes().to_vec()),
            Cmd::AllocBuffer => {
                let dev = self.device(r.u32()?)?;
                let size = r.u64()?;
                Some(self.alloc_buffer(dev, size))
            }
            Cmd::GetAlignment => {
                let dev = self.device(r.u32()?)?;
                let a = self.server.devices[dev].buffer_type().alignment() as u64;
                Some(a.to_le_bytes().to_vec())
            }
            Cmd::GetMaxSize => {
                let dev = self.device(r.u32()?)?;
                let m = self.server.devices[dev].buffer_type().max_size() as u64;
                Some(m.to_le_bytes().to_vec())
            }
            Cmd::GetDeviceMemory => {
                let dev = self.device(r.u32()?)?;
                let (free, total) = self.server.devices[dev].memory();
                let (mut free, mut total) = (free as u64, total as u64);
                if let Some(limit) = self.server.mem_limit {
                    free = free.min(limit.saturating_sub(self.held));
                    total = total.min(limit);
                }
                let mut rsp = free.to_le_bytes().to_vec();
                rsp.extend_from_slice(&total.to_le_bytes());
                Some(rsp)
            }
            Cmd::BufferGetBase => {
                let b = self.buffer(r.u64()?)?;
                Some(b.base.to_le_bytes().to_vec())
            }
            Cmd::FreeBuffer => {
                let h = r.u64()?;
                self.buffer(h)?;
                // Stored graphs hold the buffer's memory: forget them.
                self.stored.iter_mut().for_each(|s| *s = None);
                if let Some(b) = self.buffers.remove(&h) {
                    self.held -= b.size;
                }
                None
            }
            Cmd::BufferClear => {
                let h = r.u64()?;
                let v = r.u8()?;
                self.buffer(h)?.buf.clear(v)?;
                None
            }
            Cmd::SetTensor => {
                self.set_tensor(&mut r)?;
                None
            }
            Cmd::SetTensorHash => {
                let t = RpcTensor::decode(&mut r)?;
                let offset = r.u64()?;
                let hash = r.u64()?;
                Some(vec![self.set_tensor_hash(&t, offset, hash)? as u8])
            }
            Cmd::GetTensor => {
                let t = RpcTensor::decode(&mut r)?;
                let offset = r.u64()?;
                let size = r.u64()?;
                let (buf, at) = self.region(&t, offset, size)?;
                let mut out = vec![0u8; size as usize];
                buf.get_tensor(at, &mut out)?;
                Some(out)
            }
            Cmd::CopyTensor => Some(vec![self.copy_tensor(&mut r)? as u8]),
            Cmd::MemsetTensor => {
                let t = RpcTensor::decode(&mut r)?;
                let offset = r.u64()?;
                let size = r.u64()?;
                let value = r.u8()?;
                let nbytes = self.resolve(&t)?.desc.nbytes() as u64;
                if offset > nbytes || size > nbytes - offset {
                    return rejected(format!(
                        "memset of {size} bytes at {offset} in a tensor of {nbytes}"
                    ));
                }
                let (buf, at) = self.region(&t, offset, size)?;
                buf.memset_tensor(at, value, size as usize)?;
                None
            }
            Cmd::InitTensor => {
                let t = RpcTensor::decode(&mut r)?;
                let res = self.resolve(&t)?;
                if let Some(at) = res.at {
                    at.buffer.init_tensor(&res.desc, at.offset)?;
                }
                None
            }
            Cmd::GetAllocSize => {
                let dev = self.device(r.u32()?)?;
                let t = RpcTensor::decode(&mut r)?;
                let res = self.resolve(&t)?;
                // The sources matter to backends whose sizes depend on them;
                // ours do not, but each must still be well-formed.
                for _ in 0..proto::MAX_SRC {
                    let s = RpcTensor::decode(&mut r)?;
                    if s.id != 0 {
                        self.resolve(&s)?;
                    }
                }
                let size = match &res.at {
                    Some(at) => at.buffer.buffer_type().alloc_size(&res.desc),
                    None => self.server.devices[dev].buffer_type().alloc_size(&res.desc),
                };
                Some((size as u64).to_le_bytes().to_vec())
            }
            Cmd::GraphCompute => {
                let msg = GraphMsg::decode(body)?;
                let dev = self.device(msg.device)?;
                let (g, nodes) = server_graph::build(&msg, |t| self.resolve(t))?;
                self.server.backends[dev].graph_compute(&g, &nodes)?;
                self.server.backends[dev].synchronize()?;
                self.stored[dev] = Some((g, nodes));
                return Ok(None);
            }
            Cmd::GraphRecompute => {
                let dev = self.device(r.u32()?)?;
                let (g, nodes) = self.stored[dev]
                    .as_ref()
                    .ok_or_else(|| RpcError::Rejected("no graph to compute again".into()))?;
                self.server.backends[dev].graph_compute(g, nodes)?;
                self.server.backends[dev].synchronize()?;
                None
            }
        };
        r.finish()?;
        Ok(out)
    }

    fn alloc_buffer(&mut self, dev: usize, size: u64) -> Vec<u8> {
        let failed = || {
            let mut v = 0u64.to_le_bytes().to_vec();
            v.extend_from_slice(&0u64.to_le_bytes());
            v
        };
        let d = &self.server.devices[dev];
        let buft = d.buffer_type();
        let (_, total) = d.memory();
        if size > buft.max_size() as u64 || size > total as u64 {
            eprintln!(
                "rpc-server: refused a buffer of {size} bytes on {}",
                d.name()
            );
            return failed();
        }
        if let Some(limit) = self.server.mem_limit {
            if self.held.saturating_add(size) > limit {
                eprintln!(
                    "rpc-server: refused a buffer of {size} bytes on {}: the client holds {} \
                     bytes and the limit (--mem) is {limit}",
                    d.name(),
                    self.held
                );
                return failed();
            }
        }
        let buf = match buft.alloc_buffer(size as usize) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("rpc-server: {e}");
                return failed();
            }
        };
        let bsize = buf.size() as u64;
        let align = (buft.alignment() as u64).clamp(BASE_GAP, 1 << 30);
        let base = self.next_base.div_ceil(align) * align;
        self.next_base = base + bsize + BASE_GAP;
        self.held += bsize;
        let handle = self.next_handle;
        self.next_handle += 1;
        self.buffers.insert(
            handle,
            SrvBuffer {
                buf,
                base,
                size: bsize,
            },
        );
        let mut v = handle.to_le_bytes().to_vec();
        v.extend_from_slice(&bsize.to_le_bytes());
        v
    }

    fn cache_file(&self, hash: u64) -> Option<PathBuf> {
        self.server
            .cache_dir
            .as_ref()
            .map(|d| d.join(format!("{hash:016x}")))
    }

    fn set_tensor(&mut self, r: &mut Reader<'_>) -> Result<()> {
        let t = RpcTensor::decode(r)?;
        let cache_flag = r.u8()?;
        let offset = r.u64()?;
        let data = r.rest();
        let (buf, at) = self.region(&t, offset, data.len() as u64)?;
        if cache_flag != 0 {
            if let Some(path) = self.cache_file(proto::fnv_hash(data)) {
                if let Err(e) = std::fs::write(&path, data) {
                    eprintln!("rpc-server: cannot save {}: {e}", path.display());
                }
            }
        }
        buf.set_tensor(at, data)?;
        Ok(())
    }

    fn set_tensor_hash(&mut self, t: &RpcTensor, offset: u64, hash: u64) -> Result<bool> {
        let Some(path) = self.cache_file(hash) else {
            return Ok(false);
        };
        let Ok(meta) = std::fs::metadata(&path) else {
            return Ok(false);
        };
        // Bounds first, so a big cache file is never read for nothing.
        let (buf, at) = self.region(t, offset, meta.len())?;
        let data = std::fs::read(&path).map_err(|source| RpcError::Io {
            endpoint: path.display().to_string(),
            what: "reading a cached tensor".into(),
            source,
        })?;
        if data.len() as u64 != meta.len() || proto::fnv_hash(&data) != hash {
            return Ok(false);
        }
        buf.set_tensor(at, &data)?;
        Ok(true)
    }

    fn copy_tensor(&mut self, r: &mut Reader<'_>) -> Result<bool> {
        let src = RpcTensor::decode(r)?;
        let dst = RpcTensor::decode(r)?;
        let s = self.resolve(&src)?;
        let d = self.resolve(&dst)?;
        let (Some(sa), Some(da)) = (s.at, d.at) else {
            return rejected("COPY_TENSOR between tensors without buffers".into());
        };
        let n = s.desc.nbytes();
        if da.offset as u64 + n as u64 > da.buffer.size() as u64 {
            return rejected(format!(
                "copy of {n} bytes into '{}' runs past its buffer",
                dst.name_str()
            ));
        }
        ggml_core::backend::copy_placement(&sa, &da, n)?;
        Ok(true)
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        self.stored.iter_mut().for_each(|s| *s = None);
    }
}

/// True when `host` is a loopback address or name.
pub fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

/// Binds `host:port`, warning on stderr when it is not loopback.
pub fn bind(host: &str, port: u16) -> Result<TcpListener> {
    if !is_loopback(host) {
        eprintln!(
            "WARNING: rpc-server listens on {host}, not a loopback address. The RPC protocol \
             has no authentication or encryption: anyone who can reach this port can read and \
             write the served memory and run graphs. Never expose it to an untrusted network."
        );
    }
    TcpListener::bind((host, port)).map_err(|source| RpcError::Io {
        endpoint: format!("{host}:{port}"),
        what: "binding".into(),
        source,
    })
}

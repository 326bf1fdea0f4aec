//! Helpers of the integration tests: fixtures and rpc-server processes.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

// Each test binary uses a part of these.
#[allow(unused_imports)]
pub use test_support::fixtures;

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

use ggml_rpc::proto::{Cmd, GraphMsg, RpcTensor, CONN_CAPS_SIZE, MAX_SRC, RPC_TENSOR_SIZE};

/// Handle and base address our server gives the first buffer of a session.
pub const FIRST_HANDLE: u64 = 1;
/// Base address of the first buffer.
pub const FIRST_BASE: u64 = 1 << 20;
/// Size of the buffer the corpus works in.
pub const BUF_SIZE: u64 = 4096;

/// An F32 tensor of `n` elements at byte `off` of the first buffer.
pub fn f32_tensor(id: u64, n: u32, off: u64) -> RpcTensor {
    let mut t = RpcTensor {
        id,
        ty: 0,
        buffer: FIRST_HANDLE,
        ne: [n, 1, 1, 1],
        nb: [4, 4 * n, 4 * n, 4 * n],
        data: FIRST_BASE + off,
        ..RpcTensor::default()
    };
    t.set_name(&format!("t{id}"));
    t
}

/// A frame: command byte, u64 length, body.
pub fn frame(cmd: Cmd, body: &[u8]) -> Vec<u8> {
    let mut f = vec![cmd as u8];
    f.extend_from_slice(&(body.len() as u64).to_le_bytes());
    f.extend_from_slice(body);
    f
}

/// The HELLO frame and the allocation of the first buffer.
pub fn session_start() -> Vec<Vec<u8>> {
    let mut alloc = 0u32.to_le_bytes().to_vec();
    alloc.extend_from_slice(&BUF_SIZE.to_le_bytes());
    vec![
        frame(Cmd::Hello, &[0; CONN_CAPS_SIZE]),
        frame(Cmd::AllocBuffer, &alloc),
    ]
}

/// The GRAPH_COMPUTE of c = a + b over 16 floats in the first buffer.
pub fn add_graph() -> GraphMsg {
    let a = f32_tensor(1, 16, 0);
    let b = f32_tensor(2, 16, 64);
    let mut c = f32_tensor(3, 16, 128);
    c.op = ggml_rpc::ops::num::ADD;
    c.src[0] = 1;
    c.src[1] = 2;
    // ggml computes only the nodes marked for it.
    c.flags = ggml_rpc::proto::FLAG_COMPUTE;
    GraphMsg {
        device: 0,
        nodes: vec![3],
        tensors: vec![a, b, c],
    }
}

/// Valid frames of every command, once the first buffer exists.
pub fn corpus() -> Vec<Vec<u8>> {
    let t = f32_tensor(1, 16, 0);
    let enc = |t: &RpcTensor| {
        let mut v = Vec::new();
        t.encode(&mut v);
        v
    };
    let mut set = enc(&t);
    set.push(0);
    set.extend_from_slice(&0u64.to_le_bytes());
    set.extend_from_slice(&[0x3f; 64]);
    let mut get = enc(&t);
    get.extend_from_slice(&0u64.to_le_bytes());
    get.extend_from_slice(&64u64.to_le_bytes());
    let mut memset = get.clone();
    memset.push(7);
    let mut hash = enc(&t);
    hash.extend_from_slice(&0u64.to_le_bytes());
    hash.extend_from_slice(&0x1234u64.to_le_bytes());
    let mut copy = enc(&t);
    copy.extend(enc(&f32_tensor(2, 16, 64)));
    let mut alloc_size = 0u32.to_le_bytes().to_vec();
    alloc_size.extend(enc(&t));
    alloc_size.resize(4 + (1 + MAX_SRC) * RPC_TENSOR_SIZE, 0);
    let mut clear = FIRST_HANDLE.to_le_bytes().to_vec();
    clear.push(0);
    let dev0 = 0u32.to_le_bytes();
    vec![
        frame(Cmd::DeviceCount, &[]),
        frame(Cmd::GetAlignment, &dev0),
        frame(Cmd::GetMaxSize, &dev0),
        frame(Cmd::GetDeviceMemory, &dev0),
        frame(Cmd::BufferGetBase, &FIRST_HANDLE.to_le_bytes()),
        frame(Cmd::SetTensor, &set),
        frame(Cmd::GetTensor, &get),
        frame(Cmd::MemsetTensor, &memset),
        frame(Cmd::SetTensorHash, &hash),
        frame(Cmd::CopyTensor, &copy),
        frame(Cmd::GetAllocSize, &alloc_size),
        frame(Cmd::InitTensor, &enc(&t)),
        frame(Cmd::BufferClear, &clear),
        frame(Cmd::GraphCompute, &add_graph().encode()),
        frame(Cmd::GraphRecompute, &dev0),
        frame(Cmd::FreeBuffer, &FIRST_HANDLE.to_le_bytes()),
    ]
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }

    /// A value below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: [u64; 10] = [
    0,
    1,
    4,
    0xff,
    0xffff_ffff,
    0x8000_0000,
    u64::MAX,
    u64::MAX - 7,
    FIRST_BASE,
    FIRST_BASE + BUF_SIZE - 1,
];

/// A mutation of one corpus frame, or random bytes.
pub fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    if rng.below(10) == 0 {
        let n = rng.below(64);
        return (0..n).map(|_| rng.next() as u8).collect();
    }
    let mut f = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 if !f.is_empty() => {
                let i = rng.below(f.len());
                f[i] ^= 1 << rng.below(8);
            }
            1 if f.len() >= 8 => {
                // An interesting value over a field-sized window.
                let w = [1, 2, 4, 8][rng.below(4)].min(f.len());
                let i = rng.below(f.len() - w + 1);
                let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
                f[i..i + w].copy_from_slice(&v[..w]);
            }
            2 => {
                let n = rng.below(f.len() + 1);
                f.truncate(n);
            }
            3 => {
                let n = rng.below(64);
                f.extend((0..n).map(|_| rng.next() as u8));
            }
            4 if f.len() >= 9 => {
                // A lying length.
                let v = INTERESTING[rng.below(INTERESTING.len())];
                f[1..9].copy_from_slice(&v.to_le_bytes());
            }
            _ if !f.is_empty() => f[0] = rng.below(20) as u8,
            _ => {}
        }
    }
    f
}

//! rpc-server under hostile use (loopback, bounded): many clients at once,
//! a client past the memory limit (`--mem`), clients that vanish or stall
//! in the middle of a graph; the server keeps serving the others, and each
//! gets the right answer.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{add_graph, f32_tensor, frame, session_start, ServerProc, BUF_SIZE};
use ggml_core::Device;
use ggml_rpc::proto::{Cmd, CONN_CAPS_SIZE};

/// A raw client: frames out, responses in.
struct Raw(TcpStream);

impl Raw {
    fn connect(endpoint: &str) -> Raw {
        let s = TcpStream::connect(endpoint).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Raw(s)
    }

    fn send(&mut self, f: &[u8]) {
        self.0.write_all(f).expect("send");
    }

    /// A response body.
    fn response(&mut self) -> Vec<u8> {
        let mut len = [0u8; 8];
        self.0.read_exact(&mut len).expect("response length");
        let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
        self.0.read_exact(&mut body).expect("response body");
        body
    }

    /// HELLO and the first buffer of `size` bytes: its handle.
    fn start(&mut self, size: u64) -> u64 {
        self.send(&frame(Cmd::Hello, &[0; CONN_CAPS_SIZE]));
        assert_eq!(self.response()[..3], [7, 0, 0]);
        self.alloc(size)
    }

    /// ALLOC_BUFFER: the handle (0 when refused).
    fn alloc(&mut self, size: u64) -> u64 {
        let mut body = 0u32.to_le_bytes().to_vec();
        body.extend_from_slice(&size.to_le_bytes());
        self.send(&frame(Cmd::AllocBuffer, &body));
        let r = self.response();
        u64::from_le_bytes(r[..8].try_into().unwrap())
    }

    /// Uploads a and b, computes c = a + b and reads c back.
    fn add(&mut self, a: &[f32], b: &[f32]) -> Vec<f32> {
        let set = |id, off, v: &[f32]| {
            let mut body = Vec::new();
            f32_tensor(id, 16, off).encode(&mut body);
            body.push(0);
            body.extend_from_slice(&0u64.to_le_bytes());
            body.extend(v.iter().flat_map(|x| x.to_le_bytes()));
            frame(Cmd::SetTensor, &body)
        };
        self.send(&set(1, 0, a));
        self.send(&set(2, 64, b));
        self.send(&frame(Cmd::GraphCompute, &add_graph().encode()));
        let mut get = Vec::new();
        f32_tensor(3, 16, 128).encode(&mut get);
        get.extend_from_slice(&0u64.to_le_bytes());
        get.extend_from_slice(&64u64.to_le_bytes());
        self.send(&frame(Cmd::GetTensor, &get));
        self.response()
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
}

fn check_add(endpoint: &str, seed: f32) {
    let mut c = Raw::connect(endpoint);
    assert_ne!(c.start(BUF_SIZE), 0, "the first buffer");
    let a: Vec<f32> = (0..16).map(|i| seed + i as f32).collect();
    let b: Vec<f32> = (0..16).map(|i| seed * 2.0 - i as f32).collect();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(c.add(&a, &b), want, "client {seed}");
}

#[test]
fn many_clients_at_once_are_each_served_right() {
    let mut server = ServerProc::start(&[]);
    let t0 = Instant::now();
    let clients: Vec<_> = (0..48)
        .map(|i| {
            let ep = server.endpoint.clone();
            std::thread::spawn(move || check_add(&ep, i as f32))
        })
        .collect();
    for c in clients {
        c.join().expect("a client failed");
    }
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    assert!(server.alive());
}

#[test]
fn a_client_past_the_memory_limit_is_refused_alone() {
    // 1 MiB for a client's buffers.
    let mut server = ServerProc::start(&["--mem", "1"]);
    let mut greedy = Raw::connect(&server.endpoint);
    let first = greedy.start(BUF_SIZE);
    assert_ne!(first, 0);
    // The server reports the limit as the device's memory.
    greedy.send(&frame(Cmd::GetDeviceMemory, &0u32.to_le_bytes()));
    let m = greedy.response();
    let (free, total) = (
        u64::from_le_bytes(m[..8].try_into().unwrap()),
        u64::from_le_bytes(m[8..].try_into().unwrap()),
    );
    assert_eq!(total, 1 << 20);
    assert!(free <= (1 << 20) - BUF_SIZE, "{free}");
    // Past the limit: refused, and the session goes on.
    assert_eq!(greedy.alloc(1 << 20), 0, "a buffer past the limit");
    assert_eq!(greedy.alloc(1 << 40), 0, "a buffer past any memory");
    let second = greedy.alloc(512 << 10);
    assert_ne!(second, 0, "a buffer within the limit");
    let a = [1.0f32; 16];
    assert_eq!(greedy.add(&a, &a), vec![2.0; 16]);
    // Freeing gives the room back.
    greedy.send(&frame(Cmd::FreeBuffer, &second.to_le_bytes()));
    assert_ne!(greedy.alloc(512 << 10), 0, "room given back by FREE_BUFFER");
    drop(greedy);

    // Our client sees a clear allocation error naming the device.
    let dev = ggml_rpc::add_server(&server.endpoint).expect("client")[0].clone();
    let Err(e) = dev.buffer_type().alloc_buffer(2 << 20) else {
        panic!("2 MiB were allocated past a 1 MiB limit");
    };
    let e = e.to_string();
    assert!(e.contains("RPC") && e.contains("could not allocate"), "{e}");
    // The same client still works within the limit.
    let buf = dev
        .buffer_type()
        .alloc_buffer(4096)
        .expect("within the limit");
    buf.set_tensor(0, &[7u8; 16]).unwrap();
    let mut back = [0u8; 16];
    buf.get_tensor(0, &mut back).unwrap();
    assert_eq!(back, [7u8; 16]);
    assert!(server.alive());
}

#[test]
fn clients_that_vanish_or_stall_mid_graph_leave_the_server_serving() {
    let mut server = ServerProc::start(&["--frame-timeout", "1"]);
    let graph = frame(Cmd::GraphCompute, &add_graph().encode());
    // Gone mid-frame: half a GRAPH_COMPUTE, then the socket closes.
    for cut in [1, 9, graph.len() / 2, graph.len() - 1] {
        let mut c = Raw::connect(&server.endpoint);
        for f in session_start() {
            c.send(&f);
        }
        c.send(&graph[..cut]);
        drop(c);
        check_add(&server.endpoint, cut as f32);
    }
    // Gone after a whole graph, without reading anything.
    let mut c = Raw::connect(&server.endpoint);
    for f in session_start() {
        c.send(&f);
    }
    c.send(&graph);
    c.send(&graph[..20]);
    drop(c);
    check_add(&server.endpoint, 100.0);
    // Stalled mid-frame with the socket open (a host that vanished): the
    // server drops it after the frame timeout and serves the next client,
    // which waited in the queue.
    let mut stalled = Raw::connect(&server.endpoint);
    for f in session_start() {
        stalled.send(&f);
    }
    stalled.send(&graph[..graph.len() / 2]);
    let t0 = Instant::now();
    check_add(&server.endpoint, 200.0);
    let waited = t0.elapsed();
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    drop(stalled);
    // A client that never reads the responses it asked for.
    let mut deaf = Raw::connect(&server.endpoint);
    deaf.0
        .set_write_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    deaf.start(BUF_SIZE);
    let mut get = Vec::new();
    f32_tensor(1, 16, 0).encode(&mut get);
    get.extend_from_slice(&0u64.to_le_bytes());
    get.extend_from_slice(&BUF_SIZE.to_le_bytes());
    for _ in 0..2000 {
        if deaf.0.write_all(&frame(Cmd::GetTensor, &get)).is_err() {
            break;
        }
    }
    check_add(&server.endpoint, 300.0);
    drop(deaf);
    assert!(server.alive());
}

//! A bounded fuzz runner over the server's message decoding and checks:
//! hundreds of thousands of mutated requests go straight into a session
//! (no sockets), and none may panic. The valid corpus must succeed.

mod common;

use common::{corpus, mutate, session_start, Rng, BUF_SIZE, FIRST_BASE, FIRST_HANDLE};
use ggml_rpc::proto::{Cmd, GraphMsg, Reader, RpcTensor};
use ggml_rpc::server::Session;
use ggml_rpc::Server;

fn server() -> Server {
    ggml_cpu::register();
    Server::new(vec![ggml_cpu::cpu_device()], 1, None).expect("server")
}

fn split(f: &[u8]) -> Option<(Cmd, u64, &[u8])> {
    let cmd = Cmd::from_u8(*f.first()?)?;
    let len = u64::from_le_bytes(f.get(1..9)?.try_into().ok()?);
    Some((cmd, len, &f[9..]))
}

fn run(s: &mut Session<'_>, f: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let (cmd, len, body) = split(f).ok_or("short frame")?;
    s.check_len(cmd, len).map_err(|e| e.to_string())?;
    s.handle(cmd, body).map_err(|e| e.to_string())
}

#[test]
fn the_valid_corpus_succeeds() {
    let mut srv = server();
    let mut s = Session::new(&mut srv);
    let start = session_start();
    run(&mut s, &start[0]).unwrap();
    let alloc = run(&mut s, &start[1]).unwrap().unwrap();
    assert_eq!(alloc[..8], FIRST_HANDLE.to_le_bytes());
    assert_eq!(alloc[8..], BUF_SIZE.to_le_bytes());
    for f in corpus() {
        let cmd = Cmd::from_u8(f[0]).unwrap();
        let rsp = run(&mut s, &f).unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert_eq!(rsp.is_some(), cmd.has_response(), "{cmd:?}");
        if cmd == Cmd::BufferGetBase {
            assert_eq!(rsp.unwrap(), FIRST_BASE.to_le_bytes());
        }
    }
}

#[test]
fn out_of_bounds_requests_are_rejected() {
    let mut srv = server();
    let mut s = Session::new(&mut srv);
    for f in session_start() {
        run(&mut s, &f).unwrap();
    }
    let get = |data: u64, offset: u64, size: u64, n: u32| {
        let mut t = common::f32_tensor(1, n, 0);
        t.data = data;
        let mut body = Vec::new();
        t.encode(&mut body);
        body.extend_from_slice(&offset.to_le_bytes());
        body.extend_from_slice(&size.to_le_bytes());
        common::frame(Cmd::GetTensor, &body)
    };
    let end = FIRST_BASE + BUF_SIZE;
    for (data, off, size, n) in [
        (FIRST_BASE - 4, 0, 4, 1),
        (end - 4, 0, 8, 1),
        (FIRST_BASE, BUF_SIZE, 0, 1),
        (FIRST_BASE, u64::MAX, 4, 1),
        (FIRST_BASE, 0, u64::MAX, 1),
        (FIRST_BASE, 0, 4, 1025),
        (u64::MAX - 2, 0, 4, 1),
    ] {
        let e = run(&mut s, &get(data, off, size, n)).unwrap_err();
        assert!(
            e.contains("outside") || e.contains("cannot be in buffer"),
            "{data:#x}+{off} x{size}: {e}"
        );
    }
    // Strides of 0 do not make a huge tensor fit in a small buffer.
    let mut t = common::f32_tensor(1, 1024, 0);
    t.ne = [1024, 1 << 20, 1 << 20, 1];
    t.nb = [4, 0, 0, 0];
    let mut body = Vec::new();
    t.encode(&mut body);
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&16u64.to_le_bytes());
    let e = run(&mut s, &common::frame(Cmd::GetTensor, &body)).unwrap_err();
    assert!(
        e.contains("too many") || e.contains("cannot be in buffer"),
        "{e}"
    );
    // A VIEW whose offset would wrap the bounds arithmetic.
    let mut g = common::add_graph();
    g.tensors[2].op = ggml_rpc::ops::num::VIEW;
    g.tensors[2].src = [1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    g.tensors[2].op_params[0] = -1;
    g.tensors[2].op_params[1] = -1;
    g.nodes = vec![3];
    let e = run(&mut s, &common::frame(Cmd::GraphCompute, &g.encode())).unwrap_err();
    assert!(e.contains("VIEW offset"), "{e}");
    // A graph whose node's shape does not follow from its sources.
    let mut g = common::add_graph();
    g.tensors[2].ne[0] = 8;
    let e = run(&mut s, &common::frame(Cmd::GraphCompute, &g.encode())).unwrap_err();
    assert!(e.contains("the op gives"), "{e}");
    // A source listed after its user.
    let mut g = common::add_graph();
    g.tensors.swap(0, 2);
    assert!(run(&mut s, &common::frame(Cmd::GraphCompute, &g.encode())).is_err());
    // An unknown op.
    let mut g = common::add_graph();
    g.tensors[2].op = 4;
    let e = run(&mut s, &common::frame(Cmd::GraphCompute, &g.encode())).unwrap_err();
    assert!(e.contains("op 4 is not supported"), "{e}");
    // ADD_ID without its ids.
    let mut g = common::add_graph();
    g.tensors[2].op = ggml_rpc::ops::num::ADD_ID;
    let e = run(&mut s, &common::frame(Cmd::GraphCompute, &g.encode())).unwrap_err();
    assert!(e.contains("ADD_ID") && e.contains("lacks source 2"), "{e}");
    // A huge SET_TENSOR length is refused before reading the body.
    assert!(s.check_len(Cmd::SetTensor, 1 << 40).is_err());
    assert!(s.check_len(Cmd::Hello, 25).is_err());
}

#[test]
fn mutated_requests_never_panic() {
    let corpus = corpus();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut srv = server();
    let n: usize = std::env::var("RPC_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let mut done = 0;
    while done < n {
        let mut s = Session::new(&mut srv);
        for f in session_start() {
            run(&mut s, &f).unwrap();
        }
        for _ in 0..100 {
            let f = mutate(&mut rng, &corpus);
            let _ = run(&mut s, &f);
            // The decoders alone, on the same bytes.
            let _ = GraphMsg::decode(f.get(9..).unwrap_or(&[]));
            let _ = RpcTensor::decode(&mut Reader::new(&f));
            done += 1;
        }
    }
}

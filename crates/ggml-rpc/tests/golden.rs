//! Frames of real sessions, each decoded and re-encoded byte for byte:
//! golden frames of a short session (hello, device count, alloc, set
//! tensor, graph compute, get tensor) in `tests/data/golden_session.txt`,
//! which our server, given the client frames, must answer with exactly the
//! server frames; and frames captured from llama.cpp 0c1e570's own client
//! and server (see the header of `tests/data/captured_session.txt`).

use ggml_rpc::proto::{self, Cmd};
use ggml_rpc::server::Session;
use ggml_rpc::Server;

#[path = "common/frames.rs"]
mod frames;

fn load() -> Vec<frames::Frame> {
    frames::parse(include_str!("data/golden_session.txt"))
}

#[test]
fn captured_frames_decode_and_reencode_byte_for_byte() {
    let frames = frames::parse(include_str!("data/captured_session.txt"));
    assert!(frames.iter().any(|f| f.name == "GRAPH_COMPUTE"));
    frames::check_reencode(&frames, |g| assert!(!g.nodes.is_empty()));
}

#[test]
fn frames_decode_and_reencode_byte_for_byte() {
    let frames = load();
    assert_eq!(frames.iter().filter(|f| f.client).count(), 8);
    frames::check_reencode(&frames, |g| {
        assert_eq!(g.nodes, vec![3]);
        assert_eq!(g.tensors[2].op, ggml_rpc::ops::num::ADD);
        assert_eq!(g.tensors[2].src[..2], [1, 2]);
    });
}

#[test]
fn our_server_answers_the_golden_responses() {
    ggml_cpu::register();
    let mut srv = Server::new(vec![ggml_cpu::cpu_device()], 1, None).unwrap();
    let mut s = Session::new(&mut srv);
    let frames = load();
    let mut i = 0;
    while i < frames.len() {
        let f = &frames[i];
        assert!(f.client, "{}: a response without a request", f.name);
        let cmd = Cmd::from_u8(f.bytes[0]).unwrap();
        s.check_len(cmd, (f.bytes.len() - 9) as u64).unwrap();
        let rsp = s
            .handle(cmd, &f.bytes[9..])
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        i += 1;
        match rsp {
            Some(body) => {
                let want = &frames[i];
                assert!(!want.client, "{}: no golden response", f.name);
                let mut out = Vec::new();
                proto::write_response(&mut out, &body).unwrap();
                assert_eq!(out, want.bytes, "response to {}", f.name);
                i += 1;
            }
            None => assert!(
                !matches!(frames.get(i), Some(n) if !n.client),
                "{} has a golden response but none came",
                f.name
            ),
        }
    }
}

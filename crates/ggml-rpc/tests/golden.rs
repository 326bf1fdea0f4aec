//! Golden frames of a short session (hello, device count, alloc, set
//! tensor, graph compute, get tensor) in `tests/data/golden_session.txt`:
//! each frame is decoded and re-encoded byte for byte, and our server,
//! given the client frames, answers exactly the server frames.

use ggml_rpc::proto::{self, Cmd, GraphMsg, Reader, RpcTensor};
use ggml_rpc::server::Session;
use ggml_rpc::Server;

struct Frame {
    client: bool,
    name: String,
    bytes: Vec<u8>,
}

fn load() -> Vec<Frame> {
    let text = include_str!("data/golden_session.txt");
    let mut frames: Vec<Frame> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("> ").or_else(|| line.strip_prefix("< ")) {
            frames.push(Frame {
                client: line.starts_with('>'),
                name: rest.to_string(),
                bytes: Vec::new(),
            });
            continue;
        }
        let hex = line.split('|').next().unwrap();
        let f = frames.last_mut().expect("data before a frame header");
        for tok in hex.split_whitespace() {
            f.bytes.push(u8::from_str_radix(tok, 16).expect("hex byte"));
        }
    }
    frames
}

/// Decodes a client frame into its parts and encodes them again.
fn reencode_request(bytes: &[u8]) -> Vec<u8> {
    let cmd = Cmd::from_u8(bytes[0]).expect("command");
    let mut r = Reader::new(&bytes[1..]);
    let len = r.u64().unwrap();
    let body = r.rest();
    assert_eq!(len as usize, body.len(), "{cmd:?}: size field");
    if let Some(n) = cmd.fixed_request_size() {
        assert_eq!(n, body.len(), "{cmd:?}: fixed size");
    }
    let mut b = Reader::new(body);
    let mut out_body = Vec::new();
    match cmd {
        Cmd::SetTensor => {
            RpcTensor::decode(&mut b).unwrap().encode(&mut out_body);
            out_body.push(b.u8().unwrap());
            out_body.extend_from_slice(&b.u64().unwrap().to_le_bytes());
            out_body.extend_from_slice(b.rest());
        }
        Cmd::GetTensor => {
            RpcTensor::decode(&mut b).unwrap().encode(&mut out_body);
            out_body.extend_from_slice(&b.u64().unwrap().to_le_bytes());
            out_body.extend_from_slice(&b.u64().unwrap().to_le_bytes());
        }
        Cmd::GraphCompute => {
            let g = GraphMsg::decode(body).unwrap();
            assert_eq!(g.nodes, vec![3]);
            assert_eq!(g.tensors[2].op, ggml_rpc::ops::num::ADD);
            assert_eq!(g.tensors[2].src[..2], [1, 2]);
            out_body = g.encode();
            b.rest();
        }
        Cmd::AllocBuffer => {
            out_body.extend_from_slice(&b.u32().unwrap().to_le_bytes());
            out_body.extend_from_slice(&b.u64().unwrap().to_le_bytes());
        }
        Cmd::BufferGetBase => out_body.extend_from_slice(&b.u64().unwrap().to_le_bytes()),
        Cmd::Hello => out_body.extend_from_slice(b.bytes(proto::CONN_CAPS_SIZE).unwrap()),
        Cmd::DeviceCount => {}
        other => panic!("{other:?} is not in the golden session"),
    }
    b.finish().unwrap();
    let mut out = Vec::new();
    proto::write_request(&mut out, cmd, &out_body).unwrap();
    out
}

#[test]
fn frames_decode_and_reencode_byte_for_byte() {
    let frames = load();
    assert_eq!(frames.iter().filter(|f| f.client).count(), 8);
    for f in &frames {
        if f.client {
            assert_eq!(reencode_request(&f.bytes), f.bytes, "{}", f.name);
        } else {
            let mut r = Reader::new(&f.bytes);
            let len = r.u64().unwrap();
            let body = r.rest();
            assert_eq!(len as usize, body.len(), "{}", f.name);
            let mut out = Vec::new();
            proto::write_response(&mut out, body).unwrap();
            assert_eq!(out, f.bytes, "{}", f.name);
        }
    }
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

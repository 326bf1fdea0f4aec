//! Frames captured from llama.cpp 0c1e570's own client and server (see the
//! header of `tests/data/captured_session.txt`): every frame is decoded by our
//! protocol code and re-encoded byte for byte.

use ggml_rpc::proto::{self, Cmd, GraphMsg, Reader, RpcTensor};

struct Frame {
    client: bool,
    name: String,
    bytes: Vec<u8>,
}

fn load() -> Vec<Frame> {
    let text = include_str!("data/captured_session.txt");
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
        let f = frames.last_mut().expect("data before a frame header");
        for tok in line.split_whitespace() {
            f.bytes.push(u8::from_str_radix(tok, 16).expect("hex byte"));
        }
    }
    frames
}

/// Decodes a client frame into its parts and encodes them again.
fn reencode_request(bytes: &[u8]) -> (Cmd, Vec<u8>) {
    let cmd = Cmd::from_u8(bytes[0]).expect("command");
    let mut r = Reader::new(&bytes[1..]);
    let len = r.u64().unwrap();
    let body = r.rest();
    assert_eq!(len as usize, body.len(), "{cmd:?}: size field");
    if let Some(n) = cmd.fixed_request_size() {
        assert_eq!(n, body.len(), "{cmd:?}: fixed size");
    }
    let mut b = Reader::new(body);
    let mut o = Vec::new();
    match cmd {
        Cmd::SetTensor => {
            RpcTensor::decode(&mut b).unwrap().encode(&mut o);
            o.push(b.u8().unwrap());
            o.extend_from_slice(&b.u64().unwrap().to_le_bytes());
            o.extend_from_slice(b.rest());
        }
        Cmd::GetTensor => {
            RpcTensor::decode(&mut b).unwrap().encode(&mut o);
            o.extend_from_slice(&b.u64().unwrap().to_le_bytes());
            o.extend_from_slice(&b.u64().unwrap().to_le_bytes());
        }
        Cmd::GetAllocSize => {
            o.extend_from_slice(&b.u32().unwrap().to_le_bytes());
            RpcTensor::decode(&mut b).unwrap().encode(&mut o);
            // ggml sends the sources of the tensor after it.
            while b.remaining() > 0 {
                RpcTensor::decode(&mut b).unwrap().encode(&mut o);
            }
        }
        Cmd::GraphCompute => {
            let g = GraphMsg::decode(body).unwrap();
            assert!(!g.nodes.is_empty());
            o = g.encode();
            b.rest();
        }
        Cmd::AllocBuffer => {
            o.extend_from_slice(&b.u32().unwrap().to_le_bytes());
            o.extend_from_slice(&b.u64().unwrap().to_le_bytes());
        }
        Cmd::BufferClear => {
            o.extend_from_slice(&b.u64().unwrap().to_le_bytes());
            o.push(b.u8().unwrap());
        }
        Cmd::BufferGetBase | Cmd::FreeBuffer => {
            o.extend_from_slice(&b.u64().unwrap().to_le_bytes())
        }
        // A recompute names only the device of the graph sent before.
        Cmd::GraphRecompute | Cmd::GetDeviceMemory => {
            o.extend_from_slice(&b.u32().unwrap().to_le_bytes())
        }
        Cmd::Hello => o.extend_from_slice(b.bytes(proto::CONN_CAPS_SIZE).unwrap()),
        other => panic!("{other:?} is not in the captured session"),
    }
    b.finish().unwrap();
    let mut out = Vec::new();
    proto::write_request(&mut out, cmd, &o).unwrap();
    (cmd, out)
}

#[test]
fn captured_frames_decode_and_reencode_byte_for_byte() {
    let frames = load();
    assert!(frames.iter().any(|f| f.name == "GRAPH_COMPUTE"));
    for f in &frames {
        if f.client {
            let (_, out) = reencode_request(&f.bytes);
            assert_eq!(out, f.bytes, "{}", f.name);
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

//! Recorded RPC sessions (`tests/data/*_session.txt`): frames in order,
//! each a `> NAME` (client) or `< NAME` (server) header followed by its
//! bytes in hex, with `#` comment lines and `| ...` remarks after the hex.
//! A frame is decoded by our protocol code and encoded again, so that a
//! test can compare the result with the recorded bytes.

use ggml_rpc::proto::{self, Cmd, Reader, RpcTensor};

/// One recorded frame.
pub struct Frame {
    /// Sent by the client (else the server's answer).
    pub client: bool,
    /// The command's name in the recording.
    pub name: String,
    /// The whole frame.
    pub bytes: Vec<u8>,
}

/// The frames of a recording's text.
pub fn parse(text: &str) -> Vec<Frame> {
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
        let hex = line.split('|').next().unwrap_or_default();
        let f = frames.last_mut().expect("data before a frame header");
        for tok in hex.split_whitespace() {
            f.bytes.push(u8::from_str_radix(tok, 16).expect("hex byte"));
        }
    }
    frames
}

/// Decodes a client frame into its parts and encodes them again.
/// `check_graph` sees a GRAPH_COMPUTE's graph.
pub fn reencode_request(bytes: &[u8], check_graph: impl Fn(&proto::GraphMsg)) -> Vec<u8> {
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
    let u64_le = |b: &mut Reader<'_>| b.u64().unwrap().to_le_bytes();
    match cmd {
        Cmd::SetTensor => {
            RpcTensor::decode(&mut b).unwrap().encode(&mut o);
            o.push(b.u8().unwrap());
            o.extend_from_slice(&u64_le(&mut b));
            o.extend_from_slice(b.rest());
        }
        Cmd::GetTensor => {
            RpcTensor::decode(&mut b).unwrap().encode(&mut o);
            o.extend_from_slice(&u64_le(&mut b));
            o.extend_from_slice(&u64_le(&mut b));
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
            let g = proto::GraphMsg::decode(body).unwrap();
            check_graph(&g);
            o = g.encode();
            b.rest();
        }
        Cmd::AllocBuffer => {
            o.extend_from_slice(&b.u32().unwrap().to_le_bytes());
            o.extend_from_slice(&u64_le(&mut b));
        }
        Cmd::BufferClear => {
            o.extend_from_slice(&u64_le(&mut b));
            o.push(b.u8().unwrap());
        }
        Cmd::BufferGetBase | Cmd::FreeBuffer => o.extend_from_slice(&u64_le(&mut b)),
        // A recompute names only the device of the graph sent before.
        Cmd::GraphRecompute | Cmd::GetDeviceMemory => {
            o.extend_from_slice(&b.u32().unwrap().to_le_bytes())
        }
        Cmd::Hello => o.extend_from_slice(b.bytes(proto::CONN_CAPS_SIZE).unwrap()),
        Cmd::DeviceCount => {}
        other => panic!("{other:?} is not in the recorded sessions"),
    }
    b.finish().unwrap();
    let mut out = Vec::new();
    proto::write_request(&mut out, cmd, &o).unwrap();
    out
}

/// Every frame decodes and encodes again byte for byte: requests through
/// [`reencode_request`], responses through their size field.
pub fn check_reencode(frames: &[Frame], check_graph: impl Fn(&proto::GraphMsg)) {
    for f in frames {
        if f.client {
            assert_eq!(
                reencode_request(&f.bytes, &check_graph),
                f.bytes,
                "{}",
                f.name
            );
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

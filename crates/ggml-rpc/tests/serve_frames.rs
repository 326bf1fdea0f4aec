//! `Server::serve`: a client's byte stream served in process (the entry
//! the fuzz target uses) answers as a connection does; a stream that breaks
//! the protocol ends with an error and leaves the server serving.

mod common;

use std::sync::Arc;

use common::{add_graph, f32_tensor, frame, session_start, BUF_SIZE};
use ggml_core::{registry, Device, DeviceKind};
use ggml_rpc::proto::Cmd;
use ggml_rpc::Server;

fn server(limit: Option<u64>) -> Server {
    ggml_cpu::register();
    let cpu: Arc<dyn Device> = registry::devices()
        .into_iter()
        .find(|d| d.kind() == DeviceKind::Cpu)
        .expect("a CPU device");
    Server::new(vec![cpu], 1, None)
        .expect("server")
        .with_mem_limit(limit)
}

/// The response bodies in `out`.
fn responses(mut out: &[u8]) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    while out.len() >= 8 {
        let n = u64::from_le_bytes(out[..8].try_into().unwrap()) as usize;
        v.push(out[8..8 + n].to_vec());
        out = &out[8 + n..];
    }
    assert!(out.is_empty(), "a partial response");
    v
}

fn set(id: u64, off: u64, v: &[f32]) -> Vec<u8> {
    let mut body = Vec::new();
    f32_tensor(id, 16, off).encode(&mut body);
    body.push(0);
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend(v.iter().flat_map(|x| x.to_le_bytes()));
    frame(Cmd::SetTensor, &body)
}

fn get_c() -> Vec<u8> {
    let mut get = Vec::new();
    f32_tensor(3, 16, 128).encode(&mut get);
    get.extend_from_slice(&0u64.to_le_bytes());
    get.extend_from_slice(&64u64.to_le_bytes());
    frame(Cmd::GetTensor, &get)
}

#[test]
fn a_recorded_stream_is_served_in_process() {
    let mut srv = server(None);
    let a: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..16).map(|i| 10.0 * i as f32).collect();
    let mut stream: Vec<u8> = session_start().concat();
    stream.extend(set(1, 0, &a));
    stream.extend(set(2, 64, &b));
    stream.extend(frame(Cmd::GraphCompute, &add_graph().encode()));
    stream.extend(get_c());
    let mut out = Vec::new();
    srv.serve(&stream[..], &mut out).expect("a valid stream");
    let r = responses(&out);
    // HELLO, ALLOC_BUFFER, GET_TENSOR.
    assert_eq!(r.len(), 3);
    assert_eq!(r[0][..3], [7, 0, 0]);
    assert_eq!(u64::from_le_bytes(r[1][8..].try_into().unwrap()), BUF_SIZE);
    let c: Vec<f32> = r[2]
        .chunks(4)
        .map(|x| f32::from_le_bytes(x.try_into().unwrap()))
        .collect();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(c, want);
}

#[test]
fn a_broken_stream_ends_with_an_error_and_the_next_is_served() {
    let mut srv = server(Some(1 << 20));
    for bad in [
        // No HELLO first.
        frame(Cmd::DeviceCount, &[]),
        // A length that lies past the end.
        {
            let mut s = session_start().concat();
            s.extend(&frame(Cmd::SetTensor, &[0; 32])[..9]);
            s.extend([1u8; 4]);
            s
        },
        // An unknown command.
        {
            let mut s = session_start().concat();
            s.push(200);
            s
        },
    ] {
        let mut out = Vec::new();
        assert!(srv.serve(&bad[..], &mut out).is_err());
    }
    // Past the memory limit: refused (handle 0) and the stream goes on.
    let mut s = session_start().concat();
    let mut alloc = 0u32.to_le_bytes().to_vec();
    alloc.extend_from_slice(&(2u64 << 20).to_le_bytes());
    s.extend(frame(Cmd::AllocBuffer, &alloc));
    s.extend(frame(Cmd::DeviceCount, &[]));
    let mut out = Vec::new();
    srv.serve(&s[..], &mut out).expect("refusals are answers");
    let r = responses(&out);
    assert_eq!(r.len(), 4);
    assert_eq!(r[2], [0u8; 16], "the allocation past the limit");
    assert_eq!(r[3], 1u32.to_le_bytes());
}

//! 10,000 random and mutated messages against a running rpc-server: it
//! never crashes or hangs, and a valid client works afterwards.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::{corpus, mutate, session_start, Rng, ServerProc};
use ggml_core::{Device, Graph, Placement, Type};

/// Sends `frames` on a fresh connection, closes the sending side and reads
/// until the server closes; a server that neither answers nor closes
/// within the timeout has hung.
fn send(endpoint: &str, frames: &[Vec<u8>]) {
    let mut s = TcpStream::connect(endpoint).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    for f in frames {
        // The server may have closed already: that is its right.
        if s.write_all(f).is_err() {
            break;
        }
    }
    let _ = s.shutdown(Shutdown::Write);
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the server neither answered nor closed: {e}"),
        }
    }
}

#[test]
fn ten_thousand_hostile_messages_then_a_valid_client() {
    let mut server = ServerProc::start(&[]);
    let corpus = corpus();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for i in 0..10_000 {
        let mut frames = if rng.below(8) == 0 {
            Vec::new()
        } else {
            session_start()
        };
        for _ in 0..1 + rng.below(3) {
            frames.push(mutate(&mut rng, &corpus));
        }
        send(&server.endpoint, &frames);
        if i % 1000 == 0 {
            assert!(server.alive(), "rpc-server died after {i} messages");
        }
    }
    assert!(server.alive(), "rpc-server died");

    // A valid client: upload, compute c = a + b, read back.
    let dev = ggml_rpc::add_server(&server.endpoint).expect("connect after fuzzing")[0].clone();
    let buf = dev.buffer_type().alloc_buffer(3 * 64).expect("alloc");
    let a: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..16).map(|i| 100.0 + i as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    buf.set_tensor(0, &bytes(&a)).unwrap();
    buf.set_tensor(64, &bytes(&b)).unwrap();
    let mut g = Graph::new();
    let at = |offset| Placement {
        buffer: buf.clone(),
        offset,
    };
    let desc = |n: &str| ggml_core::TensorDesc::new(n, Type::F32, &[16]);
    let ta = g.import(desc("a"), at(0), Default::default());
    let tb = g.import(desc("b"), at(64), Default::default());
    let tc = g.add_op(ta, tb).unwrap();
    g.node_mut(tc).at = Some(at(128));
    let mut backend = dev.init_backend().unwrap();
    for _ in 0..2 {
        // The second time goes as GRAPH_RECOMPUTE.
        backend.graph_compute(&g, &[tc]).unwrap();
        let mut out = vec![0u8; 64];
        buf.get_tensor(128, &mut out).unwrap();
        let got: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        assert_eq!(got, want);
    }
    assert!(server.alive());
}

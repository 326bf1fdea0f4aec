//! A server that stops answering is an error after the socket timeout,
//! not a hang. (Its own test binary: the timeout is process-wide.)

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

#[test]
fn a_silent_server_times_out() {
    // Answers HELLO and DEVICE_COUNT like a server, then reads and never answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut hello = [0u8; 9 + 24];
        s.read_exact(&mut hello).unwrap();
        let mut rsp = 28u64.to_le_bytes().to_vec();
        rsp.extend_from_slice(&[7, 0, 0, 0]);
        rsp.extend_from_slice(&[0; 24]);
        s.write_all(&rsp).unwrap();
        let mut count = [0u8; 9];
        s.read_exact(&mut count).unwrap();
        let mut rsp = 4u64.to_le_bytes().to_vec();
        rsp.extend_from_slice(&1u32.to_le_bytes());
        s.write_all(&rsp).unwrap();
        let mut sink = [0u8; 1024];
        while s.read(&mut sink).is_ok_and(|n| n > 0) {}
    });
    ggml_rpc::set_timeout(Duration::from_secs(1));
    let t0 = Instant::now();
    let Err(err) = ggml_rpc::add_server(&endpoint) else {
        panic!("a server that never answers was accepted");
    };
    let err = err.to_string();
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert!(
        err.contains(&endpoint) && err.contains("no answer within the timeout"),
        "{err}"
    );
}

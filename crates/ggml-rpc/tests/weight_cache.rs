//! The weight cache (`-c`): a second upload of the same weights sends only
//! their hash.

use std::net::TcpListener;

use ggml_core::{BufferUsage, Device};

fn start_server(cache: Option<std::path::PathBuf>) -> String {
    ggml_cpu::register();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut s = ggml_rpc::Server::new(vec![ggml_cpu::cpu_device()], 1, cache).unwrap();
        let _ = s.run(&listener);
    });
    endpoint
}

#[test]
fn cached_weights_are_not_sent_twice() {
    let dir = std::env::temp_dir().join(format!("ggml-rpc-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let endpoint = start_server(Some(dir.clone()));
    let dev = ggml_rpc::add_server(&endpoint).unwrap()[0].clone();
    let size = ggml_rpc::proto::HASH_THRESHOLD + 4096;
    let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    let mut sent = Vec::new();
    for _ in 0..2 {
        let buf = dev.buffer_type().alloc_buffer(size).unwrap();
        buf.set_usage(BufferUsage::Weights);
        let before = ggml_rpc::traffic().0;
        buf.set_tensor(0, &data).unwrap();
        sent.push(ggml_rpc::traffic().0 - before);
        let mut back = vec![0u8; size];
        buf.get_tensor(0, &mut back).unwrap();
        assert!(back == data, "the weights read back differ");
    }
    assert!(
        sent[0] as usize > size,
        "first upload sends the bytes: {sent:?}"
    );
    assert!(
        sent[1] < 4096,
        "second upload sends only the hash: {sent:?}"
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

//! The RPC server's command frames: each input is one client's byte
//! stream (a sequence of frames: command, length, body), served in process
//! by the same loop as a TCP client, against a real CPU backend with a
//! 16 MiB memory limit. Responses go nowhere; a frame that breaks the
//! protocol ends the stream with an error, as it closes a connection.

#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;

thread_local! {
    static SERVER: RefCell<ggml_rpc::Server> = RefCell::new({
        ggml_cpu::register();
        let cpu = ggml_core::registry::devices()
            .into_iter()
            .find(|d| d.kind() == ggml_core::DeviceKind::Cpu)
            .expect("a CPU device");
        ggml_rpc::Server::new(vec![cpu], 1, None)
            .expect("server")
            .with_mem_limit(Some(16 << 20))
    });
}

fuzz_target!(|data: &[u8]| {
    SERVER.with(|s| {
        let _ = s.borrow_mut().serve(data, std::io::sink());
    });
});

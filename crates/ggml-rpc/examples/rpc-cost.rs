//! The cost of RPC: greedy generation speed on the local CPU and through a
//! loopback rpc-server (started in this process, serving the CPU), with
//! the bytes sent and received per generated token.
//!
//! cargo run --release -p ggml-rpc --example rpc-cost -- MODEL.gguf [N_GEN] [THREADS]

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Instant;

use ggml_core::Device;
use llama::{Batch, Context, ContextParams, Model, ModelParams};
use test_support::greedy_token;

/// Generates `n` tokens after a short prompt; returns (tokens/s, tokens).
fn generate(model: &Model, n: usize, threads: usize) -> (f64, Vec<i32>, (u64, u64)) {
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx: 256,
            n_threads: threads,
            n_threads_batch: threads,
            ..ContextParams::default()
        },
    )
    .expect("context");
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    ctx.decode(&Batch::get_one(&prompt)).expect("prompt");
    let mut tok = greedy_token(ctx.logits_ith(-1).unwrap());
    let mut out = Vec::new();
    let before = ggml_rpc::traffic();
    let t0 = Instant::now();
    for _ in 0..n {
        out.push(tok);
        ctx.decode(&Batch::get_one(&[tok])).expect("decode");
        tok = greedy_token(ctx.logits_ith(-1).unwrap());
    }
    let dt = t0.elapsed().as_secs_f64();
    let after = ggml_rpc::traffic();
    (n as f64 / dt, out, (after.0 - before.0, after.1 - before.1))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .expect("usage: rpc-cost MODEL.gguf [N_GEN] [THREADS]");
    let n: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(32);
    let threads: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(2);
    llama::backend_init();

    let local = Model::load(
        path,
        &ModelParams {
            devices: Some(Vec::new()),
            n_gpu_layers: 0,
            use_extra_bufts: false,
            ..ModelParams::default()
        },
    )
    .expect("load");
    let (tps_local, toks_local, _) = generate(&local, n, threads);
    drop(local);

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut server =
            ggml_rpc::Server::new(vec![ggml_cpu::cpu_device()], threads, None).expect("server");
        let _ = server.run(&listener);
    });
    let devs: Vec<Arc<dyn Device>> = ggml_rpc::add_server(&endpoint)
        .expect("connect")
        .into_iter()
        .map(|d| d as Arc<dyn Device>)
        .collect();
    let t0 = Instant::now();
    let (load_sent0, _) = ggml_rpc::traffic();
    let remote = Model::load(
        path,
        &ModelParams {
            devices: Some(devs),
            n_gpu_layers: 999,
            use_extra_bufts: false,
            ..ModelParams::default()
        },
    )
    .expect("load over RPC");
    let load_s = t0.elapsed().as_secs_f64();
    let load_sent = ggml_rpc::traffic().0 - load_sent0;
    let (tps_rpc, toks_rpc, (sent, recv)) = generate(&remote, n, threads);
    println!("model: {path}");
    println!("generated tokens: {n}, threads: {threads}");
    println!("local CPU      : {tps_local:.2} tokens/s");
    println!(
        "loopback RPC   : {tps_rpc:.2} tokens/s ({:.1}% of local)",
        100.0 * tps_rpc / tps_local
    );
    println!(
        "per token      : {:.0} bytes sent, {:.0} bytes received",
        sent as f64 / n as f64,
        recv as f64 / n as f64
    );
    println!(
        "load over RPC  : {:.1} s, {:.1} MiB sent",
        load_s,
        load_sent as f64 / (1 << 20) as f64
    );
    println!(
        "same tokens    : {}",
        if toks_local == toks_rpc { "yes" } else { "NO" }
    );
}

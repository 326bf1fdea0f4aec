//! Our client against our rpc-server over loopback: the same greedy tokens
//! as the local CPU, with all layers on one server and split across two
//! servers plus the CPU; a server killed mid-generation is a clear error.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{fixtures, ServerProc};
use ggml_core::Device;
use llama::{Batch, Context, ContextParams, Model, ModelParams};
use test_support::greedy_token;

fn ctx_params() -> ContextParams {
    ContextParams {
        n_ctx: 128,
        n_threads: 2,
        n_threads_batch: 2,
        ..ContextParams::default()
    }
}

fn greedy(model: &Model, n: usize) -> Vec<i32> {
    let mut ctx = Context::new(model, ctx_params()).expect("context");
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    ctx.decode(&Batch::get_one(&prompt)).expect("prompt");
    let mut out = Vec::new();
    let mut tok = greedy_token(ctx.logits_ith(-1).unwrap());
    for _ in 0..n {
        out.push(tok);
        ctx.decode(&Batch::get_one(&[tok])).expect("decode");
        tok = greedy_token(ctx.logits_ith(-1).unwrap());
    }
    out
}

fn local(path: &Path) -> Model {
    llama::backend_init();
    let p = ModelParams {
        devices: Some(Vec::new()),
        n_gpu_layers: 0,
        use_extra_bufts: false,
        ..ModelParams::default()
    };
    Model::load(path, &p).expect("local load")
}

fn remote(path: &Path, devices: Vec<Arc<dyn Device>>, ngl: i32, split: Vec<f32>) -> Model {
    let p = ModelParams {
        devices: Some(devices),
        n_gpu_layers: ngl,
        tensor_split: split,
        use_extra_bufts: false,
        ..ModelParams::default()
    };
    Model::load(path, &p).expect("remote load")
}

fn rpc_devices(s: &ServerProc) -> Vec<Arc<dyn Device>> {
    llama::backend_init();
    ggml_rpc::add_server(&s.endpoint)
        .expect("add server")
        .into_iter()
        .map(|d| d as Arc<dyn Device>)
        .collect()
}

fn same_tokens_all_layers_on_one_server(model: &str) {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models").join(model);
    let want = greedy(&local(&path), 24);
    let server = ServerProc::start(&[]);
    let devs = rpc_devices(&server);
    assert!(devs[0].name().starts_with("RPC"), "{}", devs[0].name());
    assert_eq!(devs[0].description(), server.endpoint);
    assert!(devs[0].memory().1 > 0, "the server reports its memory");
    let (sent0, _) = ggml_rpc::traffic();
    let got = greedy(&remote(&path, devs, 99, Vec::new()), 24);
    assert_eq!(got, want, "{model}: RPC tokens differ from local ones");
    assert!(ggml_rpc::traffic().0 > sent0, "nothing went over the wire");
}

#[test]
fn stories_all_layers_on_one_server() {
    same_tokens_all_layers_on_one_server("stories260K.gguf");
}

#[test]
fn tiny_q8_all_layers_on_one_server() {
    same_tokens_all_layers_on_one_server("tiny-q8_0.gguf");
}

#[test]
fn layers_split_across_two_servers_and_the_cpu() {
    let Some(fx) = fixtures() else { return };
    for model in ["stories260K.gguf", "tiny-q4_0.gguf"] {
        let path = fx.join("models").join(model);
        let want = greedy(&local(&path), 16);
        let (a, b) = (ServerProc::start(&[]), ServerProc::start(&[]));
        let mut devs = rpc_devices(&a);
        devs.extend(rpc_devices(&b));
        // Three layers offloaded, split 2:1 over the servers; the rest and
        // the input layer stay on the CPU.
        let got = greedy(&remote(&path, devs, 3, vec![2.0, 1.0]), 16);
        assert_eq!(
            got, want,
            "{model}: split RPC tokens differ from local ones"
        );
    }
}

/// Greedy tokens, every step's last logits row and the graph counters.
fn greedy_with(model: &Model, n: usize, reuse: bool) -> (Vec<i32>, Vec<Vec<f32>>, llama::Perf) {
    let cp = ContextParams {
        graph_reuse: reuse,
        ..ctx_params()
    };
    let mut ctx = Context::new(model, cp).expect("context");
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    ctx.decode(&Batch::get_one(&prompt)).expect("prompt");
    let (mut out, mut rows) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let row = ctx.logits_ith(-1).unwrap().to_vec();
        let tok = greedy_token(&row);
        rows.push(row);
        out.push(tok);
        ctx.decode(&Batch::get_one(&[tok])).expect("decode");
    }
    (out, rows, ctx.perf)
}

#[test]
fn graph_reuse_over_rpc_gives_the_same_numbers() {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models/stories260K.gguf");
    let want = greedy(&local(&path), 40);
    let (a, b) = (ServerProc::start(&[]), ServerProc::start(&[]));
    let mut devs = rpc_devices(&a);
    devs.extend(rpc_devices(&b));
    // All layers over two servers, and three of them with the CPU: the
    // graph has splits on every device, reused as a whole.
    for ngl in [99, 3] {
        let model = remote(&path, devs.clone(), ngl, vec![2.0, 1.0]);
        let (off, off_rows, off_perf) = greedy_with(&model, 40, false);
        let (on, on_rows, on_perf) = greedy_with(&model, 40, true);
        assert_eq!(off, want, "ngl {ngl}: RPC tokens differ from local ones");
        assert_eq!(on, off, "ngl {ngl}: tokens with and without reuse");
        assert!(on_rows == off_rows, "ngl {ngl}: logits differ with reuse");
        assert_eq!(off_perf.n_graph_reuses, 0);
        // 41 decodes over positions 0..45: the prompt, then one graph per
        // padding step of 32 cells (two), the rest reused.
        assert_eq!(
            (on_perf.n_graph_builds, on_perf.n_graph_reuses),
            (3, 38),
            "ngl {ngl}"
        );
    }
}

#[test]
fn a_server_killed_mid_generation_is_a_clear_error() {
    let Some(fx) = fixtures() else { return };
    let path = fx.join("models/stories260K.gguf");
    let mut server = ServerProc::start(&[]);
    let model = remote(&path, rpc_devices(&server), 99, Vec::new());
    let mut ctx = Context::new(&model, ctx_params()).expect("context");
    let prompt = model.vocab.tokenize("Once upon a time", true, true);
    ctx.decode(&Batch::get_one(&prompt)).expect("prompt");
    let tok = greedy_token(ctx.logits_ith(-1).unwrap());
    ctx.decode(&Batch::get_one(&[tok])).expect("first token");
    server.child.kill().expect("kill");
    server.child.wait().expect("wait");
    assert!(!server.alive());
    let mut err = None;
    for _ in 0..4 {
        if let Err(e) = ctx.decode(&Batch::get_one(&[tok])) {
            err = Some(e.to_string());
            break;
        }
    }
    let err = err.expect("decoding against a dead server must fail");
    assert!(
        err.contains(&server.endpoint) && err.contains("closed the connection"),
        "unclear error: {err}"
    );
}

#[test]
fn bad_endpoints_are_clear_errors() {
    let e = llama::devices::add_rpc_servers("localhost")
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected host:port"), "{e}");
    let e = llama::devices::add_rpc_servers(",")
        .unwrap_err()
        .to_string();
    assert!(e.contains("names no RPC server"), "{e}");
    // A port nobody listens on: bind one, then close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ep = format!("127.0.0.1:{port}");
    let e = llama::devices::add_rpc_servers(&ep)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&ep) && e.contains("connecting"), "{e}");
}

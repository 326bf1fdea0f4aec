//! llama-server's request decoding, called directly (no socket): the
//! body of every endpoint that reads one (`/completion`,
//! `/v1/completions`, `/v1/chat/completions` with a tool-calling Jinja
//! template, `/infill`, `/tokenize`, `/detokenize`, `/apply-template`,
//! `/lora-adapters`) from fuzzed bytes. Nothing is generated: the decoders
//! check every field and tokenize the prompt, as the handlers do before
//! the engine sees a request.

#![no_main]

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::extract::State;
use libfuzzer_sys::fuzz_target;
use llama_server::app::AppState;
use llama_server::args::ServerArgs;
use llama_server::completions::{decode, Api};

struct Fixture {
    app: AppState,
    rt: tokio::runtime::Runtime,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = llama_rs_fuzz::fixtures();
        let path = |rel: &str| dir.join(rel).display().to_string();
        let argv: Vec<String> = vec![
            "-m".into(),
            path("models/stories260K.gguf"),
            "--chat-template-file".into(),
            path("templates/Qwen-Qwen3-0.6B.jinja"),
            "--jinja".into(),
            "--lora".into(),
            path("adapters/tiny-lora-stories260K.gguf"),
            "--lora-init-without-apply".into(),
            "--no-repack".into(),
            "-c".into(),
            "256".into(),
            "-np".into(),
            "2".into(),
            "-t".into(),
            "1".into(),
            "--log-disable".into(),
        ];
        let args = ServerArgs::parse(argv).expect("flags");
        let app = llama_server::start_app(&args);
        while !app.engine.is_ready() {
            if let Some(e) = app.engine.load_error() {
                panic!("server model: {e}");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        app.chat_template().expect("chat template");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        Fixture { app, rt }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&endpoint, body)) = data.split_first() else {
        return;
    };
    let f = fixture();
    let app = &f.app;
    let state = || State(app.clone());
    let bytes = || Bytes::copy_from_slice(body);
    match endpoint % 8 {
        0 => {
            let _ = decode(app, body, Api::Native, None);
        }
        1 => {
            let _ = decode(app, body, Api::Completions, None);
        }
        2 => {
            let _ = decode(app, body, Api::Chat, None);
        }
        3 => {
            // stories260K has no FIM tokens: its /infill answers 501 before
            // reading the body, so the body's fields are read here too.
            if let Ok(b) = llama_server::request::parse(body) {
                let _ = llama_server::infill::extra_chunks(&b);
            }
            if let Ok(tokens) = llama_server::infill::prepare(app, body) {
                let _ = decode(app, body, Api::Native, Some(tokens));
            }
        }
        4 => {
            let _ = f.rt.block_on(llama_server::app::tokenize(state(), bytes()));
        }
        5 => {
            let _ =
                f.rt.block_on(llama_server::app::detokenize(state(), bytes()));
        }
        6 => {
            let _ =
                f.rt.block_on(llama_server::app::apply_template(state(), bytes()));
        }
        _ => {
            let _ =
                f.rt.block_on(llama_server::lora::post_adapters(state(), bytes()));
            // Put the scales back: the next input starts from the same state.
            app.engine.shared.loras.set_scales(&[0.0]);
        }
    }
});

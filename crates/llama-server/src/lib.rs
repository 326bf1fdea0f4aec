//! llama-server: an OpenAI-compatible HTTP server over the llama crate, with
//! parallel slots and continuous batching, streaming, and chat templates.
//!
//! The HTTP side runs on tokio with axum (routing, extractors and
//! server-sent events over hyper); one engine thread owns the model and the
//! context and serves every slot, so decoding never blocks the runtime.

pub mod app;
pub mod args;
pub mod chat;
pub mod completions;
pub mod embeddings;
pub mod engine;
pub mod error;
pub mod infill;
pub mod lora;
pub mod metrics;
pub mod request;
pub mod slots_api;
pub mod tools;

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::app::{App, AppState, HttpConfig};
use crate::args::ServerArgs;
use crate::engine::{EngineConfig, EngineHandle};

/// A running server.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its state.
    pub app: AppState,
    shutdown: Option<oneshot::Sender<()>>,
    join: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Starts serving on `listener`; the model loads in the background
    /// (`/health` answers 503 until it is ready).
    pub fn start(args: &ServerArgs, listener: TcpListener) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        let app = start_app(args);
        let (tx, rx) = oneshot::channel::<()>();
        let router = app::router(app.clone());
        let join = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    rx.await.ok();
                })
                .await
        });
        Ok(Server {
            addr,
            app,
            shutdown: Some(tx),
            join,
        })
    }

    /// Waits until the model is loaded and the chat template is built;
    /// an error says why the server cannot serve.
    pub async fn wait_ready(&self) -> Result<(), String> {
        loop {
            if let Some(e) = self.app.engine.load_error() {
                return Err(e);
            }
            if self.app.engine.is_ready() {
                return self.app.chat_template().map(|_| ()).map_err(|e| e.message);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Stops accepting connections and waits for open ones to finish.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            tx.send(()).ok();
        }
        self.join
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)))
    }
}

/// The state of a server for `args`: the engine thread starts loading the
/// model at once. Without a listener, its handlers and request decoders
/// can be called directly.
pub fn start_app(args: &ServerArgs) -> AppState {
    let engine = EngineHandle::start(EngineConfig {
        model_path: args.common.model.clone(),
        model_params: args.common.model_params.clone(),
        ctx_params: args.common.ctx_params.clone(),
        n_parallel: args.n_parallel,
        embeddings: args.embeddings,
        adapters: args.common.adapters.clone(),
        cache: args.cache.clone(),
        spec: args.spec.clone(),
    });
    let alias = args.alias.clone().unwrap_or_else(|| {
        Path::new(&args.common.model).file_name().map_or_else(
            || args.common.model.clone(),
            |f| f.to_string_lossy().into_owned(),
        )
    });
    App::new(
        engine,
        HttpConfig {
            api_key: args.api_key.clone(),
            metrics: args.metrics,
            timeout: args.timeout,
            chat_template: args.chat_template.clone(),
            jinja: args.jinja,
            model_alias: alias,
            sampling: args.common.sampling.clone(),
            reasoning_format: args.reasoning_format,
            slot_save_path: args.slot_save_path.clone(),
            n_keep: args.common.n_keep,
            n_batch: args.common.ctx_params.n_batch,
            n_predict: args.common.n_predict,
            spm_infill: args.spm_infill,
            draft: args.spec.params,
        },
    )
}

//! llama-server: serve a GGUF model over an OpenAI-compatible HTTP API.

use std::process::ExitCode;

use llama_server::args::{ServerArgs, HELP};
use llama_server::Server;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "-h" || a == "--help") {
        println!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let mut args = match ServerArgs::parse(argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = args.common.model_path() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    if let Err(e) = args.common.fit_params() {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {addr}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let server = match Server::start(&args, listener) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        llama::info!("server: listening on http://{}", server.addr);
        if let Err(e) = server.wait_ready().await {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        llama::info!("server: model loaded, ready");
        tokio::signal::ctrl_c().await.ok();
        llama::info!("server: shutting down");
        ExitCode::SUCCESS
    })
}

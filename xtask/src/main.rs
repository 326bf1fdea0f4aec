use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = xtask::cli::Cli::parse();
    match xtask::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

//! llama-tokenize: print the tokens of a text under a model's vocabulary.
//!
//! Only the file's `tokenizer.ggml.*` keys are read: any GGUF with a
//! vocabulary works, whatever its architecture, and no device is opened.

use std::io::Write;
use std::process::ExitCode;

use llama::vocab::Vocab;
use llama::{LlamaError, Result};

const HELP: &str = "usage: llama-tokenize -m MODEL (-p TEXT | -f FILE | --stdin) [options]

  --ids                 print only the ids, as [1, 2, 3]
  --no-bos              do not add a BOS token even if the model wants one
  --no-parse-special    treat special-token text as plain text
  -e, --escape          process escapes in the text, from -p, -f or --stdin:
                        \\n \\r \\t \\' \\\" \\\\ \\xHH (default)
  --no-escape           take the text as written
  --show-count          print the number of tokens
  --log-disable         no logs";

fn run() -> Result<()> {
    let mut model_path = None;
    let mut text: Option<String> = None;
    let (mut ids, mut no_bos, mut parse_special, mut show_count) = (false, false, true, false);
    let mut escape = true;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || llama::cli::flag_value(&mut it, &a);
        match a.as_str() {
            "-m" | "--model" => model_path = Some(val()?),
            "-p" | "--prompt" => text = Some(val()?),
            "-f" | "--file" => {
                let p = val()?;
                text = Some(
                    std::fs::read_to_string(&p)
                        .map_err(|source| LlamaError::Io { path: p, source })?,
                );
            }
            "--stdin" => {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|source| {
                    LlamaError::Io {
                        path: "<stdin>".into(),
                        source,
                    }
                })?;
                text = Some(s);
            }
            "--ids" => ids = true,
            "--no-bos" => no_bos = true,
            "--no-parse-special" => parse_special = false,
            "--show-count" => show_count = true,
            "-e" | "--escape" => escape = true,
            "--no-escape" => escape = false,
            "--log-disable" => llama::log::set_level(llama::log::Level::Off),
            "-h" | "--help" => {
                println!("{HELP}");
                return Ok(());
            }
            _ => return Err(llama::cli::unknown_argument(&a)),
        }
    }
    let path = model_path
        .ok_or_else(|| LlamaError::InvalidParam("no model given: use -m FILE.gguf".into()))?;
    let mut text = text
        .ok_or_else(|| LlamaError::InvalidParam("no text given: use -p, -f or --stdin".into()))?;
    if escape {
        // A file is read whole, its last newline kept: that is a token too.
        text = llama::cli::process_escapes(&text);
    }
    // The first file of a split model holds the metadata.
    let vocab = &Vocab::from_gguf(&gguf::GgufFile::open(&path)?)?;
    let add_special = vocab.add_bos() && !no_bos;
    let toks = vocab.tokenize(&text, add_special, parse_special);
    let out = std::io::stdout();
    let mut out = out.lock();
    if ids {
        let list: Vec<String> = toks.iter().map(|t| t.to_string()).collect();
        writeln!(out, "[{}]", list.join(", ")).ok();
    } else {
        for &t in &toks {
            let piece = String::from_utf8_lossy(&vocab.token_to_piece(t, true)).into_owned();
            writeln!(out, "{t:6} -> '{piece}'").ok();
        }
    }
    if show_count {
        writeln!(out, "Total number of tokens: {}", toks.len()).ok();
    }
    Ok(())
}

fn main() -> ExitCode {
    llama::cli::exit_code(run())
}

//! `POST /infill`: fill-in-the-middle with the vocabulary's FIM tokens, in
//! llama.cpp's repository-level layout:
//!
//! ```text
//! [FIM_REP]myproject\n [FIM_SEP]file\n chunk ... [FIM_SEP]filename\n
//! [FIM_PRE]prefix [FIM_SUF]suffix [FIM_MID]prompt
//! ```
//!
//! (`--spm-infill`: suffix before prefix). The prefix keeps its last
//! 3/4 of a batch, the suffix its first quarter, the extra chunks fill the
//! rest of the slot's context. A model without FIM prefix, suffix and
//! middle tokens is refused; the reply is `/completion`'s.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use llama::vocab::Vocab;
use llama::Token;
use serde_json::Value;

use crate::app::AppState;
use crate::error::ApiError;
use crate::request;

/// What the layout needs besides the request.
#[derive(Clone, Copy, Debug)]
pub struct InfillLimits {
    /// The context's batch size.
    pub n_batch: usize,
    /// The server's default `n_predict` (-1: unbounded).
    pub n_predict: i64,
    /// The slot's context size.
    pub n_ctx: usize,
    /// Suffix-prefix-middle order.
    pub spm: bool,
}

/// One `input_extra` chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraChunk {
    /// The file's name.
    pub filename: String,
    /// Its text.
    pub text: String,
}

/// Why the model cannot infill, if it cannot.
pub fn missing_fim_tokens(vocab: &Vocab) -> Option<String> {
    let sp = vocab.special();
    let mut err = String::new();
    if sp.fim_pre.is_none() {
        err += "prefix token is missing. ";
    }
    if sp.fim_suf.is_none() {
        err += "suffix token is missing. ";
    }
    if sp.fim_mid.is_none() {
        err += "middle token is missing. ";
    }
    (!err.is_empty()).then(|| format!("Infill is not supported by this model: {}", err.trim_end()))
}

/// The prompt tokens of an infill request.
pub fn format_infill(
    vocab: &Vocab,
    prefix: &str,
    suffix: &str,
    extra: &[ExtraChunk],
    prompt: &[Token],
    lim: InfillLimits,
) -> Result<Vec<Token>, String> {
    if let Some(e) = missing_fim_tokens(vocab) {
        return Err(e);
    }
    let sp = vocab.special();
    let (Some(pre), Some(suf), Some(mid)) = (sp.fim_pre, sp.fim_suf, sp.fim_mid) else {
        return Err("Infill is not supported by this model".into());
    };
    let tok = |s: &str| vocab.tokenize(s, false, false);
    let mut extra_toks: Vec<Token> = Vec::new();
    if let Some(rep) = sp.fim_rep {
        extra_toks.push(rep);
        extra_toks.extend(tok("myproject\n"));
    }
    for c in extra {
        match sp.fim_sep {
            Some(sep) => {
                extra_toks.push(sep);
                extra_toks.extend(tok(&format!("{}\n", c.filename)));
            }
            None => extra_toks.extend(tok("\n\n--- snippet ---\n\n")),
        }
        extra_toks.extend(tok(&c.text));
    }
    if let Some(sep) = sp.fim_sep {
        extra_toks.push(sep);
        extra_toks.extend(tok("filename\n"));
    }
    let mut t_prefix = tok(prefix);
    let mut t_suffix = tok(suffix);
    let nb = lim.n_batch as i64;
    let n_prefix_take = (t_prefix.len() as i64).min(3 * (nb / 4)).max(0) as usize;
    let n_suffix_take = (t_suffix.len() as i64)
        .min((nb / 4 - (2 + prompt.len() as i64)).max(0))
        .max(0) as usize;
    let n_extra_take =
        ((lim.n_ctx as i64 - nb - 2 * lim.n_predict).max(0) as usize).min(extra_toks.len());
    t_prefix.drain(..t_prefix.len() - n_prefix_take);
    t_suffix.truncate(n_suffix_take);
    t_prefix.insert(0, pre);
    t_prefix.extend_from_slice(prompt);
    t_suffix.insert(0, suf);
    let (mut inp, end) = if lim.spm {
        (t_suffix, t_prefix)
    } else {
        (t_prefix, t_suffix)
    };
    if vocab.add_bos() {
        if let Some(bos) = vocab.bos() {
            inp.insert(0, bos);
        }
    }
    let mut out: Vec<Token> = extra_toks[extra_toks.len() - n_extra_take..].to_vec();
    out.extend(inp);
    out.extend(end);
    out.push(mid);
    Ok(out)
}

fn string_field(b: &request::Body, field: &str) -> Result<String, ApiError> {
    match b.get(field) {
        None => Err(ApiError::field(field, format!("\"{field}\" is required"))),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ApiError::field(
            field,
            format!("\"{field}\" must be a string"),
        )),
    }
}

/// Reads `input_extra`: an array of `{"text": string, "filename": string}`
/// (the file name is optional, "tmp" when absent).
pub fn extra_chunks(b: &request::Body) -> Result<Vec<ExtraChunk>, ApiError> {
    let what = "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}";
    let Some(v) = b.get("input_extra") else {
        return Ok(Vec::new());
    };
    let arr = v
        .as_array()
        .ok_or_else(|| ApiError::field("input_extra", what))?;
    arr.iter()
        .map(|c| {
            let text = c.get("text").and_then(Value::as_str).ok_or_else(|| {
                ApiError::field(
                    "input_extra",
                    "extra_context chunk must contain a \"text\" field with a string value",
                )
            })?;
            let filename = match c.get("filename") {
                None | Some(Value::Null) => "tmp",
                Some(Value::String(s)) => s.as_str(),
                Some(_) => {
                    return Err(ApiError::field(
                        "input_extra",
                        "extra_context chunk's \"filename\" field must be a string",
                    ))
                }
            };
            Ok(ExtraChunk {
                filename: filename.to_string(),
                text: text.to_string(),
            })
        })
        .collect()
}

/// The handler.
pub async fn infill(State(app): State<AppState>, body: Bytes) -> Response {
    match prepare(&app, &body) {
        Ok(tokens) => crate::completions::respond_native_tokens(&app, &body, tokens).await,
        Err(e) => e.into_response(),
    }
}

/// Reads and checks an `/infill` body: the prompt tokens in llama.cpp's
/// repository-level fill-in-the-middle layout.
pub fn prepare(app: &AppState, body: &[u8]) -> Result<Vec<Token>, ApiError> {
    let model = app.model()?;
    let vocab = &model.vocab;
    if let Some(e) = missing_fim_tokens(vocab) {
        return Err(ApiError::new(StatusCode::NOT_IMPLEMENTED, e));
    }
    let b = request::parse(body)?;
    let prompt = match b.get("prompt") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::field("prompt", "\"prompt\" must be a string")),
    };
    let prefix = string_field(&b, "input_prefix")?;
    let suffix = string_field(&b, "input_suffix")?;
    let extra = extra_chunks(&b)?;
    let lim = InfillLimits {
        n_batch: app.config.n_batch,
        n_predict: app.config.n_predict,
        n_ctx: app
            .engine
            .shared
            .n_ctx_slot
            .load(std::sync::atomic::Ordering::Acquire),
        spm: app.config.spm_infill,
    };
    let prompt_toks = vocab.tokenize(&prompt, false, true);
    format_infill(vocab, &prefix, &suffix, &extra, &prompt_toks, lim)
        .map_err(|e| ApiError::new(StatusCode::NOT_IMPLEMENTED, e))
}

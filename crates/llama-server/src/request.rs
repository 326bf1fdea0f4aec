//! Reading request bodies: JSON objects whose fields are checked one by one,
//! so that an error names the field at fault.

use llama::chat::Message;
use llama::grammar::GrammarTrigger;
use llama::sampling::SamplingParams;
use llama::vocab::Vocab;
use llama::Token;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// A request body as a JSON object.
pub struct Body(pub Map<String, Value>);

/// Parses `bytes` as a JSON object.
pub fn parse(bytes: &[u8]) -> Result<Body, ApiError> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::field("body", format!("malformed JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(Body(m)),
        _ => Err(ApiError::field(
            "body",
            "the request body must be a JSON object",
        )),
    }
}

fn wrong(field: &str, what: &str) -> ApiError {
    ApiError::field(field, format!("'{field}' must be {what}"))
}

impl Body {
    /// A field that is present and not null.
    pub fn get(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
    }

    /// A field read by `read` when present, or an error saying it must be
    /// `what` when `read` finds no such value in it.
    fn typed<'a, T>(
        &'a self,
        field: &str,
        what: &str,
        read: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, ApiError> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => read(v).map(Some).ok_or_else(|| wrong(field, what)),
        }
    }

    /// A number field.
    pub fn f32(&self, field: &str) -> Result<Option<f32>, ApiError> {
        self.typed(field, "a number", |v| {
            v.as_f64().filter(|x| x.is_finite()).map(|x| x as f32)
        })
    }

    /// An integer field.
    pub fn i64(&self, field: &str) -> Result<Option<i64>, ApiError> {
        self.typed(field, "an integer", |v| {
            v.as_i64().or_else(|| {
                v.as_f64()
                    .filter(|x| x.fract() == 0.0 && x.abs() < 9e15)
                    .map(|x| x as i64)
            })
        })
    }

    /// A boolean field.
    pub fn bool(&self, field: &str) -> Result<Option<bool>, ApiError> {
        self.typed(field, "a boolean", Value::as_bool)
    }

    /// A string field.
    pub fn str(&self, field: &str) -> Result<Option<&str>, ApiError> {
        self.typed(field, "a string", Value::as_str)
    }
}

/// The draft settings of a request: `speculative.n_max`, `.n_min` (at
/// least 0; `n_min` at most `n_max`) and `.p_min` (in [0, 1]), over the
/// server's.
pub fn draft_params(
    b: &Body,
    defaults: llama::speculative::DraftParams,
) -> Result<llama::speculative::DraftParams, ApiError> {
    let mut d = defaults;
    let count = |field: &str| -> Result<Option<usize>, ApiError> {
        match b.i64(field)? {
            None => Ok(None),
            Some(x) => usize::try_from(x)
                .map(Some)
                .map_err(|_| ApiError::field(field, format!("'{field}' must be 0 or more"))),
        }
    };
    if let Some(n) = count("speculative.n_max")? {
        d.n_max = n;
    }
    if let Some(n) = count("speculative.n_min")? {
        d.n_min = n;
    }
    if let Some(p) = b.f32("speculative.p_min")? {
        if !(0.0..=1.0).contains(&p) {
            return Err(ApiError::field(
                "speculative.p_min",
                "'speculative.p_min' must be in [0, 1]",
            ));
        }
        d.p_min = p;
    }
    d.n_min = d.n_min.min(d.n_max);
    Ok(d)
}

/// `id_slot`: the slot a request asks for (-1 or absent: any), checked
/// against the `n_slots` slots.
pub fn id_slot(b: &Body, n_slots: usize) -> Result<Option<usize>, ApiError> {
    match b.i64("id_slot")? {
        None | Some(-1) => Ok(None),
        Some(x) => usize::try_from(x)
            .ok()
            .filter(|&s| s < n_slots)
            .map(Some)
            .ok_or_else(|| {
                ApiError::field(
                    "id_slot",
                    format!(
                        "'id_slot' {x} is out of range: the server has {n_slots} slots (0 to {}), or -1 for any",
                        n_slots.saturating_sub(1)
                    ),
                )
            }),
    }
}

/// Generation settings common to the completion endpoints.
#[derive(Debug, Clone)]
pub struct GenOptions {
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Tokens to generate (-1 = no limit).
    pub n_predict: i64,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Stream the reply as server-sent events.
    pub stream: bool,
    /// Send usage in the last streamed chunk.
    pub include_usage: bool,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Top tokens reported per token (0: no probabilities).
    pub n_probs: usize,
    /// Report probabilities at all (chat's `logprobs: true` with 0 top).
    pub logprobs: bool,
    /// Choices to generate (`n`).
    pub n: usize,
}

/// Most choices one request may ask for.
pub const MAX_CHOICES: i64 = 16;

/// Most top tokens a request may ask probabilities for.
const MAX_PROBS: i64 = 20;

/// Reads the generation fields. `chat` selects the chat meaning of
/// `logprobs` (a boolean with `top_logprobs`).
pub fn gen_options(
    b: &Body,
    defaults: &SamplingParams,
    vocab: &Vocab,
    chat: bool,
) -> Result<GenOptions, ApiError> {
    let mut s = defaults.clone();
    if let Some(x) = b.f32("temperature")? {
        if x < 0.0 {
            return Err(ApiError::field("temperature", "'temperature' must be >= 0"));
        }
        s.temp = x;
    }
    if let Some(x) = b.f32("top_p")? {
        if !(0.0..=1.0).contains(&x) {
            return Err(ApiError::field("top_p", "'top_p' must be in [0, 1]"));
        }
        s.top_p = x;
    }
    if let Some(x) = b.i64("top_k")? {
        s.top_k = x.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    }
    if let Some(x) = b.f32("min_p")? {
        s.min_p = x;
    }
    if let Some(x) = b.f32("typical_p")? {
        s.typ_p = x;
    }
    if let Some(x) = b.f32("dynatemp_range")? {
        s.dynatemp_range = x;
    }
    if let Some(x) = b.f32("dynatemp_exponent")? {
        s.dynatemp_exponent = x;
    }
    refuse_unsupported(b)?;
    if let Some(g) = constrained_output(b, vocab)? {
        s.grammar = g;
    }
    if let Some(lazy) = b.bool("grammar_lazy")? {
        s.grammar_lazy = lazy;
    }
    if let Some(v) = b.get("grammar_triggers") {
        s.grammar_triggers = grammar_triggers(v)?;
    }
    if s.grammar_lazy && !s.grammar.is_empty() && s.grammar_triggers.is_empty() {
        return Err(ApiError::field(
            "grammar_triggers",
            "'grammar_lazy' needs at least one of 'grammar_triggers'",
        ));
    }
    if !s.grammar.is_empty() {
        // Checked here, so that a grammar that does not parse or a trigger
        // pattern that does not compile is a 400 naming the field.
        llama::grammar::Grammar::parse_with_vocab(&s.grammar, vocab)
            .map_err(|e| ApiError::field("grammar", format!("'grammar': {e}")))?;
        GrammarTrigger::check_all(&s.grammar_triggers)
            .map_err(|e| ApiError::field("grammar_triggers", format!("'grammar_triggers': {e}")))?;
    }
    if let Some(x) = b.i64("seed")? {
        // Seeds are 32-bit, as llama.cpp's; -1 picks a random one.
        s.seed = if x < 0 {
            llama::sampling::DEFAULT_SEED
        } else {
            x as u32
        };
    }
    for (field, dst) in [
        ("presence_penalty", &mut s.penalty_present),
        ("frequency_penalty", &mut s.penalty_freq),
        ("repeat_penalty", &mut s.penalty_repeat),
    ] {
        if let Some(x) = b.f32(field)? {
            if !(-2.0..=2.0).contains(&x) && field != "repeat_penalty" {
                return Err(ApiError::field(
                    field,
                    format!("'{field}' must be in [-2, 2]"),
                ));
            }
            *dst = x;
        }
    }
    if let Some(x) = b.i64("repeat_last_n")? {
        if x < -1 {
            return Err(ApiError::field(
                "repeat_last_n",
                "'repeat_last_n' must be >= -1",
            ));
        }
        s.penalty_last_n = x as i32;
    }
    if let Some(v) = b.get("logit_bias") {
        s.logit_bias = logit_bias(v, vocab)?;
    }
    let n_predict = match (
        b.i64("max_completion_tokens")?,
        b.i64("max_tokens")?,
        b.i64("n_predict")?,
    ) {
        (Some(x), _, _) | (None, Some(x), _) => {
            if x < 0 {
                let f = if b.get("max_completion_tokens").is_some() {
                    "max_completion_tokens"
                } else {
                    "max_tokens"
                };
                return Err(ApiError::field(f, format!("'{f}' must be >= 0")));
            }
            x
        }
        (None, None, Some(x)) => {
            if x < -1 {
                return Err(ApiError::field("n_predict", "'n_predict' must be >= -1"));
            }
            x
        }
        (None, None, None) => -1,
    };
    let n = b.i64("n")?.unwrap_or(1);
    if !(1..=MAX_CHOICES).contains(&n) {
        return Err(ApiError::field(
            "n",
            format!("'n' must be in [1, {MAX_CHOICES}]"),
        ));
    }
    let stop = match b.get("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| wrong("stop", "a string or an array of strings"))?,
        Some(_) => return Err(wrong("stop", "a string or an array of strings")),
    };
    let (logprobs, n_probs) = if chat {
        let on = b.bool("logprobs")?.unwrap_or(false);
        let top = b.i64("top_logprobs")?.unwrap_or(0);
        if !(0..=MAX_PROBS).contains(&top) {
            return Err(ApiError::field(
                "top_logprobs",
                format!("'top_logprobs' must be in [0, {MAX_PROBS}]"),
            ));
        }
        (on, if on { top.max(1) } else { 0 })
    } else {
        let (field, n) = match b.i64("logprobs")? {
            Some(n) => ("logprobs", n),
            None => ("n_probs", b.i64("n_probs")?.unwrap_or(0)),
        };
        if !(0..=MAX_PROBS).contains(&n) {
            return Err(ApiError::field(
                field,
                format!("'{field}' must be in [0, {MAX_PROBS}]"),
            ));
        }
        (n > 0, n)
    };
    let include_usage = match b.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => o
            .get("include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        Some(_) => return Err(wrong("stream_options", "an object")),
    };
    Ok(GenOptions {
        sampling: s,
        n_predict,
        stop,
        stream: b.bool("stream")?.unwrap_or(false),
        include_usage,
        ignore_eos: b.bool("ignore_eos")?.unwrap_or(false),
        n_probs: n_probs as usize,
        logprobs,
        n: n as usize,
    })
}

/// `grammar`: a GBNF grammar the output must follow (empty: none; absent:
/// the server's `--grammar`).
fn grammar(b: &Body) -> Result<Option<String>, ApiError> {
    match b.get("grammar") {
        None => Ok(None),
        Some(Value::String(g)) if g.trim().is_empty() => Ok(Some(String::new())),
        Some(Value::String(g)) => Ok(Some(g.clone())),
        Some(_) => Err(wrong("grammar", "a string")),
    }
}

/// The grammar the output must follow (empty: none; `None`: the server's
/// `--grammar`), from `grammar`, or from a JSON schema: `json_schema`, or `response_format` as llama.cpp maps
/// it (`{"type": "json_object"}` with an optional `schema`, or
/// `{"type": "json_schema", "json_schema": {"schema": ...}}`; `text` asks
/// for nothing). An empty schema means any JSON object. A schema the
/// converter cannot honour is a 400 naming the field and the keyword.
fn constrained_output(b: &Body, vocab: &Vocab) -> Result<Option<String>, ApiError> {
    let gbnf = grammar(b)?;
    let mut schema: Option<(&Value, &str)> = b.get("json_schema").map(|v| (v, "json_schema"));
    let empty = Value::Object(Map::new());
    match b.get("response_format") {
        None => {}
        Some(Value::Object(o)) => match o.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t.is_empty() || t == "text" => {}
            Some(Value::String(t)) if t == "json_object" => {
                let no_schema_yet = match schema {
                    None => true,
                    Some((Value::Object(m), _)) => m.is_empty(),
                    Some(_) => false,
                };
                if o.contains_key("schema") || no_schema_yet {
                    let s = o.get("schema").filter(|v| !v.is_null()).unwrap_or(&empty);
                    schema = Some((s, "response_format"));
                }
            }
            Some(Value::String(t)) if t == "json_schema" => {
                let s = match o.get("json_schema") {
                    None | Some(Value::Null) => &empty,
                    Some(Value::Object(w)) => {
                        w.get("schema").filter(|v| !v.is_null()).unwrap_or(&empty)
                    }
                    Some(_) => {
                        return Err(wrong(
                            "response_format",
                            "an object whose 'json_schema' is an object",
                        ))
                    }
                };
                schema = Some((s, "response_format"));
            }
            _ => {
                return Err(wrong(
                    "response_format",
                    "an object whose 'type' is text, json_object or json_schema",
                ))
            }
        },
        Some(_) => return Err(wrong("response_format", "an object")),
    }
    let Some((schema, field)) = schema else {
        return Ok(gbnf);
    };
    if gbnf.as_ref().is_some_and(|g| !g.is_empty()) {
        return Err(ApiError::field(
            field,
            format!("'{field}' and 'grammar' cannot be used together"),
        ));
    }
    let any_object = serde_json::json!({"type": "object"});
    let schema = match schema {
        Value::Object(m) if m.is_empty() => &any_object,
        s => s,
    };
    let text = llama::json_schema::json_schema_to_grammar(schema)
        .map_err(|e| ApiError::field(field, format!("'{field}': {e}")))?;
    // The converter's output always parses; a pattern's character class is
    // the one thing written as given, so the check stays.
    llama::grammar::Grammar::parse_with_vocab(&text, vocab)
        .map_err(|e| ApiError::field(field, format!("'{field}': the schema's grammar: {e}")))?;
    Ok(Some(text))
}

/// `grammar_triggers`: what starts a lazy grammar, as llama.cpp's server
/// reads them: objects with `type` (0 token, 1 word, 2 pattern, 3 full
/// pattern), `value` and, for a token, `token` (its id).
fn grammar_triggers(v: &Value) -> Result<Vec<GrammarTrigger>, ApiError> {
    let bad = |i: usize, what: &str| {
        ApiError::field(
            "grammar_triggers",
            format!("'grammar_triggers[{i}]' {what}"),
        )
    };
    let Value::Array(items) = v else {
        return Err(wrong("grammar_triggers", "an array"));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, t) in items.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_i64);
        let value = t.get("value").and_then(Value::as_str);
        let (Some(kind), Some(value)) = (kind, value) else {
            return Err(bad(
                i,
                "must be an object with an integer 'type' and a string 'value'",
            ));
        };
        out.push(match kind {
            0 => {
                let token = t
                    .get("token")
                    .and_then(Value::as_i64)
                    .and_then(|x| i32::try_from(x).ok())
                    .ok_or_else(|| bad(i, "of type 0 (token) needs an integer 'token'"))?;
                GrammarTrigger::Token(token)
            }
            1 => GrammarTrigger::Word(value.to_string()),
            2 => GrammarTrigger::Pattern(value.to_string()),
            3 => GrammarTrigger::PatternFull(value.to_string()),
            _ => return Err(bad(i, "has a 'type' that is not 0, 1, 2 or 3")),
        });
    }
    Ok(out)
}

/// `chat_template_kwargs`: extra variables for the chat template (such as
/// `enable_thinking`), an object when present.
pub fn template_kwargs(b: &Body) -> Result<Option<&Map<String, Value>>, ApiError> {
    match b.get("chat_template_kwargs") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => {
            if o.get("enable_thinking").is_some_and(|v| !v.is_boolean()) {
                return Err(ApiError::field(
                    "chat_template_kwargs",
                    "'chat_template_kwargs.enable_thinking' must be a boolean",
                ));
            }
            Ok(Some(o))
        }
        Some(_) => Err(wrong("chat_template_kwargs", "an object")),
    }
}

/// Refuses what a request asks for and this server cannot do, rather than
/// answer as if it had: the samplers it lacks, when turned on.
fn refuse_unsupported(b: &Body) -> Result<(), ApiError> {
    let unsupported = |field: &str, what: &str| {
        let mut e = ApiError::new(
            axum::http::StatusCode::NOT_IMPLEMENTED,
            format!("'{field}': {what} is not supported by this server"),
        );
        e.param = Some(field.to_string());
        e
    };
    // Samplers that are off at these values (llama.cpp's defaults).
    for (field, what) in [
        ("mirostat", "mirostat sampling"),
        ("dry_multiplier", "DRY sampling"),
        ("xtc_probability", "XTC sampling"),
        ("top_n_sigma", "top-n-sigma sampling"),
    ] {
        if b.f32(field)?.is_some_and(|x| x > 0.0) {
            return Err(unsupported(field, what));
        }
    }
    Ok(())
}

/// OpenAI's `{"token id": bias}` or llama.cpp's `[[id or text, bias or
/// false], ...]`; `false` forbids the token.
fn logit_bias(v: &Value, vocab: &Vocab) -> Result<Vec<(i32, f32)>, ApiError> {
    let n_vocab = vocab.n_tokens() as i64;
    let bad = |m: String| ApiError::field("logit_bias", m);
    let bias_of = |b: &Value| -> Result<f32, ApiError> {
        match b {
            Value::Bool(false) => Ok(f32::NEG_INFINITY),
            Value::Number(n) => n
                .as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| bad("a bias must be a number".into())),
            _ => Err(bad("a bias must be a number or false".into())),
        }
    };
    let id_of = |s: i64| -> Result<i32, ApiError> {
        if (0..n_vocab).contains(&s) {
            Ok(s as i32)
        } else {
            Err(bad(format!(
                "token {s} is outside the vocabulary of {n_vocab} tokens"
            )))
        }
    };
    let mut out = Vec::new();
    match v {
        Value::Object(m) => {
            for (k, b) in m {
                let id: i64 = k
                    .parse()
                    .map_err(|_| bad(format!("key '{k}' is not a token id")))?;
                out.push((id_of(id)?, bias_of(b)?));
            }
        }
        Value::Array(a) => {
            for pair in a {
                let Some([t, b]) = pair.as_array().map(Vec::as_slice) else {
                    return Err(bad("each entry must be a pair [token, bias]".into()));
                };
                let bias = bias_of(b)?;
                match t {
                    Value::Number(n) => out.push((id_of(n.as_i64().unwrap_or(-1))?, bias)),
                    Value::String(s) => {
                        for id in vocab.tokenize(s, false, false) {
                            out.push((id, bias));
                        }
                    }
                    _ => return Err(bad("a token must be an id or a string".into())),
                }
            }
        }
        _ => return Err(wrong("logit_bias", "an object or an array")),
    }
    Ok(out)
}

/// A prompt as text or token ids.
pub enum Prompt {
    /// Text, tokenized with special tokens parsed.
    Text(String),
    /// Token ids.
    Tokens(Vec<Token>),
}

/// Reads `prompt`: a string, an array of token ids, or an array of one
/// string.
pub fn prompt(b: &Body, vocab: &Vocab) -> Result<Prompt, ApiError> {
    let err = || wrong("prompt", "a string or an array of token ids");
    match b.get("prompt") {
        None => Err(ApiError::field("prompt", "'prompt' is required")),
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            Ok(Prompt::Text(a[0].as_str().unwrap_or_default().to_string()))
        }
        Some(Value::Array(a)) if a.iter().all(Value::is_i64) => {
            let n = vocab.n_tokens() as i64;
            a.iter()
                .map(|v| {
                    let t = v.as_i64().unwrap_or(-1);
                    (0..n).contains(&t).then_some(t as Token).ok_or_else(|| {
                        ApiError::field("prompt", format!("token {t} is outside the vocabulary of {n} tokens"))
                    })
                })
                .collect::<Result<_, _>>()
                .map(Prompt::Tokens)
        }
        Some(Value::Array(_)) => Err(ApiError::field(
            "prompt",
            "one prompt per request: 'prompt' must be a string, one string in an array, or token ids",
        )),
        Some(_) => Err(err()),
    }
}

/// Roles a chat message may have.
pub const ROLES: [&str; 5] = ["system", "user", "assistant", "tool", "developer"];

/// Reads `messages`: objects with a known `role` and a text `content`
/// (a string, or an array of `{"type": "text", "text": ...}` parts).
pub fn messages(b: &Body) -> Result<Vec<Message>, ApiError> {
    let Some(Value::Array(a)) = b.get("messages") else {
        return Err(match b.get("messages") {
            None => ApiError::field("messages", "'messages' is required"),
            Some(_) => wrong("messages", "an array"),
        });
    };
    if a.is_empty() {
        return Err(ApiError::field("messages", "'messages' must not be empty"));
    }
    a.iter()
        .enumerate()
        .map(|(i, m)| {
            let f = |k: &str| format!("messages[{i}].{k}");
            let Some(m) = m.as_object() else {
                return Err(ApiError::field(&format!("messages[{i}]"), "each message must be an object"));
            };
            let role = match m.get("role") {
                Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.clone(),
                Some(Value::String(r)) => {
                    return Err(ApiError::field(
                        &f("role"),
                        format!("unknown role '{r}': expected one of {}", ROLES.join(", ")),
                    ))
                }
                _ => return Err(ApiError::field(&f("role"), format!("'{}' must be a string", f("role")))),
            };
            let content = match m.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut s = String::new();
                    for p in parts {
                        match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => s.push_str(t),
                            _ => {
                                return Err(ApiError::field(
                                    &f("content"),
                                    "only text parts ({\"type\": \"text\", \"text\": ...}) are supported",
                                ))
                            }
                        }
                    }
                    s
                }
                Some(_) => {
                    return Err(ApiError::field(&f("content"), format!("'{}' must be a string or an array of parts", f("content"))))
                }
            };
            let mut msg = Message::new(role, content);
            let text = |k: &str| -> Result<Option<String>, ApiError> {
                match m.get(k) {
                    None | Some(Value::Null) => Ok(None),
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    Some(_) => Err(ApiError::field(&f(k), format!("'{}' must be a string", f(k)))),
                }
            };
            msg.tool_call_id = text("tool_call_id")?;
            msg.name = text("name")?;
            msg.reasoning_content = text("reasoning_content")?;
            if let Some(calls) = m.get("tool_calls").filter(|v| !v.is_null()) {
                msg.tool_calls = crate::tools::message_tool_calls(calls, &f("tool_calls"))?;
            }
            Ok(msg)
        })
        .collect()
}

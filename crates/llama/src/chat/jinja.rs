//! Rendering of a model's Jinja chat template (`tokenizer.chat_template`)
//! with minijinja, given the variables llama.cpp gives the templates:
//! `messages`, `add_generation_prompt`, `bos_token`, `eos_token`,
//! `enable_thinking`, `tools` (when there are some), `date_string` and
//! `datetime`, and the request's `chat_template_kwargs` over them.

use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind};

use super::limits::{BoundedOutput, JinjaLimits};
use super::{ChatError, Message};

/// A compiled Jinja chat template with the model's BOS and EOS texts.
#[derive(Debug)]
pub struct JinjaTemplate {
    env: Environment<'static>,
    /// The BOS text given to the template (`bos_token`).
    pub bos_token: String,
    /// The EOS text given to the template (`eos_token`).
    pub eos_token: String,
    /// Whether the template renders system messages; when it does not (it
    /// drops or rejects them), a system message is merged into the next
    /// user message, as llama.cpp's Jinja engine does.
    pub supports_system: bool,
    /// Whether `enable_thinking` changes the rendering; llama.cpp then
    /// turns thinking on by default, and off otherwise.
    pub supports_thinking: bool,
    /// What the template does with tools and calls, and their format.
    pub tool_caps: super::tools::TemplateCaps,
    /// gpt-oss's harmony template, given its messages as llama.cpp gives
    /// them (see [`super::harmony`]).
    pub harmony: bool,
    /// The limits of every rendering.
    limits: JinjaLimits,
}

/// Extra variables for a rendering (`chat_template_kwargs`).
pub type Kwargs = serde_json::Map<String, serde_json::Value>;

/// `source` with Hugging Face's `{% generation %}` blocks (which mark the
/// assistant's tokens for training and render their body unchanged) made
/// plain `{% if true %}` blocks, keeping their whitespace control.
fn without_generation_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(i) = rest.find("{%") {
        out.push_str(&rest[..i]);
        let tag = &rest[i..];
        // The closing mark after the opening one (`{%}` does not close).
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (open, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (close, word) = match body.strip_suffix(['-', '+']) {
            Some(w) => (&body[body.len() - 1..], w.trim()),
            None => ("", body.trim()),
        };
        match word {
            "generation" => out.push_str(&format!("{{%{open} if true {close}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{open} endif {close}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

const NAME: &str = "chat_template";

impl JinjaTemplate {
    /// Compiles `source`. Blocks are trimmed as `transformers` compiles chat
    /// templates (`trim_blocks`, `lstrip_blocks`), and Python string methods
    /// (`strip`, `startswith`, ...) work on values as the templates expect.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        Self::with_limits(source, bos_token, eos_token, JinjaLimits::default())
    }

    /// [`JinjaTemplate::new`] with other limits on each rendering
    /// (instructions, output bytes, recursion).
    pub fn with_limits(
        source: &str,
        bos_token: &str,
        eos_token: &str,
        limits: JinjaLimits,
    ) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_fuel(Some(limits.fuel));
        env.set_recursion_limit(limits.max_depth);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| -> String {
            strftime_now(&fmt)
        });
        // An undefined value has length 0, as in Python's Jinja and
        // llama.cpp's (`tools|length` where a request has no tools).
        let length = |v: Value| -> Result<usize, Error> {
            if v.is_undefined() {
                return Ok(0);
            }
            v.len().ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidOperation,
                    format!("cannot calculate length of value of type {}", v.kind()),
                )
            })
        };
        env.add_filter("tojson", super::tojson::tojson);
        env.add_filter("length", length);
        env.add_filter("count", length);
        env.add_template_owned(NAME, without_generation_blocks(source))
            .map_err(|e| ChatError::Template(format!("{e:#}")))?;
        let mut t = Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            supports_system: true,
            supports_thinking: false,
            tool_caps: super::tools::TemplateCaps::default(),
            harmony: super::harmony::is_harmony(source),
            limits,
        };
        const PROBE: &str = "<system probe 7f3a>";
        let probe = [Message::new("system", PROBE), Message::new("user", "u")];
        t.supports_system = t
            .render_raw(&probe, false, None, None)
            .is_ok_and(|out| out.contains(PROBE));
        let user = [Message::new("user", "u")];
        let thinking = |on: bool| {
            let mut kw = Kwargs::new();
            kw.insert("enable_thinking".into(), on.into());
            t.render_raw(&user, true, None, Some(&kw)).ok()
        };
        // As llama.cpp: a template supports thinking when the switch changes
        // a reasoning block it can parse, not any text (Apertus's
        // "Deliberation: enabled" stays off).
        let (on, off) = (thinking(true), thinking(false));
        let marks = |s: &Option<String>| {
            s.as_ref()
                .is_some_and(|s| s.to_ascii_lowercase().contains("think"))
        };
        t.supports_thinking = on != off && (marks(&on) || marks(&off));
        t.tool_caps = super::tools::detect(&t, source);
        Ok(t)
    }

    /// Renders `messages` (and `tools` when given) with
    /// `add_generation_prompt` and the extra variables `kwargs`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        kwargs: Option<&Kwargs>,
    ) -> Result<String, ChatError> {
        let mut out = self.render_merged(messages, add_generation_prompt, tools, kwargs)?;
        if self.harmony && !add_generation_prompt {
            super::harmony::end_instead_of_return(&mut out);
        }
        Ok(out)
    }

    /// [`JinjaTemplate::render`] before the harmony ending, with system
    /// messages merged where the template has none.
    fn render_merged(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        kwargs: Option<&Kwargs>,
    ) -> Result<String, ChatError> {
        if self.supports_system {
            return self.render_raw(messages, add_generation_prompt, tools, kwargs);
        }
        let mut merged: Vec<Message> = Vec::with_capacity(messages.len());
        let mut system: Option<String> = None;
        for m in messages {
            if m.role == "system" {
                system = Some(match system {
                    Some(s) => format!("{s}\n{}", m.content),
                    None => m.content.clone(),
                });
            } else if m.role == "user" && system.is_some() {
                let s = system.take().unwrap_or_default();
                let mut u = m.clone();
                u.content = format!("{s}\n{}", m.content);
                merged.push(u);
            } else {
                merged.push(m.clone());
            }
        }
        if let Some(s) = system {
            merged.push(Message::new("user", s));
        }
        self.render_raw(&merged, add_generation_prompt, tools, kwargs)
    }

    /// Renders a probe conversation (no generation prompt) with call
    /// arguments as objects or as text.
    pub(crate) fn render_probe(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        object_arguments: bool,
    ) -> Result<String, ChatError> {
        self.render_with(messages, false, tools, None, object_arguments)
    }

    fn render_raw(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        kwargs: Option<&Kwargs>,
    ) -> Result<String, ChatError> {
        let object = self.tool_caps.object_arguments;
        self.render_with(messages, add_generation_prompt, tools, kwargs, object)
    }

    fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
        kwargs: Option<&Kwargs>,
        object_arguments: bool,
    ) -> Result<String, ChatError> {
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| ChatError::Template(format!("{e:#}")))?;
        let mut msgs: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| m.to_template_json(object_arguments))
            .collect();
        if self.harmony {
            msgs.iter_mut().for_each(super::harmony::adjust_message);
        }
        let mut ctx = Kwargs::new();
        ctx.insert("messages".into(), msgs.into());
        ctx.insert("add_generation_prompt".into(), add_generation_prompt.into());
        ctx.insert("bos_token".into(), self.bos_token.clone().into());
        ctx.insert("eos_token".into(), self.eos_token.clone().into());
        ctx.insert("enable_thinking".into(), self.supports_thinking.into());
        // As llama.cpp: no `tools` at all rather than none or an empty list.
        let some_tools = match tools {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if let (true, Some(t)) = (some_tools, tools) {
            ctx.insert("tools".into(), t.clone());
        }
        ctx.insert("datetime".into(), strftime_now("%b %d %Y").into());
        ctx.insert("date_string".into(), strftime_now("%d %b %Y").into());
        for (k, v) in kwargs.into_iter().flatten() {
            ctx.insert(k.clone(), v.clone());
        }
        let mut out = BoundedOutput::new(self.limits.max_output);
        match tmpl.render_captured_to(Value::from_serialize(&ctx), &mut out) {
            Ok(_) => Ok(String::from_utf8(out.buf)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
            Err(_) if out.exceeded => Err(ChatError::Render(format!(
                "the rendered prompt exceeds the limit of {} bytes",
                self.limits.max_output
            ))),
            Err(e) if e.kind() == ErrorKind::OutOfFuel => Err(ChatError::Render(format!(
                "the template ran past its limit of {} instructions",
                self.limits.fuel
            ))),
            Err(e) => Err(ChatError::Render(format!("{e:#}"))),
        }
    }
}

/// The current UTC time through a strftime subset (`%Y %m %d %e %b %B %H %M
/// %S %y %j %%`), as the `strftime_now` that templates such as Llama 3.1's
/// call to print the date.
fn strftime_now(fmt: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    format_time(secs, fmt)
}

fn format_time(secs: i64, fmt: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = secs.div_euclid(86_400);
    let tod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    const CUM: [i64; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let mut out = String::new();
    let mut it = fmt.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out += &y.to_string(),
            Some('y') => out += &format!("{:02}", y % 100),
            Some('m') => out += &format!("{m:02}"),
            Some('d') => out += &format!("{d:02}"),
            Some('e') => out += &format!("{d:2}"),
            Some('j') => out += &format!("{yday:03}"),
            Some('b') => out += &MONTHS[(m - 1) as usize][..3],
            Some('B') => out += MONTHS[(m - 1) as usize],
            Some('H') => out += &format!("{:02}", tod / 3600),
            Some('M') => out += &format!("{:02}", tod / 60 % 60),
            Some('S') => out += &format!("{:02}", tod % 60),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{format_time, without_generation_blocks};

    #[test]
    fn generation_tags_become_if_blocks_and_odd_tags_stay() {
        assert_eq!(
            without_generation_blocks("a{%- generation +%}b{% endgeneration -%}c"),
            "a{%- if true +%}b{% endif -%}c"
        );
        for odd in [
            "{%-%}", "{%+%}", "{%%}", "{%- -%}", "{% x", "x %}", "{%}", "a{%}b%}",
        ] {
            assert_eq!(without_generation_blocks(odd), odd);
        }
    }

    #[test]
    fn dates_format_as_strftime() {
        // 2024-07-23 12:34:56 UTC.
        assert_eq!(format_time(1_721_738_096, "%d %b %Y"), "23 Jul 2024");
        assert_eq!(
            format_time(1_721_738_096, "%H:%M:%S %j %B"),
            "12:34:56 205 July"
        );
        assert_eq!(format_time(951_782_400, "%Y-%m-%d"), "2000-02-29");
    }
}

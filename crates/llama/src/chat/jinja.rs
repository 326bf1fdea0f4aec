//! Rendering of a model's Jinja chat template (`tokenizer.chat_template`)
//! with minijinja, given the variables Hugging Face templates read.

use minijinja::value::Value;
use minijinja::{Environment, Error, ErrorKind};

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
}

const NAME: &str = "chat_template";

impl JinjaTemplate {
    /// Compiles `source`. Blocks are trimmed as `transformers` compiles chat
    /// templates (`trim_blocks`, `lstrip_blocks`), and Python string methods
    /// (`strip`, `startswith`, ...) work on values as the templates expect.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| -> String {
            strftime_now(&fmt)
        });
        env.add_template_owned(NAME, source.to_string())
            .map_err(|e| ChatError::Template(format!("{e:#}")))?;
        let mut t = Self {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            supports_system: true,
        };
        const PROBE: &str = "<system probe 7f3a>";
        let probe = [Message::new("system", PROBE), Message::new("user", "u")];
        t.supports_system = t
            .render_raw(&probe, false, None)
            .is_ok_and(|out| out.contains(PROBE));
        Ok(t)
    }

    /// Renders `messages` (and `tools` when given) with
    /// `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, ChatError> {
        if self.supports_system {
            return self.render_raw(messages, add_generation_prompt, tools);
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
                merged.push(Message::new("user", format!("{s}\n{}", m.content)));
            } else {
                merged.push(m.clone());
            }
        }
        if let Some(s) = system {
            merged.push(Message::new("user", s));
        }
        self.render_raw(&merged, add_generation_prompt, tools)
    }

    fn render_raw(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, ChatError> {
        let tmpl = self
            .env
            .get_template(NAME)
            .map_err(|e| ChatError::Template(format!("{e:#}")))?;
        let msgs: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| serde_json::json!({ "role": m.role, "content": m.content }))
            .collect();
        let ctx = minijinja::context! {
            messages => Value::from_serialize(&msgs),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.clone(),
            eos_token => self.eos_token.clone(),
            tools => tools.map(Value::from_serialize),
        };
        tmpl.render(ctx)
            .map_err(|e| ChatError::Render(format!("{e:#}")))
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
    use super::format_time;

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

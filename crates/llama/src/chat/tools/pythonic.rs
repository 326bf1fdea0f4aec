//! LFM2's calls: a Python list of calls between `<|tool_call_start|>` and
//! `<|tool_call_end|>`, `[name(key=value, ...), ...]`, after any content.
//! Names may be dotted (`Calendar.create_event`); values are Python
//! literals (strings in either quote with their escapes, numbers,
//! `True`/`False`/`None`, lists, tuples, dicts), JSON's `true`, `false`
//! and `null` too. Arguments become a JSON object in the order written.

use serde_json::{Map, Number, Value};

use super::parser::{interleaved, CallParse};
use super::{ParsedMessage, ToolCall};

pub(crate) const OPEN: &str = "<|tool_call_start|>";
pub(crate) const CLOSE: &str = "<|tool_call_end|>";

pub(crate) fn parse(text: &str, partial: bool, out: &mut ParsedMessage) {
    interleaved(text, partial, &[OPEN], out, |_, after, partial| {
        call_list(after, partial)
    });
}

/// Why a read stopped: the text ended (a reply still streaming may go on),
/// or it is not a call list.
#[derive(Debug, PartialEq)]
enum Stop {
    End,
    Bad,
}

type Read<T> = Result<T, Stop>;

/// A cursor over the text after the opening marker.
struct Cur<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Cur<'a> {
    fn rest(&self) -> &'a str {
        &self.s[self.i..]
    }

    fn ws(&mut self) {
        let r = self.rest();
        self.i += r.len() - r.trim_start().len();
    }

    fn peek(&self) -> Read<char> {
        self.rest().chars().next().ok_or(Stop::End)
    }

    /// Takes `c` after whitespace.
    fn expect(&mut self, c: char) -> Read<()> {
        self.ws();
        if self.peek()? == c {
            self.i += c.len_utf8();
            Ok(())
        } else {
            Err(Stop::Bad)
        }
    }

    /// A name: identifier characters and dots.
    fn name(&mut self) -> Read<&'a str> {
        self.ws();
        let r = self.rest();
        let n = r
            .char_indices()
            .find(|&(_, c)| !(c.is_alphanumeric() || c == '_' || c == '.'))
            .map_or(r.len(), |(k, _)| k);
        if n == r.len() {
            return Err(Stop::End);
        }
        if n == 0 || r.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(Stop::Bad);
        }
        self.i += n;
        Ok(&r[..n])
    }

    fn value(&mut self) -> Read<Value> {
        self.ws();
        match self.peek()? {
            '"' | '\'' => self.string().map(Value::String),
            '[' => self.seq('[', ']').map(Value::Array),
            '(' => self.seq('(', ')').map(Value::Array),
            '{' => self.dict(),
            c if c == '-' || c == '+' || c == '.' || c.is_ascii_digit() => self.number(),
            _ => {
                let w = self.name()?;
                let v = match w {
                    "True" | "true" => Value::Bool(true),
                    "False" | "false" => Value::Bool(false),
                    "None" | "null" => Value::Null,
                    _ => return Err(Stop::Bad),
                };
                Ok(v)
            }
        }
    }

    fn string(&mut self) -> Read<String> {
        let q = self.peek()?;
        self.i += 1;
        let mut out = String::new();
        let mut chars = self.rest().char_indices();
        while let Some((k, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, e) = chars.next().ok_or(Stop::End)?;
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        '0' => out.push('\0'),
                        'u' => {
                            let hex: String = chars.by_ref().take(4).map(|(_, h)| h).collect();
                            if hex.len() < 4 {
                                return Err(Stop::End);
                            }
                            let code = u32::from_str_radix(&hex, 16).map_err(|_| Stop::Bad)?;
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        '\n' => {}
                        other => {
                            // Python keeps the backslash of an unknown
                            // escape; quotes and backslashes lose it.
                            if !matches!(other, '\\' | '\'' | '"') {
                                out.push('\\');
                            }
                            out.push(other);
                        }
                    }
                }
                c if c == q => {
                    self.i += k + 1;
                    return Ok(out);
                }
                c => out.push(c),
            }
        }
        Err(Stop::End)
    }

    fn number(&mut self) -> Read<Value> {
        let r = self.rest();
        let n = r
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.')))
            .map_or(r.len(), |(k, _)| k);
        if n == r.len() {
            return Err(Stop::End);
        }
        let text = r[..n].trim_start_matches('+');
        self.i += n;
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        let f: f64 = text.parse().map_err(|_| Stop::Bad)?;
        Number::from_f64(f).map(Value::Number).ok_or(Stop::Bad)
    }

    /// Items between `open` and `close`, comma separated (a trailing comma
    /// allowed).
    fn seq(&mut self, open: char, close: char) -> Read<Vec<Value>> {
        self.expect(open)?;
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.peek()? == close {
                self.i += 1;
                return Ok(items);
            }
            items.push(self.value()?);
            self.ws();
            match self.peek()? {
                ',' => self.i += 1,
                c if c == close => {}
                _ => return Err(Stop::Bad),
            }
        }
    }

    fn dict(&mut self) -> Read<Value> {
        self.expect('{')?;
        let mut map = Map::new();
        loop {
            self.ws();
            if self.peek()? == '}' {
                self.i += 1;
                return Ok(Value::Object(map));
            }
            let key = match self.value()? {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
                _ => return Err(Stop::Bad),
            };
            self.expect(':')?;
            let v = self.value()?;
            map.insert(key, v);
            self.ws();
            match self.peek()? {
                ',' => self.i += 1,
                '}' => {}
                _ => return Err(Stop::Bad),
            }
        }
    }

    /// One call: `name(key=value, ...)`.
    fn call(&mut self) -> Read<ToolCall> {
        let name = self.name()?.to_string();
        self.expect('(')?;
        let mut args = Map::new();
        loop {
            self.ws();
            if self.peek()? == ')' {
                self.i += 1;
                break;
            }
            let key = self.name()?.to_string();
            self.expect('=')?;
            let v = self.value()?;
            args.insert(key, v);
            self.ws();
            match self.peek()? {
                ',' => self.i += 1,
                ')' => {}
                _ => return Err(Stop::Bad),
            }
        }
        Ok(ToolCall {
            name,
            arguments: Value::Object(args).to_string(),
            id: String::new(),
        })
    }
}

/// The list of calls after the opening marker, through the closing one.
/// While streaming, the calls whole so far show; a call shows once its
/// closing parenthesis has come.
fn call_list(after: &str, partial: bool) -> CallParse {
    let mut c = Cur { s: after, i: 0 };
    let mut calls = Vec::new();
    let stop = |calls: Vec<ToolCall>, why: Stop| match why {
        Stop::End if partial => CallParse::Partial(calls),
        _ => CallParse::Invalid,
    };
    if let Err(why) = c.expect('[') {
        return stop(calls, why);
    }
    loop {
        c.ws();
        match c.peek() {
            Err(why) => return stop(calls, why),
            Ok(']') => {
                c.i += 1;
                break;
            }
            Ok(',') if !calls.is_empty() => c.i += 1,
            Ok(_) => match c.call() {
                Ok(call) => calls.push(call),
                Err(why) => return stop(calls, why),
            },
        }
    }
    let end = c.i;
    c.ws();
    let rest = c.rest();
    if rest.starts_with(CLOSE) {
        CallParse::Done(calls, c.i + CLOSE.len())
    } else if partial && (rest.is_empty() || super::scan::is_marker_prefix(rest, CLOSE)) {
        CallParse::Partial(calls)
    } else {
        CallParse::Done(calls, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ParsedMessage {
        let mut m = ParsedMessage::default();
        parse(text, false, &mut m);
        m
    }

    fn one(text: &str) -> (String, String) {
        let m = parsed(text);
        assert_eq!(m.tool_calls.len(), 1, "{text}: {m:?}");
        let c = &m.tool_calls[0];
        (c.name.clone(), c.arguments.clone())
    }

    fn json(s: &str) -> String {
        serde_json::from_str::<Value>(s).unwrap().to_string()
    }

    /// The examples of llama.cpp's LFM2 parser tests.
    #[test]
    fn llama_cpp_examples() {
        let m = parsed("Hello, world!\nWhat's up?");
        assert_eq!(m.content, "Hello, world!\nWhat's up?");
        assert!(m.tool_calls.is_empty());
        let w = |s| format!("<|tool_call_start|>[{s}]<|tool_call_end|>");
        let cases = [
            (
                "special_function(arg1=1)",
                "special_function",
                r#"{"arg1": 1}"#,
            ),
            (
                r#"get_time(city="XYZCITY")"#,
                "get_time",
                r#"{"city":"XYZCITY"}"#,
            ),
            ("toggle(enabled=True)", "toggle", r#"{"enabled": true}"#),
            (
                "set_nullable(value=None)",
                "set_nullable",
                r#"{"value": null}"#,
            ),
            (
                r#"set_config(config={"enabled": True, "count": 3})"#,
                "set_config",
                r#"{"config": {"enabled": true, "count": 3}}"#,
            ),
            (
                r#"set_config(config={"enabled": true, "note": null})"#,
                "set_config",
                r#"{"config": {"enabled": true, "note": null}}"#,
            ),
            (
                r#"Calendar.create_event(title="demo", participants=["Alice", "Bob"], metadata={"priority": "high", "reminder": true})"#,
                "Calendar.create_event",
                r#"{"title": "demo", "participants": ["Alice", "Bob"], "metadata": {"priority": "high", "reminder": true}}"#,
            ),
            (
                r#"python(code="def hello():\n    print('hey')")"#,
                "python",
                r#"{"code": "def hello():\n    print('hey')"}"#,
            ),
            (
                r#"python(code="First line\nSecond line\tindented")"#,
                "python",
                r#"{"code": "First line\nSecond line\tindented"}"#,
            ),
            (
                r#"python(code="print(\"hi\")")"#,
                "python",
                r#"{"code": "print(\"hi\")"}"#,
            ),
        ];
        for (call, name, args) in cases {
            assert_eq!(one(&w(call)), (name.to_string(), json(args)), "{call}");
        }
        let md =
            "Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org).";
        let m = parsed(md);
        assert_eq!(m.content, md);
        assert!(m.tool_calls.is_empty());
        let m = parsed(
            "Let me check the time.<|tool_call_start|>[get_time(city=\"Paris\")]<|tool_call_end|>",
        );
        assert_eq!(m.content, "Let me check the time.");
        assert_eq!(m.tool_calls[0].arguments, json(r#"{"city": "Paris"}"#));
        let m = parsed(
            "<|tool_call_start|>[special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)]<|tool_call_end|>",
        );
        let got: Vec<(&str, &str)> = m
            .tool_calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("special_function", r#"{"arg1":1}"#),
                ("special_function_with_opt", r#"{"arg1":1,"arg2":2}"#)
            ]
        );
    }

    #[test]
    fn python_literals_become_json() {
        let (_, a) = one(
            "<|tool_call_start|>[f(a='single \\'q\\'', b=-2.5, c=(1, 2), d=[], e={'k': None}, f=1e3)]<|tool_call_end|>",
        );
        assert_eq!(
            a,
            json(
                r#"{"a": "single 'q'", "b": -2.5, "c": [1, 2], "d": [], "e": {"k": null}, "f": 1000.0}"#
            )
        );
        let (n, a) = one("<|tool_call_start|>[ noargs() ]<|tool_call_end|>");
        assert_eq!((n.as_str(), a.as_str()), ("noargs", "{}"));
    }

    #[test]
    fn what_is_not_a_call_stays_content() {
        for text in [
            "<|tool_call_start|>not a list<|tool_call_end|>",
            "<|tool_call_start|>[f(x=undefined)]<|tool_call_end|>",
            "<|tool_call_start|>[f(1)]<|tool_call_end|>",
            "<|tool_call_start|>[f(x=1]",
        ] {
            let m = parsed(text);
            assert!(m.tool_calls.is_empty(), "{text}: {m:?}");
            assert!(m.content.contains("<|tool_call_start|>"), "{text}: {m:?}");
        }
    }

    #[test]
    fn streaming_shows_whole_calls_and_holds_markers_back() {
        let full = "Sure.<|tool_call_start|>[a(x=\"1\"), b(y=[1, 2])]<|tool_call_end|>";
        let mut last_calls = 0;
        for cut in (0..=full.len()).filter(|&k| full.is_char_boundary(k)) {
            let mut m = ParsedMessage::default();
            parse(&full[..cut], true, &mut m);
            assert!(!m.content.contains('<'), "{cut}: {m:?}");
            assert!(m.tool_calls.len() >= last_calls, "{cut}: calls went back");
            last_calls = m.tool_calls.len();
        }
        assert_eq!(last_calls, 2);
    }

    /// Mutated and cut call lists, streamed or not, never panic: each
    /// parse ends with some content and well-formed calls or none.
    #[test]
    fn hostile_call_lists_do_not_panic() {
        let seeds = [
            "<|tool_call_start|>[get_weather(city=\"Paris\", days=3)]<|tool_call_end|>",
            "<|tool_call_start|>[a.b(x=[1, 2.5, {'k': (True, None)}]), c()]<|tool_call_end|>done",
        ];
        let alphabet: Vec<char> = "()[]{}=,'\"\\.:_ aZ09-+eE<|>\u{e9}\u{1F600}"
            .chars()
            .collect();
        let mut rng = test_support::Rng(7);
        for i in 0..20_000 {
            let mut text: Vec<char> = seeds[i % seeds.len()].chars().collect();
            for _ in 0..rng.range(1, 6) {
                let at = rng.below(text.len() + 1);
                match rng.below(3) {
                    0 if at < text.len() => {
                        text.remove(at);
                    }
                    1 if at < text.len() => text[at] = alphabet[rng.below(alphabet.len())],
                    _ => text.insert(at, alphabet[rng.below(alphabet.len())]),
                }
            }
            let cut = rng.below(text.len() + 1);
            let text: String = text[..cut].iter().collect();
            for partial in [false, true] {
                let mut m = ParsedMessage::default();
                parse(&text, partial, &mut m);
                for c in &m.tool_calls {
                    if !partial {
                        assert!(
                            serde_json::from_str::<serde_json::Value>(&c.arguments).is_ok(),
                            "{text:?}: {c:?}"
                        );
                    }
                }
            }
        }
    }
}

//! Chat templates against llama.cpp's own test vectors
//! (`testdata/llama_cpp_cases.json`: templates of real models, the
//! conversation below, and llama.cpp's renderings in code and with Jinja).

use super::*;

fn conversation() -> Vec<Message> {
    [
        ("system", "You are a helpful assistant"),
        ("user", "Hello"),
        ("assistant", "Hi there"),
        ("user", "Who are you"),
        ("assistant", "   I am an assistant   "),
        ("user", "Another question"),
    ]
    .into_iter()
    .map(|(r, c)| Message::new(r, c))
    .collect()
}

struct Case {
    name: String,
    template: String,
    expected: String,
    expected_jinja: String,
    bos: String,
    eos: String,
    jinja: bool,
}

fn cases() -> Vec<Case> {
    let text = include_str!("testdata/llama_cpp_cases.json");
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let s = |c: &serde_json::Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| Case {
            name: s(c, "name"),
            template: s(c, "template_str"),
            expected: s(c, "expected_output"),
            expected_jinja: s(c, "expected_output_jinja"),
            bos: s(c, "bos_token"),
            eos: s(c, "eos_token"),
            jinja: c["supported_with_jinja"].as_bool().unwrap_or(true),
        })
        .collect()
}

#[test]
fn builtin_templates_detect_and_render_as_llama_cpp() {
    let conv = conversation();
    let mut rendered = 0;
    let mut failures = Vec::new();
    for c in cases() {
        match Builtin::detect(&c.template) {
            Detected::Builtin(b) => {
                rendered += 1;
                let out = b.apply(&conv, true);
                if out != c.expected {
                    failures.push(format!(
                        "{} ({}):\n want {:?}\n got  {:?}",
                        c.name,
                        b.name(),
                        c.expected,
                        out
                    ));
                }
            }
            Detected::Other(_) => {}
            Detected::Unknown => failures.push(format!("{}: not recognised", c.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(rendered >= 20, "only {rendered} cases rendered in code");
}

#[test]
fn jinja_templates_render_as_llama_cpp() {
    let conv = conversation();
    let mut failures = Vec::new();
    let mut n = 0;
    for c in cases().into_iter().filter(|c| c.jinja) {
        n += 1;
        let want = if c.expected_jinja.is_empty() {
            &c.expected
        } else {
            &c.expected_jinja
        };
        let got = JinjaTemplate::new(&c.template, &c.bos, &c.eos)
            .and_then(|t| t.render(&conv, true, None, None));
        match got {
            Ok(out) if &out == want => {}
            Ok(out) => failures.push(format!("{}:\n want {want:?}\n got  {out:?}", c.name)),
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn names_round_trip_and_unknown_text_is_reported() {
    for (name, b) in NAMES {
        assert_eq!(Builtin::from_name(name), Some(*b));
        assert_eq!(b.name(), *name);
        assert_eq!(Builtin::detect(name), Detected::Builtin(*b));
    }
    assert_eq!(Builtin::detect("{{ messages }}"), Detected::Unknown);
    assert_eq!(
        Builtin::detect("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>"),
        Detected::Other("command-r")
    );
}

#[test]
fn raise_exception_and_syntax_errors_are_errors() {
    let t = JinjaTemplate::new("{{ raise_exception('roles must alternate') }}", "", "").unwrap();
    let e = t.render(&conversation(), true, None, None).unwrap_err();
    assert!(e.to_string().contains("roles must alternate"), "{e}");
    assert!(matches!(
        JinjaTemplate::new("{% for m in messages %}", "", ""),
        Err(ChatError::Template(_))
    ));
}

#[test]
fn python_string_methods_work() {
    let t = JinjaTemplate::new(
        "{% for m in messages %}{{ m['content'].strip() }}{% if m.role.startswith('sys') %}!{% endif %}{{ m.role.upper() }}|{% endfor %}",
        "",
        "",
    )
    .unwrap();
    let out = t.render(&conversation()[..1], false, None, None).unwrap();
    assert_eq!(out, "You are a helpful assistant!SYSTEM|");
}

fn render(src: &str, msgs: &[Message], tools: Option<&serde_json::Value>) -> String {
    JinjaTemplate::new(src, "", "")
        .unwrap()
        .render(msgs, true, tools, None)
        .unwrap()
}

#[test]
fn generation_blocks_and_loop_controls_render() {
    let msgs = [Message::new("user", "a"), Message::new("assistant", "b")];
    let gen = "{% for m in messages %}x {%- generation -%} {{ m.content }} {%- endgeneration -%} y{% endfor %}";
    assert_eq!(render(gen, &msgs, None), "xayxby");
    let brk = "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}";
    assert_eq!(render(brk, &msgs, None), "a");
    let cont = "{% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.content }}{% endfor %}";
    assert_eq!(render(cont, &msgs, None), "b");
}

#[test]
fn thinking_is_on_by_default_where_a_template_has_a_reasoning_block() {
    let user = [Message::new("user", "u")];
    let think = "{% if enable_thinking %}<think>{% else %}<think></think>{% endif %}";
    let t = JinjaTemplate::new(think, "", "").unwrap();
    assert!(t.supports_thinking);
    assert_eq!(t.render(&user, true, None, None).unwrap(), "<think>");
    let mut off = Kwargs::new();
    off.insert("enable_thinking".into(), false.into());
    assert_eq!(
        t.render(&user, true, None, Some(&off)).unwrap(),
        "<think></think>"
    );
    // A switch that changes other text is not a reasoning block: off.
    let other = "Deliberation: {% if enable_thinking %}enabled{% else %}disabled{% endif %}";
    let t = JinjaTemplate::new(other, "", "").unwrap();
    assert!(!t.supports_thinking);
    assert_eq!(
        t.render(&user, true, None, None).unwrap(),
        "Deliberation: disabled"
    );
}

#[test]
fn tools_dates_and_lengths_as_llama_cpp_gives_them() {
    let user = [Message::new("user", "u")];
    // No tools, or an empty list, leave `tools` undefined; its length is 0.
    let src =
        "{% if tools is defined %}T{{ tools|length }}{% else %}-{{ tools|length }}{% endif %}";
    assert_eq!(render(src, &user, None), "-0");
    assert_eq!(render(src, &user, Some(&serde_json::json!([]))), "-0");
    assert_eq!(
        render(src, &user, Some(&serde_json::json!([{"a": 1}]))),
        "T1"
    );
    let dates = render("{{ date_string }}|{{ datetime }}", &user, None);
    let (d, dt) = dates.split_once('|').unwrap();
    // "28 Nov 2026" and "Nov 28 2026".
    let p: Vec<&str> = d.split(' ').collect();
    assert_eq!(
        (p.len(), p[0].len(), p[1].len(), p[2].len()),
        (3, 2, 3, 4),
        "{dates}"
    );
    assert_eq!(dt, format!("{} {} {}", p[1], p[0], p[2]));
}

/// LFM2's template (`templates/LFM2-8B-A1B.jinja` of the fixtures) as
/// llama.cpp renders it (it applies the template as it is): the system
/// prompt, then the tool list as JSON between its markers, tool results
/// between theirs, BOS first; no system turn without a system prompt or
/// tools.
#[test]
fn lfm2_template_renders_as_llama_cpp() {
    let Some(dir) = test_support::fixtures_with("templates") else {
        return;
    };
    let src = std::fs::read_to_string(dir.join("templates/LFM2-8B-A1B.jinja")).unwrap();
    let t = JinjaTemplate::new(&src, "<|startoftext|>", "<|im_end|>").unwrap();
    let tools = serde_json::json!([
        {"type": "function", "function": {"name": "get_time", "description": "Time",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]}}},
        {"type": "function", "function": {"name": "noop", "parameters": {}}},
    ]);
    let call = "<|tool_call_start|>[get_time(city=\"Paris\")]<|tool_call_end|>";
    let msgs = [
        Message::new("system", "Be brief."),
        Message::new("user", "Time in Paris?"),
        Message::new("assistant", call),
        Message::new("tool", "12:00"),
    ];
    let out = t.render(&msgs, true, Some(&tools), None).unwrap();
    let want = concat!(
        "<|startoftext|><|im_start|>system\nBe brief.\nList of tools: <|tool_list_start|>[",
        r#"{"type": "function", "function": {"name": "get_time", "description": "Time", "#,
        r#""parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "#,
        r#""required": ["city"]}}}, {"type": "function", "function": {"name": "noop", "#,
        r#""parameters": {}}}"#,
        "]<|tool_list_end|><|im_end|>\n",
        "<|im_start|>user\nTime in Paris?<|im_end|>\n",
        "<|im_start|>assistant\n<|tool_call_start|>[get_time(city=\"Paris\")]<|tool_call_end|><|im_end|>\n",
        "<|im_start|>tool\n<|tool_response_start|>12:00<|tool_response_end|><|im_end|>\n",
        "<|im_start|>assistant\n",
    );
    assert_eq!(out, want);
    // Tools without a system prompt: the list alone; no tools and no
    // system prompt: no system turn; no generation prompt when not asked.
    let out = t.render(&msgs[1..2], true, Some(&tools), None).unwrap();
    assert!(
        out.starts_with("<|startoftext|><|im_start|>system\nList of tools: <|tool_list_start|>[{"),
        "{out}"
    );
    let out = t.render(&msgs[1..3], false, None, None).unwrap();
    assert_eq!(
        out,
        format!(
            "<|startoftext|><|im_start|>user\nTime in Paris?<|im_end|>\n\
             <|im_start|>assistant\n{call}<|im_end|>\n"
        )
    );
}

//! Tool calls over HTTP on the stories260K fixture under real models'
//! chat templates (`--chat-template-file`): with random weights the model
//! calls nothing by itself, so `tool_choice` `required` or a named
//! function (a grammar from the first token) makes it write calls, which
//! come back as `tool_calls`, whole and streamed; bad tool fields are 400s
//! naming the field, and the server keeps serving.

mod common;

use common::{fixtures, get, post, start};
use llama_server::Server;
use serde_json::{json, Value};

async fn start_with(template: &str, flags: &str) -> Option<Server> {
    let dir = fixtures()?;
    let t = dir.join("templates").join(template);
    start(
        "stories260K.gguf",
        &format!("-c 4096 --chat-template-file {} {flags}", t.display()),
    )
    .await
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 6},
                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "required": ["city", "days"]}}},
        {"type": "function", "function": {"name": "get_time", "description": "The time.",
            "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["utc", "cet"]}},
                "required": ["zone"]}}}
    ])
}

fn request(choice: Value, stream: bool) -> Value {
    json!({
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": tools(),
        "tool_choice": choice,
        "max_tokens": 400,
        "temperature": 0,
        "seed": 3,
        "stream": stream,
    })
}

/// The calls of a streamed reply, put together from its deltas, with
/// the finish reason.
fn streamed_calls(events: &[String]) -> (Vec<Value>, String, String) {
    let mut calls: Vec<Value> = Vec::new();
    let mut finish = String::new();
    let mut content = String::new();
    for e in events {
        if e == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(e).unwrap();
        let Some(c) = v["choices"].get(0) else {
            continue;
        };
        if let Some(f) = c["finish_reason"].as_str() {
            finish = f.to_string();
        }
        content += c["delta"]["content"].as_str().unwrap_or_default();
        for d in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = d["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                // A call's first delta carries its id, type and name.
                assert!(d["id"].is_string() && d["type"] == "function", "{d}");
                assert!(d["function"]["name"].is_string(), "{d}");
                calls.push(json!({"id": d["id"], "name": d["function"]["name"], "arguments": ""}));
            } else {
                assert!(d.get("id").is_none(), "{d}");
            }
            let a = calls[i]["arguments"].as_str().unwrap().to_string()
                + d["function"]["arguments"].as_str().unwrap_or_default();
            calls[i]["arguments"] = a.into();
        }
    }
    (calls, finish, content)
}

/// A call of a listed function, with arguments under its schema.
fn check_call(name: &str, args: &str) {
    let a: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{e}: {args}"));
    match name {
        "get_weather" => {
            let city = a["city"].as_str().unwrap();
            assert!(city.chars().count() <= 6, "{a}");
            assert!((1..=7).contains(&a["days"].as_i64().unwrap()), "{a}");
        }
        "get_time" => assert!(["utc", "cet"].contains(&a["zone"].as_str().unwrap()), "{a}"),
        o => panic!("unlisted function {o}"),
    }
}

async fn required_calls_come_back(template: &str) {
    let Some(srv) = start_with(template, "").await else {
        return;
    };
    let v = post(
        srv.addr,
        "/v1/chat/completions",
        &request(json!("required"), false),
    )
    .await;
    assert_eq!(v.status, 200, "{}", v.text());
    let v = v.json();
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{template}: {v}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{v}");
    let c = &calls[0];
    assert_eq!(c["type"], "function");
    assert!(c["id"].as_str().is_some_and(|id| !id.is_empty()));
    check_call(
        c["function"]["name"].as_str().unwrap(),
        c["function"]["arguments"].as_str().unwrap(),
    );

    // Streamed, the same call (ids are drawn anew).
    let ev = post(
        srv.addr,
        "/v1/chat/completions",
        &request(json!("required"), true),
    )
    .await
    .events();
    assert_eq!(ev.last().unwrap(), "[DONE]");
    let (scalls, finish, _) = streamed_calls(&ev);
    assert_eq!(finish, "tool_calls");
    assert_eq!(scalls.len(), 1);
    assert_eq!(scalls[0]["name"], c["function"]["name"]);
    assert_eq!(scalls[0]["arguments"], c["function"]["arguments"]);

    // A named function.
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    let v = post(srv.addr, "/v1/chat/completions", &request(named, false))
        .await
        .json();
    let c = &v["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(c["function"]["name"], "get_time", "{v}");
    check_call("get_time", c["function"]["arguments"].as_str().unwrap());

    // `none`: text only, no calls read.
    let v = post(
        srv.addr,
        "/v1/chat/completions",
        &request(json!("none"), false),
    )
    .await
    .json();
    assert!(
        v["choices"][0]["message"].get("tool_calls").is_none(),
        "{v}"
    );
    assert_ne!(v["choices"][0]["finish_reason"], "tool_calls");
    srv.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hermes_qwen3_calls() {
    required_calls_come_back("Qwen-Qwen3-0.6B.jinja").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mistral_nemo_calls() {
    required_calls_come_back("mistralai-Mistral-Nemo-Instruct-2407.jinja").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_3_1_calls() {
    required_calls_come_back("meta-llama-Llama-3.1-8B-Instruct.jinja").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generic_calls_for_a_template_without_tools() {
    required_calls_come_back("google-gemma-2-2b-it.jinja").await;
}

/// Every other template of the fixtures with a tool-call format.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_every_other_format() {
    for t in [
        "Qwen3.5-4B.jinja",
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "deepseek-ai-DeepSeek-V3.1.jinja",
        "meetkai-functionary-medium-v3.1.jinja",
        "meetkai-functionary-medium-v3.2.jinja",
        "openai-gpt-oss-120b.jinja",
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        "ibm-granite-granite-4.0.jinja",
        "LFM2-8B-A1B.jinja",
        "microsoft-Phi-3.5-mini-instruct.jinja",
    ] {
        required_calls_come_back(t).await;
    }
}

/// Calls and tool results of earlier turns go back through the template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_trip_renders_calls_and_results() {
    let Some(srv) = start_with("Qwen-Qwen3-0.6B.jinja", "").await else {
        return;
    };
    let messages = json!([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
    ]);
    let p = post(
        srv.addr,
        "/apply-template",
        &json!({"messages": messages, "tools": tools()}),
    )
    .await;
    assert_eq!(p.status, 200, "{}", p.text());
    let prompt = p.json()["prompt"].as_str().unwrap().to_string();
    assert!(prompt.contains("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 1}}\n</tool_call>"), "{prompt}");
    // Tools as llama.cpp shows them: members in the order given.
    assert!(prompt.contains("{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather of a city.\""), "{prompt}");
    assert!(
        prompt.contains("<tool_response>\nSunny, 21 C\n</tool_response>"),
        "{prompt}"
    );
    let body = json!({"messages": messages, "tools": tools(), "max_tokens": 8, "temperature": 0});
    let v = post(srv.addr, "/v1/chat/completions", &body).await;
    assert_eq!(v.status, 200, "{}", v.text());
    srv.stop().await.unwrap();
}

fn error_param(r: &common::Reply) -> String {
    let v = r.json();
    v["error"]["param"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_fields_are_400s_naming_them() {
    let Some(srv) = start_with("mistralai-Mistral-Nemo-Instruct-2407.jinja", "").await else {
        return;
    };
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            json!({"messages": user, "tools": [{"type": "function", "function": {"description": "x"}}]}),
            "tools[0].function.name",
        ),
        (json!({"messages": user, "tools": "get_weather"}), "tools"),
        (
            json!({"messages": user, "tools": [{"type": "function"}]}),
            "tools[0].function",
        ),
        (
            json!({"messages": user, "tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}),
            "tools[0].function.parameters",
        ),
        (
            json!({"messages": user, "tools": tools(), "tool_choice": {"type": "function", "function": {"name": "missing"}}}),
            "tool_choice",
        ),
        (
            json!({"messages": user, "tools": tools(), "tool_choice": "always"}),
            "tool_choice",
        ),
        (
            json!({"messages": user, "tools": tools(), "reasoning_format": "think"}),
            "reasoning_format",
        ),
        (
            json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}, {"role": "tool", "content": "x"}], "tools": tools()}),
            "messages[2].tool_call_id",
        ),
        (
            json!({"messages": [{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}]}),
            "messages[0].tool_calls[0].function.name",
        ),
        (
            json!({"messages": user, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string", "format": "no-such-format"}}}}}], "tool_choice": "required"}),
            "tools",
        ),
    ];
    for (body, param) in cases {
        let r = post(srv.addr, "/v1/chat/completions", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        assert_eq!(error_param(&r), param, "{body}: {}", r.text());
    }
    assert_eq!(get(srv.addr, "/health").await.status, 200);
    let ok = post(
        srv.addr,
        "/v1/chat/completions",
        &json!({"messages": user, "max_tokens": 4}),
    )
    .await;
    assert_eq!(ok.status, 200);
    srv.stop().await.unwrap();
}

/// Without Jinja there is no template to show tools to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_need_jinja() {
    let Some(srv) = start(
        "stories260K.gguf",
        "-c 256 --no-jinja --chat-template chatml",
    )
    .await
    else {
        return;
    };
    let body = json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools()});
    let r = post(srv.addr, "/v1/chat/completions", &body).await;
    assert_eq!(
        (r.status, error_param(&r).as_str()),
        (400, "tools"),
        "{}",
        r.text()
    );
    srv.stop().await.unwrap();
}

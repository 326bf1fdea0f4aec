//! The interactive chat loop of `llama-cli -cnv`, driven through its input
//! and output streams: each turn's greedy reply equals a fresh decode of
//! the same tokens, `/exit` and end of input quit, and a conversation that
//! outgrows the context stops with a message instead of failing.

mod common;

use common::fixtures;
use llama::chat::{conversation, ChatTemplate, Message};
use llama::sampling::{SamplerChain, SamplingParams};
use llama::{Batch, Context, ContextParams, Model, ModelParams};
use test_support::greedy_token;

const N_PREDICT: usize = 8;

fn load(fx: &std::path::Path) -> Model {
    Model::load(fx.join("models/stories260K.gguf"), &ModelParams::default()).expect("load")
}

fn ctx_params(n_ctx: usize) -> ContextParams {
    ContextParams {
        n_ctx,
        n_threads: 2,
        n_threads_batch: 2,
        ..ContextParams::default()
    }
}

fn greedy(model: &Model) -> SamplerChain {
    let params = SamplingParams {
        temp: 0.0,
        ..SamplingParams::default()
    };
    SamplerChain::from_params(&params, model.vocab.n_tokens())
}

/// Runs the loop on `input`; returns what it printed.
fn chat(model: &Model, n_ctx: usize, input: &str) -> String {
    let mut ctx = Context::new(model, ctx_params(n_ctx)).expect("context");
    let template = ChatTemplate::new(None, Some("chatml"), false, &model.vocab).expect("template");
    let mut sampler = greedy(model);
    let mut out = Vec::new();
    conversation::run(
        &mut ctx,
        &template,
        &mut sampler,
        None,
        N_PREDICT as i64,
        &mut input.as_bytes(),
        &mut out,
    )
    .expect("the chat loop runs");
    String::from_utf8(out).expect("utf-8 output")
}

/// Greedy continuation of `prompt` in a fresh context: the tokens and text.
fn fresh_reply(model: &Model, prompt: &[i32]) -> (Vec<i32>, String) {
    let mut ctx = Context::new(model, ctx_params(256)).expect("context");
    let mut b = Batch::new();
    for (i, &t) in prompt.iter().enumerate() {
        b.add(t, i as i32, &[0], i + 1 == prompt.len());
    }
    ctx.decode(&b).expect("prompt");
    let (mut toks, mut text) = (Vec::new(), Vec::new());
    for pos in prompt.len()..prompt.len() + N_PREDICT {
        let t = greedy_token(ctx.logits_ith(-1).expect("logits"));
        if model.vocab.is_eog(t) {
            break;
        }
        toks.push(t);
        text.extend_from_slice(&model.vocab.token_to_piece(t, false));
        let mut b = Batch::new();
        b.add(t, pos as i32, &[0], true);
        ctx.decode(&b).expect("token");
    }
    (toks, String::from_utf8_lossy(&text).into_owned())
}

#[test]
fn each_turn_equals_a_fresh_decode_of_the_conversation() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let out = chat(&model, 256, "Hello\nTell me a story\n/exit\n");
    // Prompts "\n> ", each followed by the streamed reply and a newline.
    let turns: Vec<&str> = out.split("\n> ").collect();
    assert_eq!(turns.len(), 4, "two replies then the last prompt: {out:?}");
    assert_eq!(turns[0], "");
    assert_eq!(turns[3], "", "nothing after /exit: {out:?}");
    let reply1 = turns[1].strip_suffix('\n').expect("reply ends a line");
    let reply2 = turns[2].strip_suffix('\n').expect("reply ends a line");

    let template = ChatTemplate::new(None, Some("chatml"), false, &model.vocab).unwrap();
    let mut messages = vec![Message::new("user", "Hello")];
    let text1 = template.apply(&messages, true, None).unwrap();
    let prompt1 = model.vocab.tokenize(&text1, true, true);
    let (toks1, want1) = fresh_reply(&model, &prompt1);
    assert_eq!(reply1, want1, "first reply");

    // The second turn continues the same cells: the first prompt, the
    // reply's own tokens, then only what the new message adds.
    messages.push(Message::new("assistant", reply1));
    messages.push(Message::new("user", "Tell me a story"));
    let text2 = template.apply(&messages, true, None).unwrap();
    let delta = text2
        .strip_prefix(&format!("{text1}{reply1}"))
        .expect("chatml extends the earlier turns");
    let mut prompt2 = prompt1.clone();
    prompt2.extend(&toks1);
    prompt2.extend(model.vocab.tokenize(delta, false, true));
    let (_, want2) = fresh_reply(&model, &prompt2);
    assert_eq!(reply2, want2, "second reply");
    assert!(!reply2.is_empty());
}

#[test]
fn end_of_input_quits_and_empty_lines_are_skipped() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let out = chat(&model, 256, "\n\nHello");
    // Two empty lines give two more prompts, then one reply, then the end.
    assert_eq!(out.matches("\n> ").count(), 4, "{out:?}");
    assert!(out.ends_with("\n> \n"), "{out:?}");
}

#[test]
fn a_full_context_stops_the_chat_with_a_message() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let long = "Once upon a time there was a little dog. ".repeat(100);
    let out = chat(&model, 256, &format!("{long}\n/exit\n"));
    // The loop stops at the message without reading `/exit`.
    assert_eq!(out, "\n> \n[context full: 0 of 256 tokens used]\n");
}

#[test]
fn each_reply_follows_the_grammar_from_its_start() {
    let Some(fx) = fixtures() else { return };
    let model = load(&fx);
    let params = SamplingParams {
        temp: 0.0,
        grammar: "root ::= (\"Yes\" | \"No\") \"!\"".into(),
        ..SamplingParams::default()
    };
    let mut sampler = SamplerChain::from_params_with_vocab(&params, &model.vocab).unwrap();
    let mut ctx = Context::new(&model, ctx_params(256)).expect("context");
    let template = ChatTemplate::new(None, Some("chatml"), false, &model.vocab).unwrap();
    let mut out = Vec::new();
    conversation::run(
        &mut ctx,
        &template,
        &mut sampler,
        None,
        N_PREDICT as i64,
        &mut "Hello\nAre you there?\n/exit\n".as_bytes(),
        &mut out,
    )
    .expect("the chat loop runs");
    let out = String::from_utf8(out).unwrap();
    let turns: Vec<&str> = out.split("\n> ").collect();
    assert_eq!(turns.len(), 4, "{out:?}");
    for reply in &turns[1..3] {
        let reply = reply.strip_suffix('\n').expect("reply ends a line");
        assert!(reply == "Yes!" || reply == "No!", "{out:?}");
    }
}

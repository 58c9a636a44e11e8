//! Reading the routing fields of a chat request body (`model`, `stream`, `rid`, prompt
//! text) three ways: a full `serde_json::Value`, a simd-json borrowed value (which needs a
//! mutable copy of the body: the copy is timed, as the gateway's body is shared `Bytes`),
//! and `proxy::peek` wanting only `model` and `stream`, or everything.
//!
//! Bodies of about 1 KiB, 64 KiB and 1 MiB: most of the size in message content (with the
//! newlines and quotes real chats have, so some strings need unescaping), plus a `tools`
//! array that only has to be skipped.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use simd_json::prelude::*;
use tollgate::pipeline::peek::{peek, Wants};

/// A chat request body of at least `size` bytes.
fn chat_body(size: usize) -> Vec<u8> {
    let sentence = "The gateway reads a few fields of each request and forwards the rest \
                    untouched; the worker parses the body in full. ";
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather",
            "description": "Current weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "search",
            "description": "Search the \"docs\"", "parameters": {"type": "object",
                "properties": {"q": {"type": "string"}, "k": {"type": "integer"}}}}}
    ]);
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    let mut estimate = tools.to_string().len() + 200;
    let mut turn = 0;
    while estimate < size {
        let role = if turn % 2 == 0 { "user" } else { "assistant" };
        let content = if turn % 3 == 2 {
            format!("Quoting \"line {turn}\":\n{}\n", sentence.repeat(4))
        } else {
            sentence.repeat(4)
        };
        let message = json!({"role": role, "content": content});
        estimate += message.to_string().len() + 1;
        messages.push(message);
        turn += 1;
    }
    serde_json::to_vec(&json!({
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "messages": messages,
        "tools": tools,
        "stream": true,
        "max_tokens": 256,
        "temperature": 0.7,
    }))
    .expect("bench body serialises")
}

/// Prompt text from a parsed body, joined as `peek` does (string contents only: the
/// bench bodies have no parts).
fn joined<'v>(messages: impl Iterator<Item = Option<&'v str>>) -> String {
    let mut text = String::new();
    for (i, content) in messages.flatten().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(content);
    }
    text
}

fn serde_value(body: &[u8]) -> (Option<String>, bool, Option<String>, String) {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let text = match v.get("messages").and_then(Value::as_array) {
        Some(messages) => joined(messages.iter().map(|m| m.get("content")?.as_str())),
        None => String::new(),
    };
    (
        v.get("model").and_then(Value::as_str).map(str::to_owned),
        v.get("stream").and_then(Value::as_bool).unwrap_or(false),
        v.get("rid").and_then(Value::as_str).map(str::to_owned),
        text,
    )
}

fn simd_borrowed(body: &[u8]) -> (Option<String>, bool, Option<String>, String) {
    let mut copy = body.to_vec();
    let Ok(v) = simd_json::to_borrowed_value(&mut copy) else {
        return (None, false, None, String::new());
    };
    let text = match v.get("messages").and_then(|m| m.as_array()) {
        Some(messages) => joined(messages.iter().map(|m| m.get("content")?.as_str())),
        None => String::new(),
    };
    (
        v.get("model").and_then(|m| m.as_str()).map(str::to_owned),
        v.get("stream").and_then(|s| s.as_bool()).unwrap_or(false),
        v.get("rid").and_then(|r| r.as_str()).map(str::to_owned),
        text,
    )
}

fn bench(c: &mut Criterion) {
    let routing = Wants {
        model: true,
        stream: true,
        ..Wants::default()
    };
    for (name, size) in [("1k", 1 << 10), ("64k", 64 << 10), ("1m", 1 << 20)] {
        let body = chat_body(size);
        eprintln!("json_peek/{name}: a body of {} bytes", body.len());
        let (model, stream, _, text) = serde_value(&body);
        let peeked = peek(&body, Wants::ALL);
        assert_eq!(peeked.model.as_deref(), model.as_deref());
        assert_eq!(peeked.stream, stream);
        assert_eq!(simd_borrowed(&body).3.len(), text.len());
        assert!(peeked
            .text
            .is_some_and(|t| t.len() == text.len().min(256 << 10)));

        let mut group = c.benchmark_group(format!("json_peek/{name}"));
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function("serde_value", |b| b.iter(|| serde_value(black_box(&body))));
        group.bench_function("simd_borrowed", |b| {
            b.iter(|| simd_borrowed(black_box(&body)))
        });
        group.bench_function("peek_model_stream", |b| {
            b.iter(|| peek(black_box(&body), routing))
        });
        group.bench_function("peek_all", |b| {
            b.iter(|| peek(black_box(&body), Wants::ALL))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

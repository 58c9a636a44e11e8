//! The per-request cost of checking a Messages body before routing
//! (`api::messages::check::check`): a short request with tools, a long conversation of
//! content blocks, and the same short request naming a `--model-alias` (the one case that
//! copies the body, to rename the model). A full `serde_json::Value` parse of the same
//! bodies is the yardstick.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use tollgate::api::messages::check::{check, MessagesRoute};

/// A Messages body with `turns` turns after the first, each a few content blocks.
fn body(model: &str, turns: usize) -> Bytes {
    let sentence = "The gateway checks the request and forwards the client's own bytes; \
                    \"quotes\" and\nnewlines included. ";
    let mut messages = vec![json!({"role": "user", "content": sentence.repeat(2)})];
    for turn in 0..turns {
        let id = format!("toolu_{turn:04}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": sentence, "signature": ""},
            {"type": "text", "text": sentence.repeat(3)},
            {"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Paris"}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "18 C, clear"},
            {"type": "text", "text": sentence}]}));
    }
    let request = json!({
        "model": model, "max_tokens": 1024, "temperature": 0.7, "stream": true,
        "system": [{"type": "text", "text": "You are a helpful assistant."}],
        "messages": messages,
        "tools": [{"name": "get_weather", "description": "Current weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}}],
        "tool_choice": {"type": "auto"},
        "metadata": {"user_id": "u-1"},
    });
    Bytes::from(request.to_string())
}

fn bench(c: &mut Criterion) {
    let aliases = [("fast".to_owned(), "claude-like-model".to_owned())];
    let mut group = c.benchmark_group("messages_check");
    for (name, body) in [
        ("short", body("claude-like-model", 0)),
        ("conversation_40_turns", body("claude-like-model", 40)),
        ("short_alias_renamed", body("fast", 0)),
    ] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("check/{name}/{}B", body.len()), |b| {
            b.iter(|| check(MessagesRoute::Create, black_box(body.clone()), &aliases))
        });
        group.bench_function(format!("serde_value/{name}/{}B", body.len()), |b| {
            b.iter(|| serde_json::from_slice::<Value>(black_box(&body)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

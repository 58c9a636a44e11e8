//! The per-request cost of checking a Responses body before routing
//! (`api::responses::check::check`): a ~1 KB request with tools, a ~30 KB conversation (34 rounds) of
//! input items, and the short request naming a `--model-alias` (the one case that copies
//! the body, to rename the model). A full `serde_json::Value` parse of the same bodies is
//! the yardstick.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use tollgate::api::responses::check::check;

/// A Responses body with `turns` rounds of items after the first message, each a message,
/// a function call, its output and the assistant's answer.
fn body(model: &str, turns: usize) -> Vec<u8> {
    let sentence = "The gateway checks the request and forwards the client's own bytes; \
                    \"quotes\" and\nnewlines included. ";
    let mut input = vec![json!({"role": "user", "content": sentence.repeat(2)})];
    for turn in 0..turns {
        let call = format!("call_{turn:04}");
        input.push(json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": sentence.repeat(2)}]}));
        input.push(
            json!({"type": "function_call", "call_id": call, "name": "get_weather",
            "arguments": "{\"city\":\"Paris\"}"}),
        );
        input.push(json!({"type": "function_call_output", "call_id": call,
            "output": "18 C, clear"}));
        input.push(json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": sentence.repeat(3)}]}));
    }
    let request = json!({
        "model": model, "input": input, "instructions": "You are a helpful assistant.",
        "max_output_tokens": 1024, "temperature": 0.7, "stream": true, "store": true,
        "tools": [{"type": "function", "name": "get_weather", "description": "Current weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"]}},
            {"type": "mcp", "server_label": "docs", "server_url": "http://127.0.0.1:1/mcp"}],
        "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "answer",
            "schema": {"type": "object"}}},
        "metadata": {"user_id": "u-1"},
    });
    request.to_string().into_bytes()
}

fn bench(c: &mut Criterion) {
    let aliases = [("fast".to_owned(), "gpt-like-model".to_owned())];
    let mut group = c.benchmark_group("responses_check");
    for (name, body) in [
        ("short", body("gpt-like-model", 0)),
        ("conversation_34_turns", body("gpt-like-model", 34)),
        ("short_alias_renamed", body("fast", 0)),
    ] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("check/{name}/{}B", body.len()), |b| {
            b.iter(|| {
                let body = black_box(&body[..]);
                check(body).map(|checked| checked.renamed(body, &aliases))
            })
        });
        group.bench_function(format!("serde_value/{name}/{}B", body.len()), |b| {
            b.iter(|| serde_json::from_slice::<Value>(black_box(&body)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

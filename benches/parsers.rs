//! Per-token cost of the model-output parsers (`tollgate::parsers`): each parser is fed a
//! realistic answer in its family's syntax (1–1.6 KB: a paragraph of text, two
//! tool calls with nested JSON arguments, and for the reasoning parsers and Harmony a
//! reasoning block first), cut into ~4-byte tokens as a detokenizer sends them. One
//! iteration is a whole answer: a fresh parser, one push a token, `finish`. Throughput is in
//! tokens, so ns/token = 10⁹ / (elements/s).
//!
//! Tool parsers: `passthrough` (the floor: text out as it comes), `qwen` (Hermes JSON in
//! `<tool_call>`), `llama` (`<|python_tag|>` JSON), `json` (bare JSON objects after the
//! text), `qwen_coder` (XML parameters typed by the tools' schemas), `deepseek` (V3's
//! fenced JSON between special tokens) and `gpt_oss` (Harmony messages). Reasoning parsers:
//! `qwen3` (`<think>` block), `deepseek_r1` (block opened by the prompt) and `gpt_oss`
//! (the `analysis` channel).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::json;
use tollgate::parsers::reasoning::{ReasoningDelta, Thinking};
use tollgate::parsers::tool::{ToolDelta, ToolSpec, Tools};

/// Bytes a token, about (moved forward to a character boundary).
const TOKEN_BYTES: usize = 4;

const TEXT: &str = "I'll look up the current conditions in both cities so that we can compare \
them properly. San Francisco is usually mild and foggy in the mornings this time of year, \
while Tokyo tends to be warmer and more humid; the forecast for the next few days will tell \
us whether it is worth packing an umbrella. I'll also search for any weather advisories \
that were issued this week — storms, heat warnings or air-quality alerts — and summarise \
what matters for your trip: temperatures (°C), chance of rain, and wind. If either city \
looks bad for the days you are there, I can suggest indoor alternatives — museums, markets \
and the like — or a different week; just say which matters more to you, cost or comfort. ";

const REASONING: &str = "The user wants to compare the weather in San Francisco and Tokyo \
for a trip next week. I have two tools: get_weather(city, days, units) and search(query, \
limit, filters). First call get_weather for both cities with days=3 and units=celsius, then \
search for advisories limited to the last 7 days. I should not guess the numbers; wait for \
the tool results before answering, and keep the answer short with a table per city.";

/// A call: its name, its arguments as JSON text, and as (key, value) pairs for XML.
type Call = (&'static str, String, Vec<(String, String)>);

/// The two calls.
fn calls() -> [Call; 2] {
    let weather = json!({"city": "San Francisco", "days": 3, "units": "celsius"});
    let search = json!({
        "query": "weather advisory San Francisco Tokyo storm heat air quality this week",
        "limit": 10,
        "filters": {"since_days": 7, "sources": ["noaa.gov", "jma.go.jp"], "lang": "en"}
    });
    let pairs = |v: &serde_json::Value| {
        v.as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect::<Vec<_>>()
    };
    [
        ("get_weather", weather.to_string(), pairs(&weather)),
        ("search", search.to_string(), pairs(&search)),
    ]
}

fn tools() -> Tools {
    let spec = |name: &str, properties: serde_json::Value| ToolSpec {
        name: name.to_owned(),
        parameters: json!({"type": "object", "properties": properties}),
    };
    Arc::from(vec![
        spec(
            "get_weather",
            json!({"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}}),
        ),
        spec(
            "search",
            json!({"query": {"type": "string"}, "limit": {"type": "integer"},
                   "filters": {"type": "object"}}),
        ),
    ])
}

fn qwen_calls() -> String {
    calls()
        .iter()
        .map(|(name, args, _)| {
            format!("<tool_call>\n{{\"name\": \"{name}\", \"arguments\": {args}}}\n</tool_call>\n")
        })
        .collect()
}

fn deepseek_calls() -> String {
    let body: String = calls()
        .iter()
        .map(|(name, args, _)| {
            format!("<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>")
        })
        .collect();
    format!("<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>")
}

fn harmony() -> String {
    let calls: String = calls()
        .iter()
        .map(|(name, args, _)| {
            format!("<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{args}<|call|>")
        })
        .collect();
    format!(
        "<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>commentary<|message|>{TEXT}<|end|>{calls}"
    )
}

/// Each tool parser and its answer.
fn tool_cases() -> Vec<(&'static str, String)> {
    let [(n1, a1, _), (n2, a2, _)] = calls();
    let xml: String = calls()
        .iter()
        .map(|(name, _, pairs)| {
            let params: String = pairs
                .iter()
                .map(|(k, v)| format!("<parameter={k}>\n{v}\n</parameter>\n"))
                .collect();
            format!("<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>\n")
        })
        .collect();
    vec![
        ("passthrough", format!("{TEXT}\n{}", qwen_calls())),
        ("qwen", format!("{TEXT}\n{}", qwen_calls())),
        (
            "llama",
            format!(
                "{TEXT}<|python_tag|>{{\"name\": \"{n1}\", \"parameters\": {a1}}}; {{\"name\": \"{n2}\", \"parameters\": {a2}}}"
            ),
        ),
        (
            "json",
            format!(
                "{TEXT}\n{{\"name\": \"{n1}\", \"arguments\": {a1}}}\n{{\"name\": \"{n2}\", \"arguments\": {a2}}}"
            ),
        ),
        ("qwen_coder", format!("{TEXT}\n{xml}")),
        ("deepseek", format!("{TEXT}{}", deepseek_calls())),
        ("gpt_oss", harmony()),
    ]
}

/// Each reasoning parser, the thinking setting it runs with, and its answer.
fn reasoning_cases() -> Vec<(&'static str, Thinking, String)> {
    let on = Thinking {
        enabled: true,
        opened_by_prompt: false,
    };
    vec![
        (
            "qwen3",
            on,
            format!("<think>\n{REASONING}\n</think>\n\n{TEXT}\n{}", qwen_calls()),
        ),
        (
            "deepseek_r1",
            Thinking {
                enabled: true,
                opened_by_prompt: true,
            },
            format!("{REASONING}\n</think>\n\n{TEXT}{}", deepseek_calls()),
        ),
        ("gpt_oss", on, harmony()),
    ]
}

/// `text` cut into tokens of about [`TOKEN_BYTES`].
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::with_capacity(text.len() / TOKEN_BYTES + 1);
    let mut from = 0;
    while from < text.len() {
        let mut to = (from + TOKEN_BYTES).min(text.len());
        while !text.is_char_boundary(to) {
            to += 1;
        }
        out.push(&text[from..to]);
        from = to;
    }
    out
}

fn bench(c: &mut Criterion) {
    let tools = tools();
    let mut group = c.benchmark_group("parsers/tool");
    for (name, text) in tool_cases() {
        let make = tollgate::parsers::tool::registry::by_name(name).unwrap();
        let pieces = tokens(&text);
        // The answer parses as meant: both calls found (none by passthrough).
        let whole = tollgate::parsers::tool::parse_whole(make(&tools).as_mut(), &text);
        let want = if name == "passthrough" { 0 } else { 2 };
        assert_eq!(whole.calls.len(), want, "{name}: {whole:?}");
        let mut out: Vec<ToolDelta> = Vec::with_capacity(pieces.len());
        group.throughput(Throughput::Elements(pieces.len() as u64));
        group.bench_function(format!("{name}/{}B_{}tok", text.len(), pieces.len()), |b| {
            b.iter(|| {
                out.clear();
                let mut parser = make(&tools);
                for piece in black_box(&pieces) {
                    parser.push(piece, &mut out);
                }
                parser.finish(&mut out);
                out.len()
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("parsers/reasoning");
    for (name, thinking, text) in reasoning_cases() {
        let make = tollgate::parsers::reasoning::registry::by_name(name).unwrap();
        let pieces = tokens(&text);
        let whole = tollgate::parsers::reasoning::split_whole(make(thinking).as_mut(), &text);
        assert_eq!(whole.reasoning.trim(), REASONING, "{name}: {whole:?}");
        let mut out: Vec<ReasoningDelta> = Vec::with_capacity(pieces.len());
        group.throughput(Throughput::Elements(pieces.len() as u64));
        group.bench_function(format!("{name}/{}B_{}tok", text.len(), pieces.len()), |b| {
            b.iter(|| {
                out.clear();
                let mut parser = make(thinking);
                for piece in black_box(&pieces) {
                    parser.push(piece, &mut out);
                }
                parser.finish(&mut out);
                out.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Rendering chat prompts with `tollgate::chat::template`: the agent template of
//! `tests/fixtures/chat_templates/templates/agent.jinja` (about the weight of Qwen3's: a tool
//! preamble with two schemas through `tojson`, a backwards scan for the last user turn,
//! reasoning split out of assistant turns, tool calls as JSON) for a chat of ~1k tokens (10
//! messages) and one of ~32k tokens (64 messages), each with one tool call and its result.
//! With `TOLLGATE_QWEN3_TOKENIZER_DIR` set (see `tests/chat_template.rs`), Qwen3's own
//! template renders the same chats too, and `qwen3+tokenize` renders then tokenizes them
//! with Qwen3's own tokenizer: the whole language work before a gRPC request is sent (no
//! tokenizer cache). `qwen3+tokenize+l0` does the same through the tokenizer caches with
//! the same chat every time (an L0 hit), `qwen3+tokenize+l1` with a chat whose last
//! user turn and the assistant reply after it are new every time (an L1 hit on the earlier
//! turns, only those two tokenized). Each iteration is one whole request: message conversion and
//! normalisation included.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use tollgate::chat::encode_cache;
use tollgate::chat::language::{Language, Sources};
use tollgate::chat::template::{find_template, ChatTemplate, RenderInput};

const AGENT: &str = include_str!("../tests/fixtures/chat_templates/templates/agent.jinja");

/// Text of about `chars` characters (about a token every 4), different for every `seed`.
fn text(seed: usize, chars: usize) -> String {
    const WORDS: [&str; 16] = [
        "the",
        "request",
        "gateway",
        "routes",
        "tokens",
        "to",
        "an",
        "engine",
        "which",
        "streams",
        "answers",
        "back",
        "while",
        "clients",
        "wait",
        "patiently",
    ];
    let mut out = String::with_capacity(chars + 16);
    let mut i = seed;
    while out.len() < chars {
        out.push_str(WORDS[i % WORDS.len()]);
        out.push(if i % 11 == 10 { '.' } else { ' ' });
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    out
}

/// A conversation of `messages` messages of about `chars` characters each: a system prompt,
/// then user and assistant turns, with a tool call and its result after the first question.
fn chat(messages: usize, chars: usize) -> Value {
    let mut list = vec![json!({"role": "system", "content": text(0, chars)})];
    list.push(json!({"role": "user", "content": text(1, chars)}));
    list.push(
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"days\": 2}"}
        }]}),
    );
    list.push(json!({"role": "tool", "tool_call_id": "call_1", "content": text(3, chars / 4)}));
    for i in list.len()..messages {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let content = if role == "assistant" {
            format!(
                "<think>\n{}\n</think>\n\n{}",
                text(i, chars / 4),
                text(i + 1, chars)
            )
        } else {
            text(i, chars)
        };
        list.push(json!({"role": role, "content": content}));
    }
    Value::Array(list)
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather", "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "City name"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7}
            }, "required": ["city"]}
        }},
        {"type": "function", "function": {
            "name": "search", "description": "Search the documentation.",
            "parameters": {"type": "object", "properties": {
                "query": {"type": "string"}, "limit": {"type": "integer"}
            }, "required": ["query"]}
        }}
    ])
}

fn bench(c: &mut Criterion) {
    let mut templates = vec![("agent", ChatTemplate::new(AGENT).expect("agent template"))];
    let mut tokenizer = None;
    let mut language = None;
    if let Some(dir) = std::env::var_os("TOLLGATE_QWEN3_TOKENIZER_DIR") {
        let source = find_template(Path::new(&dir), None)
            .expect("Qwen3 tokenizer dir")
            .expect("Qwen3 chat template");
        templates.push(("qwen3", ChatTemplate::new(&source).expect("Qwen3 template")));
        tokenizer = Some(
            tokenizers::Tokenizer::from_file(Path::new(&dir).join("tokenizer.json"))
                .expect("Qwen3 tokenizer"),
        );
        language = Some(
            Language::load(&Sources {
                tokenizer: dir.into(),
                chat_template: None,
            })
            .expect("Qwen3 language"),
        );
    }
    let tools = tools();
    let kwargs = json!({"enable_thinking": true});
    let mut group = c.benchmark_group("chat_template");
    for (size, messages) in [("1k_tokens", chat(10, 400)), ("32k_tokens", chat(64, 2000))] {
        for (name, template) in &templates {
            let input = RenderInput {
                messages: &messages,
                tools: Some(&tools),
                add_generation_prompt: true,
                kwargs: kwargs.as_object(),
                bos_token: None,
                eos_token: Some("<|im_end|>"),
            };
            let prompt = template.render(&input).expect("renders");
            group.throughput(Throughput::Bytes(prompt.len() as u64));
            group.bench_function(format!("{name}/{size}"), |b| {
                b.iter(|| template.render(black_box(&input)))
            });
            if let (Some(language), "qwen3") = (&language, *name) {
                cached(&mut group, language, template, &input, size);
            }
            if let (Some(tokenizer), "qwen3") = (&tokenizer, *name) {
                group.bench_function(format!("{name}+tokenize/{size}"), |b| {
                    b.iter(|| {
                        let prompt = template.render(black_box(&input)).expect("renders");
                        tokenizer
                            .encode_fast(prompt, false)
                            .expect("tokenizes")
                            .len()
                    })
                });
            }
        }
    }
    group.finish();
}

/// Render + tokenize through the tokenizer caches: the same chat again (L0), and the chat
/// with a new last question and reply each time (L1 on the turns before them).
fn cached(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    language: &Language,
    template: &ChatTemplate,
    input: &RenderInput<'_>,
    size: &str,
) {
    let prompt_ids = |input: &RenderInput<'_>| {
        let prompt = template.render(black_box(input)).expect("renders");
        encode_cache::encode(language, &prompt, false)
            .expect("tokenizes")
            .len()
    };
    let expected = language
        .tokenizer
        .encode_fast(template.render(input).expect("renders"), false)
        .expect("tokenizes")
        .len();
    assert_eq!(
        prompt_ids(input),
        expected,
        "cached ids are the tokenizer's"
    );
    group.bench_function(format!("qwen3+tokenize+l0/{size}"), |b| {
        b.iter(|| prompt_ids(input))
    });
    let mut messages = input.messages.clone();
    let turns = messages.as_array().map_or(0, Vec::len);
    let mut turn = 0u64;
    group.bench_function(format!("qwen3+tokenize+l1/{size}"), |b| {
        b.iter(|| {
            turn += 1;
            for back in [1, 2] {
                let content = &mut messages[turns - back]["content"];
                let text = content.as_str().unwrap_or_default();
                let text = text.split(" #").next().unwrap_or_default();
                *content = Value::String(format!("{text} #{turn}"));
            }
            prompt_ids(&RenderInput {
                messages: &messages,
                ..*input
            })
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

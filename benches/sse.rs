//! Parsing token streams with `tollgate::sse`: an OpenAI chat completion stream (role
//! chunk, 256 content chunks, finish chunk, usage chunk, `[DONE]`) and an Anthropic
//! messages stream (`message_start`, content block start, 256 `content_block_delta`
//! events, a `ping` and the closing events), each fed as 1,448-byte reads (a TCP segment
//! on a 1,500-byte MTU) and as 1-byte reads (the worst split there is).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate::sse::SseParser;

const TOKENS: usize = 256;
const SEGMENT: usize = 1448;

fn openai_stream() -> Vec<u8> {
    let head = r#"{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1764000000,"model":"llama-3.1-8b-instruct","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":"#;
    let mut out = String::new();
    let mut chunk = |delta: &str, finish: &str| {
        out.push_str("data: ");
        out.push_str(head);
        out.push_str(delta);
        out.push_str(r#","logprobs":null,"finish_reason":"#);
        out.push_str(finish);
        out.push_str("}]}\n\n");
    };
    chunk(r#"{"role":"assistant","content":""}"#, "null");
    for i in 0..TOKENS {
        chunk(&format!(r#"{{"content":" word{i}"}}"#), "null");
    }
    chunk("{}", r#""stop""#);
    out.push_str(r#"data: {"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1764000000,"model":"llama-3.1-8b-instruct","choices":[],"usage":{"prompt_tokens":412,"completion_tokens":256,"total_tokens":668}}"#);
    out.push_str("\n\ndata: [DONE]\n\n");
    out.into_bytes()
}

fn anthropic_stream() -> Vec<u8> {
    let mut out = String::new();
    let mut event = |name: &str, data: &str| {
        out.push_str("event: ");
        out.push_str(name);
        out.push_str("\ndata: ");
        out.push_str(data);
        out.push_str("\n\n");
    };
    event(
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":412,"output_tokens":1}}}"#,
    );
    event(
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    );
    event("ping", r#"{"type": "ping"}"#);
    for i in 0..TOKENS {
        event(
            "content_block_delta",
            &format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":" word{i}"}}}}"#
            ),
        );
    }
    event(
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    event(
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":256}}"#,
    );
    event("message_stop", r#"{"type":"message_stop"}"#);
    out.into_bytes()
}

/// Frames parsed from `stream` fed in `read`-byte pieces.
fn parse(stream: &[u8], read: usize) -> usize {
    let mut parser = SseParser::default();
    let mut frames = 0;
    for piece in stream.chunks(read) {
        if parser.feed(piece, |_| frames += 1).is_err() {
            return 0;
        }
    }
    frames
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse");
    for (name, stream) in [
        ("openai_chat", openai_stream()),
        ("anthropic_messages", anthropic_stream()),
    ] {
        group.throughput(Throughput::Bytes(stream.len() as u64));
        group.bench_function(format!("{name}/{SEGMENT}B_reads"), |b| {
            b.iter(|| parse(black_box(&stream), SEGMENT))
        });
        group.bench_function(format!("{name}/1B_reads"), |b| {
            b.iter(|| parse(black_box(&stream), 1))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Cost of the request-smuggling check on the bytes a client sends, per request.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate::server::h1_framing::{H1Framing, Verdict};

/// A chat-completion request head of about 400 bytes; `framing` is its body-framing field.
fn chat_head(framing: &str) -> Vec<u8> {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\n\
         Host: gateway.internal:8080\r\n\
         User-Agent: OpenAI/Python 1.51.0\r\n\
         Accept: application/json\r\n\
         Accept-Encoding: gzip, deflate\r\n\
         Connection: keep-alive\r\n\
         Content-Type: application/json\r\n\
         Authorization: Bearer sk-0123456789abcdef0123456789abcdef\r\n\
         X-Stainless-Lang: python\r\n\
         X-Stainless-Runtime-Version: 3.12.4\r\n\
         X-Request-Id: 3f2b7c1e-9a4d-4e8b-b1c2-7d5e6f708192\r\n\
         {framing}\r\n\
         \r\n"
    )
    .into_bytes()
}

/// A JSON-ish body of exactly `len` bytes.
fn body(len: usize) -> Vec<u8> {
    let text = b"{\"model\":\"llama\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}";
    text.iter().copied().cycle().take(len).collect()
}

fn chat_with_length() -> Vec<u8> {
    let body = body(1024);
    let mut s = chat_head(&format!("Content-Length: {}", body.len()));
    s.extend_from_slice(&body);
    s
}

fn chat_chunked() -> Vec<u8> {
    let body = body(1024);
    let mut s = chat_head("Transfer-Encoding: chunked");
    for part in body.chunks(256) {
        s.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        s.extend_from_slice(part);
        s.extend_from_slice(b"\r\n");
    }
    s.extend_from_slice(b"0\r\n\r\n");
    s
}

fn large_body() -> Vec<u8> {
    let body = body(64 * 1024);
    let mut s = chat_head(&format!("Content-Length: {}", body.len()));
    s.extend_from_slice(&body);
    s
}

fn pipelined(n: usize) -> Vec<u8> {
    let mut s = Vec::new();
    for i in 0..n {
        if i % 2 == 0 {
            s.extend_from_slice(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n");
        } else {
            s.extend_from_slice(
                b"POST /v1/embeddings HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
                  Content-Length: 16\r\n\r\n{\"input\":\"abc\"}\n",
            );
        }
    }
    s
}

/// Feeds `stream` to a fresh tracker in reads of at most `read` bytes.
fn run(stream: &[u8], read: usize) -> Verdict {
    let mut framing = H1Framing::new();
    let mut verdict = Verdict::Continue;
    for part in stream.chunks(read) {
        verdict = framing.feed(part);
    }
    verdict
}

fn bench(c: &mut Criterion) {
    let cases: [(&str, Vec<u8>, u64, usize); 4] = [
        ("chat_400b_head_1k_body", chat_with_length(), 1, usize::MAX),
        ("chat_400b_head_1k_chunked", chat_chunked(), 1, usize::MAX),
        ("64k_body_in_8k_reads", large_body(), 1, 8 * 1024),
        ("pipelined_100", pipelined(100), 100, usize::MAX),
    ];
    let mut group = c.benchmark_group("h1_framing");
    for (name, stream, requests, read) in &cases {
        assert_eq!(run(stream, *read), Verdict::Continue, "{name}");
        group.throughput(Throughput::Elements(*requests));
        group.bench_function(*name, |b| {
            b.iter(|| run(black_box(stream), *read));
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! Cost of the own HTTP/1.1 client's parsing on what a worker sends: a response head, and
//! the chunked framing check of an SSE stream per event.

use std::hint::black_box;

use bytes::{Buf, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::Method;
use tollgate::http::h1::chunked::{Chunked, Piece};
use tollgate::http::h1::head::parse_response;

/// The head an SSE-streaming engine sends (about 200 bytes).
const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\n\
    date: Tue, 24 Nov 2026 18:00:00 GMT\r\n\
    server: uvicorn\r\n\
    content-type: text/event-stream; charset=utf-8\r\n\
    cache-control: no-cache\r\n\
    x-request-id: 3f2b7c1e-9a4d-4e8b-b1c2-7d5e6f708192\r\n\
    transfer-encoding: chunked\r\n\r\n";

/// One chat-completion chunk event as an engine frames it (one chunk per event).
fn event() -> Vec<u8> {
    let data = b"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token\"},\"finish_reason\":null}]}\n\n";
    let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\r\n");
    framed
}

/// Runs `wire` through the framing check as the body does: framing dropped, payload split
/// off the buffer.
fn relay(wire: &[u8]) -> usize {
    let mut buf = BytesMut::from(wire);
    let mut chunked = Chunked::new();
    let mut payload = 0;
    while !buf.is_empty() {
        match chunked.step(&buf) {
            Ok(Piece::Framing(n)) => buf.advance(n),
            Ok(Piece::Data(n)) => payload += buf.split_to(n).freeze().len(),
            Ok(Piece::End(_)) | Err(_) => break,
        }
    }
    payload
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("h1_upstream");
    group.throughput(Throughput::Elements(1));
    group.bench_function("response_head", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(black_box(SSE_HEAD));
            black_box(parse_response(&mut buf, &Method::POST).ok().flatten())
        })
    });
    let one = event();
    group.bench_function("chunked_event", |b| b.iter(|| relay(black_box(&one))));
    let sixteen: Vec<u8> = one.iter().copied().cycle().take(one.len() * 16).collect();
    group.throughput(Throughput::Elements(16));
    group.bench_function("chunked_16_events_one_read", |b| {
        b.iter(|| relay(black_box(&sixteen)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

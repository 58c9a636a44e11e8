//! The gateway's own HTTP/1.1 client towards workers, black box: a scripted worker on
//! 127.0.0.1 answers with exactly the bytes a test gives it (split into writes with pauses
//! between them), and the client's view through the real gateway binary is checked.
//! Covers every framing a worker may send (lengths, chunked with extensions, trailers,
//! odd and uppercase sizes, split anywhere, until-close), broken framing, interim
//! answers, connection reuse and its limits, and cancellation of the worker's request
//! when the client goes away.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{gateway, post_json, wait_ready, Proc};
use serde_json::json;

/// One write of the scripted answer, and the pause before it.
#[derive(Clone)]
struct Out {
    pause_ms: u64,
    bytes: Vec<u8>,
}

fn at_once(bytes: &[u8]) -> Vec<Out> {
    vec![Out {
        pause_ms: 0,
        bytes: bytes.to_vec(),
    }]
}

/// `bytes` in writes of `size` bytes, `pause_ms` apart.
fn in_pieces(bytes: &[u8], size: usize, pause_ms: u64) -> Vec<Out> {
    bytes
        .chunks(size)
        .map(|piece| Out {
            pause_ms,
            bytes: piece.to_vec(),
        })
        .collect()
}

/// What the scripted worker saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    /// Connections that ended with the peer closing before the answer was fully written.
    cut_short: AtomicUsize,
    /// Inference request bodies, as received after de-framing.
    bodies: Mutex<Vec<Vec<u8>>>,
}

/// A worker that answers `POST /v1/...` with `answer` and anything else with an empty
/// JSON 200; keeps connections alive unless the answer closes them.
struct Scripted {
    url: String,
    seen: Arc<Seen>,
}

fn scripted(answer: Vec<Out>, close_after: bool) -> Scripted {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(Seen::default());
    let counted = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            counted.connections.fetch_add(1, Ordering::SeqCst);
            let (answer, seen) = (answer.clone(), counted.clone());
            std::thread::spawn(move || serve(conn, &answer, close_after, &seen));
        }
    });
    Scripted { url, seen }
}

/// Reads one request (head plus a Content-Length or chunked body); `None` at EOF.
fn read_request(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let mut chunk = [0u8; 8192];
    let mut fill = |conn: &mut TcpStream, buf: &mut Vec<u8>| match conn.read(&mut chunk) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    };
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        if !fill(conn, buf) {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    buf.drain(..end + 4);
    let mut body = Vec::new();
    if head.contains("transfer-encoding: chunked") {
        loop {
            let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") else {
                if !fill(conn, buf) {
                    return None;
                }
                continue;
            };
            let size_text = String::from_utf8_lossy(&buf[..line_end]).to_string();
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            while buf.len() < line_end + 2 + size + 2 {
                if !fill(conn, buf) {
                    return None;
                }
            }
            body.extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            buf.drain(..line_end + 2 + size + 2);
            if size == 0 {
                break;
            }
        }
    } else {
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < len {
            if !fill(conn, buf) {
                return None;
            }
        }
        body = buf.drain(..len).collect();
    }
    Some((head, body))
}

fn serve(mut conn: TcpStream, answer: &[Out], close_after: bool, seen: &Seen) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(20)));
    let _ = conn.set_nodelay(true);
    let mut buf = Vec::new();
    while let Some((head, body)) = read_request(&mut conn, &mut buf) {
        if !head.starts_with("post /v1/") {
            let ok =
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
            if conn.write_all(ok).is_err() {
                return;
            }
            continue;
        }
        seen.bodies.lock().expect("lock").push(body);
        for write in answer {
            std::thread::sleep(Duration::from_millis(write.pause_ms));
            if conn.write_all(&write.bytes).is_err() {
                seen.cut_short.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
        if close_after {
            return;
        }
    }
}

async fn gateway_for(url: &str, extra: &[&str]) -> Proc {
    let mut args = vec!["--worker-urls", url];
    args.extend_from_slice(extra);
    let gw = gateway(&args);
    wait_ready(&gw).await;
    gw
}

fn chat(stream: bool) -> serde_json::Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

async fn chat_reply(gw: &Proc) -> common::Reply {
    post_json(&format!("{}/v1/chat/completions", gw.url()), &chat(true)).await
}

const JSON_OK: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";

const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

/// Events framed with extensions, uppercase and zero-padded sizes, and trailers.
fn odd_chunked_stream() -> (Vec<u8>, String) {
    let events = [
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"\u{00e9}\u{4e16}\"}}]}\n\n",
        "data: [DONE]\n\n",
    ];
    let mut wire = SSE_HEAD.as_bytes().to_vec();
    wire.extend_from_slice(
        format!("{:X};name=value\r\n{}\r\n", events[0].len(), events[0]).as_bytes(),
    );
    // The second event split over two chunks, one with a zero-padded size.
    let (first, second) = events[1].as_bytes().split_at(7);
    wire.extend_from_slice(format!("000{:x} ; ext\r\n", first.len()).as_bytes());
    wire.extend_from_slice(first);
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(format!("{:x}\r\n", second.len()).as_bytes());
    wire.extend_from_slice(second);
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(format!("{:x}\r\n{}\r\n", events[2].len(), events[2]).as_bytes());
    wire.extend_from_slice(b"0\r\nx-checksum: abc\r\nx-other: 1\r\n\r\n");
    (wire, events.concat())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_framing_of_every_kind_reaches_the_client_intact() {
    let (wire, payload) = odd_chunked_stream();
    for (label, answer) in [
        ("one write", at_once(&wire)),
        ("byte by byte", in_pieces(&wire, 1, 0)),
        ("odd pieces with pauses", in_pieces(&wire, 13, 2)),
    ] {
        let worker = scripted(answer, false);
        // One data-plane thread: its pool is the one every request goes through.
        let gw = gateway_for(&worker.url, &["--runtime-worker-threads", "1"]).await;
        let mut connections = 0;
        for i in 0..4 {
            let reply = chat_reply(&gw).await;
            assert_eq!(reply.status, 200, "{label}");
            assert_eq!(reply.text(), payload, "{label}");
            assert_eq!(
                reply.headers["content-type"], "text/event-stream",
                "{label}"
            );
            // After the first, every request reuses the first one's connection.
            let now = worker.seen.connections.load(Ordering::SeqCst);
            if i > 0 {
                assert_eq!(
                    now, connections,
                    "{label}: request {i} reused the connection"
                );
            }
            connections = now;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn length_and_until_close_bodies_are_relayed_whole() {
    let body = "x".repeat(100_000);
    let with_length = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let worker = scripted(in_pieces(with_length.as_bytes(), 7_001, 1), false);
    let gw = gateway_for(&worker.url, &[]).await;
    let reply = chat_reply(&gw).await;
    assert_eq!((reply.status, reply.text().len()), (200, body.len()));
    assert_eq!(reply.headers["content-length"], body.len().to_string());

    let until_close = format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n{body}");
    let worker = scripted(in_pieces(until_close.as_bytes(), 9_999, 1), true);
    let gw = gateway_for(&worker.url, &[]).await;
    for _ in 0..2 {
        let reply = chat_reply(&gw).await;
        assert_eq!((reply.status, reply.text().len()), (200, body.len()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_answers_are_skipped() {
    let worker = scripted(
        at_once(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n\
              HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}",
        ),
        false,
    );
    let gw = gateway_for(&worker.url, &[]).await;
    let reply = chat_reply(&gw).await;
    assert_eq!(
        (reply.status, reply.text().as_str()),
        (201, "{\"ok\":true}")
    );
}

/// A worker answer whose chunked framing breaks after the first chunk, with `content_type`.
fn broken_after_one_chunk(content_type: &str) -> Vec<Out> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    let mut wire = at_once(head.as_bytes());
    wire[0].bytes.extend_from_slice(b"b\r\ndata: one\n\n\r\n");
    wire.push(Out {
        pause_ms: 100,
        bytes: b"ZZ\r\ndata: two\n\n\r\n0\r\n\r\n".to_vec(),
    });
    wire
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_chunk_framing_cuts_the_stream_and_the_connection() {
    // An SSE stream ends with the route's terminal error event, cleanly.
    let worker = scripted(broken_after_one_chunk("text/event-stream"), false);
    let gw = gateway_for(&worker.url, &["--runtime-worker-threads", "1"]).await;
    let reply = chat_reply(&gw).await;
    assert_eq!(reply.status, 200);
    let text = reply.text();
    assert!(text.starts_with("data: one\n\n"), "{text}");
    assert!(
        !text.contains("two"),
        "nothing past the break is relayed: {text}"
    );
    let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
    let event: serde_json::Value = serde_json::from_str(
        last.strip_prefix("data: ")
            .unwrap_or_else(|| panic!("an event: {last}")),
    )
    .expect("the terminal event is JSON");
    assert_eq!(event["error"]["code"], "worker_connection_error", "{text}");
    let metrics = common::scrape(&gw).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gw_router_request_errors_total{")
                && l.contains(r#"error_type="streaming_error""#)
                && l.ends_with(" 1")),
        "{metrics}"
    );
    // The broken connection is not pooled: the next request opens a new one.
    let before = worker.seen.connections.load(Ordering::SeqCst);
    assert_eq!(chat_reply(&gw).await.status, 200);
    assert_eq!(worker.seen.connections.load(Ordering::SeqCst), before + 1);

    // Any other body never looks complete: the client's connection is cut.
    let worker = scripted(broken_after_one_chunk("application/json"), false);
    let gw = gateway_for(&worker.url, &[]).await;
    let req = http::Request::post(format!("{}/v1/chat/completions", gw.url()))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            serde_json::to_vec(&chat(false)).expect("json"),
        )))
        .expect("request");
    let resp = common::client(false).request(req).await.expect("head");
    assert_eq!(resp.status(), 200);
    let collected = http_body_util::BodyExt::collect(resp.into_body()).await;
    assert!(collected.is_err(), "a broken body never looks complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_closes_idle_connections_loses_no_request() {
    // Every answer closes its connection after the body (keep-alive not honoured): the
    // pooled connection is dead by the next request, which must still succeed.
    let worker = scripted(at_once(JSON_OK), true);
    let gw = gateway_for(&worker.url, &[]).await;
    for i in 0..20 {
        let reply = chat_reply(&gw).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
        if i % 5 == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // `connection: close` in the answer: never pooled, every request has its own.
    let answer = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}";
    let worker = scripted(at_once(answer), true);
    let gw = gateway_for(&worker.url, &["--runtime-worker-threads", "1"]).await;
    let before = worker.seen.connections.load(Ordering::SeqCst);
    for _ in 0..5 {
        assert_eq!(chat_reply(&gw).await.status, 200);
    }
    assert_eq!(worker.seen.connections.load(Ordering::SeqCst), before + 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_cancels_the_workers_request() {
    // A long stream: one event every 20 ms for 10 s.
    let mut answer = at_once(SSE_HEAD.as_bytes());
    let event = b"e\r\ndata: token\n\n\r\n";
    answer.extend((0..500).map(|_| Out {
        pause_ms: 20,
        bytes: event.to_vec(),
    }));
    let worker = scripted(answer, false);
    let gw = gateway_for(&worker.url, &[]).await;
    let body = serde_json::to_vec(&chat(true)).expect("json");
    let mut conn = TcpStream::connect(gw.addr).expect("connect");
    write!(
        conn,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    )
    .expect("head");
    conn.write_all(&body).expect("body");
    let mut first = [0u8; 256];
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let n = conn.read(&mut first).expect("first bytes of the stream");
    assert!(n > 0);
    drop(conn);
    // The worker's writes start failing once the gateway has closed its connection.
    let cancelled = common::eventually(Duration::from_secs(5), || async {
        worker.seen.cut_short.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(
        cancelled,
        "the worker's connection was closed within seconds"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_arrive_whole_read_or_streamed() {
    let worker = scripted(at_once(JSON_OK), false);
    let gw = gateway_for(&worker.url, &[]).await;
    // Small: read by the gateway, sent with the head.
    let small = serde_json::to_vec(&chat(false)).expect("json");
    let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &chat(false)).await;
    assert_eq!(reply.status, 200);
    // Large and chunked by the client: streamed through.
    let big: String = "y".repeat(3 * 1024 * 1024);
    let large = serde_json::to_vec(&json!({"model": "m", "prompt": big})).expect("json");
    let mut conn = TcpStream::connect(gw.addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    conn.write_all(
        b"POST /v1/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
          transfer-encoding: chunked\r\nconnection: close\r\n\r\n",
    )
    .expect("head");
    for piece in large.chunks(100_003) {
        write!(conn, "{:x}\r\n", piece.len()).expect("size");
        conn.write_all(piece).expect("piece");
        conn.write_all(b"\r\n").expect("crlf");
    }
    conn.write_all(b"0\r\n\r\n").expect("end");
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out);
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let bodies = worker.seen.bodies.lock().expect("lock");
    assert_eq!(bodies.len(), 2);
    assert_eq!(bodies[0], small);
    assert_eq!(bodies[1].len(), large.len());
    assert!(bodies[1] == large);
}

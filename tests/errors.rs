//! Gateway-generated errors, black box: each failure mode maps to its status and code, in
//! the exact envelope, with `x-gw-error-code`.

use crate::common;
use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{client, gateway, mock, mock_requests, raw_status, send};
use serde_json::{json, Value};
use support::assert_gateway_error;

fn chat_bytes(mock: Value) -> Vec<u8> {
    serde_json::to_vec(&support::chat(false, mock)).expect("json")
}

async fn post_chat(url: &str, h2: bool, body: Vec<u8>) -> common::Reply {
    send(
        &client(h2),
        "POST",
        &format!("{url}/v1/chat/completions"),
        &[("content-type", "application/json")],
        body,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_workers_is_503_no_available_workers() {
    let gw = gateway(&[]);
    for h2 in [false, true] {
        let reply = post_chat(&gw.url(), h2, chat_bytes(Value::Null)).await;
        assert_gateway_error(&reply, 503, "no_available_workers");
        let reply = send(
            &client(h2),
            "POST",
            &format!("{}/v1/embeddings", gw.url()),
            &[("content-type", "application/json")],
            r#"{"input":"x"}"#,
        )
        .await;
        assert_gateway_error(&reply, 503, "no_available_workers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_port_is_502_worker_connect_failed() {
    // A registered worker whose port closed since (one that never answered would not be
    // registered, hence 503).
    let mut gone = mock(&[]);
    let gw = gateway(&["--worker-urls", &gone.url()]);
    let _ = gone.child.kill();
    let _ = gone.child.wait();
    for h2 in [false, true] {
        let started = Instant::now();
        let reply = post_chat(&gw.url(), h2, chat_bytes(Value::Null)).await;
        assert_gateway_error(&reply, 502, "worker_connect_failed");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "refusal is immediate"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_dropping_before_answer_is_502_worker_connection_error() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url(), "--disable-retries"]);
    for h2 in [false, true] {
        // Non-streaming with drop_after_tokens: the mock closes the connection without
        // sending a response head.
        let reply = post_chat(&gw.url(), h2, chat_bytes(json!({"drop_after_tokens": 0}))).await;
        assert_gateway_error(&reply, 502, "worker_connection_error");
    }
    // The worker did receive both requests: this was not a connect failure.
    assert_eq!(mock_requests(&upstream).await.len(), 2);
    // And the gateway still serves the next request normally.
    let reply = post_chat(&gw.url(), false, chat_bytes(Value::Null)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_worker_is_504_worker_timeout() {
    let upstream = mock(&["--stall"]);
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--request-timeout-secs",
        "1",
    ]);
    let tasks: Vec<_> = [false, true]
        .into_iter()
        .map(|h2| {
            let url = gw.url();
            tokio::spawn(async move {
                let started = Instant::now();
                let reply = post_chat(&url, h2, chat_bytes(Value::Null)).await;
                (reply, started.elapsed())
            })
        })
        .collect();
    for task in tasks {
        let (reply, elapsed) = task.await.expect("task");
        assert_gateway_error(&reply, 504, "worker_timeout");
        assert!(
            elapsed >= Duration::from_millis(900),
            "504 before the timeout: {elapsed:?}"
        );
        assert!(elapsed < Duration::from_secs(3), "504 after {elapsed:?}");
    }
}

/// A JSON chat body of exactly `len` bytes.
fn body_of_len(len: usize) -> Vec<u8> {
    let mut body = support::chat(false, Value::Null);
    body["pad"] = json!("");
    let base = serde_json::to_vec(&body).expect("json").len();
    body["pad"] = json!("p".repeat(len - base));
    let bytes = serde_json::to_vec(&body).expect("json");
    assert_eq!(bytes.len(), len);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_over_limit_is_413_and_never_forwarded() {
    let upstream = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--max-payload-size",
        "1KiB",
    ]);
    for h2 in [false, true] {
        let reply = post_chat(&gw.url(), h2, body_of_len(1025)).await;
        assert_gateway_error(&reply, 413, "payload_too_large");
        let reply = post_chat(&gw.url(), h2, body_of_len(64 * 1024)).await;
        assert_gateway_error(&reply, 413, "payload_too_large");
    }
    assert!(
        mock_requests(&upstream).await.is_empty(),
        "an oversized body must not reach the worker"
    );
    // Exactly at the limit is accepted.
    let reply = post_chat(&gw.url(), false, body_of_len(1024)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock_requests(&upstream).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["body_len"], 1024);
}

fn chunked_head() -> &'static str {
    "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
     Transfer-Encoding: chunked\r\n\r\n"
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_over_limit_is_413() {
    let upstream = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--max-payload-size",
        "1KiB",
    ]);
    let mut request = chunked_head().as_bytes().to_vec();
    for _ in 0..4 {
        request.extend(chunk(&[b' '; 512]));
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let (reply, _) = support::raw_roundtrip(gw.addr, &request, Duration::from_secs(5));
    let text = String::from_utf8_lossy(&reply).into_owned();
    assert!(text.starts_with("HTTP/1.1 413"), "{text:?}");
    assert!(
        text.to_ascii_lowercase()
            .contains("x-gw-error-code: payload_too_large"),
        "{text:?}"
    );
    assert!(text.contains(r#""code":"payload_too_large""#), "{text:?}");
    assert!(
        mock_requests(&upstream).await.is_empty(),
        "the worker must never receive the oversized body complete"
    );

    // Under the limit, the same framing goes through.
    let mut request = chunked_head().as_bytes().to_vec();
    let body = chat_bytes(Value::Null);
    let (a, b) = body.split_at(body.len() / 2);
    request.extend(chunk(a));
    request.extend(chunk(b));
    request.extend_from_slice(
        b"0\r\n\r\nGET /nothing-here HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n",
    );
    let (reply, _) = support::raw_roundtrip(gw.addr, &request, Duration::from_secs(5));
    assert_eq!(
        raw_status(&reply),
        Some(200),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    assert_eq!(mock_requests(&upstream).await.len(), 1);
}

/// The 413 comes as soon as the body passes the limit, without waiting for its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_body_413_as_soon_as_the_limit_is_passed() {
    let upstream = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--max-payload-size",
        "1KiB",
    ]);
    let mut s = TcpStream::connect(gw.addr).expect("connect");
    s.write_all(chunked_head().as_bytes()).expect("head");
    s.write_all(&chunk(&[b' '; 700])).expect("chunk 1");
    s.write_all(&chunk(&[b' '; 700])).expect("chunk 2");
    // The body is not finished: no last chunk is ever sent.
    let started = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    assert_eq!(
        raw_status(&got),
        Some(413),
        "after {:?}: {:?}",
        started.elapsed(),
        String::from_utf8_lossy(&got)
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(mock_requests(&upstream).await.is_empty());
}

/// The oversized body is never read, so the connection cannot carry another request: the
/// 413 says `connection: close` and the gateway closes it.
#[test]
fn content_length_413_closes_the_connection() {
    let gw = gateway(&[
        "--max-payload-size",
        "1KiB",
        "--worker-urls",
        "http://127.0.0.1:9",
    ]);
    let mut conn = support::RawConn::connect(gw.addr);
    let mut req =
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
                    Content-Length: 4096\r\n\r\n"
            .to_vec();
    req.extend_from_slice(&[b' '; 4096]);
    conn.write(&req).expect("write");
    let resp = conn
        .read_response(Duration::from_secs(5))
        .expect("a 413 response");
    assert_eq!(resp.status, 413);
    assert_eq!(resp.header("x-gw-error-code"), Some("payload_too_large"));
    assert_eq!(resp.header("connection"), Some("close"));
    let closed = conn.wait_closed(Duration::from_secs(2));
    assert!(closed.is_some(), "connection left open after the 413");
}

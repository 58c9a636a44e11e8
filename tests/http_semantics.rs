//! HTTP semantics at the edge, black box (RFC 9110, 9112):
//!
//! - a request with two `Authorization` fields, with no `Host` or two (HTTP/1.1) is 400;
//! - a transfer coding other than `chunked` is 501;
//! - headers the client's `Connection` names are not forwarded;
//! - a worker response with both `Transfer-Encoding` and `Content-Length` is relayed whole
//!   (framed by its chunking), and an unsolicited `101` or a status outside 100–599 is 502.
//!
//! The misbehaving workers are raw TCP listeners in this file writing canned bytes.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use common::{
    client, gateway, mock, mock_requests, post_json, post_json_with, raw_exchange, raw_status,
    send, wait_ready, Proc, Reply,
};
use serde_json::json;

fn chat() -> serde_json::Value {
    json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
}

/// A chat request over HTTP/1.1 with extra headers.
async fn chat_with(gw: &Proc, headers: &[(&str, &str)]) -> Reply {
    post_json_with(
        &format!("{}/v1/chat/completions", gw.url()),
        &chat(),
        headers,
    )
    .await
}

fn code(reply: &Reply) -> String {
    reply.json()["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_authorization_is_refused() {
    let m = mock(&[]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    wait_ready(&gw).await;
    let reply = chat_with(
        &gw,
        &[("authorization", "Bearer a"), ("authorization", "Bearer b")],
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(code(&reply), "invalid_request_headers");
    assert!(mock_requests(&m).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_repeated_host_is_refused() {
    let gw = gateway(&[]);
    for head in [
        &b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"[..],
        b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
    ] {
        let (out, _) = raw_exchange(gw.addr, head, Duration::from_secs(5));
        assert_eq!(raw_status(&out), Some(400), "{:?}", head.escape_ascii());
    }
    // HTTP/1.0 does not require Host; one Host is fine.
    let (out, _) = raw_exchange(
        gw.addr,
        b"GET /health HTTP/1.0\r\n\r\n",
        Duration::from_secs(5),
    );
    assert!(out.starts_with(b"HTTP/1.0 200") || out.starts_with(b"HTTP/1.1 200"));
    let (out, _) = raw_exchange(
        gw.addr,
        b"GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    );
    assert_eq!(raw_status(&out), Some(200));
    // h2 carries :authority instead.
    let reply = send(
        &client(true),
        "GET",
        &format!("{}/health", gw.url()),
        &[],
        "",
    )
    .await;
    assert_eq!(reply.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_transfer_coding_is_501() {
    let m = mock(&[]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    wait_ready(&gw).await;
    let req =
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n\
                2\r\n{}\r\n0\r\n\r\n";
    let (out, _) = raw_exchange(gw.addr, req, Duration::from_secs(5));
    assert_eq!(
        raw_status(&out),
        Some(501),
        "{:?}",
        out.escape_ascii().to_string()
    );
    assert!(mock_requests(&m).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_named_in_connection_are_not_forwarded() {
    let m = mock(&[]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    wait_ready(&gw).await;
    let reply = chat_with(
        &gw,
        &[
            ("connection", "X-Request-Id, traceparent"),
            ("x-request-id", "hop"),
            ("traceparent", "hop"),
            ("x-correlation-id", "end"),
        ],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock_requests(&m).await;
    let headers = &seen.last().expect("one request")["headers"];
    assert_eq!(headers["x-correlation-id"], "end", "{headers}");
    assert!(headers.get("x-request-id").is_none(), "{headers}");
    assert!(headers.get("traceparent").is_none(), "{headers}");
}

/// A fake worker: answers every request on `/v1/chat/completions` with `reply`, anything
/// else with an empty 200. Reads each request head and its `Content-Length` body first.
fn fake_worker(reply: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || serve_fake(conn, reply));
        }
    });
    url
}

fn serve_fake(mut conn: TcpStream, reply: &'static [u8]) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < end + 4 + len {
            match conn.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let answer: &[u8] = if head.starts_with("post /v1/chat/completions") {
            reply
        } else {
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        };
        if conn.write_all(answer).is_err() {
            return;
        }
        buf.drain(..end + 4 + len);
    }
}

/// Registers `url` with a known runtime and no health checks, and waits until it serves.
async fn gateway_with_fake(url: &str) -> Proc {
    let gw = gateway(&[]);
    let spec = json!({
        "url": url,
        "runtime_type": "sglang",
        "health": {"disable_health_check": true},
    });
    let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    wait_ready(&gw).await;
    gw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_response_with_both_framings_is_relayed_whole() {
    let url = fake_worker(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\
          transfer-encoding: chunked\r\n\r\n1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n",
    );
    let gw = gateway_with_fake(&url).await;
    let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &chat()).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.text(), "abcdefghijklmnopqrstuvwxyz");
    // The raw client sees no Content-Length that disagrees with the body.
    let body = serde_json::to_vec(&chat()).expect("json");
    let mut req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let (out, _) = raw_exchange(gw.addr, &req, Duration::from_secs(5));
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(!text.contains("content-length: 3\r\n"), "{text}");
    assert!(text.contains("abcdefghijklmnopqrstuvwxyz"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_101_and_bogus_statuses_are_502() {
    for canned in [
        &b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: x\r\n\r\n"[..],
        b"HTTP/1.1 600 Odd\r\ncontent-length: 2\r\n\r\nhi",
        b"HTTP/1.1 999 Odd\r\ncontent-length: 2\r\n\r\nhi",
    ] {
        let url = fake_worker(canned);
        let gw = gateway_with_fake(&url).await;
        let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &chat()).await;
        assert_eq!(
            reply.status,
            502,
            "{:?}: {}",
            canned.escape_ascii(),
            reply.text()
        );
        assert_eq!(code(&reply), "worker_connection_error");
        let text = common::scrape(&gw).await;
        assert!(
            text.lines()
                .any(|l| l.starts_with("gw_worker_errors_total") && !l.ends_with(" 0")),
            "the worker's error is counted: {text}"
        );
    }
}

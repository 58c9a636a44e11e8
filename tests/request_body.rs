//! Request bodies, black box: what the gateway holds while a body arrives, and how long it
//! waits for one.
//!
//! - A body larger than `--max-buffered-request-bytes` is held only up to that limit, then
//!   streamed on to the worker (held prefix, then the rest), whether or not it declared a
//!   `Content-Length`; the gateway's resident memory does not grow with it.
//! - The bytes held for all requests together stay within `--max-buffered-request-total-bytes`;
//!   past it, a body streams instead of being held.
//! - A body that trickles in is cut off with 408 `request_timeout` at
//!   `--request-body-timeout-secs`, and it holds no admission token while it is read, so
//!   slow uploaders cannot shut out other clients.

use crate::common;
use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{gateway, mock, mock_requests, post_json, sample, scrape, wait_ready, Proc};
use serde_json::json;

const MIB: usize = 1024 * 1024;

/// The gateway's resident set size in bytes, from `/proc/<pid>/status`.
fn rss(gw: &Proc) -> usize {
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", gw.child.id())).expect("/proc status");
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024
}

/// A JSON chat body of exactly `len` bytes (the padding is a field the mock ignores).
fn chat_body(len: usize, fill: u8) -> Vec<u8> {
    let head =
        br#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"pad":""#;
    let tail = br#""}"#;
    let mut body = head.to_vec();
    body.resize(len - tail.len(), fill);
    body.extend_from_slice(tail);
    body
}

/// Posts a raw JSON body to the chat route over HTTP/1.1 (with its `Content-Length`).
async fn post_body(gw: &Proc, body: Vec<u8>) -> common::Reply {
    common::send(
        &common::client(false),
        "POST",
        &format!("{}/v1/chat/completions", gw.url()),
        &[("content-type", "application/json")],
        body,
    )
    .await
}

/// Reads one response from `s` (the connection closes after it) and returns its status.
fn read_status(s: &mut TcpStream) -> Option<u16> {
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    common::raw_status(&out)
}

/// Uploads `body` chunked (no `Content-Length`) in 1 MiB chunks, all but the last chunk;
/// reports on `sent`, waits for `go`, then ends the body and returns the status.
fn chunked_upload(
    addr: SocketAddr,
    body: Vec<u8>,
    sent: mpsc::Sender<()>,
    go: mpsc::Receiver<()>,
) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )
    .ok()?;
    for chunk in body.chunks(MIB) {
        s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .ok()?;
        s.write_all(chunk).ok()?;
        s.write_all(b"\r\n").ok()?;
    }
    sent.send(()).ok()?;
    go.recv_timeout(Duration::from_secs(60)).ok()?;
    s.write_all(b"0\r\n\r\n").ok()?;
    read_status(&mut s)
}

/// Three chunked uploads of 48 MiB each, held open before their last chunk, with a 1 MiB
/// buffering limit: the gateway holds a prefix of each, not the bodies (before the fix it
/// buffered them whole, up to `--max-payload-size`). The bodies reach the worker intact,
/// and the body-path metric says they streamed with their retry forfeited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_uploads_past_the_buffer_limit_stream_without_growing_memory() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--max-buffered-request-bytes",
        "1MiB",
    ]);
    wait_ready(&gw).await;
    let warm = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(warm.status, 200, "{}", warm.text());
    let before = rss(&gw);

    const LEN: usize = 48 * MIB;
    let mut finishers = Vec::new();
    let mut uploads = Vec::new();
    let (sent_tx, sent_rx) = mpsc::channel();
    for i in 0..3u8 {
        let (go_tx, go_rx) = mpsc::channel();
        finishers.push(go_tx);
        let sent = sent_tx.clone();
        let addr = gw.addr;
        uploads.push(tokio::task::spawn_blocking(move || {
            chunked_upload(addr, chat_body(LEN, b'a' + i), sent, go_rx)
        }));
    }
    for _ in 0..3 {
        sent_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("every upload sent its body");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = rss(&gw);
    let grown = during.saturating_sub(before);
    assert!(
        grown < 24 * MIB,
        "gateway RSS grew by {} MiB while three 48 MiB uploads were open",
        grown / MIB
    );
    for go in &finishers {
        go.send(()).expect("finish");
    }
    for upload in uploads {
        assert_eq!(upload.await.expect("upload thread"), Some(200));
    }

    let seen = mock_requests(&m).await;
    let big: Vec<_> = seen
        .iter()
        .filter(|r| r["body_len"].as_u64().is_some_and(|n| n > MIB as u64))
        .collect();
    assert_eq!(big.len(), 3, "three large bodies reached the worker");
    for r in &big {
        assert_eq!(r["body_len"], LEN, "{}", r["body_len"]);
        let body = r["body"].as_str().expect("body");
        let fill = body.as_bytes()[body.len() - 1];
        let expect = chat_body(LEN, fill);
        assert_eq!(
            body.as_bytes(),
            &expect[..body.len()],
            "the prefix arrived intact"
        );
    }
    let text = scrape(&gw).await;
    assert_eq!(
        sample(
            &text,
            r#"gw_router_request_body_path_total{path="streamed",reason="retry_forfeited"}"#
        ),
        Some(3.0),
        "{text}"
    );
}

/// With room for only 1 MiB of held bodies in total, a 3 MiB body within the 8 MiB
/// buffering limit streams instead of being held, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_buffer_budget_streams_the_body() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--max-buffered-request-bytes",
        "8MiB",
        "--max-buffered-request-total-bytes",
        "1MiB",
    ]);
    wait_ready(&gw).await;
    let reply = post_body(&gw, chat_body(3 * MIB, b'z')).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock_requests(&m).await;
    assert_eq!(
        seen.last().map(|r| r["body_len"].clone()),
        Some(json!(3 * MIB))
    );
    let text = scrape(&gw).await;
    assert_eq!(
        sample(
            &text,
            r#"gw_router_request_body_path_total{path="streamed",reason="buffer_budget_full"}"#
        ),
        Some(1.0),
        "{text}"
    );
}

/// Sends a head declaring 100 body bytes, then one byte every 200 ms; returns the status
/// the gateway answers (or `None` if it never does within 20 s).
fn slow_upload(addr: SocketAddr) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{",
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
    let started = Instant::now();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while started.elapsed() < Duration::from_secs(20) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                // Keep trickling; a closed write side is fine (the answer is on its way).
                let _ = s.write_all(b" ");
            }
            Err(_) => break,
        }
        if common::raw_status(&out).is_some() && out.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    common::raw_status(&out)
}

/// Two clients trickling their bodies with `--max-concurrent-requests 2` do not shut out a
/// third (before the fix each held an admission token while its body was read, for up to
/// the 1,800 s request timeout); the slow ones get 408 at `--request-body-timeout-secs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_uploads_time_out_and_do_not_hold_admission() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--max-concurrent-requests",
        "2",
        "--queue-timeout-secs",
        "2",
        "--request-body-timeout-secs",
        "3",
    ]);
    wait_ready(&gw).await;
    let started = Instant::now();
    let slow: Vec<_> = (0..2)
        .map(|_| {
            let addr = gw.addr;
            tokio::task::spawn_blocking(move || slow_upload(addr))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the normal client waited {:?}",
        started.elapsed()
    );
    for s in slow {
        assert_eq!(s.await.expect("slow thread"), Some(408));
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

/// A streamed upload (retries off) that stops sending is cut off after
/// `--request-body-idle-timeout-secs` of silence with 408, and the worker is not blamed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_streamed_upload_gets_408() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--disable-retries",
        "--request-body-idle-timeout-secs",
        "1",
    ]);
    wait_ready(&gw).await;
    let addr = gw.addr;
    let status = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).ok()?;
        s.write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"model\":",
        )
        .ok()?;
        read_status(&mut s)
    })
    .await
    .expect("thread");
    assert_eq!(status, Some(408));
    let text = scrape(&gw).await;
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("gw_worker_errors_total") && !l.ends_with(" 0")),
        "{text}"
    );
}

/// A body routing must read whole (the model under `--enable-igw`) that does not fit the
/// gateway-wide budget is refused with 503 `request_buffer_budget_full`, not cut short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_routing_must_hold_whole_is_refused_past_the_budget() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--enable-igw",
        "--max-buffered-request-total-bytes",
        "1MiB",
    ]);
    wait_ready(&gw).await;
    // A raw client: the gateway answers as soon as the budget is passed and closes without
    // reading the rest, so a client that stops at its first failed write (hyper's) may
    // never read the answer. This one writes on regardless and reads the answer meanwhile.
    let body = chat_body(3 * MIB, b'y');
    let mut conn = support::RawConn::connect(gw.addr);
    let mut writer = conn.stream.try_clone().expect("clone");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(head.as_bytes());
        let _ = writer.write_all(&body);
    });
    let reply = conn
        .read_response(Duration::from_secs(10))
        .expect("an answer before the connection closed");
    let _ = conn.stream.shutdown(std::net::Shutdown::Both);
    let _ = sender.join();
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    assert_eq!(reply.status, 503, "{text}");
    let answer: serde_json::Value = serde_json::from_str(&text).expect("json answer");
    assert_eq!(answer["error"]["code"], "request_buffer_budget_full");
    assert!(mock_requests(&m)
        .await
        .iter()
        .all(|r| r["body_len"].as_u64() < Some(MIB as u64)));
}

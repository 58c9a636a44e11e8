//! Edge limits, black box over raw sockets: oversized heads (431), ambiguous framing (400
//! and close), slow clients, idle keep-alive, connection reuse and h2 multiplexing.

use crate::common;
use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{gateway, mock, mock_requests, raw_status};
use http_body_util::{BodyExt, Full};
use serde_json::Value;
use support::{raw_roundtrip, RawConn};

/// A `GET /health` head with `fields` header fields in all (Host and Connection included).
fn head_with_fields(fields: usize) -> Vec<u8> {
    let mut req = String::from("GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n");
    for i in 0..fields - 2 {
        req.push_str(&format!("X-Field-{i}: v{i}\r\n"));
    }
    req.push_str("\r\n");
    req.into_bytes()
}

fn head_with_big_header(value_len: usize) -> Vec<u8> {
    let mut req = String::from("GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nX-Big: ");
    req.push_str(&"a".repeat(value_len));
    req.push_str("\r\n\r\n");
    req.into_bytes()
}

#[test]
fn more_than_100_header_fields_is_431() {
    let gw = gateway(&[]);
    let (reply, _) = raw_roundtrip(gw.addr, &head_with_fields(100), Duration::from_secs(5));
    assert_eq!(raw_status(&reply), Some(200), "100 fields are allowed");
    let (reply, _) = raw_roundtrip(gw.addr, &head_with_fields(101), Duration::from_secs(5));
    assert_eq!(
        raw_status(&reply),
        Some(431),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
}

#[test]
fn head_over_64_kib_is_431() {
    let gw = gateway(&[]);
    let (reply, _) = raw_roundtrip(
        gw.addr,
        &head_with_big_header(60 * 1024),
        Duration::from_secs(5),
    );
    assert_eq!(raw_status(&reply), Some(200), "a 60 KiB head is allowed");
    let (reply, _) = raw_roundtrip(
        gw.addr,
        &head_with_big_header(70 * 1024),
        Duration::from_secs(5),
    );
    assert_eq!(
        raw_status(&reply),
        Some(431),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
}

/// Both `Content-Length` and `Transfer-Encoding`, in either order: 400, then the connection
/// closes, nothing reaches the worker, and a request pipelined behind is not served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_is_400_and_close() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let body = serde_json::to_vec(&support::chat(false, Value::Null)).expect("json");
    let framings = [
        format!(
            "Content-Length: {}\r\nTransfer-Encoding: chunked\r\n",
            body.len()
        ),
        format!(
            "Transfer-Encoding: chunked\r\nContent-Length: {}\r\n",
            body.len()
        ),
    ];
    for framing in framings {
        let mut req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
             {framing}\r\n{:x}\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(&body);
        req.extend_from_slice(b"\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: gw\r\n\r\n");
        let started = Instant::now();
        let (reply, closed) = raw_roundtrip(gw.addr, &req, Duration::from_secs(5));
        let text = String::from_utf8_lossy(&reply).into_owned();
        assert!(text.starts_with("HTTP/1.1 400"), "{framing:?}: {text:?}");
        assert!(closed, "{framing:?}: the connection must be closed");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{framing:?}: closed only after {:?}",
            started.elapsed()
        );
        assert_eq!(
            text.matches("HTTP/1.1 ").count(),
            1,
            "{framing:?}: nothing after the 400 is served: {text:?}"
        );
    }
    assert!(mock_requests(&upstream).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_content_lengths_are_400() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let body = serde_json::to_vec(&support::chat(false, Value::Null)).expect("json");
    for (a, b) in [(body.len(), body.len() + 1), (body.len() - 1, body.len())] {
        let mut req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
             Content-Length: {a}\r\nContent-Length: {b}\r\n\r\n"
        )
        .into_bytes();
        req.extend_from_slice(&body);
        let (reply, closed) = raw_roundtrip(gw.addr, &req, Duration::from_secs(5));
        let text = String::from_utf8_lossy(&reply).into_owned();
        assert!(text.starts_with("HTTP/1.1 400"), "{a}/{b}: {text:?}");
        assert!(closed, "{a}/{b}: connection closed after the 400");
    }
    assert!(mock_requests(&upstream).await.is_empty());
}

/// Slowloris: a head trickling in one byte every 300 ms is cut off at the header read
/// timeout, while other clients are served at once meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_head_is_cut_off_and_others_are_served() {
    let gw = gateway(&["--header-read-timeout-secs", "1"]);
    let addr = gw.addr;
    let slow = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let started = Instant::now();
        s.write_all(b"GET /health HTTP/1.1\r\n")
            .expect("request line");
        let mut buf = [0u8; 1024];
        for byte in b"X-Slow: abcdefghijklmnopqrstuvwxyz0123456789".iter() {
            if s.write_all(&[*byte]).is_err() {
                return Some(started.elapsed());
            }
            match s.read(&mut buf) {
                // Any answer (408 or nothing) followed by the close is fine.
                Ok(0) => return Some(started.elapsed()),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => return Some(started.elapsed()),
            }
        }
        None
    });

    tokio::time::sleep(Duration::from_millis(400)).await;
    for _ in 0..4 {
        let started = Instant::now();
        let reply = common::get(&format!("{}/health", gw.url())).await;
        assert_eq!(reply.status, 200);
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "a normal request took {:?} next to the slow client",
            started.elapsed()
        );
    }

    let closed_after = slow.await.expect("slow client");
    let closed_after = closed_after.expect("the slow client was never cut off");
    assert!(
        closed_after >= Duration::from_millis(700),
        "cut off before the timeout: {closed_after:?}"
    );
    assert!(
        closed_after <= Duration::from_secs(3),
        "cut off only after {closed_after:?}"
    );
}

#[test]
fn idle_http1_connection_closes_after_keep_alive_timeout() {
    let gw = gateway(&[
        "--keep-alive-timeout-secs",
        "1",
        "--header-read-timeout-secs",
        "30",
    ]);
    let mut conn = RawConn::connect(gw.addr);
    conn.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        .expect("write");
    let resp = conn
        .read_response(Duration::from_secs(5))
        .expect("response");
    assert_eq!(resp.status, 200);
    assert_ne!(resp.header("connection"), Some("close"));
    let closed = conn.wait_closed(Duration::from_millis(3500));
    let closed = closed.expect("idle connection still open after 3.5 s");
    assert!(
        closed >= Duration::from_millis(500),
        "closed right after the response ({closed:?}), not by the idle timer"
    );
    assert!(conn.pending().is_empty(), "{:?}", conn.pending());
}

/// The header read timeout does not cut an idle HTTP/1 connection: between requests the
/// keep-alive timeout applies (it used to, so clients reusing connections raced it).
#[test]
fn idle_http1_connection_outlives_the_header_read_timeout() {
    let gw = gateway(&[
        "--keep-alive-timeout-secs",
        "75",
        "--header-read-timeout-secs",
        "1",
    ]);
    let mut conn = RawConn::connect(gw.addr);
    conn.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        .expect("write");
    let resp = conn
        .read_response(Duration::from_secs(5))
        .expect("response");
    assert_eq!(resp.status, 200);
    let closed = conn.wait_closed(Duration::from_millis(2500));
    assert_eq!(
        closed, None,
        "idle connection closed at the header read timeout"
    );
    conn.write(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
        .expect("write");
    let resp = conn.read_response(Duration::from_secs(5)).expect("reused");
    assert_eq!(resp.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_h2_connection_closes_after_keep_alive_timeout() {
    let gw = gateway(&[
        "--keep-alive-timeout-secs",
        "1",
        "--header-read-timeout-secs",
        "30",
    ]);
    let (mut send, driver) = support::h2_connection(gw.addr).await;
    let req = http::Request::get(format!("{}/health", gw.url()))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let idle_from = Instant::now();
    let ended = tokio::time::timeout(Duration::from_millis(3500), driver).await;
    assert!(ended.is_ok(), "idle h2 connection still open after 3.5 s");
    assert!(idle_from.elapsed() >= Duration::from_millis(500));
}

/// The idle timer never cuts a response that is still streaming.
async fn keep_alive_timeout_spares_active_streams(h2: bool) {
    let upstream = mock(&["--itl-ms", "100", "--output-tokens", "25"]);
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--keep-alive-timeout-secs",
        "1",
    ]);
    let c = common::client(h2);
    let resp = support::start_json(
        &c,
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, Value::Null),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let frames = support::read_frames(&mut body, Duration::from_secs(10)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let text = frames.text();
    assert!(text.contains("tok24 ") && text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_timeout_spares_active_streams_h1() {
    keep_alive_timeout_spares_active_streams(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_timeout_spares_active_streams_h2() {
    keep_alive_timeout_spares_active_streams(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_reuse_serves_five_requests_on_one_connection() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let chat = serde_json::to_vec(&support::chat(false, Value::Null)).expect("json");
    let embed = br#"{"input":"hello"}"#.to_vec();
    let post = |path: &str, body: &[u8]| {
        let mut req = format!(
            "POST {path} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        req.extend_from_slice(body);
        req
    };
    let requests: Vec<(Vec<u8>, &str)> = vec![
        (b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n".to_vec(), ""),
        (post("/v1/chat/completions", &chat), "chat.completion"),
        (
            b"GET /readiness HTTP/1.1\r\nHost: gw\r\n\r\n".to_vec(),
            "ready",
        ),
        (post("/v1/embeddings", &embed), "embedding"),
        (post("/v1/chat/completions", &chat), "chat.completion"),
    ];
    let mut conn = RawConn::connect(gw.addr);
    for (i, (req, needle)) in requests.iter().enumerate() {
        conn.write(req).expect("write on the same connection");
        let resp = conn
            .read_response(Duration::from_secs(5))
            .unwrap_or_else(|| panic!("request {i}: no response on the reused connection"));
        assert_eq!(resp.status, 200, "request {i}");
        let body = String::from_utf8_lossy(&resp.body);
        assert!(body.contains(needle), "request {i}: {body:?}");
    }
    assert!(conn.pending().is_empty());
    assert_eq!(mock_requests(&upstream).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_serves_20_concurrent_streams_on_one_connection() {
    let upstream = mock(&["--ttft-ms", "300", "--output-tokens", "4"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let (send, _driver) = support::h2_connection(gw.addr).await;
    let started = Instant::now();
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let mut send = send.clone();
            let url = format!("{}/v1/chat/completions", gw.url());
            tokio::spawn(async move {
                let body = support::chat(i % 2 == 0, Value::Null);
                let req = http::Request::post(url)
                    .header("content-type", "application/json")
                    .header("x-request-id", format!("req-{i}"))
                    .body(Full::new(Bytes::from(
                        serde_json::to_vec(&body).expect("json"),
                    )))
                    .expect("request");
                send.ready().await.expect("connection ready");
                let resp = send.send_request(req).await.expect("response");
                let status = resp.status().as_u16();
                let bytes = resp.into_body().collect().await.expect("body").to_bytes();
                (status, String::from_utf8_lossy(&bytes).into_owned())
            })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let (status, body) = task.await.expect("task");
        assert_eq!(status, 200, "stream {i}: {body}");
        if i % 2 == 0 {
            assert!(body.ends_with("data: [DONE]\n\n"), "stream {i}: {body}");
        } else {
            assert!(body.contains("tok3 "), "stream {i}: {body}");
        }
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(3),
        "20 streams of 300 ms took {elapsed:?}: not concurrent"
    );
    let seen = mock_requests(&upstream).await;
    assert_eq!(seen.len(), 20);
    let mut ids: Vec<&str> = seen
        .iter()
        .map(|r| r["headers"]["x-request-id"].as_str().unwrap_or_default())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 20, "every stream arrived once");
}

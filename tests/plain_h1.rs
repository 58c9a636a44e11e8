//! Plain HTTP/1.1 requests, which the server answers itself (`server/plain_h1.rs`), black
//! box over raw sockets: pipelined requests mixed with ones only hyper serves, answered
//! in order on one connection; a request trickled a byte at a time; `Connection: close`;
//! a client that leaves before its answer; bodies at and past the size the server reads
//! whole; streamed answers in chunked framing; and a storm of malformed heads, which must
//! get hyper's answers and leave the gateway serving.

use crate::common;
use crate::support;

use std::time::Duration;

use common::{gateway, mock, mock_requests};
use serde_json::{json, Value};
use support::RawConn;

const WAIT: Duration = Duration::from_secs(10);

fn chat_request(body: &Value, extra: &str) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn chunked_chat(body: &Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    )
    .into_bytes()
}

fn chat(stream: bool) -> Value {
    json!({"model": "mock-model", "stream": stream, "max_tokens": 4,
           "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn pipelined_plain_and_hyper_requests_are_answered_in_order_on_one_connection() {
    let worker = mock(&[]);
    let gw = gateway(&["--worker-urls", &worker.url()]);
    let mut conn = RawConn::connect(gw.addr);
    let mut burst = chat_request(&chat(false), "");
    burst.extend_from_slice(b"GET /nowhere HTTP/1.1\r\nHost: gw\r\n\r\n");
    burst.extend_from_slice(&chunked_chat(&chat(false)));
    burst.extend_from_slice(&chat_request(&chat(false), ""));
    burst.extend_from_slice(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n");
    conn.write(&burst).expect("write");
    let statuses: Vec<u16> = (0..5)
        .map(|i| {
            conn.read_response(WAIT)
                .unwrap_or_else(|| panic!("answer {i}"))
                .status
        })
        .collect();
    assert_eq!(statuses, [200, 404, 200, 200, 200]);
    // And the connection stays usable after hyper served a request on it.
    conn.write(&chat_request(&chat(false), "")).expect("write");
    let last = conn.read_response(WAIT).expect("the next answer");
    assert_eq!(last.status, 200);
    let body: Value = serde_json::from_slice(&last.body).expect("json");
    assert_eq!(body["object"], "chat.completion", "{body}");
}

#[test]
fn a_request_trickled_a_byte_at_a_time_is_answered() {
    let worker = mock(&[]);
    let gw = gateway(&["--worker-urls", &worker.url()]);
    let mut conn = RawConn::connect(gw.addr);
    for byte in chat_request(&chat(false), "") {
        conn.write(&[byte]).expect("write");
    }
    let answer = conn.read_response(WAIT).expect("an answer");
    assert_eq!(answer.status, 200);
    assert!(
        answer.header("date").is_some_and(|d| d.ends_with(" GMT")),
        "{answer:?}"
    );
    assert_eq!(
        answer.header("content-length").map(str::to_owned),
        Some(answer.body.len().to_string())
    );
}

#[test]
fn connection_close_is_answered_then_the_connection_ends() {
    let worker = mock(&[]);
    let gw = gateway(&["--worker-urls", &worker.url()]);
    let mut conn = RawConn::connect(gw.addr);
    let mut burst = chat_request(&chat(false), "Connection: close\r\n");
    // Nothing after a close is served.
    burst.extend_from_slice(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n");
    conn.write(&burst).expect("write");
    let answer = conn.read_response(WAIT).expect("an answer");
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(conn.wait_closed(WAIT).is_some(), "closed after the answer");
    assert!(
        conn.pending().is_empty(),
        "nothing answered after the close"
    );
}

#[test]
fn streamed_answers_are_chunked_and_complete() {
    let worker = mock(&[]);
    let gw = gateway(&["--worker-urls", &worker.url()]);
    let mut conn = RawConn::connect(gw.addr);
    for _ in 0..3 {
        conn.write(&chat_request(&chat(true), "")).expect("write");
        let answer = conn.read_response(WAIT).expect("a stream");
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("transfer-encoding"), Some("chunked"));
        let text = String::from_utf8(answer.body).expect("utf-8");
        let events = support::stream_events(&text);
        assert!(events.len() >= 2, "{text}");
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }
}

#[test]
fn bodies_at_and_past_the_whole_read_size_reach_the_worker_intact() {
    let worker = mock(&[]);
    let gw = gateway(&["--worker-urls", &worker.url()]);
    for size in [15 * 1024, 16 * 1024, 64 * 1024, 1024 * 1024] {
        let mut body = chat(false);
        body["messages"][0]["content"] = json!("x".repeat(size));
        let mut conn = RawConn::connect(gw.addr);
        conn.write(&chat_request(&body, "")).expect("write");
        let answer = conn.read_response(WAIT).expect("an answer");
        assert_eq!(answer.status, 200, "{size}: {answer:?}");
    }
    let seen = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(mock_requests(&worker));
    let lengths: Vec<u64> = seen.iter().filter_map(|r| r["body_len"].as_u64()).collect();
    assert_eq!(lengths.len(), 4, "{lengths:?}");
    for (got, size) in lengths
        .iter()
        .zip([15 * 1024, 16 * 1024, 64 * 1024, 1024 * 1024])
    {
        assert!(
            *got > size && *got < size + 200,
            "{size} sent, {got} relayed"
        );
    }
}

#[test]
fn a_client_that_leaves_before_its_answer_does_not_hold_up_the_next() {
    let worker = mock(&["--ttft-ms", "300"]);
    let gw = gateway(&["--worker-urls", &worker.url()]);
    for _ in 0..20 {
        let mut gone = RawConn::connect(gw.addr);
        gone.write(&chat_request(&chat(false), "")).expect("write");
        drop(gone);
    }
    let mut conn = RawConn::connect(gw.addr);
    conn.write(&chat_request(&chat(false), "")).expect("write");
    assert_eq!(conn.read_response(WAIT).expect("an answer").status, 200);
}

#[test]
fn malformed_and_odd_heads_get_hyper_answers_and_the_gateway_keeps_serving() {
    let worker = mock(&[]);
    let gw = gateway(&["--worker-urls", &worker.url()]);
    let many: String = (0..120).map(|i| format!("X-{i}: v\r\n")).collect();
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GET / HTTP/1.1\r\nbad header\r\n\r\n".to_vec(), 400),
        (b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n".to_vec(), 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n".to_vec(), 400),
        (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".to_vec(), 400),
        (format!("GET / HTTP/1.1\r\n{many}\r\n").into_bytes(), 431),
        (format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(70 * 1024)).into_bytes(), 431),
    ];
    for (request, status) in cases {
        let mut conn = RawConn::connect(gw.addr);
        conn.write(&request).expect("write");
        let answer = conn.read_response(WAIT);
        assert_eq!(
            answer.map(|a| a.status),
            Some(status),
            "{:?}",
            String::from_utf8_lossy(&request[..request.len().min(80)])
        );
    }
    let mut conn = RawConn::connect(gw.addr);
    conn.write(&chat_request(&chat(false), "")).expect("write");
    assert_eq!(conn.read_response(WAIT).expect("an answer").status, 200);
}

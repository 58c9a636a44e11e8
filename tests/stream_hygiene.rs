//! Stream hygiene, black box: a worker that stalls or dies in the middle of a stream, or a
//! deadline that passes during one, gives the client one well-formed terminal error event
//! in the route's dialect and a cleanly ended stream (never a silently truncated body),
//! cancels the upstream request and counts a `streaming_error`; and clients that stop
//! reading get backpressure, not buffering in the gateway.

use crate::common;
use crate::support;

use std::time::{Duration, Instant};

use common::{client, eventually, gateway, get, mock, scrape, Proc};
use serde_json::{json, Value};
use support::{generation_body, read_frames, start_json, Frames};
use tokio::io::AsyncWriteExt;

/// The relayed inference routes and their `endpoint` metrics labels.
const ROUTES: [(&str, &str); 5] = [
    ("/v1/chat/completions", "chat"),
    ("/v1/completions", "completions"),
    ("/generate", "generate"),
    ("/v1/messages", "messages"),
    ("/v1/responses", "responses"),
];

const STALLED: &str = "the worker sent nothing for 1 s in the middle of the response";
const BROKEN: &str = "the worker closed the connection or sent an invalid response";
const LATE: &str = "the worker did not answer within the request timeout";

/// `gw_router_request_errors_total{error_type="streaming_error"}` of `endpoint`, summed
/// over its other labels.
async fn streaming_errors(gw: &Proc, endpoint: &str) -> f64 {
    let endpoint = format!("endpoint=\"{endpoint}\"");
    scrape(gw)
        .await
        .lines()
        .filter(|l| l.starts_with("gw_router_request_errors_total{"))
        .filter(|l| l.contains("error_type=\"streaming_error\"") && l.contains(&endpoint))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn mock_stats(m: &Proc) -> Value {
    get(&format!("{}/mock/stats", m.url())).await.json()
}

/// Starts a stream on `path` with the mock override `fault` and reads it to its end.
async fn stream(gw: &Proc, path: &str, fault: Value) -> (Frames, Duration) {
    let started = Instant::now();
    let resp = start_json(
        &client(false),
        &format!("{}{path}", gw.url()),
        &generation_body(path, true, fault),
    )
    .await;
    assert_eq!(resp.status(), 200, "{path}");
    let mut body = resp.into_body();
    let frames = read_frames(&mut body, Duration::from_secs(15)).await;
    (frames, started.elapsed())
}

/// The highest `sequence_number` of the Responses events in `text`.
fn last_sequence(text: &str) -> u64 {
    text.split("\n\n")
        .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .filter_map(|v| v["sequence_number"].as_u64())
        .max()
        .expect("a Responses event before the failure")
}

/// The exact terminal event of `path` for the gateway error (`kind`, `code`, `message`),
/// field order included; `before` is the stream so far (Responses continues its sequence).
fn terminal_event(path: &str, kind: &str, code: &str, message: &str, before: &str) -> String {
    match path {
        "/v1/messages" => format!(
            "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"api_error\",\
             \"code\":\"{code}\",\"message\":\"{message}\"}}}}\n\n"
        ),
        "/v1/responses" => format!(
            "event: response.failed\ndata: {{\"type\":\"response.failed\",\"sequence_number\":{},\
             \"response\":{{\"object\":\"response\",\"status\":\"failed\",\
             \"error\":{{\"code\":\"{code}\",\"message\":\"{message}\"}}}}}}\n\n",
            last_sequence(before) + 1
        ),
        _ => format!(
            "data: {{\"error\":{{\"type\":\"{kind}\",\"code\":\"{code}\",\
             \"message\":\"{message}\",\"param\":null}}}}\n\n"
        ),
    }
}

/// The stream relayed tokens 0..3, then ended cleanly with exactly the terminal event.
fn assert_ends_with_terminal(path: &str, frames: &Frames, kind: &str, code: &str, message: &str) {
    assert!(frames.clean_end(), "{path}: {frames:?}");
    let text = frames.text();
    for i in 0..3 {
        assert!(
            text.contains(&format!("tok{i} ")),
            "{path}: token {i} in {text:?}"
        );
    }
    assert!(!text.contains("tok3 "), "{path}: {text:?}");
    let last_start = text.trim_end().rfind("\n\n").map_or(0, |i| i + 2);
    let event = terminal_event(path, kind, code, message, &text[..last_start]);
    let before = text
        .strip_suffix(&event)
        .unwrap_or_else(|| panic!("{path}: stream should end with {event:?}: {text:?}"));
    assert!(before.ends_with("\n\n"), "{path}: whole events before it");
    assert!(!before.contains("\"error\":{"), "{path}: one error event");
}

/// Waits until the mock has no stream running: the gateway cancelled it.
async fn assert_upstream_cancelled(m: &Proc, path: &str) {
    assert!(
        eventually(Duration::from_secs(5), || async {
            mock_stats(m).await["inflight"] == 0
        })
        .await,
        "{path}: the upstream request was not cancelled: {}",
        mock_stats(m).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_ends_with_the_routes_timeout_event() {
    let m = mock(&["--output-tokens", "50", "--itl-ms", "5"]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--stream-stall-timeout-secs",
        "1",
    ]);
    for (path, endpoint) in ROUTES {
        let (frames, elapsed) = stream(&gw, path, json!({"stall_after_tokens": 3})).await;
        assert_ends_with_terminal(path, &frames, "Gateway Timeout", "worker_timeout", STALLED);
        assert!(
            elapsed >= Duration::from_secs(1),
            "{path}: after {elapsed:?}"
        );
        assert!(
            elapsed < Duration::from_secs(5),
            "{path}: after {elapsed:?}"
        );
        assert_upstream_cancelled(&m, path).await;
        assert_eq!(streaming_errors(&gw, endpoint).await, 1.0, "{path}");
    }
    assert_eq!(mock_stats(&m).await["cancelled"], ROUTES.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dying_mid_stream_ends_with_the_routes_connection_error_event() {
    let m = mock(&["--output-tokens", "50", "--itl-ms", "5"]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    for (path, endpoint) in ROUTES {
        let (frames, elapsed) = stream(&gw, path, json!({"drop_after_tokens": 3})).await;
        assert_ends_with_terminal(
            path,
            &frames,
            "Bad Gateway",
            "worker_connection_error",
            BROKEN,
        );
        assert!(
            elapsed < Duration::from_secs(3),
            "{path}: after {elapsed:?}"
        );
        assert_eq!(streaming_errors(&gw, endpoint).await, 1.0, "{path}");
    }
    // The gateway still serves streams on the same worker.
    let (frames, _) = stream(&gw, "/v1/chat/completions", Value::Null).await;
    assert!(frames.clean_end() && frames.text().ends_with("data: [DONE]\n\n"));
    assert_eq!(streaming_errors(&gw, "chat").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_passing_mid_stream_ends_with_a_timeout_event() {
    let m = mock(&["--output-tokens", "50", "--itl-ms", "5"]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--request-timeout-secs",
        "1",
        "--stream-stall-timeout-secs",
        "0",
    ]);
    let path = "/v1/chat/completions";
    let (frames, elapsed) = stream(&gw, path, json!({"stall_after_tokens": 3})).await;
    assert_ends_with_terminal(path, &frames, "Gateway Timeout", "worker_timeout", LATE);
    assert!(elapsed < Duration::from_secs(4), "after {elapsed:?}");
    assert_upstream_cancelled(&m, path).await;
    assert_eq!(streaming_errors(&gw, "chat").await, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_timeout_of_zero_lets_a_silent_stream_wait() {
    let m = mock(&["--output-tokens", "50", "--itl-ms", "5"]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--stream-stall-timeout-secs",
        "0",
    ]);
    let resp = start_json(
        &client(false),
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, json!({"stall_after_tokens": 3})),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let frames = read_frames(&mut body, Duration::from_millis(2500)).await;
    assert!(frames.timed_out, "still open: {frames:?}");
    let text = frames.text();
    assert!(
        text.contains("tok2 ") && !text.contains("error"),
        "{text:?}"
    );
    assert_eq!(streaming_errors(&gw, "chat").await, 0.0);
    assert_eq!(mock_stats(&m).await["inflight"], 1);
}

/// The gateway's resident set, in KiB.
fn rss_kib(gw: &Proc) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.child.id()))
        .expect("the gateway's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Opens a chat stream on a socket with a small receive buffer and never reads it.
async fn non_reading_client(addr: std::net::SocketAddr, body: &[u8]) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut stream = socket.connect(addr).await.expect("connect");
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(body).await.expect("body");
    stream
}

/// 200 clients start streams far longer than every buffer on the way (each stream is
/// over 100 MB of events, produced as fast as the mock can) and stop reading. The bound,
/// per stopped stream: hyper polls a relayed body only when it may buffer more, up to 16
/// queued frames (vectored writes, epoll) or its write buffer's 400 KiB maximum (copied
/// flat: the io_uring adapter has no vectored writes), and the adapter copies at most one
/// 64 KiB chunk per write, taking no more until it completes; the upstream connection is
/// no longer read once its body is not polled, its read buffer grown at most to hyper's
/// 400 KiB (body frames still queued may keep an older read buffer alive a while). So the
/// RSS grows by less than 1 MiB a stream, 200 MiB, sampled for 8 s while the mock
/// produces events as fast as it can, where buffering the streams would grow it by
/// hundreds of megabytes a second (measured: 300 to 750 KiB a stream on epoll, 300 to
/// 650 on io_uring, in steps as buffers grow, then flat). Meanwhile the mock's streams
/// stay open (held back, not finished), and another client is served whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_reading_get_backpressure_not_buffering() {
    const CLIENTS: usize = 200;
    const BOUND_KIB: u64 = CLIENTS as u64 * 1024;
    let m = mock(&["--output-tokens", "1000000", "--threads", "1"]);
    let gw = gateway(&["--worker-urls", &m.url(), "--runtime-worker-threads", "2"]);
    common::wait_ready(&gw).await;
    // A first stream warms the gateway up (pools, metrics series, allocator arenas).
    let (frames, _) = stream(&gw, "/v1/chat/completions", json!({"output_tokens": 16})).await;
    assert!(frames.clean_end());
    let before = rss_kib(&gw);

    let body = serde_json::to_vec(&support::chat(true, Value::Null)).expect("json");
    let mut held = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        held.push(non_reading_client(gw.addr, &body).await);
    }
    assert!(
        eventually(Duration::from_secs(20), || async {
            mock_stats(&m).await["inflight"] == CLIENTS
        })
        .await,
        "every stream started: {}",
        mock_stats(&m).await
    );
    // Long enough for unbounded buffering to show: unthrottled, the mock would finish
    // each stream in a few seconds.
    let mut samples = Vec::new();
    for _ in 0..16 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        samples.push(rss_kib(&gw));
    }
    let peak = samples.iter().copied().max().unwrap_or(before);
    let grown = peak.saturating_sub(before);
    assert!(
        grown < BOUND_KIB,
        "gateway RSS grew by {grown} KiB with {CLIENTS} stopped clients (bound {BOUND_KIB})"
    );
    let stats = mock_stats(&m).await;
    assert_eq!(
        stats["inflight"], CLIENTS,
        "held back, not finished: {stats}"
    );

    // Another client is still served, start to end.
    let (frames, elapsed) = stream(&gw, "/v1/chat/completions", json!({"output_tokens": 16})).await;
    assert!(frames.clean_end(), "{frames:?}");
    assert!(frames.text().ends_with("data: [DONE]\n\n"));
    assert!(elapsed < Duration::from_secs(5), "served in {elapsed:?}");
    eprintln!("RSS {before} KiB before, then {samples:?} KiB with {CLIENTS} stopped clients");

    // The stopped clients leave: their upstream streams are cancelled.
    drop(held);
    assert!(
        eventually(Duration::from_secs(20), || async {
            mock_stats(&m).await["inflight"] == 0
        })
        .await,
        "streams cancelled: {}",
        mock_stats(&m).await
    );
}

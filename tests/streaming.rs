//! Streaming relay, black box: SSE streams arrive complete and unbuffered over HTTP/1.1 and
//! h2c, a worker dying mid-stream ends the client's stream promptly, and a client leaving
//! mid-stream cancels the upstream request.

use crate::common;
use crate::support;

use std::time::{Duration, Instant};

use common::{client, gateway, get, mock, mock_requests, Proc};
use serde_json::{json, Value};
use support::{read_frames, start_json};

/// The event that closes each API's stream.
fn end_marker(path: &str) -> &'static str {
    match path {
        "/v1/messages" => "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        "/v1/responses" => "event: response.completed\n",
        _ => "data: [DONE]\n\n",
    }
}

async fn streams_arrive_complete(h2: bool) {
    const TOKENS: u64 = 6;
    let upstream = mock(&["--output-tokens", &TOKENS.to_string(), "--itl-ms", "5"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let c = client(h2);
    let paths = [
        "/v1/chat/completions",
        "/v1/completions",
        "/generate",
        "/v1/messages",
        "/v1/responses",
    ];
    for path in paths {
        let body = support::generation_body(path, true, Value::Null);
        let resp = start_json(&c, &format!("{}{path}", gw.url()), &body).await;
        assert_eq!(resp.status(), 200, "{path}");
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(ct.starts_with("text/event-stream"), "{path}: {ct}");
        let mut body_in = resp.into_body();
        let frames = read_frames(&mut body_in, Duration::from_secs(10)).await;
        assert!(frames.clean_end(), "{path}: {frames:?}");
        let text = frames.text();
        let marker = end_marker(path);
        if path == "/v1/responses" {
            let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
            assert!(
                last.starts_with(marker),
                "{path}: last event {last:?} of {text:?}"
            );
        } else {
            assert!(text.ends_with(marker), "{path}: stream ends {text:?}");
        }
        for i in 0..TOKENS {
            assert!(
                text.contains(&format!("tok{i} ")),
                "{path}: token {i} in {text:?}"
            );
        }
        assert!(!text.contains(&format!("tok{TOKENS} ")), "{path}");
        // Every event is whole: the stream splits into complete `\n\n`-ended events.
        assert!(text.ends_with("\n\n"), "{path}");
    }
    // Every stream went upstream with its own path.
    let seen: Vec<String> = mock_requests(&upstream)
        .await
        .iter()
        .map(|r| r["path"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(seen, paths);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_arrive_complete_h1() {
    streams_arrive_complete(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_arrive_complete_h2() {
    streams_arrive_complete(true).await;
}

/// Token events are relayed as they are produced, not buffered.
async fn events_are_not_buffered(h2: bool) {
    let upstream = mock(&["--itl-ms", "50", "--output-tokens", "10"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let c = client(h2);
    let resp = start_json(
        &c,
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, Value::Null),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let frames = read_frames(&mut body, Duration::from_secs(10)).await;
    assert!(frames.clean_end(), "{frames:?}");
    assert!(frames.text().ends_with("data: [DONE]\n\n"));

    // One arrival time per content event (a frame may carry several events).
    let mut arrivals: Vec<Instant> = Vec::new();
    for (at, data) in &frames.frames {
        let events = String::from_utf8_lossy(data)
            .matches("\"content\":\"tok")
            .count();
        arrivals.extend(std::iter::repeat_n(*at, events));
    }
    assert_eq!(
        arrivals.len(),
        10,
        "ten content events: {:?}",
        frames.text()
    );
    let spread = arrivals[9] - arrivals[0];
    assert!(
        spread >= Duration::from_millis(350),
        "content events arrived within {spread:?}: buffered?"
    );
    for window in arrivals.windows(4) {
        let bunch = window[3] - window[0];
        assert!(
            bunch > Duration::from_millis(10),
            "four content events within {bunch:?}: buffered?"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_not_buffered_h1() {
    events_are_not_buffered(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_not_buffered_h2() {
    events_are_not_buffered(true).await;
}

/// A worker that dies after three tokens: the client's stream ends promptly, without the
/// end-of-stream marker (an error or a truncated body), never hangs.
async fn worker_drop_mid_stream_ends_client_stream(h2: bool) {
    let upstream = mock(&["--itl-ms", "20", "--output-tokens", "10"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let c = client(h2);
    let started = Instant::now();
    let resp = start_json(
        &c,
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, json!({"drop_after_tokens": 3})),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let frames = read_frames(&mut body, Duration::from_secs(5)).await;
    let elapsed = started.elapsed();
    assert!(!frames.timed_out, "stream hung after the worker dropped");
    assert!(
        elapsed < Duration::from_secs(2),
        "stream ended only after {elapsed:?}"
    );
    let text = frames.text();
    for i in 0..3 {
        assert!(
            text.contains(&format!("tok{i} ")),
            "token {i} relayed: {text:?}"
        );
    }
    assert!(!text.contains("tok3 "), "{text:?}");
    assert!(
        !text.contains("[DONE]"),
        "truncated stream must not look complete"
    );
    assert!(
        frames.error.is_some() || !text.contains("finish_reason\":\"stop"),
        "{frames:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_drop_mid_stream_ends_client_stream_h1() {
    worker_drop_mid_stream_ends_client_stream(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_drop_mid_stream_ends_client_stream_h2() {
    worker_drop_mid_stream_ends_client_stream(true).await;
}

async fn mock_stats(mock: &Proc) -> Value {
    get(&format!("{}/mock/stats", mock.url())).await.json()
}

/// A client that goes away mid-stream cancels the upstream request.
async fn client_disconnect_cancels_upstream(h2: bool) {
    let upstream = mock(&["--itl-ms", "20", "--output-tokens", "200"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let c = client(h2);
    let resp = start_json(
        &c,
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, Value::Null),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let seen = support::read_until(&mut body, "tok3 ", Duration::from_secs(5)).await;
    assert!(seen.contains("tok3 "), "first events arrive: {seen:?}");
    let stats = mock_stats(&upstream).await;
    assert_eq!(stats["inflight"], 1, "{stats}");
    assert_eq!(stats["cancelled"], 0, "{stats}");

    drop(body);
    let cancelled = common::eventually(Duration::from_secs(2), || async {
        mock_stats(&upstream).await["cancelled"] == 1
    })
    .await;
    let stats = mock_stats(&upstream).await;
    assert!(
        cancelled,
        "upstream stream not cancelled within 2 s: {stats}"
    );
    assert_eq!(stats["inflight"], 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_upstream_h1() {
    client_disconnect_cancels_upstream(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_cancels_upstream_h2() {
    client_disconnect_cancels_upstream(true).await;
}

/// The same on HTTP/2 when only the stream is reset and the connection stays up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_stream_reset_cancels_upstream_while_connection_lives() {
    let upstream = mock(&["--itl-ms", "20", "--output-tokens", "200"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let (mut send, _driver) = support::h2_connection(gw.addr).await;
    let req = http::Request::post(format!("{}/v1/chat/completions", gw.url()))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            serde_json::to_vec(&support::chat(true, Value::Null)).expect("json"),
        )))
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let seen = support::read_until(&mut body, "tok2 ", Duration::from_secs(5)).await;
    assert!(seen.contains("tok2 "), "{seen:?}");
    drop(body);
    let cancelled = common::eventually(Duration::from_secs(2), || async {
        mock_stats(&upstream).await["cancelled"] == 1
    })
    .await;
    assert!(cancelled, "{}", mock_stats(&upstream).await);
    // The connection still serves requests.
    let req = http::Request::get(format!("{}/health", gw.url()))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let resp = send.send_request(req).await.expect("second stream");
    assert_eq!(resp.status(), 200);
}

/// A client that goes away before the response head (the worker is still thinking)
/// cancels the upstream request too: the worker's connection closes and its request ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_before_response_cancels_upstream_h1() {
    use std::io::Write;
    let upstream = mock(&["--stall"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let body = serde_json::to_vec(&support::chat(false, Value::Null)).expect("json");
    let mut req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(&body);
    let mut s = std::net::TcpStream::connect(gw.addr).expect("connect");
    s.write_all(&req).expect("write");
    let arrived = common::eventually(Duration::from_secs(3), || async {
        mock_stats(&upstream).await["inflight"] == 1
    })
    .await;
    assert!(arrived, "request never reached the worker");
    drop(s);
    let ended = common::eventually(Duration::from_secs(2), || async {
        mock_stats(&upstream).await["inflight"] == 0
    })
    .await;
    assert!(
        ended,
        "worker request still running 2 s after the client left: {}",
        mock_stats(&upstream).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_before_response_cancels_upstream_h2() {
    let upstream = mock(&["--stall"]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let (mut send, _driver) = support::h2_connection(gw.addr).await;
    let req = http::Request::post(format!("{}/v1/chat/completions", gw.url()))
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(
            serde_json::to_vec(&support::chat(false, Value::Null)).expect("json"),
        )))
        .expect("request");
    let pending = tokio::spawn(send.send_request(req));
    let arrived = common::eventually(Duration::from_secs(3), || async {
        mock_stats(&upstream).await["inflight"] == 1
    })
    .await;
    assert!(arrived, "request never reached the worker");
    // Dropping the response future resets the stream; the connection stays up.
    pending.abort();
    let ended = common::eventually(Duration::from_secs(2), || async {
        mock_stats(&upstream).await["inflight"] == 0
    })
    .await;
    assert!(
        ended,
        "worker request still running 2 s after the stream was reset: {}",
        mock_stats(&upstream).await
    );
}

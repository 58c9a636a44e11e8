//! Admission control, black box (spec 2 "Limits", spec 3 "HTTP layer"): the concurrency
//! limiter with its FIFO queue, queue-full and queue-timeout answers, a token held for a
//! whole stream, a client leaving the queue, the rate limiter, the media budget, and the
//! `gw_admission_*` / `gw_http_rate_limit_total` families.

use crate::common;
use crate::support;

use std::time::{Duration, Instant};

use common::{client, gateway, mock, mock_requests, post_json, sample, scrape, Proc, Reply};
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

/// A chat body whose user message carries `tag` (to find it in the mock's log) and the
/// mock's per-request override `mock`.
fn tagged(tag: &str, mock: Value) -> Value {
    let mut body = support::chat(false, mock);
    body["messages"] = json!([{"role": "user", "content": format!("request {tag}")}]);
    body
}

async fn chat(gw: &Proc, body: Value) -> Reply {
    post_json(&format!("{}{CHAT}", gw.url()), &body).await
}

/// A gateway in front of `m` with one admission token and `extra` flags.
fn one_token(m: &Proc, extra: &[&str]) -> Proc {
    let url = m.url();
    let mut args = vec!["--worker-urls", &url, "--max-concurrent-requests", "1"];
    args.extend_from_slice(extra);
    gateway(&args)
}

/// Starts a chat request in the background.
fn spawn_chat(gw: &Proc, body: Value) -> tokio::task::JoinHandle<Reply> {
    let url = format!("{}{CHAT}", gw.url());
    tokio::spawn(async move { post_json(&url, &body).await })
}

/// Waits until the series reaches `value`.
async fn until_sample(gw: &Proc, series: &str, value: f64) {
    let ok = common::eventually(Duration::from_secs(10), || async {
        sample(&scrape(gw).await, series) == Some(value)
    })
    .await;
    assert!(ok, "{series} never became {value}:\n{}", scrape(gw).await);
}

/// The tags of the chat requests the mock received, in arrival order.
async fn arrival_order(m: &Proc) -> Vec<String> {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == CHAT)
        .filter_map(|r| {
            let body: Value = serde_json::from_str(r["body"].as_str()?).ok()?;
            let text = body["messages"][0]["content"].as_str()?.to_owned();
            text.strip_prefix("request ").map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_queue_is_fifo_and_bounded() {
    let m = mock(&[]);
    let gw = one_token(
        &m,
        &[
            "--queue-size",
            "4",
            "--queue-timeout-secs",
            "30",
            "--disable-retries",
        ],
    );
    // The first request holds the only token for 1.5 s.
    let holder = spawn_chat(&gw, tagged("A", json!({"ttft_ms": 1500})));
    until_sample(&gw, "gw_admission_inflight", 1.0).await;
    let mut queued = Vec::new();
    for (i, tag) in ["B", "C", "D", "E"].into_iter().enumerate() {
        queued.push(spawn_chat(&gw, tagged(tag, Value::Null)));
        until_sample(&gw, "gw_admission_queue_depth", (i + 1) as f64).await;
    }
    // The queue is full: refused at once.
    let started = Instant::now();
    let refused = chat(&gw, tagged("F", Value::Null)).await;
    assert!(started.elapsed() < Duration::from_secs(1));
    support::assert_gateway_error(&refused, 429, "admission_queue_full");
    assert_eq!(holder.await.unwrap().status, 200);
    for q in queued {
        assert_eq!(q.await.unwrap().status, 200);
    }
    assert_eq!(arrival_order(&m).await, ["A", "B", "C", "D", "E"]);
    let text = scrape(&gw).await;
    assert_eq!(
        sample(&text, r#"gw_admission_queue_rejected_total{reason="full"}"#),
        Some(1.0)
    );
    // Only the request admitted without waiting is an `allowed` decision.
    assert_eq!(
        sample(&text, r#"gw_http_rate_limit_total{result="allowed"}"#),
        Some(1.0)
    );
    assert_eq!(sample(&text, "gw_admission_inflight"), Some(0.0));
    assert_eq!(sample(&text, "gw_admission_queue_depth"), Some(0.0));
    assert_eq!(
        sample(
            &text,
            r#"gw_http_responses_total{path="/v1/chat/completions",status_code="429",error_code="admission_queue_full"}"#
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_holds_its_token_until_the_last_byte() {
    let m = mock(&[]);
    let gw = one_token(&m, &["--queue-size", "0"]);
    let c = client(false);
    let body = support::chat(true, json!({"itl_ms": 100, "output_tokens": 8}));
    let mut resp = support::start_json(&c, &format!("{}{CHAT}", gw.url()), &body).await;
    assert_eq!(resp.status(), 200);
    // Head received, body still streaming: no token left, no queue.
    let refused = chat(&gw, tagged("B", Value::Null)).await;
    support::assert_gateway_error(&refused, 429, "admission_queue_full");
    let frames = support::read_frames(resp.body_mut(), Duration::from_secs(10)).await;
    assert!(frames.clean_end(), "{:?}", frames.error);
    assert!(frames.text().contains("[DONE]"), "{}", frames.text());
    // The stream is over: its token is back.
    let ok = common::eventually(Duration::from_secs(5), || async {
        chat(&gw, tagged("C", Value::Null)).await.status == 200
    })
    .await;
    assert!(ok);
    let text = scrape(&gw).await;
    assert!(sample(&text, r#"gw_http_rate_limit_total{result="rejected"}"#) >= Some(1.0));
    // With queueing off, a refusal is counted only as a limiter decision.
    assert_eq!(
        sample(&text, r#"gw_admission_queue_rejected_total{reason="full"}"#),
        None,
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_long_wait_times_out_with_503() {
    let m = mock(&[]);
    let gw = one_token(&m, &["--queue-timeout-secs", "1", "--disable-retries"]);
    let holder = spawn_chat(&gw, tagged("A", json!({"ttft_ms": 3000})));
    until_sample(&gw, "gw_admission_inflight", 1.0).await;
    let started = Instant::now();
    let late = chat(&gw, tagged("B", Value::Null)).await;
    let waited = started.elapsed();
    support::assert_gateway_error(&late, 503, "admission_queue_timeout");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500),
        "{waited:?}"
    );
    assert_eq!(holder.await.unwrap().status, 200);
    let text = scrape(&gw).await;
    assert_eq!(
        sample(
            &text,
            r#"gw_admission_queue_rejected_total{reason="timeout"}"#
        ),
        Some(1.0)
    );
    // The timed-out request never reached the worker.
    assert_eq!(arrival_order(&m).await, ["A"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_leaves_the_queue_gives_its_seat_back() {
    let m = mock(&[]);
    let gw = one_token(
        &m,
        &[
            "--queue-size",
            "1",
            "--queue-timeout-secs",
            "30",
            "--disable-retries",
        ],
    );
    let holder = spawn_chat(&gw, tagged("A", json!({"ttft_ms": 2500})));
    until_sample(&gw, "gw_admission_inflight", 1.0).await;
    let leaver = spawn_chat(&gw, tagged("B", Value::Null));
    until_sample(&gw, "gw_admission_queue_depth", 1.0).await;
    // The client goes away (its connection closes with the task).
    leaver.abort();
    until_sample(&gw, "gw_admission_queue_depth", 0.0).await;
    // The seat is free again: the next request queues instead of being refused.
    let next = spawn_chat(&gw, tagged("C", Value::Null));
    until_sample(&gw, "gw_admission_queue_depth", 1.0).await;
    assert_eq!(holder.await.unwrap().status, 200);
    assert_eq!(next.await.unwrap().status, 200);
    assert_eq!(arrival_order(&m).await, ["A", "C"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_rate_limit_spaces_requests_out() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--rate-limit-tokens-per-second",
        "4",
    ]);
    let started = Instant::now();
    let all: Vec<_> = (0..8)
        .map(|i| spawn_chat(&gw, tagged(&i.to_string(), Value::Null)))
        .collect();
    for r in all {
        assert_eq!(r.await.unwrap().status, 200);
    }
    // A burst of 4, then one every 250 ms: the eighth starts about 1 s in.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let text = scrape(&gw).await;
    assert!(sample(&text, r#"gw_http_rate_limit_total{result="allowed"}"#) >= Some(4.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_media_budget_refuses_oversize_and_full() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--multimodal-max-inflight-bytes",
        "3000",
        "--queue-timeout-secs",
        "1",
        "--disable-retries",
    ]);
    let image = |tag: &str, size: usize, mock: Value| {
        let mut body = tagged(tag, mock);
        body["messages"] = json!([{"role": "user", "content": [
            {"type": "text", "text": format!("request {tag}")},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", "A".repeat(size))}}
        ]}]);
        body
    };
    let too_big = chat(&gw, image("big", 4000, Value::Null)).await;
    support::assert_gateway_error(&too_big, 413, "multimodal_payload_too_large");
    let holder = spawn_chat(&gw, image("A", 1800, json!({"ttft_ms": 2500})));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let full = chat(&gw, image("B", 1800, Value::Null)).await;
    support::assert_gateway_error(&full, 429, "multimodal_inflight_budget");
    // Text requests do not touch the budget.
    assert_eq!(chat(&gw, tagged("text", Value::Null)).await.status, 200);
    assert_eq!(holder.await.unwrap().status, 200);
    // Released with the first response: room again.
    assert_eq!(chat(&gw, image("C", 1800, Value::Null)).await.status, 200);
    let text = scrape(&gw).await;
    for reason in ["multimodal_too_large", "multimodal_inflight"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"gw_admission_queue_rejected_total{{reason="{reason}"}}"#)
            ),
            Some(1.0),
            "{text}"
        );
    }
    // The limiter is off: its families do not exist.
    assert!(!text.contains("gw_http_rate_limit_total"), "{text}");
    assert!(!text.contains("gw_admission_inflight"), "{text}");
}

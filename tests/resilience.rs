//! Retries and circuit breakers, black box (spec 1 "Circuit breaker per worker" and the
//! `resilience` block; issue 4): a failing worker is invisible while another is healthy, a
//! stream that started is never replayed, large bodies are not retried, breakers open,
//! half-open and close as `GET /workers` shows, per-worker overrides and the PATCH rule.

use crate::common;
use crate::support;

use std::time::{Duration, Instant};

use common::{client, free_port, gateway, get, mock, mock_requests, post_json, send, Proc, Reply};
use serde_json::{json, Value};
use support::{assert_gateway_error, read_frames, start_json};

async fn chat(gw: &Proc, mock: Value) -> Reply {
    post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(false, mock),
    )
    .await
}

async fn mock_config(m: &Proc, patch: Value) {
    let reply = post_json(&format!("{}/mock/config", m.url()), &patch).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

async fn chats_received(m: &Proc) -> usize {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .count()
}

/// The worker object registered under `url`.
async fn worker_by_url(gw: &Proc, url: &str) -> Value {
    let listing = get(&format!("{}/workers", gw.url())).await.json();
    listing["workers"]
        .as_array()
        .and_then(|ws| ws.iter().find(|w| w["url"] == url).cloned())
        .unwrap_or_else(|| panic!("{url} not listed: {listing}"))
}

async fn breaker_state(gw: &Proc, url: &str) -> String {
    let w = worker_by_url(gw, url).await;
    w["circuit_breaker"]["state"]
        .as_str()
        .unwrap_or_else(|| panic!("no breaker state: {w}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_worker_is_invisible_while_another_is_healthy() {
    let bad = mock(&[]);
    let good = mock(&[]);
    mock_config(&bad, json!({"fail_rate": 1.0, "fail_status": 503})).await;
    let gw = gateway(&["--worker-urls", &bad.url(), &good.url()]);
    for i in 0..20 {
        let reply = chat(&gw, Value::Null).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
    }
    assert_eq!(chats_received(&good).await, 20);
    let tried_bad = chats_received(&bad).await;
    assert!(
        (1..=10).contains(&tried_bad),
        "the failing worker was tried and then left by its breaker: {tried_bad}"
    );
    assert_eq!(breaker_state(&gw, &bad.url()).await, "open");
    assert_eq!(breaker_state(&gw, &good.url()).await, "closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_failures_are_retried_on_another_worker() {
    let dead = format!("http://127.0.0.1:{}", free_port());
    let good = mock(&[]);
    let gw = gateway(&[
        "--disable-health-check",
        "--worker-urls",
        &dead,
        &good.url(),
    ]);
    for h2 in [false, true] {
        for i in 0..5 {
            let reply = send(
                &client(h2),
                "POST",
                &format!("{}/v1/chat/completions", gw.url()),
                &[("content-type", "application/json")],
                serde_json::to_vec(&support::chat(false, Value::Null)).expect("json"),
            )
            .await;
            assert_eq!(reply.status, 200, "h2 {h2} request {i}: {}", reply.text());
        }
    }
    assert_eq!(chats_received(&good).await, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_retries_relay_the_last_answer() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--retry-max-retries",
        "2",
        "--retry-initial-backoff-ms",
        "100",
        "--retry-jitter-factor",
        "0",
    ]);
    let started = Instant::now();
    let reply = chat(&gw, json!({"fail_status": 500})).await;
    let took = started.elapsed();
    assert_eq!(reply.status, 500, "{}", reply.text());
    assert!(reply.headers.get("x-gw-error-code").is_none());
    assert_eq!(chats_received(&m).await, 3, "one attempt and two retries");
    // 100 ms, then 150 ms of backoff.
    assert!(took >= Duration::from_millis(240), "{took:?}");

    // Statuses outside the retryable set are answered at once.
    let reply = chat(&gw, json!({"fail_status": 400})).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(chats_received(&m).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_stream_is_never_retried() {
    let m = mock(&["--output-tokens", "20"]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    let resp = start_json(
        &client(false),
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, json!({"drop_after_tokens": 3})),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let frames = read_frames(&mut body, Duration::from_secs(10)).await;
    assert!(!frames.timed_out, "the broken stream must end, not hang");
    assert!(!frames.text().contains("[DONE]"), "{}", frames.text());
    assert_eq!(chats_received(&m).await, 1, "a stream is never replayed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_buffer_limit_stream_and_are_not_retried() {
    let bad = mock(&[]);
    let good = mock(&[]);
    mock_config(&bad, json!({"fail_rate": 1.0, "fail_status": 503})).await;
    let gw = gateway(&[
        "--worker-urls",
        &bad.url(),
        &good.url(),
        "--max-buffered-request-bytes",
        "1KiB",
    ]);
    let mut big = support::chat(false, Value::Null);
    big["padding"] = json!("x".repeat(4096));
    let url = format!("{}/v1/chat/completions", gw.url());
    let mut statuses = Vec::new();
    for _ in 0..2 {
        statuses.push(post_json(&url, &big).await.status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 503], "round robin: one each, no retry");
    assert_eq!(chats_received(&bad).await, 1);

    // A small body on the same gateway is retried.
    for _ in 0..2 {
        assert_eq!(chat(&gw, Value::Null).await.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_half_opens_and_closes() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--disable-retries",
        "--cb-failure-threshold",
        "2",
        "--cb-success-threshold",
        "2",
        "--cb-timeout-duration-secs",
        "1",
    ]);
    let url = m.url();
    for _ in 0..2 {
        assert_eq!(chat(&gw, json!({"fail_status": 502})).await.status, 502);
    }
    let w = worker_by_url(&gw, &url).await;
    assert_eq!(w["circuit_breaker"]["state"], "open", "{w}");
    assert_eq!(w["circuit_breaker"]["consecutive_failures"], 2, "{w}");
    // Open: nothing reaches the worker.
    assert_gateway_error(&chat(&gw, Value::Null).await, 503, "no_available_workers");
    assert_eq!(chats_received(&m).await, 2);

    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(chat(&gw, Value::Null).await.status, 200);
    assert_eq!(breaker_state(&gw, &url).await, "half_open");
    assert_eq!(chat(&gw, Value::Null).await.status, 200);
    assert_eq!(breaker_state(&gw, &url).await, "closed");

    // Capacity pushback and client mistakes never open it.
    for status in [429, 400, 404, 429, 400] {
        assert_eq!(
            chat(&gw, json!({"fail_status": status})).await.status,
            status
        );
    }
    assert_eq!(breaker_state(&gw, &url).await, "closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_worker_resilience_and_the_patch_rule() {
    let m = mock(&[]);
    let gw = gateway(&["--disable-retries"]);
    let spec = json!({
        "url": m.url(),
        "health": {"success_threshold": 1, "check_interval_secs": 1},
        "resilience": {"cb_failure_threshold": 1, "cb_timeout_secs": 60,
                       "retryable_status_codes": [418], "capacity_status_codes": []},
    });
    let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let id = reply.json()["worker_id"].as_str().expect("id").to_owned();
    let ready = common::eventually(Duration::from_secs(10), || async {
        chat(&gw, Value::Null).await.status == 200
    })
    .await;
    assert!(ready, "worker never served");

    // 500 is not in this worker's failure set; 418 is, and one opens the breaker.
    assert_eq!(chat(&gw, json!({"fail_status": 500})).await.status, 500);
    assert_eq!(breaker_state(&gw, &m.url()).await, "closed");
    assert_eq!(chat(&gw, json!({"fail_status": 418})).await.status, 418);
    assert_eq!(breaker_state(&gw, &m.url()).await, "open");

    // A PATCH rebuilds the breaker with the built-in thresholds (5 failures).
    let patch = send(
        &client(false),
        "PATCH",
        &format!("{}/workers/{id}", gw.url()),
        &[("content-type", "application/json")],
        serde_json::to_vec(&json!({"priority": 7})).expect("json"),
    )
    .await;
    assert_eq!(patch.status, 202, "{}", patch.text());
    let closed = common::eventually(Duration::from_secs(10), || async {
        breaker_state(&gw, &m.url()).await == "closed"
    })
    .await;
    assert!(closed, "PATCH rebuilt the breaker closed");
    for _ in 0..4 {
        assert_eq!(chat(&gw, json!({"fail_status": 418})).await.status, 418);
    }
    assert_eq!(breaker_state(&gw, &m.url()).await, "closed");
    assert_eq!(chat(&gw, json!({"fail_status": 418})).await.status, 418);
    assert_eq!(breaker_state(&gw, &m.url()).await, "open");
}

/// A worker nobody answers at (an `https://` worker on a closed port) fails before anything
/// is sent: the request is retried on another worker, and the failures open the dead
/// worker's breaker so it leaves rotation instead of costing 1/N of traffic a retry for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_transport_fails_over_and_opens_the_breaker() {
    let good = mock(&[]);
    let gw = gateway(&["--worker-urls", &good.url()]);
    let tls = format!("https://127.0.0.1:{}", free_port());
    let spec = json!({
        "url": tls,
        "runtime_type": "sglang",
        "health": {"disable_health_check": true},
        "resilience": {"cb_failure_threshold": 3},
    });
    let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let listed = common::eventually(Duration::from_secs(10), || async {
        let listing = get(&format!("{}/workers", gw.url())).await.json();
        listing["workers"].as_array().is_some_and(|ws| {
            ws.iter()
                .any(|w| w["url"] == tls.as_str() && w["status"] == "ready")
        })
    })
    .await;
    assert!(listed, "the https worker was never ready");
    for i in 0..20 {
        let reply = chat(&gw, Value::Null).await;
        assert_eq!(reply.status, 200, "request {i}: {}", reply.text());
    }
    assert_eq!(chats_received(&good).await, 20);
    assert_eq!(breaker_state(&gw, &tls).await, "open");
}

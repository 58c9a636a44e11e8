//! Per-worker `http_pool` settings (spec 1) take effect on the data plane, black box:
//! `timeout_secs` caps the time a request to that worker may take, whatever
//! `--request-timeout-secs` says, while other workers keep the gateway's timeout.

use crate::common;

use std::time::{Duration, Instant};

use common::{eventually, gateway, get, mock, post_json, Proc};
use serde_json::{json, Value};

fn chat() -> Value {
    json!({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]})
}

/// Registers `spec` and waits until the worker is ready.
async fn register(gw: &Proc, spec: Value) -> String {
    let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let id = reply.json()["worker_id"].as_str().unwrap_or("").to_owned();
    let url = format!("{}/workers/{id}", gw.url());
    assert!(
        eventually(Duration::from_secs(10), || {
            let url = url.clone();
            async move { get(&url).await.json()["status"] == "ready" }
        })
        .await,
        "worker never ready:\n{}",
        gw.log_text()
    );
    id
}

fn fast_health() -> Value {
    json!({"success_threshold": 1, "failure_threshold": 1, "check_interval_secs": 1})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_timeout_secs_caps_its_requests() {
    let slow = mock(&["--slow-headers-ms", "4000"]);
    let gw = gateway(&["--request-timeout-secs", "60", "--retry-max-retries", "0"]);
    let id = register(
        &gw,
        json!({"url": slow.url(), "health": fast_health(), "http_pool": {"timeout_secs": 1}}),
    )
    .await;
    let started = Instant::now();
    let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &chat()).await;
    let took = started.elapsed();
    assert_eq!(reply.status, 504, "{}", reply.text());
    assert_eq!(
        reply
            .headers
            .get("x-gw-error-code")
            .and_then(|v| v.to_str().ok()),
        Some("worker_timeout")
    );
    assert!(
        took < Duration::from_millis(2500),
        "answered after {took:?}, not within timeout_secs"
    );

    // The same worker without the override waits for its answer (the gateway's 60 s).
    let spec = json!({"url": slow.url(), "health": fast_health()});
    let put = common::send(
        &common::client(false),
        "PUT",
        &format!("{}/workers/{id}", gw.url()),
        &[("content-type", "application/json")],
        serde_json::to_vec(&spec).expect("json"),
    )
    .await;
    assert_eq!(put.status, 202, "{}", put.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            let started = Instant::now();
            let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &chat()).await;
            reply.status == 200 && started.elapsed() >= Duration::from_secs(3)
        })
        .await,
        "without the override the slow worker should answer"
    );
}

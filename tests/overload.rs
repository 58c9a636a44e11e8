//! Overload protection, black box (spec 1 `overload`, spec 3 `gw_workers_overloaded`,
//! `gw_worker_overload_shed_total`): mock engines report their queue and KV usage through
//! `/v1/loads`; the load monitor flags overloaded workers, routing avoids them, and when
//! every candidate is overloaded the request is shed with 503 and `Retry-After`.

use crate::common;
use crate::support;

use std::time::Duration;

use common::{gateway, get, mock, mock_requests, post_json, sample, scrape, set_load, Proc};
use serde_json::{json, Value};

const CHAT: &str = "/v1/chat/completions";

/// Waits until `gw_workers_overloaded{model="mock-model"}` is `n`.
async fn until_overloaded(gw: &Proc, n: f64) {
    let series = r#"gw_workers_overloaded{model="mock-model"}"#;
    let ok = common::eventually(Duration::from_secs(10), || async {
        sample(&scrape(gw).await, series) == Some(n)
    })
    .await;
    assert!(ok, "{series} never became {n}:\n{}", scrape(gw).await);
}

async fn chats(m: &Proc) -> usize {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == CHAT)
        .count()
}

async fn chat(gw: &Proc) -> common::Reply {
    post_json(
        &format!("{}{CHAT}", gw.url()),
        &support::chat(false, Value::Null),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_workers_leave_routing_and_all_overloaded_sheds() {
    let a = mock(&[]);
    let b = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &a.url(),
        &b.url(),
        "--load-monitor-interval",
        "1",
        "--worker-overload-waiting-requests",
        "5",
    ]);
    until_overloaded(&gw, 0.0).await;
    set_load(&a, 0, 9, 0.1).await;
    until_overloaded(&gw, 1.0).await;
    let before = chats(&a).await;
    for _ in 0..6 {
        assert_eq!(chat(&gw).await.status, 200);
    }
    assert_eq!(chats(&a).await, before, "the overloaded worker got traffic");
    assert_eq!(chats(&b).await, 6);

    set_load(&b, 0, 5, 0.1).await;
    until_overloaded(&gw, 2.0).await;
    let shed = chat(&gw).await;
    support::assert_gateway_error(&shed, 503, "worker_overload_protection_shed");
    assert_eq!(shed.headers["retry-after"], "1");
    let text = scrape(&gw).await;
    assert_eq!(
        sample(&text, r#"gw_worker_overload_shed_total{stage="selection"}"#),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"gw_http_responses_total{path="/v1/chat/completions",status_code="503",error_code="worker_overload_protection_shed"}"#
        ),
        Some(1.0)
    );
    // A report below the threshold brings the worker back.
    set_load(&a, 0, 4, 0.1).await;
    until_overloaded(&gw, 1.0).await;
    assert_eq!(chat(&gw).await.status, 200);
    assert_eq!(chats(&a).await, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protection_flag_defaults_to_ninety_percent_kv_usage() {
    let a = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &a.url(),
        "--load-monitor-interval",
        "1",
        "--worker-overload-protection",
    ]);
    set_load(&a, 0, 1000, 0.89).await;
    // Waiting requests are no criterion without their flag; 0.89 is below 0.9.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(chat(&gw).await.status, 200);
    set_load(&a, 0, 0, 0.9).await;
    until_overloaded(&gw, 1.0).await;
    support::assert_gateway_error(&chat(&gw).await, 503, "worker_overload_protection_shed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_overload_block_turns_protection_on_for_that_worker() {
    let a = mock(&[]);
    let b = mock(&[]);
    // Load monitoring off: only the worker with an `overload` block is polled.
    let gw = gateway(&[
        "--worker-urls",
        &a.url(),
        "--load-monitor-interval",
        "1",
        "--disable-load-monitoring",
    ]);
    let reply = post_json(
        &format!("{}/workers", gw.url()),
        &json!({"url": b.url(), "overload": {"token_usage": 0.5}}),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    set_load(&a, 0, 100, 1.0).await;
    set_load(&b, 0, 0, 0.6).await;
    until_overloaded(&gw, 1.0).await;
    for _ in 0..4 {
        assert_eq!(chat(&gw).await.status, 200);
    }
    assert_eq!(chats(&b).await, 0, "the overloaded worker got traffic");
    assert_eq!(
        chats(&a).await,
        4,
        "the worker without a block is never flagged"
    );
    let workers = get(&format!("{}/workers", gw.url())).await.json();
    let echoed = workers["workers"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["url"] == b.url()))
        .map(|w| w["overload"].clone());
    assert_eq!(echoed, Some(json!({"token_usage": 0.5})));
}

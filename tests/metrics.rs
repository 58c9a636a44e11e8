//! The gateway's own metrics on the `--prometheus-port` listener (spec 3), black box:
//! families appear after the first event that records them, with the spec's names and
//! labels; unmatched paths are not recorded; removed workers report -1; a taken port stops
//! startup; custom duration buckets.

use crate::common;
use crate::support;

use std::net::TcpListener;
use std::time::Duration;

use bytes::Bytes;
use common::{client, gateway, get, mock, post_json, run_to_exit, sample, scrape, send, Proc};
use serde_json::{json, Value};

fn assert_sample(text: &str, series: &str, expected: f64) {
    assert_eq!(sample(text, series), Some(expected), "{series} in\n{text}");
}

/// Asks for the removal of the first listed worker (202 expected).
async fn delete_first_worker(gw: &Proc) {
    let listing = get(&format!("{}/workers", gw.url())).await.json();
    let id = listing["workers"][0]["id"].as_str().expect("id").to_owned();
    let del = send(
        &client(false),
        "DELETE",
        &format!("{}/workers/{id}", gw.url()),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(del.status, 202);
}

async fn chat(gw: &Proc, mock: Value) -> u16 {
    post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(false, mock),
    )
    .await
    .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_workers_and_runtime_are_exported() {
    let m = mock(&["--model", "metrics-model"]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    assert_eq!(chat(&gw, Value::Null).await, 200);
    assert_eq!(
        get(&format!("{}/no/such/route", gw.url())).await.status,
        404
    );
    // Give the canary a few ticks.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let text = scrape(&gw).await;
    let w = m.url();

    assert_sample(
        &text,
        r#"gw_http_requests_total{method="POST",path="/v1/chat/completions"}"#,
        1.0,
    );
    assert_sample(
        &text,
        r#"gw_http_responses_total{path="/v1/chat/completions",status_code="200",error_code=""}"#,
        1.0,
    );
    assert!(
        !text.contains("/no/such/route"),
        "unmatched paths are not recorded"
    );
    assert!(
        text.contains("gw_http_request_duration_seconds_bucket{"),
        "{text}"
    );
    assert_sample(&text, "gw_http_connections_active", 0.0);
    assert_sample(
        &text,
        r#"gw_router_requests_total{router_type="http",backend_type="regular",connection_mode="http",model="metrics-model",endpoint="chat",streaming="false"}"#,
        1.0,
    );
    assert_sample(
        &text,
        r#"gw_router_request_body_path_total{path="buffered",reason="retryable"}"#,
        1.0,
    );
    assert_sample(
        &text,
        r#"gw_router_upstream_responses_total{router_type="http",status_code="200",error_code=""}"#,
        1.0,
    );
    assert_sample(
        &text,
        r#"gw_worker_selection_total{worker_type="regular",connection_mode="http",model="metrics-model",policy="round_robin"}"#,
        1.0,
    );
    assert_sample(&text, &format!(r#"gw_worker_health{{worker="{w}"}}"#), 1.0);
    assert_sample(
        &text,
        &format!(r#"gw_worker_requests_active{{worker="{w}"}}"#),
        0.0,
    );
    assert_sample(&text, &format!(r#"gw_worker_http2{{worker="{w}"}}"#), 0.0);
    assert_sample(
        &text,
        &format!(r#"gw_worker_cb_state{{worker="{w}"}}"#),
        0.0,
    );
    assert_sample(
        &text,
        r#"gw_worker_pool_size{worker_type="regular",connection_mode="http",model="metrics-model"}"#,
        1.0,
    );
    assert_sample(
        &text,
        &format!(r#"gw_worker_cb_outcomes_total{{worker="{w}",outcome="success"}}"#),
        1.0,
    );
    assert_sample(&text, "gw_runtime_workers", 2.0);
    assert!(
        sample(&text, "gw_runtime_event_loop_delay_seconds_count").is_some_and(|n| n > 0.0),
        "{text}"
    );
    // Families with nothing recorded yet are absent.
    assert!(!text.contains("gw_worker_retries_total{"), "{text}");

    // A streamed request is labelled streaming; a sticky-key policy is not in play.
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &support::chat(true, Value::Null),
    )
    .await;
    assert_eq!(reply.status, 200);
    let text = scrape(&gw).await;
    assert_sample(
        &text,
        r#"gw_router_requests_total{router_type="http",backend_type="regular",connection_mode="http",model="metrics-model",endpoint="chat",streaming="true"}"#,
        1.0,
    );
}

/// Concurrent requests on fresh connections land on both data-plane threads, each writing
/// its own shard of every series: a scrape must sum them to the exact totals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_on_every_thread_add_up_exactly() {
    const N: usize = 48;
    let m = mock(&["--model", "shard-model"]);
    let gw = gateway(&["--worker-urls", &m.url()]);
    let url = format!("{}/v1/chat/completions", gw.url());
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..N {
        let (url, body) = (url.clone(), support::chat(false, Value::Null));
        set.spawn(async move { post_json(&url, &body).await.status });
    }
    while let Some(status) = set.join_next().await {
        assert_eq!(status.expect("request task"), 200);
    }
    let text = scrape(&gw).await;
    let n = N as f64;
    assert_sample(
        &text,
        r#"gw_http_requests_total{method="POST",path="/v1/chat/completions"}"#,
        n,
    );
    assert_sample(
        &text,
        r#"gw_http_responses_total{path="/v1/chat/completions",status_code="200",error_code=""}"#,
        n,
    );
    assert_sample(
        &text,
        r#"gw_http_request_duration_seconds_count{method="POST",path="/v1/chat/completions"}"#,
        n,
    );
    assert_sample(
        &text,
        r#"gw_http_request_duration_seconds_bucket{le="+Inf",method="POST",path="/v1/chat/completions"}"#,
        n,
    );
    assert_sample(
        &text,
        r#"gw_router_requests_total{router_type="http",backend_type="regular",connection_mode="http",model="shard-model",endpoint="chat",streaming="false"}"#,
        n,
    );
    // Up on one shard, down on the same or another: the sum is back to zero.
    assert_sample(&text, "gw_http_connections_active", 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_retries_breakers_and_removed_workers() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--retry-max-retries",
        "1",
        "--retry-initial-backoff-ms",
        "1",
        "--cb-failure-threshold",
        "2",
    ]);
    let w = m.url();
    assert_eq!(chat(&gw, json!({"fail_status": 503})).await, 503);
    let text = scrape(&gw).await;
    assert_sample(
        &text,
        r#"gw_worker_retries_total{worker_type="regular",endpoint="chat"}"#,
        1.0,
    );
    assert_sample(
        &text,
        r#"gw_worker_retries_exhausted_total{worker_type="regular",endpoint="chat"}"#,
        1.0,
    );
    assert_sample(
        &text,
        r#"gw_worker_errors_total{worker_type="regular",connection_mode="http",error_type="backend_error"}"#,
        2.0,
    );
    assert_sample(
        &text,
        &format!(r#"gw_worker_cb_transitions_total{{worker="{w}",from="closed",to="open"}}"#),
        1.0,
    );
    assert_sample(
        &text,
        &format!(r#"gw_worker_cb_state{{worker="{w}"}}"#),
        1.0,
    );
    assert_sample(
        &text,
        &format!(r#"gw_worker_cb_consecutive_failures{{worker="{w}"}}"#),
        2.0,
    );

    // The breaker is open: no worker is left, and the router counts it.
    assert_eq!(chat(&gw, Value::Null).await, 503);
    let text = scrape(&gw).await;
    assert_sample(
        &text,
        r#"gw_http_responses_total{path="/v1/chat/completions",status_code="503",error_code="no_available_workers"}"#,
        1.0,
    );
    assert!(
        text.contains(r#"gw_router_request_errors_total{router_type="http",backend_type="regular",connection_mode="http",model="unknown",endpoint="chat",error_type="no_workers"}"#),
        "{text}"
    );

    // Removed: health and breaker state -1, in-flight and streaks 0.
    delete_first_worker(&gw).await;
    let gone = common::eventually(Duration::from_secs(10), || async {
        get(&format!("{}/workers", gw.url())).await.json()["total"] == 0
    })
    .await;
    assert!(gone);
    let text = scrape(&gw).await;
    assert_sample(&text, &format!(r#"gw_worker_health{{worker="{w}"}}"#), -1.0);
    assert_sample(
        &text,
        &format!(r#"gw_worker_cb_state{{worker="{w}"}}"#),
        -1.0,
    );
    assert_sample(
        &text,
        &format!(r#"gw_worker_requests_active{{worker="{w}"}}"#),
        0.0,
    );
    assert_sample(
        &text,
        &format!(r#"gw_worker_cb_consecutive_failures{{worker="{w}"}}"#),
        0.0,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_duration_buckets_and_other_paths() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--prometheus-duration-buckets",
        "0.5",
        "2",
    ]);
    assert_eq!(chat(&gw, Value::Null).await, 200);
    let text = scrape(&gw).await;
    assert!(
        text.contains(r#"gw_http_request_duration_seconds_bucket{le="0.5",method="POST",path="/v1/chat/completions"}"#)
            || text.contains(r#"gw_http_request_duration_seconds_bucket{method="POST",path="/v1/chat/completions",le="0.5"}"#),
        "{text}"
    );
    assert!(!text.contains(r#"le="7200.0""#), "default buckets replaced");
    let other = get(&format!(
        "http://{}/other",
        gw.metrics.expect("metrics address")
    ))
    .await;
    assert_eq!(other.status, 404);
    let refused = send(
        &client(false),
        "POST",
        &format!("http://{}/metrics", gw.metrics.expect("metrics address")),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(refused.status, 405);
    assert_eq!(
        refused.headers.get("allow").and_then(|v| v.to_str().ok()),
        Some("GET, HEAD")
    );
}

#[test]
fn a_taken_metrics_port_stops_startup() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let out = run_to_exit(
        &[
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            &port,
        ],
        &[],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("for metrics"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_load_is_reexported_and_minus_one_once_gone() {
    let m = mock(&["--model", "load-model"]);
    let set = post_json(
        &format!("{}/mock/config", m.url()),
        &json!({"load": {"running": 7, "waiting": 3}}),
    )
    .await;
    assert_eq!(set.status, 200, "{}", set.text());
    let gw = gateway(&["--worker-urls", &m.url(), "--load-monitor-interval", "1"]);
    let w = m.url();
    let running =
        format!(r#"gw_engine_running_requests{{worker="{w}",model="load-model",dp_rank="0"}}"#);
    let waiting =
        format!(r#"gw_engine_waiting_requests{{worker="{w}",model="load-model",dp_rank="0"}}"#);
    let polled = common::eventually(Duration::from_secs(10), || async {
        sample(&scrape(&gw).await, &running).is_some_and(|v| v >= 7.0)
    })
    .await;
    assert!(polled, "{}", scrape(&gw).await);
    assert!(sample(&scrape(&gw).await, &waiting).is_some_and(|v| v >= 3.0));

    delete_first_worker(&gw).await;
    let gone = common::eventually(Duration::from_secs(10), || async {
        sample(&scrape(&gw).await, &running) == Some(-1.0)
    })
    .await;
    assert!(gone, "{}", scrape(&gw).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_runtime_age_and_backoff_families() {
    let m = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &m.url(),
        "--policy",
        "cache_aware",
        "--eviction-interval",
        "1",
        "--retry-max-retries",
        "1",
        "--retry-initial-backoff-ms",
        "20",
        "--retry-jitter-factor",
        "0",
    ]);
    assert_eq!(chat(&gw, Value::Null).await, 200);
    assert_eq!(chat(&gw, json!({"fail_status": 503})).await, 503);
    // One eviction pass and one runtime sample later.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let text = scrape(&gw).await;

    // The retry's backoff, as a summary per attempt.
    assert!(
        text.contains("# TYPE gw_worker_retry_backoff_seconds summary\n"),
        "{text}"
    );
    assert_sample(
        &text,
        r#"gw_worker_retry_backoff_seconds{attempt="1",quantile="0.5"}"#,
        0.02,
    );
    assert_sample(
        &text,
        r#"gw_worker_retry_backoff_seconds_count{attempt="1"}"#,
        1.0,
    );

    // The cache tree as of the last eviction pass.
    assert!(
        sample(&text, r#"gw_cache_tree_chars{model="mock-model"}"#).is_some_and(|n| n > 0.0),
        "{text}"
    );
    assert_sample(
        &text,
        r#"gw_cache_tree_tenants{model="mock-model",tree="string"}"#,
        1.0,
    );

    // Runtime sampler: tasks, queue, busy ratio per data-plane thread.
    assert!(sample(&text, "gw_runtime_alive_tasks").is_some_and(|n| n >= 1.0));
    assert!(sample(&text, "gw_runtime_global_queue_depth").is_some());
    for worker in ["0", "1"] {
        let busy = sample(
            &text,
            &format!(r#"gw_runtime_worker_busy_ratio{{worker="{worker}"}}"#),
        );
        assert!(busy.is_some_and(|b| (0.0..=1.0).contains(&b)), "{text}");
    }
    // Parks come from the epoll runtime's park hook only.
    let parks = sample(&text, r#"gw_runtime_worker_parks_total{worker="0"}"#);
    if common::io_engine() != "uring" {
        assert!(parks.is_some_and(|n| n >= 1.0), "{text}");
    } else {
        assert_eq!(parks, None, "{text}");
    }

    // In-flight ages: twelve buckets, nothing in flight between requests.
    let ages: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gw_http_inflight_request_age_count{"))
        .collect();
    assert_eq!(ages.len(), 12, "{text}");
    assert_sample(
        &text,
        r#"gw_http_inflight_request_age_count{gt="0",le="30"}"#,
        0.0,
    );
    assert_sample(
        &text,
        r#"gw_http_inflight_request_age_count{gt="86400",le="+Inf"}"#,
        0.0,
    );
    // Admission control is off: its limiter families do not exist.
    assert!(!text.contains("gw_admission_inflight"), "{text}");
}

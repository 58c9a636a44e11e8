//! Prefill/decode dispatch over HTTP, black box: the gateway under `--pd-disaggregation`
//! in front of mock workers in prefill and decode roles (`--pd-role`), which refuse a leg
//! that lacks what its engine needs. SGLang-style pairs get the same body with matching
//! bootstrap fields, a fresh room per request; vLLM-style pairs run prefill for one token
//! and pass its `kv_transfer_params` to decode. Every inference route, streaming and not;
//! a failed or stalled leg ends the exchange promptly with the other leg cancelled;
//! retries re-pick a pair; readiness needs one ready worker of each role.

use crate::common;
use crate::support;

use std::time::{Duration, Instant};

use common::{
    eventually, gateway, get, listed_workers, mock, mock_requests, post_json, post_json_with,
    sample, scrape, send, wait_ready, Proc,
};
use serde_json::{json, Value};
use support::{assert_gateway_error, generation_body};

const ROUTES: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/generate",
    "/v1/messages",
];

const FAST: [&str; 6] = [
    "--health-check-interval-secs",
    "1",
    "--worker-startup-check-interval",
    "1",
    "--worker-startup-timeout-secs",
    "3",
];

fn role(role: &str, runtime: &str) -> Proc {
    mock(&["--pd-role", role, "--runtime", runtime])
}

/// A gateway over `prefill` (bootstrap port 8998) and `decode` workers, plus `extra` flags.
async fn pd_gateway(prefill: &[&Proc], decode: &[&Proc], extra: &[&str]) -> Proc {
    let p: Vec<String> = prefill.iter().map(|m| m.url()).collect();
    let d: Vec<String> = decode.iter().map(|m| m.url()).collect();
    let mut args: Vec<&str> = FAST.to_vec();
    args.push("--pd-disaggregation");
    for url in &p {
        args.extend(["--prefill", url, "8998"]);
    }
    for url in &d {
        args.extend(["--decode", url]);
    }
    args.extend_from_slice(extra);
    let gw = gateway(&args);
    wait_ready(&gw).await;
    gw
}

/// The bodies a mock received on `path`, parsed.
async fn bodies(m: &Proc, path: &str) -> Vec<Value> {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == path)
        .map(|r| {
            serde_json::from_str(r["body"].as_str().unwrap_or_default()).unwrap_or(Value::Null)
        })
        .collect()
}

async fn configure(m: &Proc, patch: Value) {
    let reply = post_json(&format!("{}/mock/config", m.url()), &patch).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

async fn inflight(m: &Proc) -> u64 {
    get(&format!("{}/mock/stats", m.url())).await.json()["inflight"]
        .as_u64()
        .unwrap_or(u64::MAX)
}

fn is_stream(reply: &common::Reply) -> bool {
    reply
        .headers
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_pairs_serve_every_route_with_matching_bootstrap_fields() {
    let (p, d) = (role("prefill", "sglang"), role("decode", "sglang"));
    let gw = pd_gateway(&[&p], &[&d], &[]).await;
    let headers = [("x-request-id", "pd-req-1")];
    for path in ROUTES {
        for stream in [false, true] {
            let body = generation_body(path, stream, Value::Null);
            let url = format!("{}{path}", gw.url());
            let reply = post_json_with(&url, &body, &headers).await;
            assert_eq!(
                reply.status,
                200,
                "{path} stream={stream}: {}",
                reply.text()
            );
            assert_eq!(is_stream(&reply), stream, "{path}");
            if stream {
                assert!(reply.text().contains("data: "), "{}", reply.text());
            } else {
                assert!(reply.json().is_object());
            }
        }
        let (sent_p, sent_d) = (bodies(&p, path).await, bodies(&d, path).await);
        assert_eq!(sent_p.len(), 2, "{path}: one prefill leg per request");
        assert_eq!(sent_p, sent_d, "{path}: both legs get the same body");
        for leg in &sent_p {
            assert_eq!(leg["bootstrap_host"], "127.0.0.1");
            assert_eq!(leg["bootstrap_port"], 8998);
        }
        assert_ne!(
            sent_p[0]["bootstrap_room"], sent_p[1]["bootstrap_room"],
            "a room per request"
        );
    }
    // The allowlisted headers reach both legs.
    for m in [&p, &d] {
        let seen = mock_requests(m).await;
        assert!(seen
            .iter()
            .filter(|r| r["path"] == "/v1/chat/completions")
            .all(|r| r["headers"]["x-request-id"] == "pd-req-1"));
    }

    // A batch gets one room per item on both legs.
    let url = format!("{}/generate", gw.url());
    let batch = json!({"text": ["a", "b", "c"], "sampling_params": {}});
    let reply = post_json(&url, &batch).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let leg = bodies(&d, "/generate").await.pop().unwrap();
    assert_eq!(
        leg["bootstrap_room"].as_array().map(Vec::len),
        Some(3),
        "{leg}"
    );
    assert_eq!(bodies(&p, "/generate").await.pop().unwrap(), leg);

    // A body that is not a JSON object cannot carry the fields: 400, counted.
    let reply = send(
        &common::client(false),
        "POST",
        &format!("{}/v1/chat/completions", gw.url()),
        &[("content-type", "application/json")],
        "[1, 2]",
    )
    .await;
    assert_gateway_error(&reply, 400, "invalid_request");
    let metrics = scrape(&gw).await;
    assert_eq!(
        sample(&metrics, "gw_pd_bootstrap_failures_total"),
        Some(1.0)
    );
    for family in [
        "gw_pd_prefill_duration_seconds_count",
        "gw_pd_ttft_seconds_count",
        "gw_pd_kv_connector_mode_total{mode=\"passthrough\"}",
        "gw_pd_kv_transfer_failures_total",
        "gw_router_request_body_path_total{path=\"buffered\",reason=\"pd\"}",
    ] {
        assert!(metrics.contains(family), "{family} missing:\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_pairs_prefill_one_token_and_relay_kv_transfer_params() {
    let (p, d) = (role("prefill", "vllm"), role("decode", "vllm"));
    let gw = pd_gateway(&[&p], &[&d], &[]).await;
    for path in ROUTES {
        for stream in [false, true] {
            let mut body = generation_body(path, stream, Value::Null);
            body["max_tokens"] = json!(8);
            let reply = post_json(&format!("{}{path}", gw.url()), &body).await;
            assert_eq!(
                reply.status,
                200,
                "{path} stream={stream}: {}",
                reply.text()
            );
            assert_eq!(
                is_stream(&reply),
                stream,
                "{path}: the client's answer is decode's"
            );
        }
        for leg in bodies(&p, path).await {
            assert_eq!(leg["max_tokens"], 1, "{leg}");
            assert_eq!(leg["stream"], false, "{leg}");
            assert_eq!(leg["kv_transfer_params"]["do_remote_decode"], true, "{leg}");
        }
        let decoded = bodies(&d, path).await;
        assert_eq!(decoded.len(), 2);
        for leg in decoded {
            let expected = format!("mock-prefill-{}", p.url().rsplit(':').next().unwrap());
            assert_eq!(
                leg["kv_transfer_params"]["remote_engine_id"], expected,
                "{leg}"
            );
            assert_eq!(leg["max_tokens"], 8, "decode keeps the client's limit");
        }
    }
    let metrics = scrape(&gw).await;
    assert_eq!(
        sample(&metrics, "gw_pd_kv_transfer_failures_total"),
        Some(0.0)
    );

    // A prefill that returns no params: decode recomputes, and the miss is counted.
    let bare = mock(&[
        "--pd-role",
        "prefill",
        "--runtime",
        "vllm",
        "--pd-omit-kv-params",
    ]);
    let gw = pd_gateway(&[&bare], &[&d], &[]).await;
    let reply = post_json(
        &format!("{}/v1/chat/completions", gw.url()),
        &generation_body("/v1/chat/completions", false, Value::Null),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let last = bodies(&d, "/v1/chat/completions").await.pop().unwrap();
    assert!(last.get("kv_transfer_params").is_none(), "{last}");
    let metrics = scrape(&gw).await;
    assert_eq!(
        sample(&metrics, "gw_pd_kv_transfer_failures_total"),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_prefill_answers_at_once_and_cancels_the_stalled_decode() {
    let (p, d) = (role("prefill", "sglang"), role("decode", "sglang"));
    let gw = pd_gateway(&[&p], &[&d], &["--disable-retries"]).await;
    configure(&d, json!({"stall": true})).await;
    configure(
        &p,
        json!({"slow_headers_ms": 300, "fail_rate": 1.0, "fail_status": 500}),
    )
    .await;
    for stream in [false, true] {
        let started = Instant::now();
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &generation_body("/v1/chat/completions", stream, Value::Null),
        )
        .await;
        assert_eq!(reply.status, 500, "{}", reply.text());
        assert!(
            reply.text().contains("injected failure"),
            "the prefill's error is relayed"
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        assert!(
            eventually(Duration::from_secs(3), || async { inflight(&d).await == 0 }).await,
            "the decode leg was not cancelled"
        );
    }
    // A failing decode with a healthy prefill: decode's error is the answer.
    configure(&p, json!({"fail_rate": 0.0, "slow_headers_ms": 0})).await;
    configure(
        &d,
        json!({"stall": false, "fail_rate": 1.0, "fail_status": 400}),
    )
    .await;
    let reply = post_json(
        &format!("{}/v1/completions", gw.url()),
        &generation_body("/v1/completions", false, Value::Null),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_prefill_ends_at_the_deadline_for_either_protocol() {
    for runtime in ["sglang", "vllm"] {
        let (p, d) = (role("prefill", runtime), role("decode", runtime));
        let gw = pd_gateway(&[&p], &[&d], &["--request-timeout-secs", "2"]).await;
        configure(&p, json!({"stall": true})).await;
        configure(&d, json!({"stall": true})).await;
        let started = Instant::now();
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &generation_body("/v1/chat/completions", true, Value::Null),
        )
        .await;
        assert_gateway_error(&reply, 504, "worker_timeout");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{runtime}: {:?}",
            started.elapsed()
        );
        for m in [&p, &d] {
            assert!(
                eventually(Duration::from_secs(3), || async { inflight(m).await == 0 }).await,
                "{runtime}: a leg still runs"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_re_pick_a_pair_and_count_for_both_roles() {
    let (bad, good) = (role("prefill", "sglang"), role("prefill", "sglang"));
    let d = role("decode", "sglang");
    let gw = pd_gateway(
        &[&bad, &good],
        &[&d],
        &[
            "--prefill-policy",
            "round_robin",
            "--retry-initial-backoff-ms",
            "1",
        ],
    )
    .await;
    // Readiness needs one worker of each role; wait for all three, so round robin has
    // both prefill workers to pick from.
    assert!(
        eventually(Duration::from_secs(15), || async {
            let workers = listed_workers(&gw).await;
            workers.len() == 3 && workers.iter().all(|w| w["status"] == "ready")
        })
        .await,
        "{}",
        gw.log_text()
    );
    configure(&bad, json!({"fail_rate": 1.0, "fail_status": 503})).await;
    for _ in 0..4 {
        let reply = post_json(
            &format!("{}/v1/chat/completions", gw.url()),
            &generation_body("/v1/chat/completions", false, Value::Null),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    assert!(
        !bodies(&bad, "/v1/chat/completions").await.is_empty(),
        "the bad one was tried"
    );
    let metrics = scrape(&gw).await;
    for role in ["prefill", "decode"] {
        let series = format!("gw_worker_retries_total{{worker_type=\"{role}\",endpoint=\"chat\"}}");
        assert!(
            sample(&metrics, &series).unwrap_or(0.0) >= 1.0,
            "{series}:\n{metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_needs_a_ready_prefill_and_a_ready_decode_worker() {
    let (p, d) = (role("prefill", "sglang"), role("decode", "sglang"));
    let purl = p.url();
    let mut args: Vec<&str> = FAST.to_vec();
    args.extend([
        "--pd-disaggregation",
        "--prefill",
        &purl,
        "--drain-settle-secs",
        "0",
    ]);
    let gw = gateway(&args);
    let readiness = format!("{}/readiness", gw.url());
    let chat = format!("{}/v1/chat/completions", gw.url());
    let body = generation_body("/v1/chat/completions", false, Value::Null);
    // The prefill worker alone is ready, the fleet is not.
    assert!(
        eventually(Duration::from_secs(20), || async {
            listed_workers(&gw)
                .await
                .iter()
                .any(|w| w["status"] == "ready")
        })
        .await
    );
    assert_eq!(get(&readiness).await.status, 503);
    assert_gateway_error(&post_json(&chat, &body).await, 503, "no_available_workers");

    let added = post_json(
        &format!("{}/workers", gw.url()),
        &json!({"url": d.url(), "worker_type": "decode", "api_key": "decode-key"}),
    )
    .await;
    assert!(added.status < 300, "{}", added.text());
    wait_ready(&gw).await;
    assert_eq!(post_json(&chat, &body).await.status, 200);
    // Spec 1's HTTP PD router: the client's headers, and no worker key of the gateway's.
    let legs = mock_requests(&d).await;
    let leg = legs
        .iter()
        .find(|r| r["path"] == "/v1/chat/completions")
        .unwrap();
    assert!(leg["headers"].get("authorization").is_none(), "{leg}");

    // The prefill worker leaves: not ready again, and requests find no prefill server.
    let id = listed_workers(&gw)
        .await
        .iter()
        .find(|w| w["url"] == purl.as_str())
        .and_then(|w| w["id"].as_str().map(str::to_owned))
        .unwrap();
    let removed = send(
        &common::client(false),
        "DELETE",
        &format!("{}/workers/{id}", gw.url()),
        &[],
        bytes::Bytes::new(),
    )
    .await;
    assert!(removed.status < 300, "{}", removed.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            get(&readiness).await.status == 503
        })
        .await
    );
    assert_gateway_error(&post_json(&chat, &body).await, 503, "no_prefill_servers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_aware_prefill_selection_follows_the_whole_prompt() {
    let (p1, p2) = (role("prefill", "sglang"), role("prefill", "sglang"));
    let d = role("decode", "sglang");
    let gw = pd_gateway(&[&p1, &p2], &[&d], &["--prefill-policy", "cache_aware"]).await;
    // Two conversations that share their first message: the whole text tells them apart,
    // and each stays on the prefill worker that has its prefix.
    let shared = "You are a helpful assistant. ".repeat(20);
    let conversation = |tail: &str| {
        json!({"model": "mock-model", "messages": [
            {"role": "system", "content": shared},
            {"role": "user", "content": format!("{tail} ").repeat(40)},
        ]})
    };
    let url = format!("{}/v1/chat/completions", gw.url());
    for _ in 0..3 {
        for tail in ["alpha", "omega"] {
            assert_eq!(post_json(&url, &conversation(tail)).await.status, 200);
        }
    }
    let (one, two) = (bodies_of(&p1.url()).await, bodies_of(&p2.url()).await);
    for tail in ["alpha", "omega"] {
        let here = |list: &Vec<String>| list.iter().filter(|t| t.contains(tail)).count();
        assert!(
            (here(&one) == 3 && here(&two) == 0) || (here(&one) == 0 && here(&two) == 3),
            "{tail} moved between prefill workers: {} / {}",
            here(&one),
            here(&two)
        );
    }
}

/// The chat bodies a mock at `url` received, as text.
async fn bodies_of(url: &str) -> Vec<String> {
    let log = get(&format!("{url}/mock/requests")).await.json();
    log.as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .map(|r| r["body"].as_str().unwrap_or_default().to_owned())
        .collect()
}

//! `--dp-aware`, black box (issue 4; spec 1 `dp_size` and the PUT rule): an engine that
//! reports `dp_size` registers as one routing target per rank, requests reach the engine
//! with the chosen `data_parallel_rank` in their body, prefix-aware policies keep a prompt
//! on one rank, cache flushes reach the engine once, PUT is refused, DELETE of any rank
//! removes the engine, and an engine without data-parallel ranks stays a single worker.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{
    client, gateway, get, listed_workers, mock, mock_requests, post_json, send, Proc, Reply,
};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(15);

/// A `--dp-aware` gateway with short probe timings and `extra` flags.
fn dp_gateway(extra: &[&str]) -> Proc {
    let mut args = vec![
        "--dp-aware",
        "--health-check-interval-secs",
        "1",
        "--worker-startup-check-interval",
        "1",
        "--worker-startup-timeout-secs",
        "5",
    ];
    args.extend_from_slice(extra);
    gateway(&args)
}

/// A spec whose worker is ready after one probe.
fn spec(url: &str) -> Value {
    json!({
        "url": url,
        "health": {"success_threshold": 1, "failure_threshold": 1, "check_interval_secs": 1,
                   "drain_settle_secs": 1},
    })
}

/// POSTs a spec and returns the id the 202 names.
async fn add(gw: &Proc, spec: &Value) -> String {
    let reply = post_json(&format!("{}/workers", gw.url()), spec).await;
    assert_eq!(reply.status, 202, "POST /workers: {}", reply.text());
    reply.json()["worker_id"]
        .as_str()
        .expect("worker_id")
        .to_owned()
}

/// Waits until exactly `n` workers are listed, all ready; returns them by URL.
async fn wait_ready(gw: &Proc, n: usize) -> BTreeMap<String, Value> {
    let end = Instant::now() + WAIT;
    loop {
        let listed = listed_workers(gw).await;
        if listed.len() == n && listed.iter().all(|w| w["status"] == "ready") {
            return listed
                .into_iter()
                .map(|w| (w["url"].as_str().expect("url").to_owned(), w))
                .collect();
        }
        assert!(
            Instant::now() < end,
            "not {n} ready workers within {WAIT:?}: {listed:?}\ngateway log:\n{}",
            gw.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn chat(gw: &Proc, content: &str, headers: &[(&str, &str)]) -> Reply {
    let body = json!({
        "model": "mock-model",
        "messages": [{"role": "user", "content": content}],
    });
    common::post_json_with(&format!("{}/v1/chat/completions", gw.url()), &body, headers).await
}

/// The `data_parallel_rank` of each inference request the mock received, in order
/// (`None` where the body had none).
async fn ranks_seen(m: &Proc) -> Vec<Option<u64>> {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .map(|r| r["data_parallel_rank"].as_u64())
        .collect()
}

async fn clear_log(m: &Proc) {
    let url = format!("{}/mock/requests", m.url());
    let reply = send(&client(false), "DELETE", &url, &[], Bytes::new()).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_register_as_targets_and_requests_carry_their_rank() {
    let engine = mock(&["--dp-size", "4"]);
    let gw = dp_gateway(&["--policy", "round_robin"]);
    let id = add(&gw, &spec(&engine.url())).await;

    let listed = wait_ready(&gw, 4).await;
    let urls: Vec<&String> = listed.keys().collect();
    let expected: Vec<String> = (0..4).map(|r| format!("{}@{r}", engine.url())).collect();
    assert_eq!(urls, expected.iter().collect::<Vec<_>>());
    for worker in listed.values() {
        assert_eq!(worker["dp_size"], 4, "{worker}");
    }
    // The POST's id names rank 0.
    let first = get(&format!("{}/workers/{id}", gw.url())).await;
    assert_eq!(first.json()["url"], format!("{}@0", engine.url()));
    // The engine is registered: a second POST of its URL is a duplicate.
    let again = post_json(&format!("{}/workers", gw.url()), &spec(&engine.url())).await;
    assert_eq!(again.status, 409, "{}", again.text());

    clear_log(&engine).await;
    for i in 0..8 {
        let reply = chat(&gw, &format!("question {i}"), &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
    let mut seen = ranks_seen(&engine).await;
    seen.sort_unstable();
    let want: Vec<Option<u64>> = (0..4u64).flat_map(|r| [Some(r), Some(r)]).collect();
    assert_eq!(seen, want, "round robin spreads over the four ranks");

    // A JSON body that is not an object has nowhere to carry the rank.
    let reply = send(
        &client(false),
        "POST",
        &format!("{}/v1/chat/completions", gw.url()),
        &[("content-type", "application/json")],
        Bytes::from_static(b"[1, 2]"),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert_eq!(reply.json()["error"]["code"], "invalid_request_body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefix_aware_policies_keep_a_prompt_on_one_rank() {
    let engine = mock(&["--dp-size", "4"]);
    for policy in [
        vec!["--policy", "cache_aware"],
        vec!["--policy", "consistent_hashing"],
    ] {
        let gw = dp_gateway(&policy);
        add(&gw, &spec(&engine.url())).await;
        wait_ready(&gw, 4).await;
        clear_log(&engine).await;
        let prompt = "You are a terse assistant. Summarise the history of the printing press.";
        for _ in 0..6 {
            let reply = chat(&gw, prompt, &[("x-gw-routing-key", "session-7")]).await;
            assert_eq!(reply.status, 200, "{policy:?}: {}", reply.text());
        }
        let seen = ranks_seen(&engine).await;
        assert_eq!(seen.len(), 6, "{policy:?}: {seen:?}");
        assert!(seen[0].is_some(), "{policy:?}: {seen:?}");
        assert!(
            seen.iter().all(|r| *r == seen[0]),
            "{policy:?}: one rank for one prompt, saw {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_is_refused_and_delete_of_any_rank_removes_the_engine() {
    let engine = mock(&["--dp-size", "3"]);
    let other = mock(&[]);
    let gw = dp_gateway(&[]);
    add(&gw, &spec(&engine.url())).await;
    add(&gw, &spec(&other.url())).await;
    let listed = wait_ready(&gw, 4).await;
    let rank2 = listed[&format!("{}@2", engine.url())]["id"]
        .as_str()
        .expect("id")
        .to_owned();

    // Once-per-engine calls reach a data-parallel engine once, not once per rank.
    clear_log(&engine).await;
    let flush = post_json(&format!("{}/flush_cache", gw.url()), &json!({})).await;
    assert_eq!(flush.status, 200, "{}", flush.text());
    let flushes = mock_requests(&engine)
        .await
        .iter()
        .filter(|r| r["path"] == "/flush_cache")
        .count();
    assert_eq!(flushes, 1);

    let url = format!("{}/workers/{rank2}", gw.url());
    let put = send(
        &client(false),
        "PUT",
        &url,
        &[("content-type", "application/json")],
        serde_json::to_vec(&spec(&engine.url())).expect("json"),
    )
    .await;
    assert_eq!(put.status, 400, "{}", put.text());
    assert_eq!(put.json()["code"], "BAD_REQUEST", "{}", put.text());

    let delete = send(&client(false), "DELETE", &url, &[], Bytes::new()).await;
    assert_eq!(delete.status, 202, "{}", delete.text());
    let left = wait_ready(&gw, 1).await;
    assert_eq!(left.keys().collect::<Vec<_>>(), [&other.url()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_without_ranks_stays_single_and_a_spec_size_wins() {
    let single = mock(&[]);
    let gw = dp_gateway(&[]);
    add(&gw, &spec(&single.url())).await;
    let listed = wait_ready(&gw, 1).await;
    assert_eq!(listed.keys().collect::<Vec<_>>(), [&single.url()]);
    clear_log(&single).await;
    let reply = chat(&gw, "hello", &[]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        ranks_seen(&single).await,
        [None],
        "a single worker's body is untouched"
    );

    // The spec's own dp_size wins over the engine's answer (1 here).
    let stated = mock(&[]);
    let mut with_size = spec(&stated.url());
    with_size["dp_size"] = json!(2);
    add(&gw, &with_size).await;
    let listed = wait_ready(&gw, 3).await;
    assert!(
        listed.contains_key(&format!("{}@1", stated.url())),
        "{listed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_workers_expand_too() {
    let engine = mock(&["--dp-size", "2"]);
    let gw = dp_gateway(&["--worker-urls", &engine.url()]);
    let listed = wait_ready(&gw, 2).await;
    let urls: Vec<&String> = listed.keys().collect();
    assert_eq!(
        urls,
        [
            &format!("{}@0", engine.url()),
            &format!("{}@1", engine.url())
        ]
    );
}

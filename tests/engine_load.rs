//! Black-box tests of `GET /engine_metrics`, the engine load monitor, `GET /loads`,
//! `GET /get_loads` and the worker object's `engine_load`: the real gateway in front of
//! mock workers imitating SGLang (`/v1/loads`, `sglang:` metrics) and vLLM (`vllm:`
//! metrics only).

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const CP_ADMIN_KEY: &str = "cpk-admin-Lm4Qz8";

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// A gateway in front of `workers` that polls engine load every second, with `extra` flags.
fn monitored(workers: &[&Proc], extra: &[&str]) -> Proc {
    let urls: Vec<String> = workers.iter().map(|m| m.url()).collect();
    let mut args: Vec<&str> = vec!["--load-monitor-interval", "1", "--worker-urls"];
    args.extend(urls.iter().map(String::as_str));
    args.extend_from_slice(extra);
    gateway(&args)
}

/// A URL on which nothing listens.
fn dead_url() -> String {
    format!("http://127.0.0.1:{}", free_port())
}

async fn loads(gw: &Proc, query: &str) -> Value {
    let reply = get(&format!("{}/loads{query}", gw.url())).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// The `/loads` entries of one worker.
fn entries_of<'a>(body: &'a Value, worker: &str) -> Vec<&'a Value> {
    body["loads"]
        .as_array()
        .map(|l| l.iter().filter(|e| e["worker"] == worker).collect())
        .unwrap_or_default()
}

/// Waits until `/loads{query}` satisfies `want`; returns the last body.
async fn loads_until(gw: &Proc, query: &str, want: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..200 {
        last = loads(gw, query).await;
        if want(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "/loads{query} never matched; last {last}\n{}",
        gw.log_text()
    );
}

/// Requests the gateway's load monitor sent to a mock (`/v1/loads`, `/metrics`).
async fn load_polls(m: &Proc) -> usize {
    mock_requests_all(m)
        .await
        .iter()
        .filter(|r| r["path"] == "/v1/loads" || r["path"] == "/metrics")
        .count()
}

/// The id of the worker registered with `url`.
async fn worker_id(gw: &Proc, url: &str) -> String {
    let list = get(&format!("{}/workers", gw.url())).await.json();
    list["workers"]
        .as_array()
        .and_then(|w| w.iter().find(|w| w["url"] == url))
        .and_then(|w| w["id"].as_str())
        .unwrap_or_else(|| panic!("{url} not in {list}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_metrics_merges_engines_of_both_styles() {
    let a = mock(&["--runtime", "sglang"]);
    let b = mock(&["--runtime", "vllm"]);
    let c = mock(&["--runtime", "sglang", "--model", "m\"q"]);
    let gw = gateway(&["--worker-urls", &a.url(), &b.url(), &c.url()]);
    let reply = get(&format!("{}/engine_metrics", gw.url())).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let content_type = reply.headers["content-type"].to_str().unwrap_or("");
    assert_eq!(content_type, "text/plain; version=0.0.4");
    let text = reply.text();
    for (m, line) in [
        (
            &a,
            "sglang:num_running_reqs{model_name=\"mock-model\",worker_addr=\"{}\"} 0",
        ),
        (
            &b,
            "vllm:num_requests_running{model_name=\"mock-model\",worker_addr=\"{}\"} 0",
        ),
        (
            &c,
            "sglang:num_running_reqs{model_name=\"m\\\"q\",worker_addr=\"{}\"} 0",
        ),
    ] {
        let want = line.replace("{}", &m.url());
        assert!(text.lines().any(|l| l == want), "{want} missing:\n{text}");
    }
    let mut meta = HashSet::new();
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            // `# HELP name` / `# TYPE name`: once per family.
            let key: Vec<&str> = line.splitn(4, ' ').take(3).collect();
            assert!(meta.insert(key.join(" ")), "{line} repeated:\n{text}");
        } else {
            assert!(
                line.contains(",worker_addr=\"") || line.contains("{worker_addr=\""),
                "unlabelled sample {line}"
            );
        }
    }
    // A family's samples stay together: both SGLang engines' running counts follow one
    // HELP/TYPE pair.
    let start = text
        .find("# TYPE sglang:num_running_reqs gauge\n")
        .expect("type line");
    let block: Vec<&str> = text[start..].lines().skip(1).take(2).collect();
    assert!(
        block
            .iter()
            .all(|l| l.starts_with("sglang:num_running_reqs{")),
        "{block:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_metrics_leaves_out_dead_workers_and_says_why_when_nothing_answers() {
    let a = mock(&["--runtime", "vllm"]);
    let dead = dead_url();
    let gw = gateway(&["--worker-urls", &a.url(), &dead]);
    let reply = get(&format!("{}/engine_metrics", gw.url())).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply.text();
    assert!(
        text.contains(&format!("worker_addr=\"{}\"", a.url())),
        "{text}"
    );
    assert!(!text.contains(&dead), "{text}");

    // Two registered workers that went away since (a worker that never answered is not
    // registered at all).
    let (mut b, mut c) = (mock(&[]), mock(&[]));
    let gw = gateway(&["--worker-urls", &b.url(), &c.url()]);
    for gone in [&mut b, &mut c] {
        let _ = gone.child.kill();
        let _ = gone.child.wait();
    }
    let reply = get(&format!("{}/engine_metrics", gw.url())).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.text(), "All backend requests failed");

    let gw = gateway(&[]);
    let reply = get(&format!("{}/engine_metrics", gw.url())).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.text(), "No available workers");
    assert!(reply.headers["content-type"]
        .to_str()
        .unwrap_or("")
        .starts_with("text/plain"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_follow_the_engines_after_one_interval() {
    let sglang = mock(&["--runtime", "sglang", "--model", "alpha"]);
    let vllm = mock(&["--runtime", "vllm", "--model", "beta"]);
    let gw = monitored(&[&sglang, &vllm], &[]);
    set_load(&sglang, 7, 3, 0.5).await;
    set_load(&vllm, 2, 1, 0.25).await;
    let body = loads_until(&gw, "", |b| {
        entries_of(b, &sglang.url())
            .first()
            .is_some_and(|e| e["num_running_reqs"] == 7)
            && entries_of(b, &vllm.url())
                .first()
                .is_some_and(|e| e["num_running_reqs"] == 2)
    })
    .await;
    assert_eq!(body["dp_rank_count"], 2, "{body}");
    assert!(
        body["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("gw-")),
        "{body}"
    );
    let timestamp = body["timestamp"].as_str().unwrap_or("");
    assert!(
        timestamp.len() >= 20 && timestamp.ends_with('Z') && timestamp.as_bytes()[10] == b'T',
        "{timestamp}"
    );
    let s = entries_of(&body, &sglang.url())[0];
    assert_eq!(s["worker_type"], "regular");
    assert_eq!(s["dp_rank"], 0);
    assert_eq!(
        (s["num_waiting_reqs"].clone(), s["num_total_reqs"].clone()),
        (json!(3), json!(10))
    );
    assert_eq!(s["token_usage"], 0.5);
    assert!(
        s["max_total_num_tokens"].as_u64().is_some_and(|n| n > 0),
        "read from /v1/loads: {s}"
    );
    assert_eq!(s["num_waiting_uncached_tokens"], 0);
    for key in [
        "num_used_tokens",
        "gen_throughput",
        "cache_hit_rate",
        "utilization",
        "max_running_requests",
    ] {
        assert!(s.get(key).is_some(), "{key} missing: {s}");
    }
    let v = entries_of(&body, &vllm.url())[0];
    assert_eq!(
        (v["num_waiting_reqs"].clone(), v["token_usage"].clone()),
        (json!(1), json!(0.25))
    );
    assert_eq!(v["max_total_num_tokens"], 0, "read from /metrics: {v}");
    let aggregate = &body["aggregate"];
    assert_eq!(aggregate["total_running_reqs"], 9, "{body}");
    assert_eq!(aggregate["total_waiting_reqs"], 4);
    assert_eq!(aggregate["total_reqs"], 13);
    assert_eq!(aggregate["avg_token_usage"], 0.375);
    // The vLLM engine is never asked for SGLang's load route.
    let asked_vllm: Vec<Value> = mock_requests_all(&vllm).await;
    assert!(asked_vllm.iter().all(|r| r["path"] != "/v1/loads"));

    // ?model= keeps one model's workers; an unknown model has no entry and no aggregate.
    let only = loads(&gw, "?model=alpha").await;
    assert_eq!(only["dp_rank_count"], 1, "{only}");
    assert_eq!(entries_of(&only, &sglang.url()).len(), 1);
    let none = loads(&gw, "?model=nope").await;
    assert_eq!(none["loads"], json!([]), "{none}");
    assert!(none.get("aggregate").is_none(), "{none}");

    // A new figure shows within about an interval.
    set_load(&sglang, 11, 0, 0.75).await;
    loads_until(&gw, "?model=alpha", |b| {
        entries_of(b, &sglang.url())
            .first()
            .is_some_and(|e| e["num_running_reqs"] == 11 && e["token_usage"] == 0.75)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_loads_is_a_control_plane_route() {
    let m = mock(&[]);
    let key = format!("ops:Ops:admin:{CP_ADMIN_KEY}");
    let gw = monitored(&[&m], &["--control-plane-api-keys", &key]);
    loads_until(&gw, "", |b| b["dp_rank_count"] == 1).await;
    let c = client(false);
    let url = format!("{}/get_loads", gw.url());
    let refused = send(&c, "GET", &url, &[], "").await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    let auth = bearer(CP_ADMIN_KEY);
    let reply = send(&c, "GET", &url, &[("authorization", &auth)], "").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let body = reply.json();
    assert_eq!(body["dp_rank_count"], 1, "{body}");
    assert_eq!(entries_of(&body, &m.url()).len(), 1);
    // `/loads` stays public.
    assert_eq!(get(&format!("{}/loads", gw.url())).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_load_appears_in_the_worker_object_after_the_first_poll() {
    // A long interval: the first round ran before this worker was registered, so it
    // has no report.
    let m = mock(&[]);
    let gw = gateway(&["--load-monitor-interval", "3600"]);
    let reply = post_json(&format!("{}/workers", gw.url()), &json!({"url": m.url()})).await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let id = reply.json()["worker_id"].as_str().unwrap_or("").to_owned();
    let url = format!("{}/workers/{id}", gw.url());
    let ready = eventually(Duration::from_secs(20), || {
        let url = url.clone();
        async move { get(&url).await.json()["status"] == "ready" }
    })
    .await;
    assert!(ready, "{}", gw.log_text());
    let worker = get(&url).await.json();
    assert!(worker.get("engine_load").is_none(), "{worker}");
    let body = loads(&gw, "").await;
    assert_eq!(body["loads"], json!([]), "{body}");
    assert!(body.get("aggregate").is_none(), "{body}");

    // With a short interval the report arrives.
    set_load(&m, 4, 2, 0.125).await;
    let gw = monitored(&[&m], &[]);
    let id = worker_id(&gw, &m.url()).await;
    let url = format!("{}/workers/{id}", gw.url());
    let found = eventually(Duration::from_secs(10), || {
        let url = url.clone();
        async move { get(&url).await.json().get("engine_load").is_some() }
    })
    .await;
    assert!(found, "{}", gw.log_text());
    let report = &get(&url).await.json()["engine_load"];
    assert_eq!(report["source"], "loads_api", "{report}");
    assert_eq!(report["loads"][0]["num_running_reqs"], 4, "{report}");
    assert_eq!(report["loads"][0]["num_waiting_reqs"], 2, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_that_leave_or_are_not_ready_are_not_polled() {
    let stays = mock(&[]);
    let leaves = mock(&[]);
    let sick = mock(&[]);
    let gw = monitored(
        &[&stays, &leaves, &sick],
        &[
            "--health-check-interval-secs",
            "1",
            "--health-failure-threshold",
            "1",
            "--drain-settle-secs",
            "0",
        ],
    );
    loads_until(&gw, "", |b| b["dp_rank_count"] == 3).await;

    let id = worker_id(&gw, &leaves.url()).await;
    let c = client(false);
    let reply = send(&c, "DELETE", &format!("{}/workers/{id}", gw.url()), &[], "").await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let post = json!({"unhealthy": true});
    let reply = post_json(&format!("{}/mock/config", sick.url()), &post).await;
    assert_eq!(reply.status, 200);
    let body = loads_until(&gw, "", |b| b["dp_rank_count"] == 1).await;
    assert_eq!(entries_of(&body, &stays.url()).len(), 1, "{body}");

    let (left_before, sick_before) = (load_polls(&leaves).await, load_polls(&sick).await);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        load_polls(&leaves).await,
        left_before,
        "a removed worker is not polled"
    );
    assert_eq!(
        load_polls(&sick).await,
        sick_before,
        "a worker out of ready is not polled"
    );
    let sick_id = worker_id(&gw, &sick.url()).await;
    let sick_object = get(&format!("{}/workers/{sick_id}", gw.url())).await.json();
    assert_eq!(sick_object["status"], "not_ready", "{sick_object}");
    assert!(sick_object.get("engine_load").is_none(), "{sick_object}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_monitoring_polls_only_for_a_policy_that_needs_engine_load() {
    let m = mock(&[]);
    let gw = monitored(&[&m], &["--disable-load-monitoring"]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let body = loads(&gw, "").await;
    assert_eq!(body["loads"], json!([]), "{body}");
    assert!(body.get("aggregate").is_none());
    assert_eq!(load_polls(&m).await, 0, "nothing polled");
    drop(gw);

    set_load(&m, 5, 0, 0.0).await;
    let gw = monitored(
        &[&m],
        &["--disable-load-monitoring", "--policy", "power_of_two"],
    );
    let body = loads_until(&gw, "", |b| b["dp_rank_count"] == 1).await;
    assert_eq!(entries_of(&body, &m.url())[0]["num_running_reqs"], 5);
}

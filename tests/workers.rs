//! Worker management over `/workers`, black box (spec 1, "Worker management", "States and
//! transitions", "Errors"): registration with startup probing and detection, listing and
//! filtering, body and URL validation, concurrent registration of one URL, PATCH and PUT,
//! draining removal, health flapping, and listing a large fleet.
//!
//! Every gateway here starts without `--worker-urls` and without control-plane auth, so
//! `/workers` is open. Timings are shortened with flags and per-worker `health` overrides;
//! waits poll with deadlines.

use crate::common;

use std::collections::HashSet;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{client, eventually, gateway, get, mock, mock_requests, post_json, send, Proc, Reply};
use serde_json::{json, Value};

/// Gateway flags that keep probing and registration timings short.
const FAST: [&str; 6] = [
    "--health-check-interval-secs",
    "1",
    "--worker-startup-check-interval",
    "1",
    "--worker-startup-timeout-secs",
    "3",
];

fn fast_gateway() -> Proc {
    gateway(&FAST)
}

/// Per-worker health overrides: one probe decides, probes every second.
fn fast_health() -> Value {
    json!({
        "success_threshold": 1,
        "failure_threshold": 1,
        "check_interval_secs": 1,
        "drain_settle_secs": 1,
    })
}

/// `n` distinct URLs on 127.0.0.3 whose ports refuse connections (bound, then released;
/// nothing else in the suite listens on that address).
fn dead_urls(n: usize) -> Vec<String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.3:0").expect("bind 127.0.0.3"))
        .collect();
    listeners
        .iter()
        .map(|l| format!("http://{}", l.local_addr().expect("addr")))
        .collect()
}

fn dead_url() -> String {
    dead_urls(1).remove(0)
}

/// A worker that registers without probing: health checks off (detection against a
/// refusing port fails fast and is tolerated).
fn unprobed(url: &str) -> Value {
    json!({"url": url, "health": {"disable_health_check": true}})
}

async fn add(gw: &Proc, spec: &Value) -> Reply {
    post_json(&format!("{}/workers", gw.url()), spec).await
}

/// POSTs a spec, checks the 202 body and `Location`, returns the worker id.
async fn add_ok(gw: &Proc, spec: &Value) -> String {
    let reply = add(gw, spec).await;
    assert_eq!(reply.status, 202, "POST /workers {spec}: {}", reply.text());
    let body = reply.json();
    let mut keys: Vec<&str> = body
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["location", "message", "status", "url", "worker_id"],
        "{body}"
    );
    assert_eq!(body["status"], "accepted", "{body}");
    let id = body["worker_id"].as_str().expect("worker_id").to_string();
    uuid::Uuid::parse_str(&id).unwrap_or_else(|e| panic!("worker_id {id:?} not a UUID: {e}"));
    assert_eq!(body["url"], spec["url"], "{body}");
    let location = format!("/workers/{id}");
    assert_eq!(body["location"], location.as_str(), "{body}");
    assert_eq!(
        reply.headers.get("location").and_then(|v| v.to_str().ok()),
        Some(location.as_str()),
        "Location header"
    );
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    id
}

async fn get_worker(gw: &Proc, id: &str) -> Reply {
    get(&format!("{}/workers/{id}", gw.url())).await
}

async fn list(gw: &Proc, query: &str) -> Value {
    let reply = get(&format!("{}/workers{query}", gw.url())).await;
    assert_eq!(reply.status, 200, "GET /workers{query}: {}", reply.text());
    reply.json()
}

fn listed_ids(listing: &Value) -> HashSet<String> {
    listing["workers"]
        .as_array()
        .expect("workers array")
        .iter()
        .map(|w| w["id"].as_str().expect("id").to_string())
        .collect()
}

/// Polls `GET /workers/{id}` until `pred(status, body)` holds; panics with the last reply.
async fn poll_worker(
    gw: &Proc,
    id: &str,
    timeout: Duration,
    what: &str,
    pred: impl Fn(u16, &Value) -> bool,
) -> Value {
    let end = Instant::now() + timeout;
    loop {
        let reply = get_worker(gw, id).await;
        let body = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
        if pred(reply.status, &body) {
            return body;
        }
        assert!(
            Instant::now() < end,
            "worker {id}: not {what} within {timeout:?}; last {} {}\ngateway log:\n{}",
            reply.status,
            reply.text(),
            tail(&gw.log_text())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the worker is registered (no job running) with `status`.
async fn wait_status(gw: &Proc, id: &str, status: &str, timeout: Duration) -> Value {
    poll_worker(gw, id, timeout, status, |code, v| {
        code == 200 && v["status"] == status && v.get("job_status").is_none()
    })
    .await
}

async fn wait_gone(gw: &Proc, id: &str, timeout: Duration) {
    poll_worker(gw, id, timeout, "gone (404)", |code, _| code == 404).await;
}

fn tail(log: &str) -> &str {
    let start = log.len().saturating_sub(4000);
    let start = (start..=log.len())
        .find(|i| log.is_char_boundary(*i))
        .unwrap_or(log.len());
    &log[start..]
}

/// A worker-endpoint error: `{error: <message>, code: <CODE>}`; returns the message.
fn assert_worker_error(reply: &Reply, status: u16, code: &str) -> String {
    assert_eq!(reply.status, status, "body {:?}", reply.text());
    let ct = header(reply, "content-type");
    assert!(ct.starts_with("application/json"), "content-type {ct:?}");
    let body = reply.json();
    let obj = body.as_object().expect("error body is an object");
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "error"], "{body}");
    assert_eq!(body["code"], code, "{body}");
    let message = body["error"]
        .as_str()
        .expect("error is a string")
        .to_string();
    assert!(!message.is_empty(), "{body}");
    message
}

/// A body-validation error: plain text, not JSON.
fn assert_plain(reply: &Reply, status: u16) {
    assert_eq!(reply.status, status, "body {:?}", reply.text());
    let ct = header(reply, "content-type");
    assert!(ct.starts_with("text/plain"), "content-type {ct:?}");
    assert!(!reply.body.is_empty(), "a reason is given");
    assert!(
        serde_json::from_slice::<Value>(&reply.body).is_err(),
        "plain text, not JSON: {:?}",
        reply.text()
    );
}

fn header(reply: &Reply, name: &str) -> String {
    reply
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The gateway envelope for a 503 without routable workers.
fn assert_no_workers(reply: &Reply) {
    assert_eq!(reply.status, 503, "body {:?}", reply.text());
    assert_eq!(header(reply, "x-gw-error-code"), "no_available_workers");
    let body = reply.json();
    assert_eq!(body["error"]["code"], "no_available_workers", "{body}");
}

async fn chat(gw: &Proc, model: &str, extra: Value) -> Reply {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "hello there"}],
    });
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    post_json(&format!("{}/v1/chat/completions", gw.url()), &body).await
}

async fn mock_config(m: &Proc, patch: Value) {
    let reply = post_json(&format!("{}/mock/config", m.url()), &patch).await;
    assert_eq!(reply.status, 200, "mock config: {}", reply.text());
}

async fn clear_mock_log(m: &Proc) {
    let reply = send(
        &client(false),
        "DELETE",
        &format!("{}/mock/requests", m.url()),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(reply.status, 200);
}

/// Sends `method` on `/workers/{id}` with a JSON body (or none).
async fn on_worker(gw: &Proc, method: &str, id: &str, body: Option<&Value>) -> Reply {
    let url = format!("{}/workers/{id}", gw.url());
    match body {
        Some(b) => {
            send(
                &client(false),
                method,
                &url,
                &[("content-type", "application/json")],
                serde_json::to_vec(b).expect("json"),
            )
            .await
        }
        None => send(&client(false), method, &url, &[], Bytes::new()).await,
    }
}

fn assert_accepted(reply: &Reply, id: &str) {
    assert_eq!(reply.status, 202, "body {:?}", reply.text());
    let body = reply.json();
    let mut keys: Vec<&str> = body
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, ["message", "status", "worker_id"], "{body}");
    assert_eq!(body["status"], "accepted", "{body}");
    assert_eq!(body["worker_id"], id, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

const WAIT: Duration = Duration::from_secs(10);

// 1. Registration, detection, the worker object, traffic.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_workers_become_ready_are_detected_and_serve_traffic() {
    const KEY: &str = "sk-worker-secret-5c81e2";
    let sg = mock(&[
        "--runtime",
        "sglang",
        "--model",
        "m-sglang",
        "--api-key",
        KEY,
    ]);
    let vl = mock(&["--runtime", "vllm", "--model", "m-vllm"]);
    let gen = mock(&["--runtime", "generic", "--model", "m-generic"]);
    let explicit = mock(&["--runtime", "generic", "--model", "m-explicit"]);
    let gw = fast_gateway();

    let cases = [
        (&sg, "m-sglang", "sglang", Some(KEY)),
        (&vl, "m-vllm", "vllm", None),
        (&gen, "m-generic", "generic", None),
        // An explicit runtime (the `runtime` alias) skips detection.
        (&explicit, "m-explicit", "vllm", None),
    ];
    let mut ids = Vec::new();
    for (m, _, _, key) in &cases {
        let mut spec = json!({"url": m.url(), "health": fast_health()});
        if let Some(key) = key {
            spec["api_key"] = json!(key);
        }
        if m.addr == gen.addr {
            // Echo rules: `overload` is echoed; `health`, `http_pool`, `resilience` are
            // not; unknown fields are ignored.
            spec["overload"] = json!({"waiting_requests": 4});
            spec["http_pool"] = json!({"pool_max_idle_per_host": 10});
            spec["resilience"] = json!({"cb_failure_threshold": 5});
            spec["no_such_field"] = json!({"x": 1});
        }
        if m.addr == explicit.addr {
            spec["runtime"] = json!("vllm");
        }
        ids.push(add_ok(&gw, &spec).await);
    }

    for ((m, model, runtime, _), id) in cases.iter().zip(&ids) {
        let w = wait_status(&gw, id, "ready", WAIT).await;
        assert_eq!(w["id"], id.as_str(), "{w}");
        assert_eq!(w["url"], m.url(), "{w}");
        assert_eq!(w["model_id"], *model, "{w}");
        assert_eq!(w["connection_mode"], "http", "{w}");
        assert_eq!(w["is_healthy"], true, "{w}");
        assert!(w["load"].is_u64(), "{w}");
        assert_eq!(w["http2"], false, "HTTP/1.1 by default: {w}");
        assert_eq!(w["runtime_type"], *runtime, "{w}");
        assert!(w["labels"].is_object(), "{w}");
        assert_eq!(w["priority"], 50, "{w}");
        assert_eq!(w["cost"].as_f64(), Some(1.0), "{w}");
        assert_eq!(w["worker_type"], "regular", "{w}");
        assert!(w["max_connection_attempts"].is_u64(), "{w}");
        assert!(w.get("api_key").is_none(), "{w}");
        if m.addr == gen.addr {
            assert_eq!(w["overload"], json!({"waiting_requests": 4}), "{w}");
            for hidden in ["health", "http_pool", "resilience", "no_such_field"] {
                assert!(w.get(hidden).is_none(), "{hidden} echoed: {w}");
            }
        }
    }

    // The key is write-only: nowhere in either read.
    let one = get_worker(&gw, &ids[0]).await;
    assert!(!one.text().contains(KEY), "{}", one.text());
    let all = get(&format!("{}/workers", gw.url())).await;
    assert_eq!(all.status, 200);
    assert!(!all.text().contains(KEY), "{}", all.text());
    assert!(!all.text().contains("api_key"), "{}", all.text());

    // Traffic reaches each mock; the keyed one receives the worker key (the client sent
    // no Authorization). A few tries per model, so this holds whether or not the data
    // plane picks workers by model.
    for (m, model, _, key) in &cases {
        let mut relayed = None;
        for _ in 0..2 * cases.len() {
            let reply = chat(&gw, model, json!({})).await;
            assert_eq!(reply.status, 200, "{model}: {}", reply.text());
            let log = mock_requests(m).await;
            relayed = log
                .into_iter()
                .find(|r| r["path"] == "/v1/chat/completions");
            if relayed.is_some() {
                break;
            }
        }
        let relayed = relayed.unwrap_or_else(|| panic!("no chat reached the {model} mock"));
        if let Some(key) = key {
            assert_eq!(
                relayed["headers"]["authorization"],
                format!("Bearer {key}"),
                "{relayed}"
            );
        }
    }
}

// 2. Listing, stats and the model filter.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_counts_types_and_filters_by_model() {
    let m = mock(&["--model", "org/m-list"]);
    let carded = mock(&["--model", "engine-name"]);
    let gw = fast_gateway();
    let served = add_ok(&gw, &json!({"url": m.url(), "health": fast_health()})).await;
    let card = add_ok(
        &gw,
        &json!({"url": carded.url(), "health": fast_health(),
                "models": [{"id": "card-model", "aliases": ["card-alias"]}]}),
    )
    .await;
    let dead = dead_urls(4);
    let mut any_model = Vec::new();
    for (url, worker_type) in dead.iter().zip(["regular", "prefill", "decode", "encode"]) {
        let mut spec = unprobed(url);
        spec["worker_type"] = json!(worker_type);
        any_model.push(add_ok(&gw, &spec).await);
    }
    let w = wait_status(&gw, &served, "ready", WAIT).await;
    assert_eq!(w["model_id"], "org/m-list", "{w}");
    let w = wait_status(&gw, &card, "ready", WAIT).await;
    assert_eq!(w["model_id"], "card-model", "the first card wins: {w}");
    for id in &any_model {
        let w = wait_status(&gw, id, "ready", WAIT).await;
        assert!(w.get("model_id").is_none(), "no model list: {w}");
    }

    let all = list(&gw, "").await;
    assert_eq!(all["total"], 6, "{all}");
    assert_eq!(
        all["stats"],
        json!({"prefill_count": 1, "decode_count": 1, "regular_count": 3}),
        "encode counts in total only: {all}"
    );
    let unlisted: HashSet<String> = any_model.iter().cloned().collect();
    let with = |extra: &[&String]| {
        let mut ids = unlisted.clone();
        ids.extend(extra.iter().map(|id| (*id).clone()));
        ids
    };
    assert_eq!(listed_ids(&all), with(&[&served, &card]));

    // Workers without a model list match any model.
    let kept = list(&gw, "?model=org%2Fm-list").await;
    assert_eq!(listed_ids(&kept), with(&[&served]), "{kept}");
    assert_eq!(kept["total"], 5, "{kept}");
    for query in ["?model=card-model", "?model=card-alias"] {
        let kept = list(&gw, query).await;
        assert_eq!(listed_ids(&kept), with(&[&card]), "{query}: {kept}");
    }

    let other = list(&gw, "?model=other").await;
    assert_eq!(listed_ids(&other), unlisted, "{other}");
    assert_eq!(other["total"], 4, "{other}");
    assert_eq!(other["stats"]["regular_count"], 1, "{other}");
}

// 3. Validation and error bodies.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_get_the_documented_errors() {
    let gw = fast_gateway();
    let c = client(false);
    let workers = format!("{}/workers", gw.url());
    let json_ct = [("content-type", "application/json")];
    let good = serde_json::to_vec(&json!({"url": dead_url()})).expect("json");

    // 415: no JSON content type (none, or another one).
    let r = send(&c, "POST", &workers, &[], good.clone()).await;
    assert_plain(&r, 415);
    let r = send(
        &c,
        "POST",
        &workers,
        &[("content-type", "text/plain")],
        good,
    )
    .await;
    assert_plain(&r, 415);

    // 400: malformed JSON, plain text.
    let r = send(&c, "POST", &workers, &json_ct, &b"{\"url\": "[..]).await;
    assert_plain(&r, 400);

    // 422: missing url, wrong type, unknown enum value.
    let url = dead_url();
    for body in [
        json!({}),
        json!({"priority": 3}),
        json!({"url": url, "priority": "high"}),
        json!({"url": url, "worker_type": "prefil"}),
        json!({"url": url, "runtime_type": "sglangx"}),
        json!({"url": url, "health": {"timeout_secs": "5"}}),
        json!({"url": url, "labels": {"a": 1}}),
    ] {
        let r = add(&gw, &body).await;
        assert_plain(&r, 422);
    }

    // 400 BAD_REQUEST: uppercase scheme, ipc:// without path, empty, other scheme, no host.
    for bad in [
        url.replacen("http://", "HTTP://", 1),
        "ipc://".to_string(),
        String::new(),
        "ftp://127.0.0.1:1".to_string(),
        "http://".to_string(),
    ] {
        let r = add(&gw, &json!({ "url": bad })).await;
        assert_worker_error(&r, 400, "BAD_REQUEST");
    }

    // Nothing was registered by any of these.
    assert_eq!(list(&gw, "").await["total"], 0);

    // worker_id not a UUID → 400; unknown UUID → 404.
    let patch = json!({"priority": 1});
    let put = json!({ "url": url });
    let unknown = uuid::Uuid::new_v4().to_string();
    for (id, status, code) in [
        ("not-a-uuid", 400, "BAD_REQUEST"),
        (unknown.as_str(), 404, "WORKER_NOT_FOUND"),
    ] {
        let r = on_worker(&gw, "GET", id, None).await;
        assert_worker_error(&r, status, code);
        let r = on_worker(&gw, "PATCH", id, Some(&patch)).await;
        assert_worker_error(&r, status, code);
        let r = on_worker(&gw, "PUT", id, Some(&put)).await;
        assert_worker_error(&r, status, code);
        let r = on_worker(&gw, "DELETE", id, None).await;
        assert_worker_error(&r, status, code);
    }

    // A registered URL cannot be added again; the message names the existing worker.
    let id = add_ok(&gw, &unprobed(&url)).await;
    wait_status(&gw, &id, "ready", WAIT).await;
    let r = add(&gw, &unprobed(&url)).await;
    let message = assert_worker_error(&r, 409, "WORKER_ALREADY_EXISTS");
    assert!(message.contains(&id), "{message}");
    assert_eq!(list(&gw, "").await["total"], 1);

    // PATCH and PUT bodies follow the same rules.
    let at = format!("{}/workers/{id}", gw.url());
    for method in ["PATCH", "PUT"] {
        let body = serde_json::to_vec(&json!({ "url": url })).expect("json");
        let r = send(&c, method, &at, &[], body).await;
        assert_plain(&r, 415);
        let r = send(&c, method, &at, &json_ct, &b"{\"url\""[..]).await;
        assert_plain(&r, 400);
    }
    let r = on_worker(&gw, "PATCH", &id, Some(&json!({"priority": "x"}))).await;
    assert_plain(&r, 422);
    let r = on_worker(&gw, "PUT", &id, Some(&json!({"priority": 1}))).await;
    assert_plain(&r, 422);
    let upper = url.replacen("http://", "HTTP://", 1);
    let r = on_worker(&gw, "PUT", &id, Some(&json!({ "url": upper }))).await;
    assert_worker_error(&r, 400, "BAD_REQUEST");
    let w = wait_status(&gw, &id, "ready", WAIT).await;
    assert_eq!(w["priority"], 50, "unchanged: {w}");
}

// 4. One URL registered concurrently; a worker that never answers.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registration_of_one_url_and_a_worker_that_never_answers() {
    let gw = fast_gateway();
    let url = dead_url();
    let spec = json!({ "url": url });
    let started = Instant::now();
    let (a, b) = tokio::join!(add(&gw, &spec), add(&gw, &spec));
    let (won, lost) = match (a.status, b.status) {
        (202, 409) => (a, b),
        (409, 202) => (b, a),
        other => panic!(
            "expected one 202 and one 409, got {other:?}: {} / {}",
            a.text(),
            b.text()
        ),
    };
    let id = won.json()["worker_id"]
        .as_str()
        .expect("worker_id")
        .to_string();
    let message = assert_worker_error(&lost, 409, "WORKER_CREATE_IN_PROGRESS");
    assert!(message.contains(&id), "names the id to poll: {message}");

    // While it registers: a placeholder with the job, not listed.
    let r = get_worker(&gw, &id).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let w = r.json();
    assert_eq!(w["id"], id.as_str(), "{w}");
    assert_eq!(w["url"], url.as_str(), "{w}");
    assert_eq!(w["status"], "pending", "{w}");
    assert_eq!(w["is_healthy"], false, "{w}");
    // The other fields of a worker object are there, holding defaults.
    for field in [
        "runtime_type",
        "worker_type",
        "models",
        "labels",
        "priority",
        "cost",
        "connection_mode",
        "max_connection_attempts",
        "load",
        "http2",
    ] {
        assert!(w.get(field).is_some(), "placeholder lacks {field}: {w}");
    }
    let job = &w["job_status"];
    assert_eq!(job["job_type"], "AddWorker", "{w}");
    assert_eq!(job["worker_url"], url.as_str(), "{w}");
    assert!(
        job["status"] == "pending" || job["status"] == "processing",
        "{w}"
    );
    assert!(job.get("message").is_some(), "{w}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let ts = job["timestamp"].as_u64().expect("timestamp");
    assert!(ts.abs_diff(now) <= 5, "timestamp {ts} vs now {now}");
    let listing = list(&gw, "").await;
    assert_eq!(listing["total"], 0, "{listing}");
    assert!(listing["workers"].as_array().is_some_and(|w| w.is_empty()));

    // Still probing a second later (the startup timeout is 3 s).
    tokio::time::sleep_until((started + Duration::from_secs(1)).into()).await;
    let r = get_worker(&gw, &id).await;
    assert_eq!(r.status, 200, "still registering after 1 s: {}", r.text());
    assert_eq!(r.json()["job_status"]["job_type"], "AddWorker");
    assert_eq!(list(&gw, "").await["total"], 0);

    // Then the registration fails and the id is released.
    wait_gone(&gw, &id, WAIT).await;
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "gave up after {:?}",
        started.elapsed()
    );
    assert_eq!(list(&gw, "").await["total"], 0);
    // The URL is free again.
    let again = add_ok(&gw, &spec).await;
    assert_ne!(again, id);
}

// 5. PATCH.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_updates_in_place_and_can_make_a_pending_worker_ready() {
    let m = mock(&["--model", "m-patch"]);
    let slow = mock(&["--model", "m-slow"]);
    let gw = fast_gateway();
    let id = add_ok(
        &gw,
        &json!({
            "url": m.url(), "health": fast_health(), "api_key": "k-old",
            "labels": {"a": "1", "b": "2"},
        }),
    )
    .await;
    wait_status(&gw, &id, "ready", WAIT).await;

    let patch = json!({
        "priority": 7, "cost": 2.5, "labels": {"b": "20", "c": "3"}, "api_key": "k-new",
        "models": [{"id": "ignored-by-patch"}],
    });
    let r = on_worker(&gw, "PATCH", &id, Some(&patch)).await;
    assert_accepted(&r, &id);
    let w = poll_worker(&gw, &id, WAIT, "patched", |code, v| {
        code == 200 && v["priority"] == 7 && v.get("job_status").is_none()
    })
    .await;
    assert_eq!(w["cost"].as_f64(), Some(2.5), "{w}");
    assert_eq!(w["labels"]["a"], "1", "kept: {w}");
    assert_eq!(w["labels"]["b"], "20", "overwritten: {w}");
    assert_eq!(w["labels"]["c"], "3", "added: {w}");
    assert_eq!(w["status"], "ready", "{w}");
    assert_eq!(w["model_id"], "m-patch", "{w}");
    let text = get_worker(&gw, &id).await.text();
    assert!(!text.contains("k-new") && !text.contains("k-old"), "{text}");

    // The rotated key is what the worker now receives.
    clear_mock_log(&m).await;
    let reply = chat(&gw, "m-patch", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let log = mock_requests(&m).await;
    let sent = log
        .iter()
        .find(|r| r["path"] == "/v1/chat/completions")
        .unwrap_or_else(|| panic!("chat not relayed: {log:?}"));
    assert_eq!(sent["headers"]["authorization"], "Bearer k-new", "{sent}");

    // A worker held pending by a high success threshold becomes ready when PATCH turns
    // its health checks off.
    let pending = add_ok(
        &gw,
        &json!({"url": slow.url(), "health": {"success_threshold": 100, "check_interval_secs": 1}}),
    )
    .await;
    let w = wait_status(&gw, &pending, "pending", WAIT).await;
    assert_eq!(
        w["model_id"], "m-slow",
        "registered, not a placeholder: {w}"
    );
    assert_eq!(w["is_healthy"], false, "{w}");
    let r = on_worker(
        &gw,
        "PATCH",
        &pending,
        Some(&json!({"health": {"disable_health_check": true}})),
    )
    .await;
    assert_accepted(&r, &pending);
    let w = wait_status(&gw, &pending, "ready", WAIT).await;
    assert_eq!(w["is_healthy"], true, "{w}");
    let reply = chat(&gw, "m-slow", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_present_the_rotated_key() {
    const KEY: &str = "engine-key-3b7d";
    let m = mock(&["--model", "m-keyed", "--api-key", KEY]);
    let gw = fast_gateway();
    let id = add_ok(
        &gw,
        &json!({"url": m.url(), "health": fast_health(), "api_key": KEY}),
    )
    .await;
    wait_status(&gw, &id, "ready", WAIT).await;
    // A wrong key: the engine refuses the probes and the worker leaves rotation.
    let wrong = json!({"api_key": "not-the-key"});
    assert_accepted(&on_worker(&gw, "PATCH", &id, Some(&wrong)).await, &id);
    wait_status(&gw, &id, "not_ready", WAIT).await;
    let right = json!({ "api_key": KEY });
    assert_accepted(&on_worker(&gw, "PATCH", &id, Some(&right)).await, &id);
    wait_status(&gw, &id, "ready", WAIT).await;
}

// 6. PUT.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_keeps_the_url_and_reregisters_under_the_same_id() {
    let m = mock(&["--model", "m-put"]);
    let gw = fast_gateway();
    let id = add_ok(
        &gw,
        &json!({"url": m.url(), "health": fast_health(), "priority": 7, "labels": {"old": "x"}}),
    )
    .await;
    wait_status(&gw, &id, "ready", WAIT).await;

    let r = on_worker(
        &gw,
        "PUT",
        &id,
        Some(&json!({"url": dead_url(), "health": fast_health()})),
    )
    .await;
    assert_worker_error(&r, 400, "BAD_REQUEST");
    let w = wait_status(&gw, &id, "ready", WAIT).await;
    assert_eq!(w["url"], m.url(), "unchanged: {w}");
    assert_eq!(w["priority"], 7, "unchanged: {w}");

    clear_mock_log(&m).await;
    let r = on_worker(
        &gw,
        "PUT",
        &id,
        Some(&json!({"url": m.url(), "health": fast_health(), "cost": 3.0})),
    )
    .await;
    assert_accepted(&r, &id);
    // The complete new spec replaces the old: omitted fields are back to defaults.
    let w = poll_worker(&gw, &id, WAIT, "replaced and ready", |code, v| {
        code == 200
            && v["cost"].as_f64() == Some(3.0)
            && v["status"] == "ready"
            && v.get("job_status").is_none()
    })
    .await;
    assert_eq!(w["id"], id.as_str(), "{w}");
    assert_eq!(w["priority"], 50, "{w}");
    assert!(w["labels"].get("old").is_none(), "{w}");
    assert_eq!(w["model_id"], "m-put", "{w}");
    // Detection ran again (periodic probes only ask for /health).
    let log = common::mock_requests_all(&m).await;
    assert!(
        log.iter().any(|r| r["path"] == "/v1/models"),
        "registration talked to the worker again: {log:?}"
    );
    let listing = list(&gw, "").await;
    assert_eq!(listing["total"], 1, "{listing}");
    assert_eq!(listing["workers"][0]["id"], id.as_str());
    let reply = chat(&gw, "m-put", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    // The re-registered worker is watched: failing probes still take it out.
    mock_config(&m, json!({"unhealthy": true})).await;
    wait_status(&gw, &id, "not_ready", WAIT).await;
    mock_config(&m, json!({"unhealthy": false})).await;
    wait_status(&gw, &id, "ready", WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_overtaken_by_delete_does_not_bring_the_worker_back() {
    let m = mock(&["--model", "m-race"]);
    let gw = fast_gateway();
    let id = add_ok(&gw, &json!({"url": m.url(), "health": fast_health()})).await;
    wait_status(&gw, &id, "ready", WAIT).await;

    // The PUT's registration keeps probing a worker that does not answer yet...
    mock_config(&m, json!({"unhealthy": true})).await;
    let put = json!({"url": m.url(), "health": fast_health(), "priority": 1});
    assert_accepted(&on_worker(&gw, "PUT", &id, Some(&put)).await, &id);
    // ...while the worker is deleted; then the engine answers again.
    assert_accepted(&on_worker(&gw, "DELETE", &id, None).await, &id);
    wait_gone(&gw, &id, WAIT).await;
    mock_config(&m, json!({"unhealthy": false})).await;

    // The PUT's job must fail, not re-add the worker (its registration would now pass).
    let end = Instant::now() + Duration::from_secs(4);
    while Instant::now() < end {
        let r = get_worker(&gw, &id).await;
        assert_eq!(r.status, 404, "the deleted worker came back: {}", r.text());
        assert_eq!(list(&gw, "").await["total"], 0);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// 7. DELETE: draining with a request in flight; a pending worker goes at once.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_drains_a_ready_worker_and_lets_requests_in_flight_finish() {
    const TOKENS: u64 = 16;
    let m = mock(&["--model", "m-drain"]);
    let gw = fast_gateway();
    let mut health = fast_health();
    health["drain_settle_secs"] = json!(2);
    let id = add_ok(&gw, &json!({"url": m.url(), "health": health})).await;
    wait_status(&gw, &id, "ready", WAIT).await;

    // A stream of about one second, started before the removal.
    let url = format!("{}/v1/chat/completions", gw.url());
    let body = json!({
        "model": "m-drain",
        "messages": [{"role": "user", "content": "tell me a story"}],
        "stream": true,
        "mock": {"itl_ms": 60, "output_tokens": TOKENS},
    });
    let stream = tokio::spawn(async move { post_json(&url, &body).await });
    poll_worker(&gw, &id, WAIT, "carrying the stream", |code, v| {
        code == 200 && v["load"].as_u64().is_some_and(|l| l >= 1)
    })
    .await;

    let r = on_worker(&gw, "DELETE", &id, None).await;
    let deleted = Instant::now();
    assert_accepted(&r, &id);
    let w = poll_worker(&gw, &id, Duration::from_secs(1), "draining", |code, v| {
        code == 200 && v["status"] == "draining"
    })
    .await;
    assert_eq!(w["is_healthy"], false, "{w}");
    assert_eq!(w["job_status"]["job_type"], "RemoveWorker", "{w}");
    let listing = list(&gw, "").await;
    assert_eq!(listing["workers"][0]["status"], "draining", "{listing}");
    // No new requests while draining.
    assert_no_workers(&chat(&gw, "m-drain", json!({})).await);

    let reply = stream.await.expect("stream task");
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply.text();
    for i in 0..TOKENS {
        assert!(text.contains(&format!("tok{i} ")), "token {i}: {text:?}");
    }
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "complete stream: {text:?}"
    );

    wait_gone(&gw, &id, WAIT).await;
    assert!(
        deleted.elapsed() >= Duration::from_millis(1500),
        "removed {:?} after DELETE, drain_settle_secs is 2",
        deleted.elapsed()
    );
    assert_eq!(list(&gw, "").await["total"], 0);
    assert_worker_error(
        &on_worker(&gw, "DELETE", &id, None).await,
        404,
        "WORKER_NOT_FOUND",
    );

    // The URL can be registered again, under a new id, and serves again.
    let again = add_ok(&gw, &json!({"url": m.url(), "health": fast_health()})).await;
    assert_ne!(again, id);
    wait_status(&gw, &again, "ready", WAIT).await;
    let reply = chat(&gw, "m-drain", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_of_a_pending_worker_removes_it_at_once() {
    let m = mock(&["--model", "m-pending"]);
    let gw = fast_gateway();
    let id = add_ok(
        &gw,
        &json!({"url": m.url(), "health": {
            "success_threshold": 100, "check_interval_secs": 1, "drain_settle_secs": 5,
        }}),
    )
    .await;
    let w = wait_status(&gw, &id, "pending", WAIT).await;
    assert_eq!(w["model_id"], "m-pending", "{w}");
    let r = on_worker(&gw, "DELETE", &id, None).await;
    assert_accepted(&r, &id);
    wait_gone(&gw, &id, Duration::from_secs(1)).await;
    assert_eq!(list(&gw, "").await["total"], 0);

    // A ready worker with drain_settle_secs 0 goes at once too.
    let mut health = fast_health();
    health["drain_settle_secs"] = json!(0);
    let id = add_ok(&gw, &json!({"url": m.url(), "health": health})).await;
    wait_status(&gw, &id, "ready", WAIT).await;
    assert_accepted(&on_worker(&gw, "DELETE", &id, None).await, &id);
    wait_gone(&gw, &id, Duration::from_secs(1)).await;
}

// Failures found only by the background job.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_that_fail_in_the_background() {
    let m = mock(&["--model", "m-fail"]);
    let gw = fast_gateway();

    // A failed registration releases its id.
    let id = add_ok(
        &gw,
        &json!({"url": m.url(), "health": fast_health(), "overload": {"waiting_requests": 0}}),
    )
    .await;
    wait_gone(&gw, &id, WAIT).await;
    // So do the other registration-time checks: a handshake address on a non-ZMQ worker,
    // a ZMQ worker with a runtime other than rt_b/rt_e.
    for spec in [
        json!({"url": m.url(), "health": fast_health(),
               "zmq_handshake_address": "tcp://127.0.0.1:20001"}),
        json!({"url": "ipc:///tmp/tollgate-workers-test.sock", "runtime": "sglang"}),
    ] {
        let id = add_ok(&gw, &spec).await;
        wait_gone(&gw, &id, WAIT).await;
    }
    assert_eq!(list(&gw, "").await["total"], 0);

    // A failed PUT leaves the worker as it was, with the failed job visible.
    let id = add_ok(
        &gw,
        &json!({"url": m.url(), "health": fast_health(), "priority": 9}),
    )
    .await;
    wait_status(&gw, &id, "ready", WAIT).await;
    let r = on_worker(
        &gw,
        "PUT",
        &id,
        Some(&json!({"url": m.url(), "overload": {"token_usage": 1.5}})),
    )
    .await;
    assert_accepted(&r, &id);
    let w = poll_worker(&gw, &id, WAIT, "carrying a failed job", |code, v| {
        code == 200 && v["job_status"]["status"] == "failed"
    })
    .await;
    let job = &w["job_status"];
    assert_eq!(job["job_type"], "UpdateWorker", "{w}");
    assert_eq!(job["worker_url"], m.url(), "{w}");
    assert!(
        job["message"].as_str().is_some_and(|s| !s.is_empty()),
        "{w}"
    );
    assert!(job["timestamp"].is_u64(), "{w}");
    assert_eq!(w["status"], "ready", "{w}");
    assert_eq!(w["priority"], 9, "{w}");
    assert!(w.get("overload").is_none(), "{w}");
    let reply = chat(&gw, "m-fail", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

// Workers added through the API do not inherit the gateway `--api-key`.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_workers_do_not_inherit_the_gateway_key() {
    const GATEWAY_KEY: &str = "gw-shared-key-91d0";
    let m = mock(&["--model", "m-nokey"]);
    let mut args = FAST.to_vec();
    args.extend(["--api-key", GATEWAY_KEY]);
    let gw = gateway(&args);
    let c = client(false);
    let auth = format!("Bearer {GATEWAY_KEY}");
    let headers = [
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
    ];
    let spec = json!({"url": m.url(), "health": fast_health()});
    let reply = send(
        &c,
        "POST",
        &format!("{}/workers", gw.url()),
        &headers,
        serde_json::to_vec(&spec).expect("json"),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    let id = reply.json()["worker_id"]
        .as_str()
        .expect("worker_id")
        .to_string();
    let at = format!("{}/workers/{id}", gw.url());
    let end = Instant::now() + WAIT;
    loop {
        let r = send(&c, "GET", &at, &headers[1..], Bytes::new()).await;
        let v = serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null);
        if r.status == 200 && v["status"] == "ready" {
            break;
        }
        assert!(Instant::now() < end, "not ready: {} {}", r.status, r.text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The gateway's own calls (probes, detection) carry no key.
    let log = common::mock_requests_all(&m).await;
    assert!(!log.is_empty());
    for entry in &log {
        assert!(
            entry["headers"].get("authorization").is_none(),
            "worker got a key it was never given: {entry}"
        );
    }
    assert!(
        gw.log_text()
            .lines()
            .any(|l| l.contains("WARN") && l.contains(&m.url())),
        "a warning names the keyless worker:\n{}",
        tail(&gw.log_text())
    );
}

// The job queue is bounded: a full queue answers 500 at once.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_job_queue_is_refused_with_500() {
    // A worker that takes connections into its backlog and never answers: every
    // registration job hangs in its first probe, so queued jobs pile up. Each job needs
    // its own URL, and a path does not make one (the worker is its scheme and
    // authority): the listener takes every loopback address, one per job.
    let hole = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = hole.local_addr().expect("addr").port();
    let gw = fast_gateway();
    let started = Instant::now();
    let mut accepted = 0usize;
    let refusal = loop {
        let host = format!("127.0.{}.{}", 1 + accepted / 250, 1 + accepted % 250);
        let spec = json!({
            "url": format!("http://{host}:{port}"),
            "health": {"timeout_secs": 60},
        });
        let reply = add(&gw, &spec).await;
        if reply.status != 202 {
            break reply;
        }
        accepted += 1;
        assert!(accepted < 5000, "the queue never filled");
    };
    let message = assert_worker_error(&refusal, 500, "INTERNAL_SERVER_ERROR");
    assert!(accepted >= 64, "refused after only {accepted}: {message}");
    // The control plane still answers, and the refused registration left no trace.
    let listing = list(&gw, "").await;
    assert_eq!(listing["total"], 0, "{}", listing["total"]);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    drop(hole);
}

// Labels with built-in meaning.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_and_kv_labels_are_interpreted() {
    let gw = fast_gateway();
    let mut spec = unprobed(&dead_url());
    spec["labels"] = json!({
        "model_path": "path-model", "model_id": "id-model", "team": "x",
        "kv_role": "role-from-label", "kv_connector": "label-connector",
    });
    spec["kv_connector"] = json!("spec-connector");
    let id = add_ok(&gw, &spec).await;
    let w = wait_status(&gw, &id, "ready", WAIT).await;
    // Without models, the model comes from the labels: model_id before model_path.
    assert_eq!(w["model_id"], "id-model", "{w}");
    // KV labels move into the spec fields; a spec value wins over the label.
    assert_eq!(w["kv_role"], "role-from-label", "{w}");
    assert_eq!(w["kv_connector"], "spec-connector", "{w}");
    assert!(w["labels"].get("kv_role").is_none(), "{w}");
    assert!(w["labels"].get("kv_connector").is_none(), "{w}");
    assert_eq!(w["labels"]["team"], "x", "{w}");
    assert_eq!(listed_ids(&list(&gw, "?model=id-model").await).len(), 1);
    assert!(listed_ids(&list(&gw, "?model=other").await).is_empty());
}

// `http_pool.http2`.

/// A plain HTTP/1.1 server that answers every request 200 `{}` and knows nothing of
/// HTTP/2 (a prior-knowledge preface gets an HTTP/1.1 answer).
fn http1_only_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut pending = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => pending.extend_from_slice(&buf[..n]),
                    }
                    while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                        pending.drain(..end + 4);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if conn.write_all(answer).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

/// The protocol versions of the inference requests `m` received from the gateway.
async fn versions_seen(m: &Proc) -> Vec<String> {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .map(|r| r["version"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_pool_setting_is_honoured_and_reported() {
    let m = mock(&["--model", "m-h2"]);
    let h1 = http1_only_server();
    let gw = fast_gateway();

    // Default without --upstream-http2: HTTP/1.1.
    let plain = add_ok(&gw, &json!({"url": h1, "health": fast_health()})).await;
    let w = wait_status(&gw, &plain, "ready", WAIT).await;
    assert_eq!(w["http2"], false, "{w}");
    assert_accepted(&on_worker(&gw, "DELETE", &plain, None).await, &plain);
    wait_gone(&gw, &plain, WAIT).await;

    // http2 true against an engine that speaks h2c: HTTP/2, reported, and used for traffic.
    let h2 = add_ok(
        &gw,
        &json!({"url": m.url(), "health": fast_health(), "http_pool": {"http2": true}}),
    )
    .await;
    let w = wait_status(&gw, &h2, "ready", WAIT).await;
    assert_eq!(w["http2"], true, "{w}");
    let reply = chat(&gw, "m-h2", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = chat(&gw, "m-h2", json!({"stream": true})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(reply.text().contains("data: [DONE]"), "{}", reply.text());
    assert_eq!(versions_seen(&m).await, ["HTTP/2.0", "HTTP/2.0"]);

    // http2 true against an HTTP/1.1-only worker: the registration fails (the id is
    // released) and the log says why.
    let refused = add_ok(
        &gw,
        &json!({"url": h1, "health": fast_health(), "http_pool": {"http2": true}}),
    )
    .await;
    wait_gone(&gw, &refused, WAIT).await;
    // The log reaches the test through a reader thread, behind a debug-level stream of h2
    // frames: the line may arrive a moment after the job ended.
    let said = eventually(WAIT, || async {
        gw.log_text().contains("speaks only HTTP/1.1")
    });
    assert!(said.await, "{}", tail(&gw.log_text()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_http2_prefers_h2c_and_falls_back_to_http1() {
    let m = mock(&["--model", "m-up2"]);
    let h1 = http1_only_server();
    let mut args = FAST.to_vec();
    let url = m.url();
    args.extend(["--upstream-http2", "--worker-urls", &url]);
    let gw = gateway(&args);

    // The startup worker speaks h2c: chosen, reported, used.
    let listing = list(&gw, "").await;
    let startup = &listing["workers"][0];
    assert_eq!(startup["http2"], true, "{listing}");
    let reply = chat(&gw, "m-up2", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(versions_seen(&m).await, ["HTTP/2.0"]);

    // A worker that speaks only HTTP/1.1 registers over HTTP/1.1 instead of failing.
    let plain = add_ok(&gw, &json!({"url": h1, "health": fast_health()})).await;
    let w = wait_status(&gw, &plain, "ready", WAIT).await;
    assert_eq!(w["http2"], false, "{w}");

    // `http2: false` opts out even under the flag.
    let m2 = mock(&["--model", "m-up2-off"]);
    let off = add_ok(
        &gw,
        &json!({"url": m2.url(), "health": fast_health(), "http_pool": {"http2": false}}),
    )
    .await;
    let w = wait_status(&gw, &off, "ready", WAIT).await;
    assert_eq!(w["http2"], false, "{w}");
}

// 8. Health flapping.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_probes_take_a_worker_out_and_recovery_brings_it_back() {
    let m = mock(&["--model", "m-flap"]);
    let gw = fast_gateway();
    // Two successes make it ready: the registration probe and one more a second later.
    let health = json!({"success_threshold": 2, "failure_threshold": 1, "check_interval_secs": 1});
    let id = add_ok(&gw, &json!({"url": m.url(), "health": health})).await;
    wait_status(&gw, &id, "pending", WAIT).await;
    wait_status(&gw, &id, "ready", WAIT).await;
    let reply = chat(&gw, "m-flap", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    mock_config(&m, json!({"unhealthy": true})).await;
    let w = wait_status(&gw, &id, "not_ready", WAIT).await;
    assert_eq!(w["is_healthy"], false, "{w}");
    assert_no_workers(&chat(&gw, "m-flap", json!({})).await);

    mock_config(&m, json!({"unhealthy": false})).await;
    let restored = Instant::now();
    let w = wait_status(&gw, &id, "ready", WAIT).await;
    assert_eq!(w["is_healthy"], true, "{w}");
    assert!(
        restored.elapsed() >= Duration::from_millis(900),
        "ready {:?} after recovery; two probes a second apart are needed",
        restored.elapsed()
    );
    let reply = chat(&gw, "m-flap", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

// 9. A large fleet lists quickly.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_workers_list_in_under_a_second() {
    const N: usize = 1000;
    let gw = fast_gateway();
    let mut ids = HashSet::new();
    for url in dead_urls(N) {
        ids.insert(add_ok(&gw, &unprobed(&url)).await);
    }
    assert_eq!(ids.len(), N);
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let total = list(&gw, "").await["total"].as_u64().unwrap_or(0);
        if total == N as u64 {
            break;
        }
        assert!(
            Instant::now() < end,
            "only {total} of {N} registered\n{}",
            tail(&gw.log_text())
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = Instant::now();
    let listing = list(&gw, "").await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "GET /workers took {took:?}");
    assert_eq!(listing["total"], N, "{}", listing["total"]);
    assert_eq!(listed_ids(&listing), ids);
    assert_eq!(listing["stats"]["regular_count"], N);
    assert!(listing["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .all(|w| w["status"] == "ready"));
}

// 10. Prefill and decode workers from the command line.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefill_and_decode_workers_register_at_startup() {
    const KEY: &str = "pd-worker-key-5c1e";
    let prefill = mock(&["--model", "m-pd", "--api-key", KEY]);
    let decode = mock(&["--model", "m-pd", "--api-key", KEY, "--runtime", "vllm"]);
    let (p, d) = (prefill.url(), decode.url());
    let mut args = FAST.to_vec();
    args.extend([
        "--api-key",
        KEY,
        "--pd-disaggregation",
        "--prefill",
        &p,
        "8998",
        "--decode",
        &d,
    ]);
    let gw = gateway(&args);
    let auth = format!("Bearer {KEY}");

    // Command-line workers register like API ones: listed once probed and detected,
    // ready once their health checks pass.
    let list_all = || async {
        let listing = send(
            &client(false),
            "GET",
            &format!("{}/workers", gw.url()),
            &[("authorization", &auth)],
            Bytes::new(),
        )
        .await;
        assert_eq!(listing.status, 200, "{}", listing.text());
        listing.json()
    };
    let deadline = Instant::now() + WAIT;
    let listing = loop {
        let listing = list_all().await;
        let ready = listing["workers"]
            .as_array()
            .is_some_and(|ws| ws.len() == 2 && ws.iter().all(|w| w["status"] == "ready"));
        if ready {
            break listing;
        }
        assert!(Instant::now() < deadline, "not both ready: {listing}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(listing["total"], 2, "{listing}");
    let by_url = |url: &str| {
        listing["workers"]
            .as_array()
            .and_then(|ws| ws.iter().find(|w| w["url"] == url).cloned())
            .unwrap_or_else(|| panic!("{url} not listed: {listing}"))
    };
    let (pw, dw) = (by_url(&p), by_url(&d));
    assert_eq!(pw["worker_type"], "prefill", "{pw}");
    assert_eq!(pw["bootstrap_port"], 8998, "{pw}");
    assert_eq!(pw["runtime_type"], "sglang", "{pw}");
    assert_eq!(pw["status"], "ready", "{pw}");
    assert_eq!(pw["pd_pairing"], "sglang/http/default", "{pw}");
    assert_eq!(dw["worker_type"], "decode", "{dw}");
    assert_eq!(dw["runtime_type"], "vllm", "{dw}");
    assert_eq!(dw["pd_pairing"], "vllm/http/default", "{dw}");
    assert!(dw.get("bootstrap_port").is_none(), "{dw}");

    // Information routes go to the first ready prefill worker, with the worker key.
    let info = get(&format!("{}/get_model_info", gw.url())).await;
    assert_eq!(info.status, 200, "{}", info.text());
    assert_eq!(info.json()["model_path"], "m-pd");
    let seen = mock_requests(&prefill).await;
    assert!(
        seen.iter()
            .any(|r| r["path"] == "/get_model_info"
                && r["headers"]["authorization"] == auth.as_str()),
        "{seen:?}"
    );

    // These two do not pair (sglang/http/default against vllm/http/default): no decode
    // worker for the prefill one, 503 no_available_workers, nothing sent.
    let reply = send(
        &client(false),
        "POST",
        &format!("{}/v1/chat/completions", gw.url()),
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        Bytes::from_static(br#"{"model":"m-pd","messages":[{"role":"user","content":"hi"}]}"#),
    )
    .await;
    assert_eq!(reply.status, 503, "{}", reply.text());
    assert_eq!(header(&reply, "x-gw-error-code"), "no_available_workers");
    for m in [&prefill, &decode] {
        assert!(
            !mock_requests(m)
                .await
                .iter()
                .any(|r| r["path"] == "/v1/chat/completions"),
            "no inference request may reach a worker"
        );
    }
}

//! Fleet-wide administration and information routes, black box (spec 1, "Cache
//! management", "Model and server information", "Profiling", "Other routes", "Errors"):
//! `/flush_cache` and the profiler routes fan out to every worker and summarise per worker;
//! `/v1/models` answers from the registry; `/get_model_info`, `/get_server_info` and
//! `/health_generate` are forwarded to one healthy worker with its answer unchanged.

use crate::common;
use crate::support;

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{client, eventually, gateway, get, mock, mock_requests, send, Proc, Reply};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use support::assert_gateway_error;

/// Data-plane key shared by the gateway and the mocks that should accept its calls.
const KEY: &str = "sk-admin-fanout-3Kq8";

/// A worker that answers `/health` (so registration and probes accept it) and fails every
/// flush and profiler call with 500; it runs on the test's runtime and ends with it.
async fn failing_worker() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(|req: http::Request<Incoming>| async move {
                        let (status, body) = match req.uri().path() {
                            "/health" => (200, ""),
                            "/flush_cache" | "/start_profile" | "/stop_profile" => {
                                (500, "engine busy")
                            }
                            _ => (404, ""),
                        };
                        let resp = http::Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::from_static(body.as_bytes())))
                            .expect("response");
                        Ok::<_, Infallible>(resp)
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    format!("http://{addr}")
}

/// Gateway serving `urls` (and `extra` flags), once at least one worker takes traffic when
/// `wait_ready` is set.
async fn start(urls: &[String], extra: &[&str], wait_ready: bool) -> Proc {
    let mut args: Vec<&str> = Vec::new();
    if !urls.is_empty() {
        args.push("--worker-urls");
        args.extend(urls.iter().map(String::as_str));
    }
    args.extend_from_slice(extra);
    let gw = gateway(&args);
    if wait_ready {
        let url = format!("{}/readiness", gw.url());
        let ready = eventually(Duration::from_secs(20), || {
            let url = url.clone();
            async move { get(&url).await.status == 200 }
        })
        .await;
        assert!(ready, "no worker became ready:\n{}", gw.log_text());
    }
    gw
}

/// A control-plane POST with the shared key (with only `--api-key` set it guards both
/// planes) and an optional JSON body.
async fn admin_post(gw: &Proc, path: &str, body: Option<Value>) -> Reply {
    let auth = format!("Bearer {KEY}");
    let mut headers = vec![("authorization", auth.as_str())];
    let bytes = match &body {
        Some(v) => {
            headers.push(("content-type", "application/json"));
            Bytes::from(serde_json::to_vec(v).expect("json"))
        }
        None => Bytes::new(),
    };
    send(
        &client(false),
        "POST",
        &format!("{}{path}", gw.url()),
        &headers,
        bytes,
    )
    .await
}

/// The requests a mock received on `path`.
async fn received(mock: &Proc, path: &str) -> Vec<Value> {
    mock_requests(mock)
        .await
        .into_iter()
        .filter(|r| r["path"] == path)
        .collect()
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    keys.sort();
    keys
}

fn failed_workers(body: &Value) -> Vec<String> {
    body["failed"]
        .as_array()
        .unwrap_or_else(|| panic!("no failed list: {body}"))
        .iter()
        .map(|f| {
            assert_eq!(keys(f), ["error", "worker"], "failure entry {f}");
            assert!(
                !f["error"].as_str().unwrap_or_default().is_empty(),
                "failure has a reason: {f}"
            );
            f["worker"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap_or_default().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------------------
// POST /flush_cache
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_reaches_every_worker_with_its_key() {
    let a = mock(&["--api-key", KEY]);
    let b = mock(&["--api-key", KEY]);
    let gw = start(&[a.url(), b.url()], &["--api-key", KEY], true).await;

    let reply = admin_post(&gw, "/flush_cache", None).await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    assert!(reply.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let body = reply.json();
    assert_eq!(
        keys(&body),
        [
            "message",
            "status",
            "total_grpc_workers",
            "total_http_workers",
            "total_workers",
            "total_zmq_workers_skipped",
            "workers_flushed",
        ],
        "success carries no successful/failed lists: {body}"
    );
    assert_eq!(body["status"], "success");
    assert_eq!(body["workers_flushed"], 2);
    assert_eq!(body["total_http_workers"], 2);
    assert_eq!(body["total_grpc_workers"], 0);
    assert_eq!(body["total_zmq_workers_skipped"], 0);
    assert_eq!(body["total_workers"], 2);
    assert!(!body["message"].as_str().unwrap().is_empty());

    for m in [&a, &b] {
        let seen = received(m, "/flush_cache").await;
        assert_eq!(seen.len(), 1, "one flush per worker: {seen:?}");
        assert_eq!(seen[0]["method"], "POST");
        assert_eq!(seen[0]["headers"]["authorization"], format!("Bearer {KEY}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_reports_failed_workers_with_206() {
    let good = mock(&["--api-key", KEY]);
    // Answers 500 to the flush: a non-2xx answer is a failure.
    let refusing = failing_worker().await;
    // Registered, then gone: the connection is refused.
    let gone = mock(&["--api-key", KEY]);
    let dead = gone.url();
    let gw = start(
        &[good.url(), refusing.clone(), dead.clone()],
        &["--api-key", KEY],
        true,
    )
    .await;
    drop(gone);

    let reply = admin_post(&gw, "/flush_cache", None).await;
    assert_eq!(reply.status, 206, "body {}", reply.text());
    let body = reply.json();
    assert_eq!(body["status"], "partial_success");
    assert_eq!(body["workers_flushed"], 1);
    assert_eq!(body["total_http_workers"], 3);
    assert_eq!(body["total_grpc_workers"], 0);
    assert_eq!(body["total_zmq_workers_skipped"], 0);
    assert_eq!(body["total_workers"], 3);
    assert_eq!(strings(&body["successful"]), [good.url()]);
    let mut failed = failed_workers(&body);
    failed.sort();
    let mut expected = vec![refusing.clone(), dead];
    expected.sort();
    assert_eq!(failed, expected);
    let refused = body["failed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["worker"] == refusing.as_str())
        .unwrap();
    assert!(
        refused["error"].as_str().unwrap().contains("500"),
        "the status is named: {refused}"
    );
    assert!(
        !reply.text().contains(KEY),
        "the worker key never shows in the answer"
    );
    assert_eq!(received(&good, "/flush_cache").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_with_no_workers_is_success() {
    let gw = start(&[], &[], false).await;
    let reply = send(
        &client(false),
        "POST",
        &format!("{}/flush_cache", gw.url()),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    let body = reply.json();
    assert_eq!(body["status"], "success");
    assert_eq!(body["workers_flushed"], 0);
    assert_eq!(body["total_workers"], 0);
    assert!(body.get("failed").is_none());
}

// ---------------------------------------------------------------------------------------
// POST /start_profile, /stop_profile
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_all_workers_passes_the_body_through() {
    let a = mock(&["--api-key", KEY]);
    let b = mock(&["--api-key", KEY]);
    let gw = start(&[a.url(), b.url()], &["--api-key", KEY], true).await;

    let options = json!({"output_dir": "/tmp/traces", "num_steps": 3, "activities": ["CPU"]});
    let reply = admin_post(&gw, "/start_profile", Some(options.clone())).await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    let body = reply.json();
    assert_eq!(body["status"], "success");
    assert!(body.get("failed").is_none(), "{body}");
    let mut ok = strings(&body["successful"]);
    ok.sort();
    let mut expected = vec![a.url(), b.url()];
    expected.sort();
    assert_eq!(ok, expected);
    for m in [&a, &b] {
        let seen = received(m, "/start_profile").await;
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0]["method"], "POST");
        assert_eq!(seen[0]["headers"]["authorization"], format!("Bearer {KEY}"));
        let sent: Value = serde_json::from_str(seen[0]["body"].as_str().unwrap()).unwrap();
        assert_eq!(sent, options);
    }

    // No body at all: every worker, stopped.
    let reply = admin_post(&gw, "/stop_profile", None).await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    for m in [&a, &b] {
        assert_eq!(received(m, "/stop_profile").await.len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_one_worker_by_url() {
    let a = mock(&["--api-key", KEY]);
    let b = mock(&["--api-key", KEY]);
    let gw = start(&[a.url(), b.url()], &["--api-key", KEY], true).await;

    let reply = admin_post(
        &gw,
        "/start_profile",
        Some(json!({"url": b.url(), "num_steps": 5})),
    )
    .await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    assert_eq!(strings(&reply.json()["successful"]), [b.url()]);
    assert!(received(&a, "/start_profile").await.is_empty());
    let seen = received(&b, "/start_profile").await;
    assert_eq!(seen.len(), 1);
    let sent: Value = serde_json::from_str(seen[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        sent,
        json!({"num_steps": 5}),
        "`url` is the gateway's own field"
    );

    // A trailing slash names the same worker.
    let reply = admin_post(
        &gw,
        "/stop_profile",
        Some(json!({"url": format!("{}/", a.url())})),
    )
    .await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    assert_eq!(received(&a, "/stop_profile").await.len(), 1);
    assert!(received(&b, "/stop_profile").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_unknown_url_is_404_and_bad_body_is_400() {
    let a = mock(&["--api-key", KEY]);
    let gw = start(&[a.url()], &["--api-key", KEY], true).await;

    let reply = admin_post(
        &gw,
        "/start_profile",
        Some(json!({"url": "http://127.0.0.1:1"})),
    )
    .await;
    assert_eq!(reply.status, 404, "body {}", reply.text());
    let body = reply.json();
    assert_eq!(body["code"], "WORKER_NOT_FOUND");
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("http://127.0.0.1:1"));
    assert!(received(&a, "/start_profile").await.is_empty());

    for bad in [&b"{nope"[..], &b"[1, 2]"[..], &br#"{"url": 7}"#[..]] {
        let reply = send(
            &client(false),
            "POST",
            &format!("{}/stop_profile", gw.url()),
            &[
                ("authorization", &format!("Bearer {KEY}")),
                ("content-type", "application/json"),
            ],
            Bytes::copy_from_slice(bad),
        )
        .await;
        assert_eq!(reply.status, 400, "body {}", reply.text());
        assert_eq!(reply.json()["code"], "BAD_REQUEST");
    }
    assert!(received(&a, "/stop_profile").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_with_no_workers_is_404() {
    let gw = start(&[], &[], false).await;
    let reply = send(
        &client(false),
        "POST",
        &format!("{}/start_profile", gw.url()),
        &[],
        Bytes::new(),
    )
    .await;
    assert_eq!(reply.status, 404, "body {}", reply.text());
    assert_eq!(reply.json()["code"], "WORKER_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profile_failure_is_206_with_both_lists() {
    let good = mock(&["--api-key", KEY]);
    let gone = mock(&["--api-key", KEY]);
    let dead = gone.url();
    let gw = start(&[good.url(), dead.clone()], &["--api-key", KEY], true).await;
    drop(gone);

    let reply = admin_post(&gw, "/stop_profile", None).await;
    assert_eq!(reply.status, 206, "body {}", reply.text());
    let body = reply.json();
    assert_eq!(body["status"], "partial_success");
    assert_eq!(strings(&body["successful"]), [good.url()]);
    assert_eq!(failed_workers(&body), std::slice::from_ref(&dead));

    // Only the dead worker targeted: everything failed, still 206.
    let reply = admin_post(&gw, "/start_profile", Some(json!({"url": dead}))).await;
    assert_eq!(reply.status, 206, "body {}", reply.text());
    let body = reply.json();
    assert!(strings(&body["successful"]).is_empty());
    assert_eq!(failed_workers(&body), [dead]);
}

// ---------------------------------------------------------------------------------------
// GET /v1/models
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_the_registry() {
    let a = mock(&["--model", "alpha-7b"]);
    let b = mock(&["--model", "beta-13b"]);
    let c = mock(&["--model", "alpha-7b"]);
    let gw = start(&[], &["--model-alias", "fast=alpha-7b"], false).await;
    let workers = format!("{}/workers", gw.url());
    // A model card (its alias is a routing name, not a model), a model the engine reports,
    // and the same model again from a label.
    for spec in [
        json!({"url": a.url(), "models": [{"id": "alpha-7b", "aliases": ["a7"]}]}),
        json!({"url": b.url()}),
        json!({"url": c.url(), "labels": {"served_model_name": "alpha-7b"}}),
    ] {
        let reply = common::post_json(&workers, &spec).await;
        assert_eq!(reply.status, 202, "{spec}: {}", reply.text());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = get(&workers).await.json()["total"].as_u64();
        if listed == Some(3) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "workers registered: {listed:?}\n{}",
            gw.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let reply = get(&format!("{}/v1/models", gw.url())).await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    assert!(reply.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let mut body = reply.json();
    assert_eq!(keys(&body), ["data", "object"]);
    assert_eq!(body["object"], "list");
    let data = body["data"].as_array_mut().expect("data");
    data.sort_by_key(|m| m["id"].as_str().unwrap_or_default().to_owned());
    assert_eq!(
        body["data"],
        json!([
            {"id": "alpha-7b", "object": "model", "created": 0, "owned_by": "self_hosted"},
            {"id": "beta-13b", "object": "model", "created": 0, "owned_by": "self_hosted"},
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_without_workers_is_503_plain_text() {
    let gw = start(&[], &[], false).await;
    let reply = get(&format!("{}/v1/models", gw.url())).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.text(), "No models available");
    assert!(reply.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
}

// ---------------------------------------------------------------------------------------
// GET /get_model_info, /get_server_info, /health_generate
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_routes_return_the_workers_answer() {
    let m = mock(&["--model", "gamma-1b", "--api-key", KEY]);
    let gw = start(&[m.url()], &["--api-key", KEY], true).await;
    let auth = format!("Bearer {KEY}");

    for path in ["/get_model_info", "/get_server_info"] {
        // Public route: no credential needed at the gateway.
        let via_gateway = get(&format!("{}{path}", gw.url())).await;
        let direct = send(
            &client(false),
            "GET",
            &format!("{}{path}", m.url()),
            &[("authorization", &auth)],
            Bytes::new(),
        )
        .await;
        assert_eq!(via_gateway.status, 200, "{path}: {}", via_gateway.text());
        assert_eq!(
            via_gateway.headers["content-type"],
            direct.headers["content-type"]
        );
        assert!(via_gateway.headers.get("x-gw-error-code").is_none());
        assert_eq!(via_gateway.json(), direct.json(), "{path}");
        let seen = received(&m, path).await;
        assert!(
            seen.iter()
                .any(|r| r["method"] == "GET" && r["headers"]["authorization"] == auth.as_str()),
            "{path} reached the worker with its key: {seen:?}"
        );
    }
    assert_eq!(
        get(&format!("{}/get_model_info", gw.url())).await.json()["model_path"],
        "gamma-1b"
    );

    let reply = get(&format!("{}/health_generate", gw.url())).await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    assert!(!received(&m, "/health_generate").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_error_statuses_come_back_unchanged() {
    // A vLLM engine has no /get_model_info: its 404 comes back as it is.
    let m = mock(&["--runtime", "vllm"]);
    let gw = start(&[m.url()], &[], true).await;
    let reply = get(&format!("{}/get_model_info", gw.url())).await;
    assert_eq!(reply.status, 404, "body {}", reply.text());
    assert!(reply.headers.get("x-gw-error-code").is_none());
    assert_eq!(reply.json()["error"]["type"], "not_found_error");

    // An engine whose generation check fails: the worker's 503, not the gateway's.
    let patch = send(
        &client(false),
        "POST",
        &format!("{}/mock/config", m.url()),
        &[("content-type", "application/json")],
        Bytes::from_static(br#"{"unhealthy": true}"#),
    )
    .await;
    assert_eq!(patch.status, 200, "{}", patch.text());
    let reply = get(&format!("{}/health_generate", gw.url())).await;
    assert_eq!(reply.status, 503, "body {}", reply.text());
    assert!(reply.headers.get("x-gw-error-code").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_routes_without_workers_are_503() {
    let gw = start(&[], &[], false).await;
    for path in ["/get_model_info", "/get_server_info", "/health_generate"] {
        let reply = get(&format!("{}{path}", gw.url())).await;
        assert_gateway_error(&reply, 503, "no_available_workers");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_forwarding_to_a_dead_worker_is_502() {
    let gone = mock(&[]);
    let gw = start(&[gone.url()], &[], true).await;
    drop(gone);
    let reply = get(&format!("{}/get_server_info", gw.url())).await;
    assert_gateway_error(&reply, 502, "worker_connect_failed");
}

// ---------------------------------------------------------------------------------------
// gRPC-only fleet
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_only_fleet_info_routes_are_501_and_admin_rpcs_reach_the_engine() {
    let dir = std::env::temp_dir().join(format!("tollgate-fanout-grpc-{}", std::process::id()));
    common::tokenizer::write_tokenizer(&dir);
    let engine = common::grpc_engine(&["--model", "m"]);
    let gw = start(&[], &["--model-path", dir.to_str().unwrap()], false).await;
    let reply = common::post_json(
        &format!("{}/workers", gw.url()),
        &json!({"url": format!("grpc://{}", engine.addr)}),
    )
    .await;
    assert_eq!(reply.status, 202, "body {}", reply.text());
    let list_url = format!("{}/workers", gw.url());
    let deadline = Instant::now() + Duration::from_secs(20);
    let grpc_url = loop {
        let body = get(&list_url).await.json();
        if let Some(w) = body["workers"].as_array().and_then(|w| w.first()) {
            break w["url"].as_str().unwrap_or_default().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the gRPC worker was not registered:\n{}",
            gw.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    for path in ["/get_model_info", "/get_server_info", "/health_generate"] {
        let reply = get(&format!("{}{path}", gw.url())).await;
        assert_gateway_error(&reply, 501, "not_implemented");
    }

    // The administrative routes reach the engine with its RPCs.
    let reply = admin_post(&gw, "/flush_cache", None).await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    let body = reply.json();
    assert_eq!(body["workers_flushed"], 1);
    assert_eq!(body["total_http_workers"], 0);
    assert_eq!(body["total_grpc_workers"], 1);
    assert_eq!(body["total_workers"], 1);
    assert!(body.get("failed").is_none(), "{body}");
    support::echo::logged(&engine, "flush_cache success=true").await;

    let reply = admin_post(&gw, "/start_profile", None).await;
    assert_eq!(reply.status, 200, "body {}", reply.text());
    assert_eq!(strings(&reply.json()["successful"]), [grpc_url]);
    support::echo::logged(&engine, "start_profile output_dir=none").await;
}

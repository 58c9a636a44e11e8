//! External providers as workers (spec 1, `runtime_type: external`), against local
//! stand-ins served over TLS with the providers' path layout, key headers and error shapes
//! (`mock-worker --provider openai|anthropic`):
//!
//! - registration asks nothing but `GET /v1/models` (no `/health`, no detection), with the
//!   worker's key where that provider reads it, and the listed models become the worker's;
//! - under `--enable-igw` a request for a provider's model goes to that provider with the
//!   worker's key (never the gateway's), a self-hosted model stays on its engine, and
//!   streams are relayed as they come;
//! - the provider's errors come back with their status and body;
//! - `GET /v1/models` with a caller's own provider key returns that provider's list;
//! - a provider that refuses the listing fails the registration, and a recognised
//!   provider host takes the external path without being probed.

use crate::common;

use std::time::Duration;

use common::pki::{tls_mock_requests, Kind, Pki, ServerCert};
use common::{
    eventually, gateway, get, listed_workers, mock, post_json, post_json_with, send, Proc,
};
use serde_json::{json, Value};

const GW_KEY: &str = "gateway-key";

/// A provider stand-in over TLS, serving `model` and requiring `key`.
fn provider(cert: &ServerCert, kind: &str, model: &str, key: &str) -> (Proc, String) {
    let m = mock(&[
        "--provider",
        kind,
        "--model",
        model,
        "--api-key",
        key,
        "--tls-cert-path",
        cert.cert_str(),
        "--tls-key-path",
        cert.key_str(),
    ]);
    let url = format!("https://127.0.0.1:{}", m.addr.port());
    (m, url)
}

async fn register(gw: &Proc, spec: Value) {
    let reply = post_json_with(
        &format!("{}/workers", gw.url()),
        &spec,
        &[("authorization", &format!("Bearer {GW_KEY}"))],
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
}

async fn wait_workers(gw: &Proc, n: usize) {
    assert!(
        eventually(Duration::from_secs(15), || async {
            let workers = listed_workers_auth(gw).await;
            workers.len() == n && workers.iter().all(|w| w["status"] == "ready")
        })
        .await,
        "{n} workers never became ready:\n{}",
        gw.log_text()
    );
}

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn providers_serve_their_models_with_their_own_keys() {
    let pki = Pki::new();
    let cert = pki.server("provider", Kind::Good);
    let (_openai, openai_url) = provider(&cert, "openai", "gpt-test", "sk-openai");
    let (_anthropic, anthropic_url) = provider(&cert, "anthropic", "claude-test", "sk-ant");
    let engine = mock(&["--model", "local-model"]);
    let gw = gateway(&[
        "--enable-igw",
        "--api-key",
        GW_KEY,
        "--upstream-ca-cert-path",
        pki.ca_str(),
    ]);
    register(
        &gw,
        json!({"url": openai_url, "runtime_type": "external", "api_key": "sk-openai"}),
    )
    .await;
    register(
        &gw,
        json!({"url": anthropic_url, "runtime_type": "external", "api_key": "sk-ant",
               "labels": {"provider": "anthropic"}}),
    )
    .await;
    register(&gw, json!({"url": engine.url(), "api_key": "engine-key"})).await;
    wait_workers(&gw, 3).await;

    // Registration asked each provider for its models only, with its key its own way.
    for (url, header, value) in [
        (&openai_url, "authorization", "Bearer sk-openai"),
        (&anthropic_url, "x-api-key", "sk-ant"),
    ] {
        let seen = tls_mock_requests(&pki.ca, url).await;
        let paths: Vec<&str> = seen.iter().filter_map(|r| r["path"].as_str()).collect();
        assert_eq!(paths, ["/v1/models"], "{url}: no probing");
        assert_eq!(seen[0]["headers"][header], value, "{url}");
    }

    let auth = format!("Bearer {GW_KEY}");
    let headers = [("authorization", auth.as_str())];
    let target = format!("{}/v1/chat/completions", gw.url());
    let reply = post_json_with(&target, &chat("gpt-test", false), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["model"], "gpt-test");
    let reply = post_json_with(&target, &chat("gpt-test", true), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(
        reply.text().trim_end().ends_with("data: [DONE]"),
        "{}",
        reply.text()
    );
    let reply = post_json_with(&target, &chat("local-model", false), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    let messages = json!({"model": "claude-test", "max_tokens": 16,
                          "messages": [{"role": "user", "content": "hi"}]});
    let reply = post_json_with(&format!("{}/v1/messages", gw.url()), &messages, &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    // What the providers received: their own keys, never the gateway's.
    let openai_seen = tls_mock_requests(&pki.ca, &openai_url).await;
    let chats: Vec<&Value> = openai_seen
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .collect();
    assert_eq!(chats.len(), 2, "{openai_seen:?}");
    for r in &chats {
        assert_eq!(r["headers"]["authorization"], "Bearer sk-openai", "{r}");
    }
    let anthropic_seen = tls_mock_requests(&pki.ca, &anthropic_url).await;
    let msgs: Vec<&Value> = anthropic_seen
        .iter()
        .filter(|r| r["path"] == "/v1/messages")
        .collect();
    assert_eq!(msgs.len(), 1, "{anthropic_seen:?}");
    assert_eq!(msgs[0]["headers"]["x-api-key"], "sk-ant");
    assert_eq!(msgs[0]["headers"]["anthropic-version"], "2023-06-01");
    assert!(
        msgs[0]["headers"].get("authorization").is_none(),
        "{}",
        msgs[0]
    );
    // The engine still gets the client's Authorization (spec 1).
    let engine_seen = common::mock_requests(&engine).await;
    let local: Vec<&Value> = engine_seen
        .iter()
        .filter(|r| r["path"] == "/v1/chat/completions")
        .collect();
    assert_eq!(local.len(), 1);
    assert_eq!(local[0]["headers"]["authorization"], auth.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_errors_come_back_with_their_status_and_body() {
    let pki = Pki::new();
    let cert = pki.server("provider", Kind::Good);
    let (_openai, openai_url) = provider(&cert, "openai", "gpt-test", "sk-openai");
    let gw = gateway(&["--api-key", GW_KEY, "--upstream-ca-cert-path", pki.ca_str()]);
    register(
        &gw,
        json!({"url": openai_url, "runtime_type": "external", "api_key": "sk-openai"}),
    )
    .await;
    wait_workers(&gw, 1).await;
    let auth = format!("Bearer {GW_KEY}");
    let headers = [("authorization", auth.as_str())];

    // A model the provider does not have: its 404, in its own envelope.
    let target = format!("{}/v1/chat/completions", gw.url());
    let reply = post_json_with(&target, &chat("no-such-model", false), &headers).await;
    assert_eq!(reply.status, 404, "{}", reply.text());
    assert_eq!(
        reply.json()["error"]["code"],
        "model_not_found",
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()["error"]["type"], "invalid_request_error");

    // A rotated key the provider refuses: its 401, unchanged.
    let workers = listed_workers_auth(&gw).await;
    let id = workers[0]["id"].as_str().unwrap_or("").to_owned();
    let patch = send(
        &common::client(false),
        "PATCH",
        &format!("{}/workers/{id}", gw.url()),
        &[
            ("content-type", "application/json"),
            ("authorization", &auth),
        ],
        serde_json::to_vec(&json!({"api_key": "sk-revoked"})).unwrap(),
    )
    .await;
    assert_eq!(patch.status, 202, "{}", patch.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            post_json_with(&target, &chat("gpt-test", false), &headers)
                .await
                .status
                == 401
        })
        .await
    );
    let reply = post_json_with(&target, &chat("gpt-test", false), &headers).await;
    assert_eq!(
        reply.json()["error"]["code"],
        "invalid_api_key",
        "{}",
        reply.text()
    );
}

async fn listed_workers_auth(gw: &Proc) -> Vec<Value> {
    let reply = send(
        &common::client(false),
        "GET",
        &format!("{}/workers", gw.url()),
        &[("authorization", &format!("Bearer {GW_KEY}"))],
        "",
    )
    .await;
    reply.json()["workers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_models_with_a_callers_own_provider_key() {
    let pki = Pki::new();
    let cert = pki.server("provider", Kind::Good);
    let (_openai, openai_url) = provider(&cert, "openai", "gpt-test", "sk-openai");
    let (_anthropic, anthropic_url) = provider(&cert, "anthropic", "claude-test", "sk-ant");
    let engine = mock(&["--model", "local-model"]);
    // An open data plane: a caller's Authorization is its own.
    let gw = gateway(&["--enable-igw", "--upstream-ca-cert-path", pki.ca_str()]);
    for spec in [
        json!({"url": openai_url, "runtime_type": "external", "api_key": "sk-openai"}),
        json!({"url": anthropic_url, "runtime_type": "external", "api_key": "sk-ant",
               "labels": {"provider": "anthropic"}}),
        json!({"url": engine.url()}),
    ] {
        let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
        assert_eq!(reply.status, 202, "{}", reply.text());
    }
    assert!(
        eventually(Duration::from_secs(15), || async {
            listed_workers(&gw)
                .await
                .iter()
                .filter(|w| w["status"] == "ready")
                .count()
                == 3
        })
        .await
    );
    let models = format!("{}/v1/models", gw.url());
    let own = get(&models).await;
    assert_eq!(own.status, 200);
    let listed = own.json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["local-model"],
        "self-hosted only without a caller key"
    );

    let client = common::client(false);
    let theirs = send(
        &client,
        "GET",
        &models,
        &[("authorization", "Bearer sk-openai")],
        "",
    )
    .await;
    assert_eq!(theirs.status, 200, "{}", theirs.text());
    assert_eq!(theirs.json()["data"][0]["id"], "gpt-test");
    assert_eq!(theirs.json()["data"][0]["owned_by"], "mock-provider");
    let theirs = send(
        &client,
        "GET",
        &models,
        &[("x-api-key", "sk-ant"), ("anthropic-version", "2023-06-01")],
        "",
    )
    .await;
    assert_eq!(theirs.status, 200, "{}", theirs.text());
    assert_eq!(theirs.json()["data"][0]["type"], "model");
    assert_eq!(theirs.json()["has_more"], false);
    // A wrong caller key: the provider's own refusal.
    let refused = send(
        &client,
        "GET",
        &models,
        &[("authorization", "Bearer sk-wrong")],
        "",
    )
    .await;
    assert_eq!(refused.status, 401);
    assert_eq!(refused.json()["error"]["code"], "invalid_api_key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_listing_fails_the_registration() {
    let pki = Pki::new();
    let cert = pki.server("provider", Kind::Good);
    let (_openai, openai_url) = provider(&cert, "openai", "gpt-test", "sk-openai");
    let gw = gateway(&["--upstream-ca-cert-path", pki.ca_str()]);
    for (spec, said) in [
        (
            json!({"url": openai_url, "runtime_type": "external", "api_key": "sk-wrong"}),
            "answered 401",
        ),
        (
            json!({"url": openai_url, "runtime_type": "external"}),
            "the worker has no api_key",
        ),
        // A recognised provider host is external without asking: the closed network
        // fails the one listing call, never a probe.
        (
            json!({"url": "https://api.openai.com", "api_key": "sk-x"}),
            "external provider: GET /v1/models failed",
        ),
    ] {
        let reply = post_json(&format!("{}/workers", gw.url()), &spec).await;
        assert_eq!(reply.status, 202, "{}", reply.text());
        assert!(
            eventually(Duration::from_secs(30), || async {
                gw.log_text().contains(said)
            })
            .await,
            "{said}:\n{}",
            gw.log_text()
        );
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            listed_workers(&gw).await.is_empty()
        })
        .await,
        "failed registrations leave no worker"
    );
    let seen = tls_mock_requests(&pki.ca, &openai_url).await;
    assert!(seen.iter().all(|r| r["path"] == "/v1/models"), "{seen:?}");
}

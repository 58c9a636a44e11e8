//! Route table, black box: every forwarded route reaches the worker with its path, query
//! and body intact over HTTP/1.1 and h2c and relays the worker's answer; the gateway's own
//! routes (health, readiness), unknown paths (bare 404), wrong methods (405) and routes not
//! built yet (501 envelope).

use crate::common;
use crate::support;

use bytes::Bytes;
use common::{client, gateway, mock, mock_requests, send, Proc};
use serde_json::{json, Value};
use support::assert_gateway_error;

/// Forwarded JSON routes with a body the mock answers deterministically (apart from ids and
/// timestamps).
fn forwarded_routes() -> Vec<(&'static str, Value)> {
    vec![
        (
            "/v1/chat/completions",
            support::generation_body("/v1/chat/completions", false, Value::Null),
        ),
        (
            "/v1/completions",
            support::generation_body("/v1/completions", false, Value::Null),
        ),
        (
            "/generate",
            support::generation_body("/generate", false, Value::Null),
        ),
        ("/v1/embeddings", json!({"input": ["alpha", "beta"]})),
        (
            "/rerank",
            json!({"query": "q", "documents": ["a", "b", "c"]}),
        ),
        (
            "/v1/rerank",
            json!({"query": "q2", "documents": ["x", "y"]}),
        ),
        ("/v1/classify", json!({"input": "classify this"})),
        (
            "/v1/tokenize",
            json!({"prompt": "tokenize this text please"}),
        ),
        ("/v1/detokenize", json!({"tokens": [1, 2, 3]})),
        (
            "/v1/messages",
            support::generation_body("/v1/messages", false, Value::Null),
        ),
        (
            "/v1/messages/count_tokens",
            json!({"model": "mock-model", "messages": support::messages()}),
        ),
        (
            "/v1/responses",
            support::generation_body("/v1/responses", false, Value::Null),
        ),
    ]
}

/// Drops the fields that differ between two runs of the same request (ids, timestamps).
fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in ["id", "created", "created_at"] {
                map.remove(key);
            }
            map.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

async fn last_request(mock: &Proc) -> Value {
    mock_requests(mock)
        .await
        .pop()
        .expect("the mock recorded a request")
}

async fn forwarded_routes_reach_the_worker(h2: bool) {
    let upstream = mock(&[]);
    // A second, fresh mock answers the same requests directly: the reference answers.
    let reference = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let c = client(h2);
    let direct = client(false);
    let json_ct = [("content-type", "application/json")];

    for (path, body) in forwarded_routes() {
        let bytes = serde_json::to_vec(&body).expect("json");
        let via = send(
            &c,
            "POST",
            &format!("{}{path}", gw.url()),
            &json_ct,
            bytes.clone(),
        )
        .await;
        let expected = send(
            &direct,
            "POST",
            &format!("{}{path}", reference.url()),
            &json_ct,
            bytes.clone(),
        )
        .await;
        assert_eq!(via.status, 200, "{path}: {}", via.text());
        assert_eq!(via.status, expected.status, "{path}");
        assert_eq!(
            via.headers.get("content-type"),
            expected.headers.get("content-type"),
            "{path}"
        );
        let (mut got, mut want) = (via.json(), expected.json());
        normalize(&mut got);
        normalize(&mut want);
        assert_eq!(got, want, "{path}: relayed body differs from the worker's");

        let seen = last_request(&upstream).await;
        assert_eq!(seen["method"], "POST", "{path}");
        assert_eq!(seen["path"], path, "{path}");
        assert!(seen["query"].is_null(), "{path}: {seen}");
        assert_eq!(seen["body_len"], bytes.len(), "{path}");
        assert_eq!(
            seen["body"].as_str(),
            Some(std::str::from_utf8(&bytes).expect("utf8")),
            "{path}"
        );
        assert_eq!(
            seen["headers"]["content-type"], "application/json",
            "{path}"
        );
    }
    assert_eq!(
        mock_requests(&upstream).await.len(),
        forwarded_routes().len(),
        "one upstream request per client request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_routes_reach_the_worker_h1() {
    forwarded_routes_reach_the_worker(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_routes_reach_the_worker_h2() {
    forwarded_routes_reach_the_worker(true).await;
}

/// The worker's error statuses and bodies are relayed unchanged, on every route (after
/// the one retry allowed here; the breaker is off so every route reaches the worker).
async fn worker_errors_are_relayed(h2: bool) {
    let upstream = mock(&[]);
    let gw = gateway(&[
        "--worker-urls",
        &upstream.url(),
        "--retry-max-retries",
        "1",
        "--disable-circuit-breaker",
    ]);
    let c = client(h2);
    for (i, (path, mut body)) in forwarded_routes().into_iter().enumerate() {
        let status = [418u16, 429, 500, 503][i % 4];
        body["mock"] = json!({"fail_status": status});
        let reply = send(
            &c,
            "POST",
            &format!("{}{path}", gw.url()),
            &[("content-type", "application/json")],
            serde_json::to_vec(&body).expect("json"),
        )
        .await;
        assert_eq!(reply.status, status, "{path}: {}", reply.text());
        assert!(
            reply.headers.get("x-gw-error-code").is_none(),
            "{path}: a worker error is not a gateway error"
        );
        let v = reply.json();
        assert_eq!(v["error"]["code"], status, "{path}: {v}");
        assert_eq!(
            v["error"]["message"],
            format!("mock worker injected failure ({status})"),
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_errors_are_relayed_h1() {
    worker_errors_are_relayed(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_errors_are_relayed_h2() {
    worker_errors_are_relayed(true).await;
}

/// A multipart body with binary content.
fn multipart(boundary: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
             filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(b"RIFF");
    body.extend((0..=255u8).cycle().take(3000));
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    body
}

async fn audio_transcriptions_multipart(h2: bool) {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let boundary = "----tollgateBoundary7MA4YWxkTrZu0gW";
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let body = multipart(boundary);
    let reply = send(
        &client(h2),
        "POST",
        &format!("{}/v1/audio/transcriptions", gw.url()),
        &[("content-type", &content_type)],
        body.clone(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.json(),
        json!({"text": format!("mock transcription of {} bytes", body.len())})
    );
    let seen = last_request(&upstream).await;
    assert_eq!(seen["path"], "/v1/audio/transcriptions");
    assert_eq!(seen["headers"]["content-type"], content_type.as_str());
    assert_eq!(seen["body_len"], body.len());
    // The log renders the bytes lossily; the same rendering of the same bytes is equal.
    assert_eq!(
        seen["body"].as_str(),
        Some(String::from_utf8_lossy(&body).as_ref())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_transcriptions_multipart_h1() {
    audio_transcriptions_multipart(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_transcriptions_multipart_h2() {
    audio_transcriptions_multipart(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_liveness_readiness_with_a_worker() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    for h2 in [false, true] {
        let c = client(h2);
        for path in ["/health", "/liveness"] {
            let reply = send(&c, "GET", &format!("{}{path}", gw.url()), &[], Bytes::new()).await;
            assert_eq!(reply.status, 200, "{path} (h2: {h2})");
        }
        let reply = send(
            &c,
            "GET",
            &format!("{}/readiness", gw.url()),
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(reply.status, 200, "h2: {h2}");
        assert_eq!(
            reply.json(),
            json!({"status": "ready", "ready_workers": 1, "total_workers": 1})
        );
    }
    // The gateway answers these itself.
    assert!(mock_requests(&upstream).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_without_workers_is_503() {
    let gw = gateway(&[]);
    for h2 in [false, true] {
        let c = client(h2);
        let reply = send(
            &c,
            "GET",
            &format!("{}/readiness", gw.url()),
            &[],
            Bytes::new(),
        )
        .await;
        assert_eq!(reply.status, 503, "h2: {h2}");
        assert_eq!(
            reply.json(),
            json!({"status": "not_ready", "ready_workers": 0, "total_workers": 0})
        );
        // Liveness does not depend on workers.
        for path in ["/health", "/liveness"] {
            let reply = send(&c, "GET", &format!("{}{path}", gw.url()), &[], Bytes::new()).await;
            assert_eq!(reply.status, 200, "{path} (h2: {h2})");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_bare_404() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let cases = [
        ("GET", "/nope"),
        ("POST", "/v1/chat/completions/"),
        ("GET", "/health/"),
        ("GET", "/readiness/"),
        ("POST", "/v1/chat"),
        ("POST", "/V1/chat/completions"),
        ("POST", "/v1//chat/completions"),
        ("POST", "/v1/chat/completions/extra"),
        ("GET", "/"),
    ];
    for h2 in [false, true] {
        let c = client(h2);
        for (method, path) in cases {
            let reply = send(
                &c,
                method,
                &format!("{}{path}", gw.url()),
                &[("content-type", "application/json")],
                "{}",
            )
            .await;
            assert_eq!(reply.status, 404, "{method} {path} (h2: {h2})");
            assert!(
                reply.body.is_empty(),
                "{method} {path}: bare 404, got {:?}",
                reply.text()
            );
            assert!(reply.headers.get("x-gw-error-code").is_none());
        }
    }
    assert!(mock_requests(&upstream).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_method_is_405() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    // RFC 9110 §15.5.6: a 405 lists the methods the path accepts in `Allow`.
    let cases = [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/embeddings", "POST"),
        ("DELETE", "/generate", "POST"),
        ("POST", "/health", "GET, HEAD"),
        ("POST", "/readiness", "GET, HEAD"),
        ("DELETE", "/liveness", "GET, HEAD"),
        ("PATCH", "/v1/messages", "POST"),
        ("POST", "/workers/w1", "GET, HEAD, PUT, PATCH, DELETE"),
        ("GET", "/wasm/m1", "DELETE"),
        ("PUT", "/v1/conversations/c1", "GET, HEAD, POST, DELETE"),
    ];
    for h2 in [false, true] {
        let c = client(h2);
        for (method, path, allow) in cases {
            let reply = send(
                &c,
                method,
                &format!("{}{path}", gw.url()),
                &[],
                Bytes::new(),
            )
            .await;
            assert_eq!(reply.status, 405, "{method} {path} (h2: {h2})");
            assert_eq!(
                reply.headers.get("allow").and_then(|v| v.to_str().ok()),
                Some(allow),
                "{method} {path} (h2: {h2})"
            );
        }
    }
    assert!(mock_requests(&upstream).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_not_built_yet_answer_501() {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let cases = [
        ("POST", "/v1/realtime/sessions"),
        ("POST", "/v1/realtime/client_secrets"),
    ];
    for h2 in [false, true] {
        let c = client(h2);
        for (method, path) in cases {
            let body = if method == "POST" { "{}" } else { "" };
            let reply = send(
                &c,
                method,
                &format!("{}{path}", gw.url()),
                &[("content-type", "application/json")],
                body,
            )
            .await;
            assert_gateway_error(&reply, 501, "not_implemented");
        }
        // Stored responses are the gateway's: an HTTP worker's are not retrievable.
        for path in ["/v1/responses/resp_1", "/v1/responses/resp_1/input_items"] {
            let reply = send(&c, "GET", &format!("{}{path}", gw.url()), &[], "").await;
            assert_gateway_error(&reply, 404, "not_found");
        }
    }
    assert!(mock_requests(&upstream).await.is_empty());
}

async fn query_strings_are_forwarded(h2: bool) {
    let upstream = mock(&[]);
    let gw = gateway(&["--worker-urls", &upstream.url()]);
    let c = client(h2);
    let cases = [
        ("/generate", "x=1"),
        ("/v1/chat/completions", "a=b&c=d%20e"),
        ("/v1/embeddings", "api-version=2024-01-01"),
    ];
    for (path, query) in cases {
        let body = match path {
            "/v1/embeddings" => json!({"input": "q"}),
            p => support::generation_body(p, false, Value::Null),
        };
        let reply = send(
            &c,
            "POST",
            &format!("{}{path}?{query}", gw.url()),
            &[("content-type", "application/json")],
            serde_json::to_vec(&body).expect("json"),
        )
        .await;
        assert_eq!(reply.status, 200, "{path}?{query}: {}", reply.text());
        let seen = last_request(&upstream).await;
        assert_eq!(seen["path"], path);
        assert_eq!(seen["query"], query);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_strings_are_forwarded_h1() {
    query_strings_are_forwarded(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_strings_are_forwarded_h2() {
    query_strings_are_forwarded(true).await;
}

/// Sends `count` embeddings requests (input `req-<i>`) through a gateway with two workers
/// and returns, per request in order, the index of the worker that received it.
async fn worker_of_each_request(policy: &str, count: usize) -> Vec<usize> {
    let a = mock(&[]);
    let b = mock(&[]);
    let gw = gateway(&["--worker-urls", &a.url(), &b.url(), "--policy", policy]);
    let c = client(false);
    for i in 0..count {
        let reply = send(
            &c,
            "POST",
            &format!("{}/v1/embeddings", gw.url()),
            &[("content-type", "application/json")],
            format!(r#"{{"input":"req-{i}"}}"#),
        )
        .await;
        assert_eq!(reply.status, 200);
    }
    let mut owner = vec![usize::MAX; count];
    for (w, worker) in [&a, &b].into_iter().enumerate() {
        for r in mock_requests(worker).await {
            let body: Value = serde_json::from_str(r["body"].as_str().unwrap_or("")).expect("json");
            let i: usize = body["input"]
                .as_str()
                .and_then(|s| s.strip_prefix("req-"))
                .and_then(|n| n.parse().ok())
                .expect("request index");
            assert_eq!(owner[i], usize::MAX, "request {i} delivered twice");
            owner[i] = w;
        }
    }
    assert!(
        owner.iter().all(|w| *w != usize::MAX),
        "a request got lost: {owner:?}"
    );
    owner
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_robin_alternates_between_workers() {
    let order = worker_of_each_request("round_robin", 10).await;
    assert!(
        order.windows(2).all(|p| p[0] != p[1]),
        "workers do not take turns: {order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_policy_uses_every_worker() {
    let order = worker_of_each_request("random", 40).await;
    let on_first = order.iter().filter(|w| **w == 0).count();
    assert!(
        on_first > 0 && on_first < 40,
        "a worker was never chosen: {order:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rl_routes_are_not_mounted_and_wasm_needs_enable_wasm() {
    let gw = gateway(&[]);
    let c = client(false);
    for (method, path) in [
        ("GET", "/v1/rl/workers"),
        ("GET", "/v1/rl/workers/7a0b5b8e-1111-4222-8333-444455556666"),
        ("POST", "/v1/rl/workers/w1/engine/update_weights"),
        ("GET", "/v1/rl/engine/get_weights?selector=a%3Db"),
        ("DELETE", "/v1/rl/workers"),
    ] {
        let reply = send(&c, method, &format!("{}{path}", gw.url()), &[], "").await;
        assert_eq!(reply.status, 404, "{method} {path}");
        assert!(reply.body.is_empty(), "{method} {path}");
    }
    for (method, path) in [
        ("GET", "/wasm"),
        ("POST", "/wasm"),
        ("DELETE", "/wasm/5f1d4a4e-0000-4000-8000-000000000000"),
    ] {
        let reply = send(&c, method, &format!("{}{path}", gw.url()), &[], "").await;
        assert_eq!(reply.status, 500, "{method} {path}");
        assert!(reply.body.is_empty(), "{method} {path}");
    }
}

//! The provider backend (`--backend anthropic`), black box: the gateway in front of a
//! stand-in for Anthropic's Messages API (`mock-worker --provider anthropic`, over TLS like
//! the real one, or plain HTTP):
//!
//! - the workers, from the command line or `POST /workers`, are registered without a
//!   single call to the provider;
//! - `POST /v1/messages` reaches `<URL>/v1/messages` (a URL given with `/v1/` too) with
//!   exactly the client's `Authorization`, `x-api-key`, `anthropic-version` and
//!   `anthropic-beta`, nothing of the gateway's own, never `X-GW-MCP`;
//! - a non-streaming answer comes back re-serialised, equal in value (unknown blocks and
//!   fields kept); a stream is relayed event by event as it is produced;
//! - upstream errors keep their status and body; a malformed 200 is 502 `parse_error`;
//! - count_tokens and the other inference routes answer a plain-text 501;
//! - the gateway's `--api-key` is still enforced on `Authorization`;
//! - a dead or silent provider fails with the gateway's `worker_*` errors.

use crate::common;
use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::pki::{tls_mock_requests, Kind, Pki};
use common::{client, free_port, gateway, mock, mock_requests_all, post_json_with, send};
use serde_json::{json, Value};
use support::{assert_gateway_error, read_frames, start};

const GW_KEY: &str = "gateway-key";
const PROVIDER_KEY: &str = "sk-ant-client";
const MODEL: &str = "claude-stand-in";

fn messages(stream: bool, mock: Value) -> Value {
    let mut body = json!({
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
    });
    if !mock.is_null() {
        body["mock"] = mock;
    }
    body
}

/// The headers of a well-behaved SDK client, plus ones the provider must not see.
fn client_headers(auth: &str) -> Vec<(&str, &str)> {
    vec![
        ("authorization", auth),
        ("x-api-key", PROVIDER_KEY),
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "tools-2024-05-16"),
        ("x-request-id", "req-1"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
        ("x-gw-mcp", "enabled"),
        ("cookie", "session=1"),
    ]
}

/// A body the stand-in returns verbatim: a Messages response with a block type and fields
/// beyond spec 2's.
fn unusual_message() -> Value {
    json!({
        "id": "msg_unusual",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            {"type": "text", "text": "see", "citations": [{"type": "char_location", "cited_text": "x"}]},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "a_block_of_next_year", "data": {"nested": [1, 2.5, null]}},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {
            "input_tokens": 12, "output_tokens": 7,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 3,
            "server_tool_use": {"web_search_requests": 1}, "service_tier": "standard",
        },
        "container": null,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_go_to_the_provider_with_the_clients_headers() {
    let pki = Pki::new();
    let cert = pki.server("provider", Kind::Good);
    let provider = mock(&[
        "--provider",
        "anthropic",
        "--model",
        MODEL,
        "--api-key",
        PROVIDER_KEY,
        "--output-tokens",
        "5",
        "--tls-cert-path",
        cert.cert_str(),
        "--tls-key-path",
        cert.key_str(),
    ]);
    let origin = format!("https://127.0.0.1:{}", provider.addr.port());
    let gw = gateway(&[
        "--backend",
        "anthropic",
        "--worker-urls",
        &format!("{origin}/v1/"),
        "--api-key",
        GW_KEY,
        "--upstream-ca-cert-path",
        pki.ca_str(),
    ]);
    common::wait_ready(&gw).await;
    // Registered without asking the provider anything: no probe, no detection, no listing.
    assert!(tls_mock_requests(&pki.ca, &origin).await.is_empty());

    let url = format!("{}/v1/messages", gw.url());
    let auth = format!("Bearer {GW_KEY}");
    let headers = client_headers(&auth);

    // Non-streaming: the stand-in's generation, re-serialised.
    let reply = post_json_with(&url, &messages(false, Value::Null), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["model"], MODEL);
    assert_eq!(answer["content"][0]["text"], "tok0 tok1 tok2 tok3 tok4 ");
    assert_eq!(answer["usage"]["output_tokens"], 5);
    assert_eq!(
        reply.headers["content-length"].to_str().unwrap(),
        reply.body.len().to_string()
    );

    // What the provider received: the path, and exactly the four headers besides framing.
    let seen = tls_mock_requests(&pki.ca, &origin).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0]["path"], "/v1/messages");
    let sent = &seen[0]["headers"];
    let names: BTreeSet<&str> = sent
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .filter(|n| !matches!(*n, "host" | "content-type" | "content-length"))
        .collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "anthropic-beta",
            "anthropic-version",
            "authorization",
            "x-api-key"
        ]),
        "{sent}"
    );
    assert_eq!(sent["authorization"], auth.as_str());
    assert_eq!(sent["x-api-key"], PROVIDER_KEY);
    assert_eq!(sent["anthropic-version"], "2023-06-01");
    assert_eq!(sent["anthropic-beta"], "tools-2024-05-16");
    assert_eq!(sent["content-type"], "application/json");

    // A body with blocks and fields beyond the spec: equal in value after the round trip.
    let odd = unusual_message();
    let mock_reply = json!({"reply_body": serde_json::to_string(&odd).unwrap()});
    let reply = post_json_with(&url, &messages(false, mock_reply), &headers).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json(), odd);

    // Streaming: the stand-in's events, in order, each as it is produced.
    let body = messages(true, json!({"itl_ms": 60}));
    let mut all = vec![("content-type", "application/json")];
    all.extend(headers.iter().copied());
    let resp = start(
        &client(false),
        "POST",
        &url,
        &all,
        serde_json::to_vec(&body).unwrap(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut stream = resp.into_body();
    let frames = read_frames(&mut stream, Duration::from_secs(10)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let text = frames.text();
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        events,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ],
        "{text}"
    );
    assert!(!text.contains("[DONE]"));
    let deltas: Vec<Instant> = frames
        .frames
        .iter()
        .flat_map(|(at, data)| {
            let n = String::from_utf8_lossy(data)
                .matches("event: content_block_delta")
                .count();
            std::iter::repeat_n(*at, n)
        })
        .collect();
    assert_eq!(deltas.len(), 5);
    assert!(
        deltas[4] - deltas[0] >= Duration::from_millis(180),
        "deltas arrived together: buffered?"
    );

    // The gateway key is still the gateway's gate.
    let mut unauthenticated = headers.clone();
    unauthenticated.retain(|(k, _)| *k != "authorization");
    let reply = post_json_with(&url, &messages(false, Value::Null), &unauthenticated).await;
    assert_eq!(reply.status, 401);
    assert!(reply.body.is_empty());
    let mut wrong = headers.clone();
    wrong[0] = ("authorization", "Bearer not-the-key");
    let reply = post_json_with(&url, &messages(false, Value::Null), &wrong).await;
    assert_eq!(reply.status, 401);
    // The provider's own key check answers for the provider.
    let mut wrong_provider_key = headers.clone();
    wrong_provider_key[1] = ("x-api-key", "sk-wrong");
    let reply = post_json_with(&url, &messages(false, Value::Null), &wrong_provider_key).await;
    assert_eq!(reply.status, 401, "{}", reply.text());
    assert_eq!(reply.json()["error"]["type"], "authentication_error");
    assert!(reply.headers.get("x-gw-error-code").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_malformed_bodies_and_unserved_routes() {
    let provider = mock(&["--provider", "anthropic", "--model", MODEL]);
    let gw = gateway(&[
        "--backend",
        "vendor",
        "--worker-urls",
        &provider.url(),
        "--retry-max-retries",
        "1",
    ]);
    common::wait_ready(&gw).await;
    let url = format!("{}/v1/messages", gw.url());
    let headers = [
        ("x-api-key", PROVIDER_KEY),
        ("vendor-version", "2023-06-01"),
        ("anthropic-version", "2023-06-01"),
    ];

    // Upstream errors: their status and body, unchanged (a 5xx after its retry).
    for status in [400u16, 429, 503, 529] {
        let reply = post_json_with(
            &url,
            &messages(false, json!({"fail_status": status})),
            &headers,
        )
        .await;
        assert_eq!(reply.status, status, "{}", reply.text());
        assert!(reply.headers.get("x-gw-error-code").is_none());
        let message = format!("mock worker injected failure ({status})");
        assert_eq!(reply.json()["type"], "error", "{}", reply.text());
        assert_eq!(reply.json()["error"]["message"], message.as_str());
    }
    // The neutral spelling went through as the client sent it.
    let seen = mock_requests_all(&provider).await;
    assert_eq!(seen[0]["headers"]["vendor-version"], "2023-06-01");
    // A query (the SDKs' beta endpoints add `?beta=true`) goes along.
    let reply = post_json_with(
        &format!("{url}?beta=true"),
        &messages(false, Value::Null),
        &headers,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock_requests_all(&provider).await;
    let last = seen.last().unwrap();
    assert_eq!(
        (&last["path"], &last["query"]),
        (&json!("/v1/messages"), &json!("beta=true"))
    );

    // A stream the provider breaks off ends with the Messages error event.
    let mut all = vec![("content-type", "application/json")];
    all.extend(headers.iter().copied());
    let resp = start(
        &client(false),
        "POST",
        &url,
        &all,
        serde_json::to_vec(&messages(true, json!({"drop_after_tokens": 2}))).unwrap(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(10)).await;
    let text = frames.text();
    assert!(text.contains("event: content_block_delta"), "{text}");
    assert!(!text.contains("message_stop"), "{text}");
    let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
    assert!(last.starts_with("event: error\ndata: "), "{text}");
    assert!(last.contains("\"type\":\"error\""), "{text}");

    // A 200 that is not a Messages response: 502 parse_error, never retried.
    let before = mock_requests_all(&provider).await.len();
    for broken in [
        "this is not json".to_owned(),
        json!({"type": "message", "role": "assistant", "model": MODEL}).to_string(),
        json!({"id": "m", "type": "message", "role": "assistant", "model": MODEL,
               "content": [{"type": "text"}], "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": 1, "output_tokens": 1}})
        .to_string(),
    ] {
        let reply = post_json_with(
            &url,
            &messages(false, json!({"reply_body": broken})),
            &headers,
        )
        .await;
        assert_gateway_error(&reply, 502, "parse_error");
    }
    assert_eq!(mock_requests_all(&provider).await.len(), before + 3);

    // Routes the provider backend does not serve: plain-text 501.
    let c = client(false);
    for path in [
        "/v1/messages/count_tokens",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/completions",
    ] {
        let reply = send(
            &c,
            "POST",
            &format!("{}{path}", gw.url()),
            &[("content-type", "application/json")],
            serde_json::to_vec(&messages(false, Value::Null)).unwrap(),
        )
        .await;
        assert_eq!(reply.status, 501, "{path}: {}", reply.text());
        assert!(
            reply.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/plain"),
            "{path}"
        );
        assert!(!reply.body.is_empty(), "{path}");
    }
    assert_eq!(
        mock_requests_all(&provider).await.len(),
        before + 3,
        "nothing unserved reached the provider"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_or_silent_provider_fails_with_worker_errors() {
    let dead = format!("http://127.0.0.1:{}", free_port());
    let gw = gateway(&[
        "--backend",
        "anthropic",
        "--worker-urls",
        &dead,
        "--retry-max-retries",
        "1",
    ]);
    common::wait_ready(&gw).await;
    let url = format!("{}/v1/messages", gw.url());
    let reply = post_json_with(&url, &messages(false, Value::Null), &[]).await;
    assert_gateway_error(&reply, 502, "worker_connect_failed");

    let silent = mock(&["--provider", "anthropic", "--model", MODEL]);
    let gw = gateway(&[
        "--backend",
        "anthropic",
        "--worker-urls",
        &silent.url(),
        "--request-timeout-secs",
        "1",
    ]);
    common::wait_ready(&gw).await;
    let url = format!("{}/v1/messages", gw.url());
    let headers = [("anthropic-version", "2023-06-01")];
    let started = Instant::now();
    let reply = post_json_with(&url, &messages(false, json!({"stall": true})), &headers).await;
    assert_gateway_error(&reply, 504, "worker_timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_added_later_are_the_provider_too() {
    let provider = mock(&["--provider", "anthropic", "--model", MODEL]);
    let gw = gateway(&["--backend", "anthropic"]);
    // Even a worker registered as an engine: under a provider backend it is the provider.
    let reply = common::post_json(
        &format!("{}/workers", gw.url()),
        &json!({"url": provider.url(), "runtime_type": "sglang"}),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    assert!(
        common::eventually(Duration::from_secs(10), || async {
            let workers = common::listed_workers(&gw).await;
            workers.len() == 1 && workers[0]["status"] == "ready"
        })
        .await,
        "{}",
        gw.log_text()
    );
    let workers = common::listed_workers(&gw).await;
    assert_eq!(workers[0]["runtime_type"], "external", "{workers:?}");
    assert!(
        mock_requests_all(&provider).await.is_empty(),
        "no call at registration"
    );

    let reply = post_json_with(
        &format!("{}/v1/messages", gw.url()),
        &messages(false, Value::Null),
        &[("anthropic-version", "2023-06-01")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["type"], "message");
}

//! Several models behind one gateway (`--enable-igw`): the data plane reads the `model` of
//! the request body and routes to the workers serving it (aliases included); a model
//! no registered worker serves gets 404 `model_not_found` (spec 2), a known model whose
//! workers are all out of rotation 503 `no_available_workers`. Bodies still reach the
//! worker intact.

use crate::common;
use crate::support;

use std::time::Duration;

use common::{eventually, gateway, get, mock, mock_requests, post_json};
use serde_json::{json, Value};
use support::assert_gateway_error;

fn chat(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": format!("hello {model}")}],
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_to_the_workers_of_their_model() {
    let alpha = mock(&["--model", "alpha"]);
    let beta = mock(&["--model", "beta"]);
    let gw = gateway(&[
        "--enable-igw",
        "--model-alias",
        "fast=alpha",
        "--worker-urls",
        &alpha.url(),
        &beta.url(),
    ]);
    let url = format!("{}/v1/chat/completions", gw.url());
    for model in ["alpha", "beta", "fast", "alpha", "beta", "fast"] {
        let reply = post_json(&url, &chat(model, false)).await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.text());
    }
    let streamed = post_json(&url, &chat("beta", true)).await;
    assert_eq!(streamed.status, 200);
    assert!(
        streamed.text().contains("data: [DONE]"),
        "{}",
        streamed.text()
    );

    let seen = |requests: Vec<Value>| -> Vec<String> {
        requests
            .iter()
            .filter(|r| r["path"] == "/v1/chat/completions")
            .map(|r| {
                let body: Value = serde_json::from_str(r["body"].as_str().unwrap_or("")).unwrap();
                body["model"].as_str().unwrap_or("").to_owned()
            })
            .collect()
    };
    assert_eq!(
        seen(mock_requests(&alpha).await),
        ["alpha", "fast", "alpha", "fast"],
        "alpha and its alias go to alpha's worker only, body untouched"
    );
    assert_eq!(seen(mock_requests(&beta).await), ["beta", "beta", "beta"]);

    let reply = post_json(&url, &chat("gamma", false)).await;
    assert_gateway_error(&reply, 404, "model_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_model_without_a_ready_worker_is_503_an_unknown_one_404() {
    let mut alpha = mock(&["--model", "alpha"]);
    let gw = gateway(&[
        "--enable-igw",
        "--health-check-interval-secs",
        "1",
        "--health-failure-threshold",
        "1",
        "--worker-urls",
        &alpha.url(),
    ]);
    let url = format!("{}/v1/chat/completions", gw.url());
    assert_eq!(post_json(&url, &chat("alpha", false)).await.status, 200);
    assert_gateway_error(
        &post_json(&url, &chat("nope", false)).await,
        404,
        "model_not_found",
    );
    let _ = alpha.child.kill();
    let _ = alpha.child.wait();
    let readiness = format!("{}/readiness", gw.url());
    assert!(
        eventually(Duration::from_secs(10), || async {
            get(&readiness).await.status == 503
        })
        .await
    );
    assert_gateway_error(
        &post_json(&url, &chat("alpha", false)).await,
        503,
        "no_available_workers",
    );
    assert_gateway_error(
        &post_json(&url, &chat("nope", false)).await,
        404,
        "model_not_found",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn igw_keeps_the_payload_limit_and_passes_bodies_without_a_model() {
    let alpha = mock(&["--model", "alpha"]);
    let gw = gateway(&[
        "--enable-igw",
        "--max-payload-size",
        "1KiB",
        "--worker-urls",
        &alpha.url(),
    ]);
    let url = format!("{}/v1/chat/completions", gw.url());
    let big =
        json!({"model": "alpha", "messages": [{"role": "user", "content": "x".repeat(4096)}]});
    let reply = post_json(&url, &big).await;
    assert_gateway_error(&reply, 413, "payload_too_large");
    // No model: every routable worker is a candidate; the worker answers for itself.
    let reply = post_json(
        &url,
        &json!({"messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_gets_408_request_timeout() {
    let alpha = mock(&["--model", "alpha"]);
    let gw = gateway(&[
        "--enable-igw",
        "--request-timeout-secs",
        "1",
        "--worker-urls",
        &alpha.url(),
    ]);
    let mut conn = support::RawConn::connect(gw.addr);
    conn.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n\
          content-length: 100\r\n\r\n{\"model\":\"alpha\",",
    )
    .expect("write");
    let reply = conn
        .read_response(std::time::Duration::from_secs(5))
        .expect("an answer before the client gives up");
    assert_eq!(reply.status, 408);
    assert_eq!(reply.header("x-gw-error-code"), Some("request_timeout"));
    let body: Value = serde_json::from_slice(&reply.body).expect("envelope");
    assert_eq!(body["error"]["code"], "request_timeout");
    assert!(
        mock_requests(&alpha).await.is_empty(),
        "nothing reaches the worker"
    );
}

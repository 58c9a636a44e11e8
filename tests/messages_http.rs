//! `/v1/messages` and `/v1/messages/count_tokens` on HTTP workers, black box (spec 2): the
//! gateway checks a held body before routing (400 `json_parse_error` for one that does not
//! parse, 400 code 400 for a broken rule; nothing reaches the worker), forwards the client's
//! bytes with a `--model-alias` name replaced by the canonical id, relays the worker's
//! answers and streams unchanged, and forwards only the allowed headers. count_tokens goes
//! to a worker of the body's model (404 `model_not_found` when none serves it) and refuses
//! a bad body in plain text (400, 415, 422). A body the router streams through unread
//! (retries off) is the worker's to judge.

use crate::common;
use crate::support;

use common::{gateway, mock, mock_requests, post_json, post_json_with, send, wait_ready, Proc};
use serde_json::{json, Value};
use support::assert_gateway_error;

const MODEL: &str = "mock-model";

/// Request headers as `send` takes them.
type Headers<'a> = &'a [(&'a str, &'a str)];

fn body() -> Value {
    json!({"model": MODEL, "max_tokens": 32, "messages": [{"role": "user", "content": "hello"}]})
}

/// A mock serving `mock-model` and a gateway with `fast` as its alias, plus `extra` flags.
async fn setup(extra: &[&str]) -> (Proc, Proc) {
    let mut args = vec!["--model-alias", "fast=mock-model"];
    args.extend_from_slice(extra);
    setup_bare(&args).await
}

/// A mock serving `mock-model` and a gateway with only `flags`.
async fn setup_bare(flags: &[&str]) -> (Proc, Proc) {
    let m = mock(&["--model", MODEL]);
    let url = m.url();
    let mut args = vec!["--worker-urls", &url];
    args.extend_from_slice(flags);
    let gw = gateway(&args);
    wait_ready(&gw).await;
    (m, gw)
}

async fn bodies_seen(m: &Proc, path: &str) -> Vec<String> {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == path)
        .map(|r| r["body"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn post_raw(url: &str, raw: &str, headers: &[(&str, &str)]) -> common::Reply {
    send(&common::client(false), "POST", url, headers, raw.to_owned()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_bytes_reach_the_worker_with_the_alias_replaced() {
    let (m, gw) = setup(&[]).await;
    let url = format!("{}/v1/messages", gw.url());
    // Unmodelled fields, odd number spellings and key order are the client's.
    let raw = r#"{"context_management": {"edits": []}, "model": "fast", "temperature": 0.50,
        "max_tokens": 32, "messages": [{"role": "user", "content": "hello"}], "big": 1.0E+2,
        "output_config": {"effort": "high"}}"#;
    let reply = post_raw(&url, raw, &[("content-type", "application/json")]).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    assert_eq!(answer["type"], "message", "{answer}");
    assert_eq!(answer["role"], "assistant");

    let direct = raw.replace("\"fast\"", "\"mock-model\"");
    let reply = post_raw(&url, &direct, &[("content-type", "application/json")]).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        bodies_seen(&m, "/v1/messages").await,
        [direct.clone(), direct],
        "the alias is renamed, every other byte kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_relayed_as_the_worker_sends_it() {
    let (_m, gw) = setup(&[]).await;
    let mut b = body();
    b["stream"] = json!(true);
    let reply = post_json(&format!("{}/v1/messages", gw.url()), &b).await;
    assert_eq!(reply.status, 200);
    let text = reply.text();
    assert!(text.starts_with("event: message_start"), "{text}");
    assert!(text.contains("event: content_block_delta"), "{text}");
    assert!(
        text.trim_end().ends_with(r#"{"type":"message_stop"}"#),
        "{text}"
    );
    assert!(!text.contains("[DONE]"));
}

/// Asserts spec 2's validation answer: 400, `{error: {message, type, code}}`.
fn assert_validation(reply: &common::Reply, code: Value, case: &str) {
    assert_eq!(reply.status, 400, "{case}: {}", reply.text());
    let body = reply.json();
    assert_eq!(
        body["error"]["type"], "invalid_request_error",
        "{case}: {body}"
    );
    assert_eq!(body["error"]["code"], code, "{case}: {body}");
    assert!(body["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_rule_is_checked_before_routing() {
    let (m, gw) = setup(&[]).await;
    let url = format!("{}/v1/messages", gw.url());
    let with = |field: &str, value: Value| {
        let mut b = body();
        b[field] = value;
        b
    };
    let without = |field: &str| {
        let mut b = body();
        b.as_object_mut().map(|o| o.remove(field));
        b
    };
    let parse_errors = [
        ("model missing", without("model")),
        ("messages missing", without("messages")),
        ("max_tokens missing", without("max_tokens")),
        ("max_tokens a string", with("max_tokens", json!("32"))),
        (
            "role unknown",
            with("messages", json!([{"role": "tool", "content": "x"}])),
        ),
        (
            "mcp_tool_use block",
            with(
                "messages",
                json!([{"role": "assistant", "content": [
                    {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "f", "input": {}}]}]),
            ),
        ),
        (
            "mcp_tool_result block",
            with(
                "messages",
                json!([{"role": "user", "content": [
                    {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": []}]}]),
            ),
        ),
        (
            "tool_choice type unknown",
            with("tool_choice", json!({"type": "some"})),
        ),
        ("stream a string", with("stream", json!("true"))),
    ];
    for (case, b) in &parse_errors {
        let reply = post_json(&url, b).await;
        assert_validation(&reply, json!("json_parse_error"), case);
    }
    let reply = post_raw(&url, "{not json", &[("content-type", "application/json")]).await;
    assert_validation(&reply, json!("json_parse_error"), "not JSON");

    let tools = json!([{"name": "f", "description": "d", "input_schema": {"type": "object"}}]);
    let mut named_absent = with("tools", tools);
    named_absent["tool_choice"] = json!({"type": "tool", "name": "g"});
    let rules = [
        ("max_tokens 0", with("max_tokens", json!(0))),
        ("messages empty", with("messages", json!([]))),
        (
            "tool_choice without tools",
            with("tool_choice", json!({"type": "any"})),
        ),
        ("tool_choice names no tool", named_absent),
        (
            "mcp_toolset without mcp_servers",
            with(
                "tools",
                json!([{"type": "mcp_toolset", "mcp_server_name": "s"}]),
            ),
        ),
        ("model empty", with("model", json!(""))),
    ];
    for (case, b) in &rules {
        let reply = post_json(&url, b).await;
        assert_validation(&reply, json!(400), case);
    }
    assert!(
        bodies_seen(&m, "/v1/messages").await.is_empty(),
        "no refused request reached the worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_streamed_through_is_the_workers_to_judge() {
    // No alias to rename and no retry to replay: nothing makes the gateway hold the body.
    let (m, gw) = setup_bare(&["--disable-retries"]).await;
    let mut b = body();
    b["max_tokens"] = json!(0);
    let reply = post_json(&format!("{}/v1/messages", gw.url()), &b).await;
    assert!(
        reply.headers.get("x-gw-error-code").is_none(),
        "not the gateway's answer: {}",
        reply.text()
    );
    assert_eq!(bodies_seen(&m, "/v1/messages").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_allowed_headers_reach_the_worker() {
    let (m, gw) = setup(&[]).await;
    let headers = [
        ("anthropic-version", "2023-06-01"),
        ("anthropic-beta", "tools-2024-04-04"),
        ("x-api-key", "sk-client-secret"),
        ("x-gw-mcp", "enabled"),
        ("x-request-id", "req-7"),
        ("authorization", "Bearer client"),
    ];
    let reply = post_json_with(&format!("{}/v1/messages", gw.url()), &body(), &headers).await;
    assert_eq!(reply.status, 200);
    let seen = mock_requests(&m)
        .await
        .into_iter()
        .rfind(|r| r["path"] == "/v1/messages")
        .expect("the request reached the worker");
    let got = &seen["headers"];
    assert_eq!(got["anthropic-version"], "2023-06-01");
    assert_eq!(got["anthropic-beta"], "tools-2024-04-04");
    assert_eq!(got["x-request-id"], "req-7");
    assert_eq!(got["authorization"], "Bearer client");
    assert!(got.get("x-api-key").is_none(), "{got}");
    assert!(got.get("x-gw-mcp").is_none(), "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_goes_to_a_worker_of_the_model() {
    let (m, gw) = setup(&[]).await;
    let url = format!("{}/v1/messages/count_tokens", gw.url());
    let count = json!({"model": "fast", "messages": [{"role": "user", "content": "12345678"}],
        "context_management": {"edits": []}});
    let reply = post_json(&url, &count).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(reply.json()["input_tokens"].as_u64().is_some_and(|n| n > 0));
    let seen = bodies_seen(&m, "/v1/messages/count_tokens").await;
    let forwarded: Value = serde_json::from_str(&seen[0]).unwrap();
    assert_eq!(forwarded["model"], MODEL, "alias renamed");
    assert_eq!(
        forwarded["context_management"],
        json!({"edits": []}),
        "kept"
    );

    let reply = post_json(&url, &json!({"model": "other", "messages": []})).await;
    assert_gateway_error(&reply, 404, "model_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_refuses_a_bad_body_in_plain_text() {
    let (m, gw) = setup(&[]).await;
    let url = format!("{}/v1/messages/count_tokens", gw.url());
    let json_ct = [("content-type", "application/json")];
    let good = r#"{"model":"mock-model","messages":[]}"#;
    let cases: [(&str, Headers<'_>, u16); 5] = [
        ("{oops", &json_ct, 400),
        (good, &[("content-type", "text/plain")], 415),
        (good, &[], 415),
        (r#"{"messages":[]}"#, &json_ct, 422),
        (r#"{"model":"mock-model","messages":"x"}"#, &json_ct, 422),
    ];
    for (raw, headers, status) in cases {
        let reply = post_raw(&url, raw, headers).await;
        assert_eq!(reply.status, status, "{raw} {headers:?}: {}", reply.text());
        let ct = reply.headers["content-type"].to_str().unwrap_or_default();
        assert!(ct.starts_with("text/plain"), "{ct}");
        assert!(!reply.text().is_empty());
    }
    assert!(bodies_seen(&m, "/v1/messages/count_tokens")
        .await
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_is_not_served_by_grpc_engines() {
    let dir = support::echo::temp_dir("messages_http", "count_tokens");
    common::tokenizer::write_tokenizer(&dir);
    let engine = common::grpc_engine(&["--model", "echo-model"]);
    let gw = gateway(&[
        "--worker-urls",
        &support::echo::grpc_url(&engine),
        "--model-path",
        dir.to_str().unwrap(),
    ]);
    wait_ready(&gw).await;
    let count = json!({"model": "echo-model", "messages": [{"role": "user", "content": "x"}]});
    let reply = post_json(&format!("{}/v1/messages/count_tokens", gw.url()), &count).await;
    assert_eq!(reply.status, 501, "{}", reply.text());
    let ct = reply.headers["content-type"].to_str().unwrap_or_default();
    assert!(ct.starts_with("text/plain"), "{ct}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_under_pd_goes_to_one_prefill_worker() {
    let prefill = mock(&["--model", MODEL]);
    let decode = mock(&["--model", MODEL]);
    let (p, d) = (prefill.url(), decode.url());
    let gw = gateway(&[
        "--health-check-interval-secs",
        "1",
        "--pd-disaggregation",
        "--prefill",
        &p,
        "--decode",
        &d,
    ]);
    let url = format!("{}/v1/messages/count_tokens", gw.url());
    let count = json!({"model": MODEL, "messages": [{"role": "user", "content": "12345678"}]});
    let served = common::eventually(std::time::Duration::from_secs(20), || async {
        post_json(&url, &count).await.status == 200
    })
    .await;
    assert!(served, "count_tokens never served by the prefill worker");
    assert!(!bodies_seen(&prefill, "/v1/messages/count_tokens")
        .await
        .is_empty());
    assert!(
        bodies_seen(&decode, "/v1/messages/count_tokens")
            .await
            .is_empty(),
        "no decode worker, no bootstrap: the prefill worker answers alone"
    );
    let forwarded: Value =
        serde_json::from_str(&bodies_seen(&prefill, "/v1/messages/count_tokens").await[0]).unwrap();
    assert!(forwarded.get("bootstrap_room").is_none(), "{forwarded}");

    // The prefill worker is picked with --prefill-policy, not --policy.
    let second = mock(&["--model", MODEL]);
    let p2 = second.url();
    let gw = gateway(&[
        "--pd-disaggregation",
        "--prefill",
        &p,
        "--prefill",
        &p2,
        "--decode",
        &d,
        "--policy",
        "random",
        "--prefill-policy",
        "round_robin",
        "--health-check-interval-secs",
        "1",
    ]);
    // Readiness needs one worker of each role: wait for both prefill workers, or round
    // robin has only one to take.
    let all_ready = common::eventually(std::time::Duration::from_secs(20), || async {
        let workers = common::listed_workers(&gw).await;
        workers.len() == 3 && workers.iter().all(|w| w["status"] == "ready")
    })
    .await;
    assert!(all_ready, "{:?}", common::listed_workers(&gw).await);
    let url = format!("{}/v1/messages/count_tokens", gw.url());
    for _ in 0..4 {
        assert_eq!(post_json(&url, &count).await.status, 200);
    }
    let metrics = common::scrape(&gw).await;
    let line = metrics
        .lines()
        .find(|l| l.starts_with("gw_worker_selection_total{worker_type=\"prefill\""))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.contains("policy=\"round_robin\""), "{line}");
    assert!(line.ends_with(" 4"), "{line}");
    assert_eq!(
        bodies_seen(&second, "/v1/messages/count_tokens")
            .await
            .len(),
        2,
        "round robin takes the prefill workers in turn"
    );

    // Without a prefill worker: 503 no_prefill_servers.
    let only_decode = gateway(&["--pd-disaggregation", "--decode", &d]);
    let url = format!("{}/v1/messages/count_tokens", only_decode.url());
    let reply = post_json(&url, &count).await;
    assert_gateway_error(&reply, 503, "no_prefill_servers");
}

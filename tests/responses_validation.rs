//! `POST /v1/responses` checked before routing, black box (spec 2, "Responses request",
//! "Errors", "Limits"): a body that does not parse, lacks a required field or has one of the
//! wrong type gets 400 `invalid_request_error` / `json_parse_error`; one that breaks a rule
//! gets 400 `invalid_request_error` with code 400; nothing refused reaches the worker. A
//! valid request, unknown fields included, reaches the worker as the client wrote it (only
//! a `--model-alias` name replaced). Retries are off in every gateway here: the body is
//! held for the check all the same (nothing else would make the gateway read it). A fleet
//! of gRPC engines refuses the same bodies before any generation.

use crate::common;
use crate::support;

use common::{gateway, mock, mock_requests, post_json, scrape, send, wait_ready, Proc};
use serde_json::{json, Value};
use support::echo::{gateway_for, temp_dir};

const MODEL: &str = "mock-model";
const PATH: &str = "/v1/responses";

/// A mock serving `mock-model` and a gateway, retries off, with `fast` as its alias.
async fn setup() -> (Proc, Proc) {
    let m = mock(&["--model", MODEL]);
    let url = m.url();
    let gw = gateway(&[
        "--worker-urls",
        &url,
        "--disable-retries",
        "--model-alias",
        "fast=mock-model",
    ]);
    wait_ready(&gw).await;
    (m, gw)
}

fn body() -> Value {
    json!({"model": MODEL, "input": "hello"})
}

fn with(field: &str, value: Value) -> Value {
    let mut b = body();
    b[field] = value;
    b
}

fn without(field: &str) -> Value {
    let mut b = body();
    b.as_object_mut().map(|o| o.remove(field));
    b
}

async fn bodies_seen(m: &Proc) -> Vec<String> {
    mock_requests(m)
        .await
        .iter()
        .filter(|r| r["path"] == PATH)
        .map(|r| r["body"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn post_raw(gw: &Proc, raw: &str) -> common::Reply {
    send(
        &common::client(false),
        "POST",
        &format!("{}{PATH}", gw.url()),
        &[("content-type", "application/json")],
        raw.to_owned(),
    )
    .await
}

/// Asserts spec 2's validation answer: 400, `{error: {message, type, code}}`, the code in
/// `X-GW-Error-Code` too.
fn assert_validation(reply: &common::Reply, code: Value, case: &str) {
    assert_eq!(reply.status, 400, "{case}: {}", reply.text());
    let body = reply.json();
    assert_eq!(
        body["error"]["type"], "invalid_request_error",
        "{case}: {body}"
    );
    assert_eq!(body["error"]["code"], code, "{case}: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{case}: {body}"
    );
    let header = reply
        .headers
        .get("x-gw-error-code")
        .and_then(|v| v.to_str().ok());
    let want = code
        .as_str()
        .map_or_else(|| code.to_string(), str::to_owned);
    assert_eq!(header, Some(want.as_str()), "{case}");
}

async fn assert_all(gw: &Proc, code: Value, cases: &[(&str, Value)]) {
    let url = format!("{}{PATH}", gw.url());
    for (case, b) in cases {
        let reply = post_json(&url, b).await;
        assert_validation(&reply, code.clone(), case);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_request_reaches_the_worker_as_written_with_the_alias_renamed() {
    let (m, gw) = setup().await;
    // Unknown fields, odd number spellings and key order are the client's.
    let raw = r#"{"service_tier": "flex", "model": "fast", "temperature": 0.50,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}],
        "big": 1.0E+2, "background": {"any": [true]}, "vendor_extension": {"x": null},
        "tools": [{"type": "web_search", "external_web_access": false}],
        "reasoning": {"effort": "max"}, "store": false}"#;
    let reply = post_raw(&gw, raw).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let direct = raw.replace("\"fast\"", "\"mock-model\"");
    let reply = post_raw(&gw, &direct).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        bodies_seen(&m).await,
        [direct.clone(), direct],
        "the alias is renamed, every other byte kept"
    );
    let text = scrape(&gw).await;
    assert!(
        common::sample(
            &text,
            r#"gw_router_request_body_path_total{path="buffered",reason="validation"}"#
        )
        .is_some_and(|n| n >= 2.0),
        "held for the check with retries off:\n{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_mistyped_fields_are_json_parse_errors() {
    let (m, gw) = setup().await;
    let item = |item: Value| with("input", json!([{"role": "user", "content": "x"}, item]));
    let tools = |tools: Value| with("tools", tools);
    let text_format = |format: Value| with("text", json!({"format": format}));
    let cases = [
        ("model missing", without("model")),
        ("model a number", with("model", json!(7))),
        ("input missing", without("input")),
        ("input a number", with("input", json!(3))),
        (
            "message role unknown",
            item(json!({"role": "tool", "content": "x"})),
        ),
        (
            "message content a number",
            item(json!({"role": "user", "content": 1})),
        ),
        (
            "function_call without call_id",
            item(json!({"type": "function_call", "name": "f", "arguments": "{}"})),
        ),
        (
            "function_call arguments an object",
            item(json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}})),
        ),
        (
            "function_call_output without output",
            item(json!({"type": "function_call_output", "call_id": "c"})),
        ),
        (
            "input item type unknown",
            item(json!({"type": "telepathy"})),
        ),
        (
            "max_output_tokens a string",
            with("max_output_tokens", json!("16")),
        ),
        ("max_tool_calls a float", with("max_tool_calls", json!(1.5))),
        ("temperature a string", with("temperature", json!("1"))),
        ("top_p a boolean", with("top_p", json!(true))),
        ("top_logprobs a string", with("top_logprobs", json!("5"))),
        ("store a string", with("store", json!("true"))),
        ("stream a number", with("stream", json!(1))),
        (
            "parallel_tool_calls a string",
            with("parallel_tool_calls", json!("no")),
        ),
        ("metadata an array", with("metadata", json!([]))),
        ("metadata value a number", with("metadata", json!({"k": 1}))),
        (
            "tool_choice mode unknown",
            with("tool_choice", json!("sometimes")),
        ),
        ("tool type unknown", tools(json!([{"type": "telepathy"}]))),
        (
            "function tool without name",
            tools(json!([{"type": "function"}])),
        ),
        (
            "namespace nested",
            tools(json!([{"type": "namespace", "name": "a", "tools": [
                {"type": "namespace", "name": "b", "tools": []}]}])),
        ),
        (
            "mcp tool without server_label",
            tools(json!([{"type": "mcp", "server_url": "http://127.0.0.1:1/mcp"}])),
        ),
        ("conversation a number", with("conversation", json!(1))),
        (
            "reasoning effort unknown",
            with("reasoning", json!({"effort": "extreme"})),
        ),
        (
            "reasoning summary unknown",
            with("reasoning", json!({"summary": "long"})),
        ),
        (
            "text format type unknown",
            text_format(json!({"type": "yaml"})),
        ),
        (
            "json_schema without schema",
            text_format(json!({"type": "json_schema", "name": "n"})),
        ),
    ];
    assert_all(&gw, json!("json_parse_error"), &cases).await;
    for raw in ["{not json", "[]", ""] {
        let reply = post_raw(&gw, raw).await;
        assert_validation(&reply, json!("json_parse_error"), raw);
    }
    assert!(
        bodies_seen(&m).await.is_empty(),
        "no refused request reached the worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_rules_are_400() {
    let (m, gw) = setup().await;
    let function = json!({"type": "function", "name": "f", "parameters": {"type": "object"}});
    let namespace = json!({"type": "namespace", "name": "ns", "description": "d",
        "tools": [{"type": "function", "name": "g"}]});
    let mcp = |label: &str| {
        json!({"type": "mcp", "server_label": label,
        "server_url": "http://127.0.0.1:1/mcp"})
    };
    let choosing = |tools: Value, choice: Value| {
        let mut b = with("tools", tools);
        b["tool_choice"] = choice;
        b
    };
    let both = {
        let mut b = with("conversation", json!("conv_1"));
        b["previous_response_id"] = json!("resp_1");
        b
    };
    let logprobs_21 = {
        let mut b = with("top_logprobs", json!(21));
        b["include"] = json!(["message.output_text.logprobs"]);
        b
    };
    let text_format = |format: Value| with("text", json!({"format": format}));
    let metadata: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cases = [
        ("input empty string", with("input", json!(""))),
        ("input empty array", with("input", json!([]))),
        (
            "input without a message",
            with("input", json!([{"type": "item_reference", "id": "msg_1"}])),
        ),
        ("max_output_tokens 0", with("max_output_tokens", json!(0))),
        ("max_tool_calls 0", with("max_tool_calls", json!(0))),
        ("temperature above 2", with("temperature", json!(2.5))),
        ("temperature negative", with("temperature", json!(-1))),
        ("top_p 0", with("top_p", json!(0))),
        ("top_p above 1", with("top_p", json!(1.5))),
        ("top_logprobs 21", logprobs_21),
        (
            "top_logprobs without include",
            with("top_logprobs", json!(2)),
        ),
        (
            "tool_choice without tools",
            with("tool_choice", json!("required")),
        ),
        (
            "tool_choice names an undeclared function",
            choosing(
                json!([function.clone()]),
                json!({"type": "function", "name": "h"}),
            ),
        ),
        (
            "tool_choice names a function outside its namespace",
            choosing(
                json!([function.clone(), namespace.clone()]),
                json!({"type": "function", "name": "f", "namespace": "ns"}),
            ),
        ),
        (
            "tool_choice names an undeclared mcp server",
            choosing(
                json!([mcp("docs")]),
                json!({"type": "mcp", "server_label": "wiki"}),
            ),
        ),
        (
            "mcp label starting with a digit",
            with("tools", json!([mcp("9docs")])),
        ),
        (
            "mcp label with a space",
            with("tools", json!([mcp("my docs")])),
        ),
        (
            "mcp labels equal ignoring case",
            with("tools", json!([mcp("Docs"), mcp("docs")])),
        ),
        (
            "mcp with server_url and connector_id",
            with(
                "tools",
                json!([{"type": "mcp", "server_label": "docs",
                "server_url": "http://127.0.0.1:1/mcp", "connector_id": "connector_gmail"}]),
            ),
        ),
        ("previous_response_id with conversation", both),
        (
            "conversation not conv_",
            with("conversation", json!("thread_1")),
        ),
        (
            "conversation object not conv_",
            with("conversation", json!({"id": "c1"})),
        ),
        (
            "json_schema name empty",
            text_format(json!({"type": "json_schema", "name": "", "schema": {}})),
        ),
        (
            "json_schema schema not an object",
            text_format(json!({"type": "json_schema", "name": "n", "schema": "object"})),
        ),
        (
            "metadata with 17 entries",
            with("metadata", Value::Object(metadata)),
        ),
    ];
    assert_all(&gw, json!(400), &cases).await;
    assert!(
        bodies_seen(&m).await.is_empty(),
        "no refused request reached the worker"
    );
    // The same rules' edges pass.
    let url = format!("{}{PATH}", gw.url());
    let mut edges = with("temperature", json!(2));
    edges["top_p"] = json!(1);
    edges["max_output_tokens"] = json!(1);
    edges["conversation"] = json!({"id": "conv_abc-1"});
    edges["tools"] = json!([function, namespace, mcp("Docs-1")]);
    edges["tool_choice"] = json!({"type": "function", "name": "g", "namespace": "ns"});
    edges["reasoning"] = json!({"effort": "none", "summary": "concise"});
    let reply = post_json(&url, &edges).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(bodies_seen(&m).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_engines_get_nothing_refused_either() {
    let dir = temp_dir("responses-validation", "grpc");
    common::tokenizer::write_tokenizer(&dir);
    let engine = common::grpc_engine(&["--service", "sglang", "--model", MODEL]);
    let gw = gateway_for(&engine, &dir).await;
    let both = {
        let mut b = with("conversation", json!({"id": "conv_1"}));
        b["previous_response_id"] = json!("resp_1");
        b
    };
    assert_all(
        &gw,
        json!("json_parse_error"),
        &[
            (
                "reasoning effort unknown",
                with("reasoning", json!({"effort": "huge"})),
            ),
            ("input missing", without("input")),
        ],
    )
    .await;
    assert_all(
        &gw,
        json!(400),
        &[
            (
                "json_schema name empty",
                with(
                    "text",
                    json!({"format": {"type": "json_schema", "name": "",
                    "schema": {"type": "object"}}}),
                ),
            ),
            ("previous_response_id with conversation", both),
            (
                "tool_choice without tools",
                with("tool_choice", json!("auto")),
            ),
        ],
    )
    .await;
    assert!(
        !engine.log_text().contains("generate request_id"),
        "the engine generated nothing:\n{}",
        engine.log_text()
    );
}

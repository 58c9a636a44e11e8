use super::*;
use crate::http::error::respond::error_response;
use serde_json::{json, Value};

fn create(body: Value) -> Result<Checked, GatewayError> {
    check(
        MessagesRoute::Create,
        Bytes::from(body.to_string()),
        &[("fast".into(), "llama-3".into())],
    )
}

fn count(raw: &str) -> Result<Checked, GatewayError> {
    check(MessagesRoute::CountTokens, Bytes::from(raw.to_owned()), &[])
}

fn base() -> Value {
    json!({"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
}

fn with(field: &str, value: Value) -> Value {
    let mut body = base();
    body[field] = value;
    body
}

fn without(field: &str) -> Value {
    let mut body = base();
    body.as_object_mut().map(|o| o.remove(field));
    body
}

fn code(result: Result<Checked, GatewayError>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(GatewayError::MessagesMalformed { .. }) => "json_parse_error",
        Err(GatewayError::MessagesInvalid { .. }) => "400",
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn a_full_request_passes_unchanged() {
    let raw = r#"{"model":"m","max_tokens":1.0e3,"temperature":0.70,"messages":[
        {"role":"system","content":"be brief"},
        {"role":"user","content":[{"type":"text","text":"hi"},
            {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]},
        {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":""},
            {"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"4"}]}],
        "system":[{"type":"text","text":"s"}],"stream":true,"top_k":5,"top_p":0.9,
        "stop_sequences":["\n\n"],"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}},
            {"type":"web_search_20250305","name":"web_search"}],
        "tool_choice":{"type":"tool","name":"f"},"thinking":{"type":"enabled","budget_tokens":1024},
        "metadata":{"user_id":null},"service_tier":"auto","container":{"id":"c"},
        "context_management":{"edits":[]},"output_config":{"effort":"high"},"rid":"r1"}"#;
    // max_tokens written as 1.0e3 is a float, which is not an integer: refused.
    assert_eq!(
        code(check(MessagesRoute::Create, Bytes::from(raw), &[])),
        "json_parse_error"
    );
    let raw = raw.replace("1.0e3", "1000");
    let out = check(MessagesRoute::Create, Bytes::from(raw.clone()), &[]).unwrap();
    assert_eq!(out.body, raw.as_bytes(), "forwarded byte for byte");
}

#[test]
fn an_alias_is_replaced_and_every_other_byte_kept() {
    let raw = r#"{"temperature": 0.50, "model" : "fast", "max_tokens":8,"messages":[{"role":"user","content":"x"}],"extra":1e400}"#;
    // 1e400 does not fit an f64, but it is an unmodelled field: kept as written.
    let out = check(
        MessagesRoute::Create,
        Bytes::from(raw),
        &[("fast".into(), "llama-3".into())],
    )
    .unwrap();
    assert_eq!(
        std::str::from_utf8(&out.body).unwrap(),
        raw.replace("\"fast\"", "\"llama-3\"")
    );
    let escaped =
        r#"{"model":"f\u0061st","max_tokens":8,"messages":[{"role":"user","content":"x"}]}"#;
    let out = check(
        MessagesRoute::Create,
        Bytes::from(escaped),
        &[("fast".into(), "llama-3".into())],
    )
    .unwrap();
    let value: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(value["model"], "llama-3");
    assert_eq!(code(create(with("model", json!("other")))), "ok");
}

#[test]
fn parse_failures_are_json_parse_errors() {
    for bad in [
        "{",
        "[]",
        "not json",
        r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]} x"#,
    ] {
        let err = check(MessagesRoute::Create, Bytes::from(bad), &[]);
        assert_eq!(code(err), "json_parse_error", "{bad}");
    }
    for body in [
        without("model"),
        without("messages"),
        without("max_tokens"),
        with("model", json!(3)),
        with("max_tokens", json!("16")),
        with("max_tokens", json!(1.5)),
        with("messages", json!({"role": "user"})),
        with("messages", json!([{"role": "tool", "content": "x"}])),
        with("messages", json!([{"role": "user"}])),
        with("messages", json!([{"role": "user", "content": 3}])),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "mcp_tool_use", "id": "a", "name": "b", "input": {}}]}]),
        ),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "mcp_tool_result", "tool_use_id": "a"}]}]),
        ),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "video"}]}]),
        ),
        with(
            "messages",
            json!([{"role": "user", "content": [{"text": "no type"}]}]),
        ),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "text"}]}]),
        ),
        with(
            "messages",
            json!([{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b"}]}]),
        ),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "tool_result"}]}]),
        ),
        with("system", json!(5)),
        with("system", json!([{"type": "image", "source": {}}])),
        with("stream", json!("yes")),
        with("temperature", json!("hot")),
        with("top_k", json!(0.5)),
        with("stop_sequences", json!("stop")),
        with("stop_sequences", json!([1])),
        with("tools", json!({})),
        with("tool_choice", json!("auto")),
        with("tool_choice", json!({"type": "sometimes"})),
        with("thinking", json!({"type": "maybe"})),
        with("thinking", json!({"type": "adaptive", "display": "full"})),
        with("metadata", json!({"user_id": 7})),
        with("service_tier", json!("priority")),
        with(
            "mcp_servers",
            json!([{"type": "stdio", "name": "a", "url": "http://x"}]),
        ),
        with("mcp_servers", json!([{"type": "url", "name": "a"}])),
        with("rid", json!(1)),
    ] {
        assert_eq!(code(create(body.clone())), "json_parse_error", "{body}");
    }
    let dup =
        r#"{"model":"m","model":"n","max_tokens":1,"messages":[{"role":"user","content":"x"}]}"#;
    assert_eq!(
        code(check(MessagesRoute::Create, Bytes::from(dup), &[])),
        "json_parse_error"
    );
}

#[test]
fn broken_rules_are_code_400() {
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    let mut named_absent = with("tools", tools.clone());
    named_absent["tool_choice"] = json!({"type": "tool", "name": "g"});
    let mut unnamed = with("tools", tools.clone());
    unnamed["tool_choice"] = json!({"type": "tool"});
    let mut toolset_unknown_server = with(
        "tools",
        json!([{"type": "mcp_toolset", "mcp_server_name": "b"}]),
    );
    toolset_unknown_server["mcp_servers"] =
        json!([{"type": "url", "name": "a", "url": "http://x"}]);
    for body in [
        with("model", json!("")),
        with("max_tokens", json!(0)),
        with("max_tokens", json!(-3)),
        with("messages", json!([])),
        with("tool_choice", json!({"type": "auto"})),
        with("tool_choice", json!({"type": "any"})),
        with("tool_choice", json!({"type": "tool", "name": "f"})),
        named_absent,
        unnamed,
        with("tools", json!([{"name": "f"}])),
        with("tools", json!([{"name": "f", "input_schema": "object"}])),
        with("tools", json!([{"input_schema": {}}])),
        with(
            "tools",
            json!([{"type": "mcp_toolset", "mcp_server_name": "a"}]),
        ),
        toolset_unknown_server,
        with("thinking", json!({"type": "enabled"})),
        with("thinking", json!({"type": "enabled", "budget_tokens": 0})),
        with(
            "thinking",
            json!({"type": "disabled", "display": "omitted"}),
        ),
    ] {
        assert_eq!(code(create(body.clone())), "400", "{body}");
    }
}

#[test]
fn accepted_variations() {
    let tools = json!([{"name": "f", "input_schema": {"type": "object"}}]);
    let mut toolset = with(
        "tools",
        json!([{"type": "mcp_toolset", "mcp_server_name": "a", "default_config": {"enabled": true}}]),
    );
    toolset["mcp_servers"] =
        json!([{"type": "url", "name": "a", "url": "https://x/mcp", "authorization_token": "t"}]);
    for body in [
        with("tool_choice", json!({"type": "none"})),
        with("tools", tools.clone()),
        toolset,
        with(
            "thinking",
            json!({"type": "adaptive", "display": "summarized"}),
        ),
        with("thinking", json!({"type": "disabled"})),
        with("system", json!("s")),
        with("metadata", json!({})),
        with("container", json!("container_id")),
        with("messages", json!([{"role": "user", "content": []}])),
        with(
            "messages",
            json!([{"role": "user", "content": [{"type": "redacted_thinking", "data": "x"},
                {"type": "document", "source": {"type": "text", "data": "d"}},
                {"type": "search_result", "source": "s", "title": "t", "content": []},
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "tool_search_tool_result", "tool_use_id": "x", "content": {}},
                {"type": "tool_reference", "tool_name": "f"}]}]),
        ),
    ] {
        assert_eq!(code(create(body.clone())), "ok", "{body}");
    }
}

#[test]
fn count_tokens_errors_are_plain_text_by_kind() {
    let fault = |raw: &str| match count(raw) {
        Err(GatewayError::CountTokensBody { fault, .. }) => Some(fault),
        Err(other) => panic!("unexpected {other:?}"),
        Ok(_) => None,
    };
    assert_eq!(fault("{"), Some(BodyFault::Syntax));
    assert_eq!(fault("nope"), Some(BodyFault::Syntax));
    assert_eq!(fault(r#"{"messages":[]}"#), Some(BodyFault::Field));
    assert_eq!(fault(r#"{"model":"m"}"#), Some(BodyFault::Field));
    assert_eq!(
        fault(r#"{"model":1,"messages":[]}"#),
        Some(BodyFault::Field)
    );
    assert_eq!(
        fault(r#"{"model":"m","messages":"x"}"#),
        Some(BodyFault::Field)
    );
    // No max_tokens, other fields forwarded.
    assert_eq!(
        fault(
            r#"{"model":"m","messages":[{"role":"user","content":"x"}],"mcp_servers":[],"context_management":{}}"#
        ),
        None
    );
    let resp = error_response(&count("{").unwrap_err());
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    let resp = error_response(&count(r#"{"model":"m"}"#).unwrap_err());
    assert_eq!(resp.status(), 422);
}

#[test]
fn declared_json_content_types() {
    let mut h = HeaderMap::new();
    assert!(!declares_json(&h));
    h.insert(
        CONTENT_TYPE,
        "Application/JSON; charset=utf-8".parse().unwrap(),
    );
    assert!(declares_json(&h));
    h.insert(CONTENT_TYPE, "text/plain".parse().unwrap());
    assert!(!declares_json(&h));
}

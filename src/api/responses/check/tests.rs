use super::*;
use serde_json::{json, Value};

fn base() -> Value {
    json!({"model": "m", "input": "hi"})
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

/// The error code a body gets: `ok`, `json_parse_error` or `400`.
fn code_of(raw: &[u8]) -> &'static str {
    match check(raw) {
        Ok(_) => "ok",
        Err(GatewayError::ResponsesMalformed { .. }) => "json_parse_error",
        Err(GatewayError::ResponsesInvalid { .. }) => "400",
        Err(other) => panic!("unexpected error {other:?}"),
    }
}

fn code(body: Value) -> &'static str {
    code_of(body.to_string().as_bytes())
}

fn assert_codes(want: &str, cases: &[(&str, Value)]) {
    for (case, body) in cases {
        assert_eq!(code(body.clone()), want, "{case}: {body}");
    }
}

fn function(name: &str) -> Value {
    json!({"type": "function", "name": name, "parameters": {"type": "object"}})
}

fn mcp(label: &str) -> Value {
    json!({"type": "mcp", "server_label": label, "server_url": "http://127.0.0.1:1/mcp"})
}

#[test]
fn a_full_request_passes_and_is_summarised() {
    let raw = r#"{"model":"m","input":[
        {"role":"developer","content":"be brief"},
        {"type":"message","role":"user","content":[{"type":"input_text","text":"hi"},
            {"type":"input_image","image_url":"data:image/png;base64,AA=="}]},
        {"type":"function_call","call_id":"c1","name":"f","arguments":"{}","namespace":"ns"},
        {"type":"function_call_output","call_id":"c1","output":[]},
        {"type":"reasoning","id":"rs_1","summary":[]},
        {"type":"item_reference","id":"msg_1"},
        {"type":"mcp_call","id":"mcp_1","server_label":"s","name":"t","arguments":"{}"}],
        "instructions":"x","max_output_tokens":16,"max_tool_calls":1,"temperature":0.0,
        "top_p":1,"stream":true,"stream_options":{"include_obfuscation":false},"store":false,
        "tools":[{"type":"function","name":"f","description":"d","parameters":{},"strict":true},
            {"type":"namespace","name":"ns","description":"d","tools":[
                {"type":"function","name":"g"},{"type":"custom","name":"c"}]},
            {"type":"mcp","server_label":"Docs-1_a","connector_id":"connector_gmail",
                "require_approval":"never","allowed_tools":{"read_only":true,"tool_names":["a"]}},
            {"type":"web_search","external_web_access":false,"filters":{"allowed_domains":[]}},
            {"type":"web_search_preview"},{"type":"code_interpreter","container":{"type":"auto"}},
            {"type":"file_search","vector_store_ids":[]},{"type":"image_generation"}],
        "tool_choice":{"type":"function","name":"g","namespace":"ns"},
        "parallel_tool_calls":false,"previous_response_id":"resp_1",
        "reasoning":{"effort":"xhigh","summary":"auto"},
        "text":{"format":{"type":"json_schema","name":"n","schema":{"type":"object"},"strict":true}},
        "include":["message.output_text.logprobs"],"top_logprobs":20,
        "metadata":{"k":"v"},"user":"u","background":{"anything":[1]},
        "top_k":-1,"min_p":0.0,"repetition_penalty":1.0,"frequency_penalty":0,
        "presence_penalty":0,"stop":["\n"],"truncation":"auto","unknown_field":1e400}"#;
    let checked = check(raw.as_bytes()).unwrap();
    assert_eq!(checked.model, "m");
    assert!(checked.stream);
    assert!(!checked.store);
    assert_eq!(checked.previous_response_id.as_deref(), Some("resp_1"));
    assert_eq!(checked.conversation, None);
    assert_eq!(
        checked.renamed(raw.as_bytes(), &[]),
        None,
        "nothing to rename"
    );
}

#[test]
fn the_summary_has_the_defaults_and_both_conversation_spellings() {
    let checked = check(br#"{"model":"m","input":"hi"}"#).unwrap();
    assert!(!checked.stream);
    assert!(checked.store, "store defaults to true");
    for raw in [
        r#"{"model":"m","input":"hi","conversation":"conv_1"}"#,
        r#"{"model":"m","input":"hi","conversation":{"id":"conv_1"}}"#,
    ] {
        assert_eq!(
            check(raw.as_bytes()).unwrap().conversation.as_deref(),
            Some("conv_1")
        );
    }
}

#[test]
fn an_alias_is_replaced_and_every_other_byte_kept() {
    let aliases = [("fast".to_owned(), "llama-3".to_owned())];
    let raw = r#"{"temperature": 0.50, "model" : "fast", "input":"x","extra":1e400}"#;
    let checked = check(raw.as_bytes()).unwrap();
    let out = checked.renamed(raw.as_bytes(), &aliases).unwrap();
    assert_eq!(
        std::str::from_utf8(&out).unwrap(),
        raw.replace("\"fast\"", "\"llama-3\"")
    );
    let escaped = r#"{"model":"f\u0061st","input":"x"}"#;
    let checked = check(escaped.as_bytes()).unwrap();
    let out = checked.renamed(escaped.as_bytes(), &aliases).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&out).unwrap()["model"],
        "llama-3"
    );
    assert_eq!(
        checked.renamed(b"another body", &aliases),
        None,
        "a body of another length is not spliced"
    );
}

#[test]
fn parse_failures_are_json_parse_errors() {
    for bad in [
        "",
        "{",
        "[]",
        r#"["m", "hi"]"#,
        "not json",
        r#"{"model":"m","input":"hi"} x"#,
        r#"{"model":"m","model":"n","input":"hi"}"#,
    ] {
        assert_eq!(code_of(bad.as_bytes()), "json_parse_error", "{bad}");
    }
}

#[test]
fn model_is_a_required_string() {
    assert_codes(
        "json_parse_error",
        &[
            ("missing", without("model")),
            ("a number", with("model", json!(3))),
            ("null", with("model", Value::Null)),
        ],
    );
}

#[test]
fn input_is_a_required_string_or_array() {
    assert_codes(
        "json_parse_error",
        &[
            ("missing", without("input")),
            ("a number", with("input", json!(1))),
            ("an object", with("input", json!({"role": "user"}))),
            ("an item not an object", with("input", json!(["hi"]))),
        ],
    );
}

#[test]
fn input_must_not_be_empty() {
    assert_codes(
        "400",
        &[
            ("empty string", with("input", json!(""))),
            ("empty array", with("input", json!([]))),
            (
                "items without a message",
                with(
                    "input",
                    json!([{"type": "function_call_output", "call_id": "c", "output": "4"}]),
                ),
            ),
        ],
    );
    let continued = json!({"model": "m", "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "c", "output": "4"}]});
    assert!(check(continued.to_string().as_bytes()).is_ok());
}

#[test]
fn input_items_have_their_types_shapes() {
    let item = |item: Value| with("input", json!([{"role": "user", "content": "x"}, item]));
    assert_codes(
        "json_parse_error",
        &[
            ("message without role", item(json!({"content": "x"}))),
            (
                "message role unknown",
                item(json!({"role": "tool", "content": "x"})),
            ),
            ("message without content", item(json!({"role": "user"}))),
            (
                "content a number",
                item(json!({"role": "user", "content": 1})),
            ),
            (
                "part without type",
                item(json!({"role": "user", "content": [{"text": "x"}]})),
            ),
            (
                "text part without text",
                item(json!({"role": "user", "content": [{"type": "input_text"}]})),
            ),
            (
                "function_call without call_id",
                item(json!({"type": "function_call", "name": "f", "arguments": "{}"})),
            ),
            (
                "function_call arguments an object",
                item(
                    json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}),
                ),
            ),
            (
                "function_call without name",
                item(json!({"type": "function_call", "call_id": "c", "arguments": "{}"})),
            ),
            (
                "function_call_output without output",
                item(json!({"type": "function_call_output", "call_id": "c"})),
            ),
            (
                "function_call_output output a number",
                item(json!({"type": "function_call_output", "call_id": "c", "output": 4})),
            ),
            (
                "item_reference without id",
                item(json!({"type": "item_reference"})),
            ),
            ("unknown type", item(json!({"type": "telepathy"}))),
        ],
    );
    assert_codes(
        "ok",
        &[
            (
                "empty output string",
                item(json!({"type": "function_call_output", "call_id": "c", "output": ""})),
            ),
            (
                "empty output array",
                item(json!({"type": "function_call_output", "call_id": "c", "output": []})),
            ),
            (
                "output parts",
                item(json!({"type": "function_call_output", "call_id": "c",
                    "output": [{"type": "input_text", "text": "4"}]})),
            ),
            (
                "other OpenAI types",
                item(json!({"type": "mcp_list_tools", "tools": []})),
            ),
            (
                "system role",
                item(json!({"role": "system", "content": []})),
            ),
        ],
    );
}

#[test]
fn counts_are_at_least_one() {
    assert_codes(
        "400",
        &[
            ("max_output_tokens 0", with("max_output_tokens", json!(0))),
            (
                "max_output_tokens negative",
                with("max_output_tokens", json!(-5)),
            ),
            ("max_tool_calls 0", with("max_tool_calls", json!(0))),
        ],
    );
    assert_codes(
        "json_parse_error",
        &[
            (
                "max_output_tokens a string",
                with("max_output_tokens", json!("16")),
            ),
            (
                "max_output_tokens a float",
                with("max_output_tokens", json!(1.5)),
            ),
            (
                "max_tool_calls a string",
                with("max_tool_calls", json!("1")),
            ),
        ],
    );
    assert_codes(
        "ok",
        &[
            ("max_output_tokens 1", with("max_output_tokens", json!(1))),
            ("max_tool_calls 1", with("max_tool_calls", json!(1))),
        ],
    );
}

#[test]
fn sampling_values_are_in_range() {
    assert_codes(
        "400",
        &[
            ("temperature above 2", with("temperature", json!(2.01))),
            ("temperature negative", with("temperature", json!(-0.1))),
            ("top_p 0", with("top_p", json!(0))),
            ("top_p above 1", with("top_p", json!(1.01))),
        ],
    );
    assert_codes(
        "ok",
        &[
            ("temperature 0", with("temperature", json!(0))),
            ("temperature 2", with("temperature", json!(2))),
            ("top_p 1", with("top_p", json!(1))),
            ("top_p small", with("top_p", json!(0.001))),
        ],
    );
    assert_codes(
        "json_parse_error",
        &[
            ("temperature a string", with("temperature", json!("1"))),
            ("top_p a bool", with("top_p", json!(true))),
            ("top_k a float", with("top_k", json!(1.5))),
            ("stop a number", with("stop", json!(1))),
            ("stop with a number", with("stop", json!(["a", 1]))),
        ],
    );
}

#[test]
fn top_logprobs_is_bounded_and_needs_its_include() {
    let logprobs = |n: Value| {
        let mut body = with("top_logprobs", n);
        body["include"] = json!(["message.output_text.logprobs"]);
        body
    };
    assert_codes(
        "400",
        &[
            ("21", logprobs(json!(21))),
            ("negative", logprobs(json!(-1))),
            ("without include", with("top_logprobs", json!(5))),
        ],
    );
    let mut other_include = with("top_logprobs", json!(5));
    other_include["include"] = json!(["reasoning.encrypted_content"]);
    assert_eq!(code(other_include), "400");
    assert_codes(
        "ok",
        &[("0", logprobs(json!(0))), ("20", logprobs(json!(20)))],
    );
    assert_codes(
        "json_parse_error",
        &[
            ("a string", logprobs(json!("5"))),
            ("include not strings", with("include", json!([1]))),
        ],
    );
}

#[test]
fn tool_choice_other_than_none_needs_tools() {
    for choice in [
        json!("auto"),
        json!("required"),
        json!({"type": "web_search_preview"}),
    ] {
        assert_eq!(code(with("tool_choice", choice.clone())), "400", "{choice}");
        let mut empty = with("tool_choice", choice.clone());
        empty["tools"] = json!([]);
        assert_eq!(code(empty), "400", "empty tools: {choice}");
    }
    assert_eq!(code(with("tool_choice", json!("none"))), "ok");
    assert_codes(
        "json_parse_error",
        &[
            ("unknown mode", with("tool_choice", json!("sometimes"))),
            ("a number", with("tool_choice", json!(1))),
            (
                "object without type",
                with("tool_choice", json!({"name": "f"})),
            ),
        ],
    );
}

fn choosing(tools: Value, choice: Value) -> Value {
    let mut body = with("tools", tools);
    body["tool_choice"] = choice;
    body
}

#[test]
fn a_chosen_function_must_be_declared_in_its_namespace() {
    let tools = json!([function("f"), {"type": "namespace", "name": "ns", "description": "d",
        "tools": [{"type": "function", "name": "g"}]}]);
    assert_codes(
        "ok",
        &[
            (
                "top-level",
                choosing(tools.clone(), json!({"type": "function", "name": "f"})),
            ),
            (
                "in its namespace",
                choosing(
                    tools.clone(),
                    json!({"type": "function", "name": "g", "namespace": "ns"}),
                ),
            ),
            ("auto", choosing(tools.clone(), json!("auto"))),
            (
                "allowed_tools",
                choosing(
                    tools.clone(),
                    json!({"type": "allowed_tools", "mode": "required",
                    "tools": [{"type": "function", "name": "f"}]}),
                ),
            ),
        ],
    );
    assert_codes(
        "400",
        &[
            (
                "not declared",
                choosing(tools.clone(), json!({"type": "function", "name": "h"})),
            ),
            (
                "a member without its namespace",
                choosing(tools.clone(), json!({"type": "function", "name": "g"})),
            ),
            (
                "not in that namespace",
                choosing(
                    tools.clone(),
                    json!({"type": "function", "name": "f", "namespace": "ns"}),
                ),
            ),
            (
                "unknown namespace",
                choosing(
                    tools.clone(),
                    json!({"type": "function", "name": "g", "namespace": "x"}),
                ),
            ),
            (
                "allowed_tools names an undeclared function",
                choosing(
                    tools.clone(),
                    json!({"type": "allowed_tools", "mode": "auto",
                    "tools": [{"type": "function", "name": "h"}]}),
                ),
            ),
            (
                "allowed_tools mode none",
                choosing(
                    tools.clone(),
                    json!({"type": "allowed_tools", "mode": "none",
                    "tools": []}),
                ),
            ),
        ],
    );
    assert_codes(
        "json_parse_error",
        &[
            (
                "function without name",
                choosing(tools.clone(), json!({"type": "function"})),
            ),
            (
                "unknown type",
                choosing(tools.clone(), json!({"type": "telepathy"})),
            ),
        ],
    );
}

#[test]
fn a_chosen_mcp_server_must_be_declared() {
    let tools = json!([mcp("Docs")]);
    assert_eq!(
        code(choosing(
            tools.clone(),
            json!({"type": "mcp", "server_label": "docs"})
        )),
        "ok",
        "labels compare ignoring case"
    );
    assert_eq!(
        code(choosing(
            tools.clone(),
            json!({"type": "mcp", "server_label": "other"})
        )),
        "400"
    );
    assert_eq!(
        code(choosing(
            json!([function("f")]),
            json!({"type": "mcp", "server_label": "docs"})
        )),
        "400"
    );
    assert_eq!(
        code(choosing(tools, json!({"type": "mcp"}))),
        "json_parse_error"
    );
}

#[test]
fn tools_have_their_types_fields() {
    assert_codes(
        "json_parse_error",
        &[
            ("not an array", with("tools", json!({"type": "function"}))),
            ("without type", with("tools", json!([{"name": "f"}]))),
            (
                "unknown type",
                with("tools", json!([{"type": "telepathy"}])),
            ),
            (
                "function without name",
                with("tools", json!([{"type": "function"}])),
            ),
            (
                "function parameters not an object",
                with(
                    "tools",
                    json!([{"type": "function", "name": "f", "parameters": "x"}]),
                ),
            ),
            (
                "namespace without tools",
                with("tools", json!([{"type": "namespace", "name": "ns"}])),
            ),
            (
                "namespace nested",
                with(
                    "tools",
                    json!([{"type": "namespace", "name": "ns", "tools": [
                    {"type": "namespace", "name": "inner", "tools": []}]}]),
                ),
            ),
            (
                "namespace holding a built-in",
                with(
                    "tools",
                    json!([{"type": "namespace", "name": "ns", "tools": [
                    {"type": "web_search"}]}]),
                ),
            ),
            (
                "mcp without server_label",
                with("tools", json!([{"type": "mcp", "server_url": "u"}])),
            ),
            (
                "mcp allowed_tools a string",
                with(
                    "tools",
                    json!([{"type": "mcp", "server_label": "a", "allowed_tools": "x"}]),
                ),
            ),
            (
                "mcp require_approval unknown",
                with(
                    "tools",
                    json!([{"type": "mcp", "server_label": "a", "require_approval": "sometimes"}]),
                ),
            ),
        ],
    );
    assert_codes(
        "400",
        &[
            ("function name empty", with("tools", json!([function("")]))),
            ("mcp label empty", with("tools", json!([mcp("")]))),
            (
                "mcp label starts with a digit",
                with("tools", json!([mcp("1abc")])),
            ),
            ("mcp label with a dot", with("tools", json!([mcp("a.b")]))),
            (
                "mcp labels equal ignoring case",
                with("tools", json!([mcp("Docs"), mcp("docs")])),
            ),
            (
                "mcp with server_url and connector_id",
                with(
                    "tools",
                    json!([{"type": "mcp", "server_label": "a",
                    "server_url": "http://x", "connector_id": "connector_gmail"}]),
                ),
            ),
        ],
    );
    assert_codes(
        "ok",
        &[
            (
                "web_search with its fields",
                with(
                    "tools",
                    json!([{"type": "web_search", "external_web_access": false,
                    "search_context_size": "low", "user_location": {"type": "approximate"}}]),
                ),
            ),
            (
                "two different labels",
                with("tools", json!([mcp("a-1"), mcp("b_2")])),
            ),
            (
                "mcp by label only",
                with("tools", json!([{"type": "mcp", "server_label": "a"}])),
            ),
        ],
    );
}

#[test]
fn previous_response_id_and_conversation_exclude_each_other() {
    let mut both = with("conversation", json!("conv_1"));
    both["previous_response_id"] = json!("resp_1");
    assert_eq!(code(both), "400");
    assert_eq!(
        code(with("previous_response_id", json!(1))),
        "json_parse_error"
    );
}

#[test]
fn a_conversation_id_starts_with_conv() {
    assert_codes(
        "400",
        &[
            ("string", with("conversation", json!("c_1"))),
            ("object", with("conversation", json!({"id": "resp_1"}))),
            ("bad characters", with("conversation", json!("conv_1/../x"))),
        ],
    );
    assert_codes(
        "json_parse_error",
        &[
            ("a number", with("conversation", json!(1))),
            ("object without id", with("conversation", json!({}))),
            ("an array", with("conversation", json!(["conv_1"]))),
        ],
    );
}

#[test]
fn reasoning_tiers_and_summaries_are_closed_sets() {
    for effort in ["none", "minimal", "low", "medium", "high", "xhigh", "max"] {
        assert_eq!(
            code(with("reasoning", json!({"effort": effort}))),
            "ok",
            "{effort}"
        );
    }
    for summary in ["auto", "concise", "detailed"] {
        assert_eq!(
            code(with("reasoning", json!({"summary": summary}))),
            "ok",
            "{summary}"
        );
    }
    assert_eq!(code(with("reasoning", json!({}))), "ok", "effort defaults");
    assert_codes(
        "json_parse_error",
        &[
            (
                "effort unknown",
                with("reasoning", json!({"effort": "extreme"})),
            ),
            (
                "effort upper case",
                with("reasoning", json!({"effort": "HIGH"})),
            ),
            (
                "summary unknown",
                with("reasoning", json!({"summary": "long"})),
            ),
            ("not an object", with("reasoning", json!("high"))),
            ("an array", with("reasoning", json!(["high"]))),
        ],
    );
}

#[test]
fn text_format_json_schema_needs_a_name_and_an_object_schema() {
    let format = |f: Value| with("text", json!({"format": f}));
    assert_codes(
        "ok",
        &[
            ("text", format(json!({"type": "text"}))),
            ("json_object", format(json!({"type": "json_object"}))),
            (
                "json_schema",
                format(json!({"type": "json_schema", "name": "n", "schema": {}, "strict": false})),
            ),
        ],
    );
    assert_codes(
        "400",
        &[
            (
                "name empty",
                format(json!({"type": "json_schema", "name": "", "schema": {}})),
            ),
            (
                "schema a string",
                format(json!({"type": "json_schema", "name": "n", "schema": "{}"})),
            ),
            (
                "schema an array",
                format(json!({"type": "json_schema", "name": "n", "schema": []})),
            ),
        ],
    );
    assert_codes(
        "json_parse_error",
        &[
            ("type unknown", format(json!({"type": "yaml"}))),
            (
                "name missing",
                format(json!({"type": "json_schema", "schema": {}})),
            ),
            (
                "schema missing",
                format(json!({"type": "json_schema", "name": "n"})),
            ),
            (
                "strict a string",
                format(json!({"type": "json_schema", "name": "n", "schema": {}, "strict": "yes"})),
            ),
            ("text a string", with("text", json!("json"))),
        ],
    );
}

#[test]
fn flags_are_booleans_and_metadata_an_object_of_strings() {
    assert_codes(
        "json_parse_error",
        &[
            ("store a string", with("store", json!("true"))),
            ("stream a number", with("stream", json!(1))),
            (
                "parallel_tool_calls a string",
                with("parallel_tool_calls", json!("no")),
            ),
            ("metadata an array", with("metadata", json!([]))),
            ("metadata value a number", with("metadata", json!({"k": 1}))),
            ("instructions a number", with("instructions", json!(1))),
            ("user a number", with("user", json!(1))),
            (
                "stream_options a string",
                with("stream_options", json!("x")),
            ),
        ],
    );
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    assert_codes(
        "400",
        &[
            ("17 metadata entries", with("metadata", Value::Object(many))),
            (
                "metadata key too long",
                with("metadata", json!({"k".repeat(65): "v"})),
            ),
            (
                "metadata value too long",
                with("metadata", json!({"k": "v".repeat(513)})),
            ),
        ],
    );
    assert_codes(
        "ok",
        &[
            (
                "background anything",
                with("background", json!([1, {"a": null}])),
            ),
            (
                "unknown field",
                with("service_tier", json!({"any": "thing"})),
            ),
            ("nulls are absent", with("temperature", Value::Null)),
        ],
    );
}

#[test]
fn errors_have_spec_2s_codes_and_shapes() {
    use crate::http::error::Shape;
    let malformed = check(b"{").unwrap_err().spec();
    assert_eq!(
        (malformed.status.as_u16(), malformed.code, malformed.shape),
        (400, "json_parse_error", Shape::ParseError)
    );
    let invalid = check(br#"{"model":"m","input":""}"#).unwrap_err().spec();
    assert_eq!(
        (invalid.status.as_u16(), invalid.code, invalid.shape),
        (400, "400", Shape::RuleBroken)
    );
}

//! A Responses request turned into the chat the gRPC pipeline serves.
//!
//! - `input` becomes items, each with an id (a string is one user message); these are
//!   what `input_items` lists and what the next turn continues from.
//! - The chat's messages: `instructions` as a leading system message, then the context
//!   (the stored items of the chain or conversation) and the input, item by item:
//!   messages keep their role (`developer` is the template's `system`) with their text
//!   parts concatenated in order; `function_call` items become the assistant's
//!   `tool_calls` (a namespace member presented as `<namespace>.<name>`);
//!   `function_call_output` a `tool` message; reasoning and MCP items, which a local
//!   model does not need to see again, are left out. Media are refused with
//!   `convert_request_failed`: the chat pipeline is text-only.
//! - `function` tools and the members of `namespace` tools become the chat's functions;
//!   other tool types (MCP, built-ins) are not offered to the model here.
//! - Sampling: `max_output_tokens`, `temperature`, `top_p` and the sampling extensions
//!   (`top_k`, `min_p`, `repetition_penalty`, the penalties, `stop`); `reasoning.effort`
//!   `none` and `minimal` turn the template's thinking off, the other tiers on.

use serde_json::{json, Map, Value};

use crate::history::{is_storable_id, new_item_id};
use crate::http::error::GatewayError;

/// The request's `input` as items, each given an id when it has none.
pub fn input_items(input: &Value) -> Result<Vec<Value>, GatewayError> {
    let items = match input {
        Value::String(text) => vec![json!({
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })],
        Value::Array(items) => items.clone(),
        _ => return Err(malformed("input must be a string or an array of items")),
    };
    items
        .into_iter()
        .map(|item| {
            let Value::Object(mut item) = item else {
                return Err(malformed("each input item must be an object"));
            };
            let kind = match item.get("type") {
                None => {
                    item.insert("type".into(), Value::String("message".into()));
                    "message".to_owned()
                }
                Some(Value::String(kind)) => kind.clone(),
                Some(_) => return Err(malformed("an input item's type must be a string")),
            };
            if kind == "message" {
                normalise_content(&mut item)?;
            }
            if kind == "item_reference" {
                // Resolving one would read another response's items by id; refused
                // rather than dropped, which left the model without the turn it named.
                return Err(malformed(
                    "item_reference input items are not served: send the item itself",
                ));
            }
            match item.get("id") {
                Some(Value::String(id)) if !is_storable_id(id) => {
                    return Err(malformed(
                        "an input item's id must be 1 to 256 printable ASCII characters",
                    ))
                }
                Some(Value::String(_)) => {}
                _ => {
                    item.insert("id".into(), Value::String(new_item_id(&kind)));
                }
            }
            Ok(Value::Object(item))
        })
        .collect()
}

/// A message's string content as one text part (`input_text`, or `output_text` for the
/// assistant), the shape items are listed in.
fn normalise_content(item: &mut Map<String, Value>) -> Result<(), GatewayError> {
    let role = match item.get("role") {
        Some(Value::String(role)) => role.clone(),
        _ => return Err(malformed("a message item needs a role")),
    };
    if let Some(Value::String(text)) = item.get("content") {
        let part = if role == "assistant" {
            "output_text"
        } else {
            "input_text"
        };
        let text = text.clone();
        item.insert("content".into(), json!([{"type": part, "text": text}]));
    }
    if role == "assistant" && !item.contains_key("status") {
        item.insert("status".into(), Value::String("completed".into()));
    }
    Ok(())
}

/// The chat messages for `instructions`, the context and the input items.
pub fn messages(
    instructions: Option<&str>,
    context: &[Value],
    input: &[Value],
) -> Result<Vec<Value>, GatewayError> {
    let mut out: Vec<Value> = Vec::with_capacity(context.len() + input.len() + 1);
    if let Some(text) = instructions {
        out.push(json!({"role": "system", "content": text}));
    }
    for item in context.iter().chain(input) {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some("developer") => "system",
                    Some(role) => role,
                    None => return Err(malformed("a message item needs a role")),
                };
                let text = text_of(item.get("content"), "message content")?;
                out.push(json!({"role": role, "content": text}));
            }
            "function_call" => {
                let call_id = str_field(item, "call_id")?;
                let name = str_field(item, "name")?;
                let name = match item.get("namespace").and_then(Value::as_str) {
                    Some(namespace) => format!("{namespace}.{name}"),
                    None => name.to_owned(),
                };
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}");
                let call = json!({"id": call_id, "type": "function",
                                  "function": {"name": name, "arguments": arguments}});
                // Calls of one turn are one assistant message.
                match out.last_mut() {
                    Some(Value::Object(last))
                        if last.get("role").and_then(Value::as_str) == Some("assistant")
                            && last.contains_key("tool_calls") =>
                    {
                        if let Some(Value::Array(calls)) = last.get_mut("tool_calls") {
                            calls.push(call);
                        }
                    }
                    _ => out.push(json!({"role": "assistant", "content": "",
                                         "tool_calls": [call]})),
                }
            }
            "function_call_output" => {
                let call_id = str_field(item, "call_id")?;
                let output = text_of(item.get("output"), "function_call_output output")?;
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            // An MCP call the gateway ran: the call and what the model was told of it.
            "mcp_call" => {
                let id = item.get("id").and_then(Value::as_str).unwrap_or("mcp");
                let name = str_field(item, "name")?;
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}");
                let output = match item.get("output").and_then(Value::as_str) {
                    Some(output) => output.to_owned(),
                    None => format!("error: {}", item.get("error").unwrap_or(&Value::Null)),
                };
                out.push(json!({"role": "assistant", "content": "", "tool_calls": [
                    {"id": id, "type": "function",
                     "function": {"name": name, "arguments": arguments}}]}));
                out.push(json!({"role": "tool", "tool_call_id": id, "content": output}));
            }
            // Reasoning, MCP listings, references: not shown to the model again.
            _ => {}
        }
    }
    Ok(out)
}

/// The text of a content value: a string, or text parts concatenated in order; media
/// cannot be shown to a text-only pipeline.
fn text_of(content: Option<&Value>, what: &str) -> Result<String, GatewayError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
                match kind {
                    "input_text" | "output_text" | "text" | "refusal" => {
                        let piece = part
                            .get("text")
                            .or_else(|| part.get("refusal"))
                            .and_then(Value::as_str)
                            .unwrap_or("");
                        text.push_str(piece);
                    }
                    _ => {
                        return Err(GatewayError::ConvertRequestFailed {
                            message: format!(
                                "{what}: {kind:?} parts cannot be sent to gRPC workers, \
                                 which take text only"
                            ),
                        })
                    }
                }
            }
            Ok(text)
        }
        Some(_) => Err(malformed(&format!("{what} must be a string or an array"))),
    }
}

fn str_field<'a>(item: &'a Value, field: &str) -> Result<&'a str, GatewayError> {
    item.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(&format!("an input item lacks its {field}")))
}

/// The chat's functions: `function` tools and the members of `namespace` tools
/// (`<namespace>.<name>`); other tool types are not the model's to call here.
pub fn functions(tools: Option<&Value>) -> Vec<Value> {
    let mut out = Vec::new();
    let Some(Value::Array(tools)) = tools else {
        return out;
    };
    for tool in tools {
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => out.push(function(tool, None)),
            Some("namespace") => {
                let namespace = tool.get("name").and_then(Value::as_str);
                if let Some(Value::Array(members)) = tool.get("tools") {
                    for member in members {
                        if member.get("type").and_then(Value::as_str) == Some("function") {
                            out.push(function(member, namespace));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn function(tool: &Value, namespace: Option<&str>) -> Value {
    let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
    let name = match namespace {
        Some(namespace) => format!("{namespace}.{name}"),
        None => name.to_owned(),
    };
    let mut function = Map::new();
    function.insert("name".into(), Value::String(name));
    for field in ["description", "parameters", "strict"] {
        if let Some(value) = tool.get(field).filter(|v| !v.is_null()) {
            function.insert(field.into(), value.clone());
        }
    }
    json!({"type": "function", "function": function})
}

/// The chat's `tool_choice` for the request's: `auto`, `none` and `required` as they
/// are, a function (with its namespace) by name; others (`allowed_tools`, MCP, built-ins)
/// leave the choice to the model.
pub fn tool_choice(choice: Option<&Value>, offered: bool) -> Value {
    if !offered {
        return Value::String("none".into());
    }
    match choice {
        Some(Value::String(mode)) if matches!(mode.as_str(), "auto" | "none" | "required") => {
            Value::String(mode.clone())
        }
        Some(Value::Object(choice))
            if choice.get("type").and_then(Value::as_str) == Some("function") =>
        {
            let name = choice.get("name").and_then(Value::as_str).unwrap_or("");
            let name = match choice.get("namespace").and_then(Value::as_str) {
                Some(namespace) => format!("{namespace}.{name}"),
                None => name.to_owned(),
            };
            json!({"type": "function", "function": {"name": name}})
        }
        _ => Value::String("auto".into()),
    }
}

/// The chat body for one model turn; `extra` are further functions (the MCP tools').
pub fn chat_body(request: &Map<String, Value>, messages: Vec<Value>, extra: Vec<Value>) -> Value {
    let mut body = Map::new();
    if let Some(model) = request.get("model") {
        body.insert("model".into(), model.clone());
    }
    body.insert("messages".into(), Value::Array(messages));
    let mut functions = functions(request.get("tools"));
    functions.extend(extra);
    let offered = !functions.is_empty();
    body.insert(
        "tool_choice".into(),
        tool_choice(request.get("tool_choice"), offered),
    );
    if offered {
        body.insert("tools".into(), Value::Array(functions));
    }
    if let Some(max) = request.get("max_output_tokens").filter(|v| !v.is_null()) {
        body.insert("max_tokens".into(), max.clone());
    }
    for field in [
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "frequency_penalty",
        "presence_penalty",
        "stop",
        "parallel_tool_calls",
    ] {
        if let Some(value) = request.get(field).filter(|v| !v.is_null()) {
            body.insert(field.into(), value.clone());
        }
    }
    if let Some(effort) = request
        .get("reasoning")
        .filter(|r| r.is_object())
        .map(|r| r.get("effort").and_then(Value::as_str).unwrap_or("medium"))
    {
        let thinking = !matches!(effort, "none" | "minimal");
        body.insert(
            "chat_template_kwargs".into(),
            json!({"enable_thinking": thinking, "thinking": thinking,
                   "reasoning_effort": effort}),
        );
    }
    Value::Object(body)
}

fn malformed(message: &str) -> GatewayError {
    GatewayError::InvalidRequest {
        message: message.to_owned(),
    }
}

/// The length of `value` written as JSON, counted without writing it anywhere.
pub fn json_len(value: &Value) -> usize {
    /// Counts the bytes written to it.
    struct Counted(usize);
    impl std::io::Write for Counted {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counted = Counted(0);
    // Writing a `Value` to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counted, value);
    counted.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_item_id_that_cannot_be_stored_is_refused() {
        for id in ["msg_\u{0}", "msg 1", &"m".repeat(257)] {
            let input = json!([{"type": "message", "role": "user", "content": "hi", "id": id}]);
            let err = input_items(&input).unwrap_err();
            assert_eq!(err.status(), http::StatusCode::BAD_REQUEST, "{id:?}");
        }
        let input = json!([{"type": "message", "role": "user", "content": "hi", "id": "msg_1"}]);
        assert_eq!(input_items(&input).unwrap()[0]["id"], "msg_1");
    }

    #[test]
    fn a_string_input_is_one_user_message_with_an_id() {
        let items = input_items(&json!("hi")).unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["role"], "user");
        assert_eq!(items[0]["content"][0]["type"], "input_text");
        assert!(items[0]["id"].as_str().unwrap().starts_with("msg_"));
    }

    #[test]
    fn calls_and_outputs_become_tool_turns() {
        let input = input_items(&json!([
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": "c1", "name": "get", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "f", "namespace": "ns",
             "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": ""},
        ]))
        .unwrap();
        let chat = messages(Some("be brief"), &[], &input).unwrap();
        assert_eq!(chat[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(chat[2]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(chat[2]["tool_calls"][1]["function"]["name"], "ns.f");
        assert_eq!(
            chat[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": ""})
        );
    }

    #[test]
    fn media_is_refused() {
        let input = input_items(&json!([{"role": "user", "content": [
            {"type": "input_image", "image_url": "http://x/y.png"}]}]))
        .unwrap();
        assert!(matches!(
            messages(None, &[], &input),
            Err(GatewayError::ConvertRequestFailed { .. })
        ));
    }

    #[test]
    fn namespaces_are_flattened_and_choices_mapped() {
        let request = json!({"model": "m", "tools": [
            {"type": "function", "name": "a.b", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
            {"type": "mcp", "server_label": "x", "server_url": "http://x"}],
            "tool_choice": {"type": "function", "name": "f", "namespace": "ns"},
            "reasoning": {"effort": "minimal"}, "max_output_tokens": 5});
        let body = chat_body(request.as_object().unwrap(), vec![], vec![]);
        assert_eq!(body["tools"][0]["function"]["name"], "a.b");
        assert_eq!(body["tools"][1]["function"]["name"], "ns.f");
        assert_eq!(body["tools"].as_array().unwrap().len(), 2);
        assert_eq!(body["tool_choice"]["function"]["name"], "ns.f");
        assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
        assert_eq!(body["max_tokens"], 5);
    }
}

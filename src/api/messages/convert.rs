//! A Messages body read and converted into the chat [`Ask`] the gRPC pipeline serves.
//!
//! - `system` (a string or text blocks) becomes a leading system message; a system-role
//!   message inside `messages` keeps its place.
//! - user turns: text blocks (and the text of `document` and `search_result` blocks)
//!   become the message's text parts; each `tool_result` becomes a `tool` message with
//!   its `tool_call_id`, placed where it was among the user's blocks. Images are refused:
//!   the chat pipeline is text-only.
//! - assistant turns: text becomes `content`, `thinking` becomes `reasoning_content`,
//!   `tool_use` becomes `tool_calls` whose `arguments` are the JSON of `input`.
//! - blocks that mean nothing to a local model (`redacted_thinking`, the server tools'
//!   blocks, `tool_reference`) are dropped; a type outside spec 2's list is refused.
//! - custom tools (`input_schema`) become functions for the template and the tool-call
//!   parser; other tool types are dropped. `tool_choice` maps onto the chat's, so `any`
//!   and `tool` are enforced by constrained decoding as on the chat route.
//! - `thinking` enabled or adaptive turns the template's thinking on (`enable_thinking`,
//!   and DeepSeek's `thinking`), disabled turns it off; absent leaves the template's
//!   default.
//!
//! Refusals follow spec 2's Messages errors: a body that is not JSON or lacks a required
//! field or has one of the wrong type is [`GatewayError::MessagesMalformed`]; a broken rule is
//! [`GatewayError::MessagesInvalid`].

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::generation::ask::{self as request, Api, Ask, Input, Invalid, Stop, ToolChoice};
use crate::http::error::GatewayError;

/// Block types spec 2 accepts; any other is refused.
const BLOCK_TYPES: [&str; 12] = [
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "search_result",
    "web_search_tool_result",
    "tool_search_tool_result",
    "tool_reference",
];

/// The fields of a Messages body the gRPC path reads; `metadata`, `service_tier`,
/// `container`, `mcp_servers` and anything else are not the engine's business.
#[derive(Deserialize)]
struct Body {
    model: String,
    messages: Vec<Turn>,
    max_tokens: u32,
    system: Option<Content>,
    #[serde(default)]
    stream: bool,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    stop_sequences: Option<Vec<String>>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Choice>,
    thinking: Option<Thinking>,
}

#[derive(Deserialize)]
struct Turn {
    role: Role,
    content: Content,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
    System,
}

/// A string, or content blocks (read one by one, so an unknown type is a rule broken
/// rather than a body that does not parse).
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text {
        text: String,
    },
    Image {},
    Document {
        source: Value,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        content: Option<Content>,
    },
    Thinking {
        thinking: String,
    },
    RedactedThinking {},
    ServerToolUse {},
    SearchResult {
        content: Vec<Value>,
    },
    WebSearchToolResult {},
    ToolSearchToolResult {},
    ToolReference {},
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Choice {
    Auto {},
    Any {},
    Tool { name: String },
    None {},
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Thinking {
    Enabled {},
    Adaptive {},
    Disabled {},
}

/// A custom tool: `type` absent or `custom`.
#[derive(Deserialize)]
struct CustomTool {
    name: String,
    description: Option<String>,
    input_schema: Map<String, Value>,
}

fn parse_error(message: impl Into<String>) -> GatewayError {
    GatewayError::MessagesMalformed {
        message: message.into(),
    }
}

fn rule(message: impl Into<String>) -> GatewayError {
    GatewayError::MessagesInvalid {
        message: message.into(),
    }
}

/// `value` read as `T`, a mismatch being a body that does not parse; `at` says where.
fn read<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, GatewayError> {
    serde_json::from_value(value).map_err(|e| parse_error(format!("{at}: {e}")))
}

/// Reads a Messages body into the chat request the pipeline serves.
pub fn ask(body: &[u8]) -> Result<Ask, GatewayError> {
    let body: Body = serde_json::from_slice(body)
        .map_err(|e| parse_error(format!("invalid request body: {e}")))?;
    if body.model.is_empty() {
        return Err(rule("model must not be empty"));
    }
    if body.max_tokens == 0 {
        return Err(rule("max_tokens must be at least 1"));
    }
    if body.messages.is_empty() {
        return Err(rule("messages must hold at least one message"));
    }
    let declared = body.tools.as_ref().is_some_and(|t| !t.is_empty());
    let (tool_choice, only) = match body.tool_choice {
        None if declared => (ToolChoice::Auto, None),
        None | Some(Choice::None {}) => (ToolChoice::None, None),
        Some(_) if !declared => return Err(rule("tool_choice requires tools")),
        Some(Choice::Auto {}) => (ToolChoice::Auto, None),
        Some(Choice::Any {}) => (ToolChoice::Required, None),
        Some(Choice::Tool { name }) => (ToolChoice::Named(name.clone()), Some(name)),
    };
    let functions = functions(body.tools.unwrap_or_default(), only.as_deref())?;
    if let (Some(name), true) = (&only, functions.is_empty()) {
        return Err(rule(format!(
            "tool_choice names {name:?}, which is not among the custom tools"
        )));
    }
    if tool_choice == ToolChoice::Required && functions.is_empty() {
        return Err(rule("tool_choice any needs at least one custom tool"));
    }
    let tools = (!functions.is_empty()).then(|| Value::Array(functions));
    let specs = match &tools {
        Some(tools) => request::tool_specs(tools).map_err(|Invalid(m)| rule(m))?,
        None => Vec::new(),
    };
    let tool_choice = if specs.is_empty() {
        ToolChoice::None
    } else {
        tool_choice
    };

    let mut messages = Vec::with_capacity(body.messages.len() + 1);
    if let Some(system) = body.system {
        messages.push(json!({"role": "system", "content": text_of(system, "system")?}));
    }
    for (at, turn) in body.messages.into_iter().enumerate() {
        convert_turn(turn, at, &mut messages)?;
    }

    let thinking = body.thinking.map(|t| !matches!(t, Thinking::Disabled {}));
    let kwargs = thinking.map(|on| {
        let mut kwargs = Map::new();
        kwargs.insert("enable_thinking".into(), Value::Bool(on));
        kwargs.insert("thinking".into(), Value::Bool(on));
        kwargs
    });
    let stops = request::stop_strings(body.stop_sequences.map(Stop::Many))
        .map_err(|Invalid(m)| rule(m.replacen("stop ", "stop_sequences ", 1)))?;
    let sampling = request::sampling(body.temperature, body.top_p, body.top_k)
        .map_err(|Invalid(m)| rule(m))?;
    Ok(Ask {
        route: Api::Messages,
        model: Some(body.model),
        input: Input::Chat {
            messages: Value::Array(messages),
            tools,
            add_generation_prompt: true,
            kwargs,
        },
        stream: body.stream,
        include_usage: false,
        max_tokens: Some(body.max_tokens),
        stops,
        visible_stops: false,
        stop_token_ids: Vec::new(),
        skip_special_tokens: true,
        ignore_eos: false,
        sampling,
        n: 1,
        logprobs: None,
        tools: specs.into(),
        tool_choice,
        thinking: thinking.unwrap_or(true),
        opened_by_prompt: false,
        schema: None,
    }
    .with_schema())
}

/// The custom tools as the chat's functions (`only`: the one `tool_choice` names); other
/// tool types are dropped.
fn functions(tools: Vec<Value>, only: Option<&str>) -> Result<Vec<Value>, GatewayError> {
    let mut functions = Vec::with_capacity(tools.len());
    for (at, tool) in tools.into_iter().enumerate() {
        let custom = match tool.get("type") {
            None | Some(Value::Null) => true,
            Some(kind) => kind.as_str() == Some("custom"),
        };
        if !custom {
            continue;
        }
        let tool: CustomTool = read(tool, &format!("tools[{at}]"))?;
        if only.is_some_and(|name| name != tool.name) {
            continue;
        }
        let mut function = Map::new();
        function.insert("name".into(), Value::String(tool.name));
        if let Some(description) = tool.description {
            function.insert("description".into(), Value::String(description));
        }
        function.insert("parameters".into(), Value::Object(tool.input_schema));
        functions.push(json!({"type": "function", "function": function}));
    }
    Ok(functions)
}

/// The text of a `system` field or a system-role message: a string, or text blocks
/// joined by newlines.
fn text_of(content: Content, at: &str) -> Result<String, GatewayError> {
    match content {
        Content::Text(text) => Ok(text),
        Content::Blocks(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, block) in blocks.into_iter().enumerate() {
                match block_of(block, &format!("{at}[{i}]"))? {
                    Block::Text { text } => texts.push(text),
                    _ => return Err(rule(format!("{at}[{i}] must be a text block"))),
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

/// One block, its type checked against spec 2's list before its fields are read.
fn block_of(block: Value, at: &str) -> Result<Block, GatewayError> {
    let kind = block
        .get("type")
        .ok_or_else(|| parse_error(format!("{at}: missing field `type`")))?
        .as_str()
        .ok_or_else(|| parse_error(format!("{at}.type must be a string")))?;
    if !BLOCK_TYPES.contains(&kind) {
        return Err(rule(format!("{at}: unknown content block type {kind:?}")));
    }
    read(block, at)
}

/// Appends the chat messages `turn` becomes.
fn convert_turn(turn: Turn, at: usize, out: &mut Vec<Value>) -> Result<(), GatewayError> {
    let at = format!("messages[{at}].content");
    let blocks = match (turn.role, turn.content) {
        (Role::System, content) => {
            out.push(json!({"role": "system", "content": text_of(content, &at)?}));
            return Ok(());
        }
        (role, Content::Text(text)) => {
            out.push(json!({"role": role_name(role), "content": text}));
            return Ok(());
        }
        (_, Content::Blocks(blocks)) => blocks,
    };
    let mut parsed = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.into_iter().enumerate() {
        parsed.push(block_of(block, &format!("{at}[{i}]"))?);
    }
    match turn.role {
        Role::Assistant => out.push(assistant(parsed, &at)?),
        _ => user(parsed, &at, out)?,
    }
    Ok(())
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System => "system",
    }
}

fn no_images(at: &str) -> GatewayError {
    GatewayError::InvalidRequest {
        message: format!(
            "{at}: image blocks are not supported on gRPC workers: the gateway's chat \
             pipeline is text-only"
        ),
    }
}

/// A user turn: text parts, with each tool result as a `tool` message where it stood.
fn user(blocks: Vec<Block>, at: &str, out: &mut Vec<Value>) -> Result<(), GatewayError> {
    let mut parts: Vec<Value> = Vec::new();
    let flush = |parts: &mut Vec<Value>, out: &mut Vec<Value>| {
        if !parts.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(parts)}));
        }
    };
    for (i, block) in blocks.into_iter().enumerate() {
        let here = format!("{at}[{i}]");
        match block {
            Block::Text { text } => parts.push(json!({"type": "text", "text": text})),
            Block::Document { source } => {
                parts.push(json!({"type": "text", "text": document_text(&source, &here)?}));
            }
            Block::SearchResult { content } => {
                for text in texts(content, &here)? {
                    parts.push(json!({"type": "text", "text": text}));
                }
            }
            Block::ToolResult {
                tool_use_id,
                content,
            } => {
                flush(&mut parts, out);
                let text = match content {
                    None => String::new(),
                    Some(Content::Text(text)) => text,
                    Some(Content::Blocks(blocks)) => texts(blocks, &here)?.join("\n"),
                };
                out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": text}));
            }
            Block::Image {} => return Err(no_images(&here)),
            Block::ToolUse { .. } | Block::Thinking { .. } => {
                return Err(rule(format!(
                    "{here}: tool_use and thinking blocks belong to assistant turns"
                )))
            }
            Block::RedactedThinking {}
            | Block::ServerToolUse {}
            | Block::WebSearchToolResult {}
            | Block::ToolSearchToolResult {}
            | Block::ToolReference {} => {}
        }
    }
    flush(&mut parts, out);
    Ok(())
}

/// The texts of blocks inside a tool result or search result: text blocks only.
fn texts(blocks: Vec<Value>, at: &str) -> Result<Vec<String>, GatewayError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.into_iter().enumerate() {
        let here = format!("{at}.content[{i}]");
        match block_of(block, &here)? {
            Block::Text { text } => texts.push(text),
            Block::Image {} => return Err(no_images(&here)),
            _ => return Err(rule(format!("{here} must be a text block"))),
        }
    }
    Ok(texts)
}

/// A document's text: plain-text sources only (PDFs and URLs need what a text-only
/// pipeline lacks).
fn document_text(source: &Value, at: &str) -> Result<String, GatewayError> {
    match (
        source.get("type").and_then(Value::as_str),
        source.get("data"),
    ) {
        (Some("text"), Some(Value::String(data))) => Ok(data.clone()),
        _ => Err(GatewayError::InvalidRequest {
            message: format!("{at}: only plain-text documents are supported on gRPC workers"),
        }),
    }
}

/// An assistant turn: its text, its thinking and its tool calls, in one message.
fn assistant(blocks: Vec<Block>, at: &str) -> Result<Value, GatewayError> {
    let mut text = Vec::new();
    let mut reasoning = Vec::new();
    let mut calls = Vec::new();
    for (i, block) in blocks.into_iter().enumerate() {
        let here = format!("{at}[{i}]");
        match block {
            Block::Text { text: t } => text.push(t),
            Block::Thinking { thinking } => reasoning.push(thinking),
            Block::ToolUse { id, name, input } => calls.push(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": input.to_string()},
            })),
            Block::Image {} => return Err(no_images(&here)),
            Block::ToolResult { .. } | Block::Document { .. } | Block::SearchResult { .. } => {
                return Err(rule(format!(
                    "{here}: tool_result, document and search_result blocks belong to user turns"
                )))
            }
            Block::RedactedThinking {}
            | Block::ServerToolUse {}
            | Block::WebSearchToolResult {}
            | Block::ToolSearchToolResult {}
            | Block::ToolReference {} => {}
        }
    }
    let mut message = Map::new();
    message.insert("role".into(), Value::String("assistant".into()));
    message.insert("content".into(), Value::String(text.join("\n")));
    if !reasoning.is_empty() {
        message.insert(
            "reasoning_content".into(),
            Value::String(reasoning.join("\n")),
        );
    }
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Value::Object(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: Value) -> Ask {
        match ask(body.to_string().as_bytes()) {
            Ok(ask) => ask,
            Err(err) => panic!("{body} refused: {err}"),
        }
    }

    fn messages_of(ask: &Ask) -> &Value {
        match &ask.input {
            Input::Chat { messages, .. } => messages,
            _ => panic!("not a chat"),
        }
    }

    fn base() -> Value {
        json!({"model": "m", "max_tokens": 16,
               "messages": [{"role": "user", "content": "hi"}]})
    }

    #[test]
    fn system_turns_and_blocks_become_chat_messages() {
        let mut body = base();
        body["system"] =
            json!([{"type": "text", "text": "be brief"}, {"type": "text", "text": "be kind"}]);
        body["messages"] = json!([
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "look it up", "signature": "x"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}},
                {"type": "redacted_thinking", "data": "zzz"}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                {"type": "text", "text": "and tomorrow?"}]},
            {"role": "system", "content": "late rule"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "rain"}]}
        ]);
        let ask = ok(body);
        assert_eq!(
            messages_of(&ask),
            &json!([
                {"role": "system", "content": "be brief\nbe kind"},
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {"role": "assistant", "content": "Checking.", "reasoning_content": "look it up",
                 "tool_calls": [{"id": "toolu_1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
                {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
                {"role": "user", "content": [{"type": "text", "text": "and tomorrow?"}]},
                {"role": "system", "content": "late rule"},
                {"role": "tool", "tool_call_id": "toolu_2", "content": "rain"}
            ])
        );
        assert_eq!(ask.route, Api::Messages);
        assert_eq!(ask.max_tokens, Some(16));
        assert_eq!(ask.tool_choice, ToolChoice::None);
    }

    #[test]
    fn sampling_stops_and_thinking_are_read() {
        let mut body = base();
        body["temperature"] = json!(0.5);
        body["top_p"] = json!(0.9);
        body["top_k"] = json!(20);
        body["stop_sequences"] = json!(["END", ""]);
        body["stream"] = json!(true);
        body["metadata"] = json!({"user_id": "u"});
        body["service_tier"] = json!("auto");
        body["container"] = json!({"id": "c"});
        body["mcp_servers"] = json!([]);
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        let ask = ok(body.clone());
        let s = ask.sampling;
        assert_eq!((s.temperature, s.top_p, s.top_k), (0.5, 0.9, 20));
        assert_eq!(ask.stops, ["END"]);
        assert_eq!(
            ask.sampling_params().stop,
            ["END"],
            "stop strings for the engine too"
        );
        assert!(ask.stream && ask.thinking);
        let Input::Chat { kwargs, .. } = &ask.input else {
            panic!()
        };
        assert_eq!(kwargs.as_ref().unwrap()["enable_thinking"], json!(true));
        body["thinking"] = json!({"type": "disabled"});
        let off = ok(body.clone());
        assert!(!off.thinking);
        body["thinking"] = json!({"type": "adaptive", "display": "omitted"});
        assert!(ok(body.clone()).thinking);
        let plain = ok(base());
        assert!(plain.thinking, "absent: the template's default");
        assert!(matches!(plain.input, Input::Chat { kwargs: None, .. }));
        assert_eq!(plain.sampling.top_k, -1);
    }

    #[test]
    fn tools_and_tool_choice_map_to_the_chat() {
        let mut body = base();
        body["tools"] = json!([
            {"name": "get_weather", "description": "w", "input_schema": {"type": "object"}},
            {"type": "custom", "name": "get_time", "input_schema": {"type": "object"}},
            {"type": "bash_20250124", "name": "bash"},
            {"type": "mcp_toolset", "mcp_server_name": "s"},
            {"type": "web_search_20250305", "name": "web_search"}
        ]);
        let auto = ok(body.clone());
        let names: Vec<&str> = auto.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["get_weather", "get_time"]);
        assert_eq!(auto.tool_choice, ToolChoice::Auto);
        let Input::Chat { tools, .. } = &auto.input else {
            panic!()
        };
        assert_eq!(
            tools.as_ref().unwrap()[0],
            json!({"type": "function", "function": {"name": "get_weather",
                   "description": "w", "parameters": {"type": "object"}}})
        );
        body["tool_choice"] = json!({"type": "any"});
        assert_eq!(ok(body.clone()).tool_choice, ToolChoice::Required);
        body["tool_choice"] = json!({"type": "none"});
        assert_eq!(ok(body.clone()).tool_choice, ToolChoice::None);
        body["tool_choice"] = json!({"type": "tool", "name": "get_time"});
        let named = ok(body.clone());
        assert_eq!(named.tool_choice, ToolChoice::Named("get_time".into()));
        assert_eq!(named.tools.len(), 1, "only the named tool");
        assert!(named.schema.is_some(), "enforced by constrained decoding");
    }

    fn refused(body: Value) -> GatewayError {
        match ask(body.to_string().as_bytes()) {
            Ok(_) => panic!("{body} accepted"),
            Err(err) => err,
        }
    }

    #[test]
    fn missing_or_mistyped_fields_are_parse_errors() {
        let mut cases = Vec::new();
        for field in ["model", "messages", "max_tokens"] {
            let mut body = base();
            body.as_object_mut().unwrap().remove(field);
            cases.push(body);
        }
        for (field, value) in [
            ("max_tokens", json!("ten")),
            ("max_tokens", json!(-1)),
            ("messages", json!("hi")),
            ("system", json!(5)),
            ("stop_sequences", json!("END")),
            ("tool_choice", json!({"type": "sometimes"})),
            ("thinking", json!({"type": "maybe"})),
        ] {
            let mut body = base();
            body[field] = value;
            cases.push(body);
        }
        let mut body = base();
        body["messages"] = json!([{"role": "user", "content": [{"type": "text"}]}]);
        cases.push(body);
        for body in cases {
            assert!(
                matches!(
                    refused(body.clone()),
                    GatewayError::MessagesMalformed { .. }
                ),
                "{body}"
            );
        }
        assert!(matches!(
            ask(b"{not json"),
            Err(GatewayError::MessagesMalformed { .. })
        ));
    }

    #[test]
    fn broken_rules_are_validation_failures() {
        let mut cases = Vec::new();
        let mut body = base();
        body["max_tokens"] = json!(0);
        cases.push(body);
        let mut body = base();
        body["messages"] = json!([]);
        cases.push(body);
        let mut body = base();
        body["model"] = json!("");
        cases.push(body);
        let mut body = base();
        body["tool_choice"] = json!({"type": "auto"});
        cases.push(body);
        let mut body = base();
        body["tools"] = json!([{"name": "a", "input_schema": {}}]);
        body["tool_choice"] = json!({"type": "tool", "name": "b"});
        cases.push(body);
        for kind in ["mcp_tool_use", "mcp_tool_result", "video"] {
            let mut body = base();
            body["messages"] = json!([{"role": "user", "content": [{"type": kind}]}]);
            cases.push(body);
        }
        for body in cases {
            assert!(
                matches!(refused(body.clone()), GatewayError::MessagesInvalid { .. }),
                "{body}"
            );
        }
    }

    #[test]
    fn documents_and_search_results_are_text_and_server_blocks_are_dropped() {
        let mut body = base();
        body["messages"] = json!([
            {"role": "user", "content": [
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "the doc"}},
                {"type": "search_result", "source": "s", "title": "t",
                 "content": [{"type": "text", "text": "found"}]},
                {"type": "web_search_tool_result", "tool_use_id": "x", "content": []}]},
            {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "x", "name": "web_search", "input": {}},
                {"type": "text", "text": "ok"}]}
        ]);
        assert_eq!(
            messages_of(&ok(body.clone())),
            &json!([
                {"role": "user", "content": [{"type": "text", "text": "the doc"},
                                             {"type": "text", "text": "found"}]},
                {"role": "assistant", "content": "ok"}
            ])
        );
        body["messages"][0]["content"][0]["source"] = json!({"type": "base64",
            "media_type": "application/pdf", "data": "AA=="});
        assert!(matches!(refused(body), GatewayError::InvalidRequest { .. }));
    }

    #[test]
    fn images_are_refused_clearly() {
        let mut body = base();
        body["messages"] = json!([{"role": "user", "content": [{"type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]);
        let GatewayError::InvalidRequest { message } = refused(body) else {
            panic!("not an invalid request")
        };
        assert!(message.contains("text-only"), "{message}");
    }
}

//! Responses requests (`POST /v1/responses`) checked before routing (spec 2, "Responses
//! request", "Errors", "Limits"), on every backend: a broken request never reaches a worker.
//!
//! [`check`] parses the body once into borrowed types ([`schema`]) that keep only what a
//! rule needs, and hands back a small summary ([`Checked`]) that the execution path reads
//! instead of parsing again. What goes to a worker is the client's own bytes: unmodelled
//! fields stay as written, numbers keep the client's spelling, and only the model's value is
//! replaced when it names a `--model-alias` ([`Checked::renamed`]).
//!
//! Which error (spec 2: `invalid_request_error`, status 400 for both):
//! - code `json_parse_error` ([`GatewayError::ResponsesMalformed`]): the body is not JSON,
//!   a required field is missing, or a field has the wrong JSON type or a value outside a
//!   closed set (an unknown `reasoning.effort`, as spec 2 says; an unknown item, tool or
//!   `tool_choice` type; a namespace member that is not a function or custom tool);
//! - code `400` ([`GatewayError::ResponsesInvalid`]): the body parses but a value is out of
//!   range or two fields disagree (spec 2's examples: a conversation ID not starting with
//!   `conv_`, both `previous_response_id` and `conversation`). An empty `input` string,
//!   an empty `text.format.name` and an MCP `server_label` that is empty or badly formed
//!   are values out of range, so 400 as well.

mod schema;

use std::borrow::Cow;
use std::ops::Range;

use bytes::{Bytes, BytesMut};

use crate::http::error::GatewayError;
use schema::{Choice, FormatType, Input, Mode, Request, Tool, ToolChoice, BUILT_IN_TOOLS};

/// Highest `top_logprobs` (spec 2, "Limits").
const MAX_TOP_LOGPROBS: i64 = 20;
/// The `include` entry `top_logprobs` needs.
const LOGPROBS_INCLUDE: &str = "message.output_text.logprobs";
/// OpenAI's limits on `metadata`: entries, key length, value length (characters).
const METADATA_ENTRIES: usize = 16;
const METADATA_KEY_CHARS: usize = 64;
const METADATA_VALUE_CHARS: usize = 512;

/// What the rest of the gateway needs of a request that passed, borrowed from the body.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked<'a> {
    /// The model the client named (an alias not yet resolved).
    pub model: Cow<'a, str>,
    /// `stream`, default false.
    pub stream: bool,
    /// `store`, default true.
    pub store: bool,
    pub previous_response_id: Option<Cow<'a, str>>,
    /// The conversation ID, from either spelling (`"conv_..."` or `{id}`).
    pub conversation: Option<Cow<'a, str>>,
    /// Where the model's JSON string sits in the body, and the body's length: what
    /// [`Checked::renamed`] replaces, and its proof that it was given the same body.
    model_span: Range<usize>,
    body_len: usize,
}

/// Checks a `/v1/responses` body against spec 2's rules.
pub fn check(body: &[u8]) -> Result<Checked<'_>, GatewayError> {
    // serde reads a struct from a JSON array too (fields by position): only an object is a
    // request.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return Err(malformed(
            "the request body must be a JSON object".to_owned(),
        ));
    }
    let request: Request<'_> = serde_json::from_slice(body)
        .map_err(|err| malformed(format!("invalid request body: {err}")))?;
    let model: Cow<'_, str> = serde_json::from_str(request.model.get())
        .map_err(|_| malformed("`model` must be a string".to_owned()))?;
    shapes(&request)?;
    rules(&request)?;
    let raw = request.model.get();
    // `raw` borrows from `body` (serde_json's RawValue over the slice): its offset is the
    // distance between the two addresses.
    let start = (raw.as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    Ok(Checked {
        model,
        stream: request.stream.unwrap_or(false),
        store: request.store.unwrap_or(true),
        previous_response_id: request.previous_response_id,
        conversation: request.conversation.map(|c| c.0),
        model_span: start..start + raw.len(),
        body_len: body.len(),
    })
}

impl Checked<'_> {
    /// `body` (the bytes given to [`check`]) with the model renamed to its canonical ID when
    /// it names an alias (`aliases`: alias, canonical); `None` when nothing changes. Every
    /// other byte is the client's.
    pub fn renamed(&self, body: &[u8], aliases: &[(String, String)]) -> Option<Bytes> {
        let (_, canonical) = aliases.iter().find(|(alias, _)| *alias == *self.model)?;
        if body.len() != self.body_len {
            return None;
        }
        let before = body.get(..self.model_span.start)?;
        let after = body.get(self.model_span.end..)?;
        let name = serde_json::to_string(canonical).ok()?;
        let mut out = BytesMut::with_capacity(before.len() + name.len() + after.len());
        out.extend_from_slice(before);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(after);
        Some(out.freeze())
    }
}

fn malformed(message: String) -> GatewayError {
    GatewayError::ResponsesMalformed { message }
}

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::ResponsesInvalid {
        message: message.into(),
    }
}

/// Required fields and types serde cannot see because they depend on a tool's type.
fn shapes(request: &Request<'_>) -> Result<(), GatewayError> {
    let tools = request.tools.as_deref().unwrap_or_default();
    for (i, schema::Obj(tool)) in tools.iter().enumerate() {
        let needs = |field: &str| malformed(format!("tools[{i}]: missing field `{field}`"));
        match &*tool.kind {
            "function" | "custom" => {
                tool.name.as_ref().ok_or_else(|| needs("name"))?;
                parameters_object(tool.parameters, &format!("tools[{i}]"))?;
            }
            "namespace" => {
                tool.name.as_ref().ok_or_else(|| needs("name"))?;
                let members = tool.tools.as_deref().ok_or_else(|| needs("tools"))?;
                for (j, schema::Obj(member)) in members.iter().enumerate() {
                    parameters_object(member.parameters, &format!("tools[{i}].tools[{j}]"))?;
                }
            }
            "mcp" => {
                tool.server_label
                    .as_ref()
                    .ok_or_else(|| needs("server_label"))?;
            }
            kind if BUILT_IN_TOOLS.contains(&kind) => {}
            kind => return Err(malformed(format!("tools[{i}]: unknown tool type `{kind}`"))),
        }
    }
    if let Some(schema::Obj(text)) = &request.text {
        if let Some(schema::Obj(format)) = &text.format {
            if format.kind == FormatType::JsonSchema {
                if format.name.is_none() {
                    return Err(malformed("text.format: missing field `name`".to_owned()));
                }
                if format.schema.is_none() {
                    return Err(malformed("text.format: missing field `schema`".to_owned()));
                }
            }
        }
    }
    if let Some(metadata) = &request.metadata {
        if metadata.entries > METADATA_ENTRIES {
            return Err(invalid(format!(
                "metadata has {} entries; at most {METADATA_ENTRIES} are allowed",
                metadata.entries
            )));
        }
        if metadata.longest_key > METADATA_KEY_CHARS {
            return Err(invalid(format!(
                "a metadata key is longer than {METADATA_KEY_CHARS} characters"
            )));
        }
        if metadata.longest_value > METADATA_VALUE_CHARS {
            return Err(invalid(format!(
                "a metadata value is longer than {METADATA_VALUE_CHARS} characters"
            )));
        }
    }
    Ok(())
}

/// A function's `parameters`, when given, is a JSON Schema: an object.
fn parameters_object(
    parameters: Option<&serde_json::value::RawValue>,
    at: &str,
) -> Result<(), GatewayError> {
    match parameters {
        Some(raw) if !raw.get().starts_with('{') => Err(malformed(format!(
            "{at}: `parameters` must be a JSON Schema object"
        ))),
        _ => Ok(()),
    }
}

/// Spec 2's rules for a body of the right shape: ranges and fields that depend on others.
fn rules(request: &Request<'_>) -> Result<(), GatewayError> {
    match request.input {
        Input::Text { empty: true } => return Err(invalid("input must not be empty")),
        Input::Items { count: 0, .. } => {
            return Err(invalid("input must hold at least one item"));
        }
        // Spec 2: "an array holds at least one message" — for a request that starts a
        // conversation. One that continues a stored response or a conversation may send
        // only the outputs of the calls the model made (the OpenAI SDK's tool round trip).
        Input::Items { messages: 0, .. }
            if request.previous_response_id.is_none() && request.conversation.is_none() =>
        {
            return Err(invalid(
                "input items must contain at least one message, unless the request \
                 continues a previous_response_id or a conversation",
            ));
        }
        _ => {}
    }
    if request.max_output_tokens.is_some_and(|n| n < 1) {
        return Err(invalid("max_output_tokens must be at least 1"));
    }
    if request.max_tool_calls.is_some_and(|n| n < 1) {
        return Err(invalid("max_tool_calls must be at least 1"));
    }
    if request
        .temperature
        .is_some_and(|t| !(0.0..=2.0).contains(&t))
    {
        return Err(invalid("temperature must be between 0 and 2"));
    }
    if request.top_p.is_some_and(|p| p <= 0.0 || p > 1.0) {
        return Err(invalid("top_p must be greater than 0 and at most 1"));
    }
    if let Some(n) = request.top_logprobs {
        if !(0..=MAX_TOP_LOGPROBS).contains(&n) {
            return Err(invalid(format!(
                "top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}"
            )));
        }
        let includes = request.include.as_deref().unwrap_or_default();
        if !includes.iter().any(|i| i == LOGPROBS_INCLUDE) {
            return Err(invalid(format!(
                "top_logprobs requires `{LOGPROBS_INCLUDE}` in include"
            )));
        }
    }
    if request.previous_response_id.is_some() && request.conversation.is_some() {
        return Err(invalid(
            "previous_response_id and conversation are mutually exclusive: provide only one",
        ));
    }
    if let Some(conversation) = &request.conversation {
        conversation_id(&conversation.0)?;
    }
    if let Some(schema::Obj(text)) = &request.text {
        if let Some(schema::Obj(format)) = &text.format {
            if format.name.as_deref() == Some("") {
                return Err(invalid("text.format.name must not be empty"));
            }
            if format.schema.is_some_and(|s| !s.get().starts_with('{')) {
                return Err(invalid("text.format.schema must be a JSON object"));
            }
        }
    }
    let tools: Vec<&Tool<'_>> = request
        .tools
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|t| &t.0)
        .collect();
    tool_rules(&tools)?;
    if let Some(choice) = &request.tool_choice {
        tool_choice_rules(choice, &tools)?;
    }
    Ok(())
}

/// A conversation ID: `conv_` and then letters, digits, `_` or `-` (OpenAI's rule).
fn conversation_id(id: &str) -> Result<(), GatewayError> {
    if !id.starts_with("conv_") {
        return Err(invalid(format!(
            "invalid conversation: `{}`; an ID begins with `conv_`",
            shown(id)
        )));
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(invalid(format!(
            "invalid conversation: `{}`; an ID holds only letters, digits, `_` and `-`",
            shown(id)
        )));
    }
    Ok(())
}

/// A client's string as shown in a message: at most 64 characters of it, so an error stays
/// short whatever was sent.
fn shown(value: &str) -> Cow<'_, str> {
    match value.char_indices().nth(64) {
        Some((cut, _)) => Cow::Owned(format!("{}...", value.get(..cut).unwrap_or_default())),
        None => Cow::Borrowed(value),
    }
}

/// Rules of the tools themselves: names not empty, MCP labels well formed and unique
/// (ignoring case), one MCP target at most.
fn tool_rules(tools: &[&Tool<'_>]) -> Result<(), GatewayError> {
    let mut labels: Vec<String> = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        if tool.name.as_deref() == Some("") && tool.kind != "mcp" {
            return Err(invalid(format!("tools[{i}].name must not be empty")));
        }
        let members = tool.tools.as_deref().unwrap_or_default();
        if members.iter().any(|m| m.0.name.is_empty()) {
            return Err(invalid(format!(
                "tools[{i}]: a namespace member's name must not be empty"
            )));
        }
        let Some(label) = tool.server_label.as_deref().filter(|_| tool.kind == "mcp") else {
            continue;
        };
        if label.is_empty() {
            return Err(invalid(format!(
                "tools[{i}].server_label must not be empty"
            )));
        }
        let well_formed = label.starts_with(|c: char| c.is_ascii_alphabetic())
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !well_formed {
            return Err(invalid(format!(
                "tools[{i}].server_label `{}` must start with a letter and hold only letters, \
                 digits, `-` and `_`",
                shown(label)
            )));
        }
        let folded = label.to_ascii_lowercase();
        if labels.contains(&folded) {
            return Err(invalid(format!(
                "tools[{i}]: server_label `{label}` is used twice (labels are compared \
                 ignoring case)"
            )));
        }
        labels.push(folded);
        if tool.server_url.is_some() && tool.connector_id.is_some() {
            return Err(invalid(format!(
                "tools[{i}] ({label}) sets both server_url and connector_id; give one"
            )));
        }
    }
    Ok(())
}

/// `tool_choice` against `tools`: anything but `none` needs tools, and what it names must
/// be declared.
fn tool_choice_rules(choice: &ToolChoice<'_>, tools: &[&Tool<'_>]) -> Result<(), GatewayError> {
    if matches!(choice, ToolChoice::Mode(Mode::None)) {
        return Ok(());
    }
    if tools.is_empty() {
        return Err(invalid("tool_choice is only allowed when tools are given"));
    }
    let ToolChoice::Object(choice) = choice else {
        return Ok(());
    };
    named_tool(choice, tools, "tool_choice")?;
    if choice.kind == "allowed_tools" {
        match choice.mode {
            Some(Mode::Auto | Mode::Required) => {}
            _ => {
                return Err(invalid(
                    "tool_choice.mode must be `auto` or `required` for allowed_tools",
                ))
            }
        }
        let Some(allowed) = choice.tools.as_deref() else {
            return Err(malformed("tool_choice: missing field `tools`".to_owned()));
        };
        for (i, schema::Obj(entry)) in allowed.iter().enumerate() {
            named_tool(entry, tools, &format!("tool_choice.tools[{i}]"))?;
        }
    }
    Ok(())
}

/// The tool an object choice (or an `allowed_tools` entry) names, which must be declared:
/// a function (in its namespace when one is given), a custom tool, an MCP server by label;
/// a built-in by its type alone.
fn named_tool(choice: &Choice<'_>, tools: &[&Tool<'_>], at: &str) -> Result<(), GatewayError> {
    let needs = |field: &str| malformed(format!("{at}: missing field `{field}`"));
    match &*choice.kind {
        "function" | "custom" => {
            let name = choice.name.as_deref().ok_or_else(|| needs("name"))?;
            let declared = match choice.namespace.as_deref() {
                Some(namespace) => tools
                    .iter()
                    .filter(|t| t.kind == "namespace" && t.name.as_deref() == Some(namespace))
                    .flat_map(|t| t.tools.as_deref().unwrap_or_default())
                    .any(|m| m.0.name == name && member_kind_is(&choice.kind, m.0.kind)),
                None => tools
                    .iter()
                    .any(|t| t.kind == choice.kind && t.name.as_deref() == Some(name)),
            };
            if !declared {
                let place = choice
                    .namespace
                    .as_deref()
                    .map_or(String::new(), |ns| format!(" in namespace `{}`", shown(ns)));
                return Err(invalid(format!(
                    "{at} names {} `{}`{place}, which is not in tools",
                    choice.kind,
                    shown(name)
                )));
            }
        }
        "mcp" => {
            let label = choice
                .server_label
                .as_deref()
                .ok_or_else(|| needs("server_label"))?;
            let declared = tools.iter().any(|t| {
                t.kind == "mcp"
                    && t.server_label
                        .as_deref()
                        .is_some_and(|l| l.eq_ignore_ascii_case(label))
            });
            if !declared {
                return Err(invalid(format!(
                    "{at} names MCP server `{}`, which no mcp tool declares",
                    shown(label)
                )));
            }
        }
        "allowed_tools" if at == "tool_choice" => {}
        kind if BUILT_IN_TOOLS.contains(&kind) => {}
        kind => return Err(malformed(format!("{at}: unknown type `{kind}`"))),
    }
    Ok(())
}

fn member_kind_is(kind: &str, member: schema::MemberType) -> bool {
    match member {
        schema::MemberType::Function => kind == "function",
        schema::MemberType::Custom => kind == "custom",
    }
}

#[cfg(test)]
mod tests;

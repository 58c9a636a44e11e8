//! `POST /parse/function_call` and `POST /parse/reasoning`: the gateway's own output
//! parsers ([`crate::parsers`]) run on a text the client sends, with no worker involved.
//!
//! Spec 1 fixes only the errors (`{error: <message>, success: false}`, 400 or 503) and leaves
//! the payloads to the API the routes mirror. Two SGLang APIs answer this: the router's
//! `/parse/function_call` and `/parse/reasoning` (the paths and error shape spec 1 uses),
//! and the server's `/parse_function_call` and `/separate_reasoning`. Both take the same
//! requests; their answers name the fields differently, so every answer carries both sets
//! of names and a client written against either reads it unchanged:
//!
//! - function call request `{text, tool_call_parser, tools?}` (`tools`: OpenAI tools,
//!   `[{type: "function", function: {name, parameters?}}]`). Answer `{normal_text, calls:
//!   [{tool_index, name, parameters}], remaining_text, tool_calls: [{function: {name,
//!   arguments}}], success: true}` — `normal_text`/`calls` as SGLang's server writes them,
//!   `remaining_text`/`tool_calls`/`success` as its router does. `parameters` and
//!   `arguments` are the same JSON object text. `tool_index` is the position of the call's
//!   name in `tools`, -1 when it is not declared; such calls are kept (the router keeps
//!   every call; the server's "forward unknown tools" mode does too).
//! - reasoning request `{text, reasoning_parser}`. Answer `{normal_text, reasoning_text,
//!   text, success: true}` — `normal_text`/`success` the router's, `text` the server's name
//!   for the same answer text, `reasoning_text` both's.
//!
//! Lenient where the mirrors disagree or a client would be refused for nothing: `parser`
//! is taken for either parser field (the router's documentation spells it so), and
//! `tools` may be left out (the parsers read it only to type values and give
//! `tool_index`). Parser names are the gateway's own or SGLang's and vLLM's (see the two
//! registries). Neither request has a thinking switch, so reasoning is split as for a
//! request with thinking on whose prompt did not open the block, which is what SGLang's
//! detectors do by default (`deepseek_r1` reads from the first token, `qwen3` only after
//! a leading `<think>`).
//!
//! Errors: 400 for a body that is not JSON, a field of the wrong type, a missing `text` or
//! parser name, an unknown parser. No 503: the router answers it when its parser factory
//! was never built, and the gateway's parsers are compiled in. A body that cannot be read
//! (too large, broken off, too slow) is answered before these handlers, as for every
//! administration body.

use std::fmt;

use http::{Response, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::json_response;
use crate::http::body::RespBody;
use crate::http::error::{respond::admin_error, respond::AdminErrorBody};
use crate::parsers::reasoning::{self, Split, Thinking};
use crate::parsers::tool::{self, ToolCall, ToolSpec, Tools};

/// `POST /parse/function_call`.
pub fn function_call(body: &[u8]) -> Response<RespBody> {
    match parse_function_call(body) {
        Ok(found) => json_response(StatusCode::OK, &found.answer()),
        Err(err) => err.into_response(),
    }
}

/// `POST /parse/reasoning`.
pub fn reasoning(body: &[u8]) -> Response<RespBody> {
    match parse_reasoning(body) {
        Ok(split) => json_response(StatusCode::OK, &reasoning_answer(&split)),
        Err(err) => err.into_response(),
    }
}

/// Why a parse request is refused. Every refusal is the client's: 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The body is not JSON, or a field has the wrong type (serde's words).
    BadBody(String),
    /// A required field is absent or `null`.
    Missing(&'static str),
    /// No parser of this kind has the name.
    UnknownParser { kind: Kind, name: String },
}

/// Which registry a parser name was looked up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Reasoning,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::BadBody(why) => write!(f, "invalid request body: {why}"),
            ParseError::Missing(field) => write!(f, "missing required field `{field}`"),
            // The router's wording, then the names that would have worked.
            ParseError::UnknownParser { kind, name } => {
                let (what, known) = match kind {
                    Kind::Tool => ("tool", tool::registry::NAMES),
                    Kind::Reasoning => ("reasoning", reasoning::registry::NAMES),
                };
                write!(
                    f,
                    "Unknown {what} parser: {name} (known: {})",
                    known.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for ParseError {}

impl ParseError {
    /// The one mapping of these errors to the wire.
    fn into_response(self) -> Response<RespBody> {
        let message = self.to_string();
        admin_error(
            StatusCode::BAD_REQUEST,
            AdminErrorBody::Failed { message: &message },
        )
    }
}

/// The function call request. Optional fields so that an absent one is named in the
/// refusal rather than reported in serde's words.
#[derive(Deserialize)]
struct FunctionCallRequest {
    text: Option<String>,
    #[serde(alias = "parser")]
    tool_call_parser: Option<String>,
    tools: Option<Vec<Tool>>,
}

/// One OpenAI tool; only the function's name and schema matter here.
#[derive(Deserialize)]
struct Tool {
    function: Function,
}

#[derive(Deserialize)]
struct Function {
    name: String,
    #[serde(default)]
    parameters: Value,
}

#[derive(Deserialize)]
struct ReasoningRequest {
    text: Option<String>,
    #[serde(alias = "parser")]
    reasoning_parser: Option<String>,
}

/// What the function call parser found: the text without the calls, and each call with
/// its position among the declared tools.
#[derive(Debug, PartialEq, Eq)]
struct Found {
    text: String,
    calls: Vec<(i64, ToolCall)>,
}

/// A call as SGLang's server writes it.
#[derive(Serialize)]
struct Call<'a> {
    tool_index: i64,
    name: &'a str,
    /// A JSON object's text.
    parameters: &'a str,
}

/// A call as SGLang's router writes it.
#[derive(Serialize)]
struct RouterCall<'a> {
    function: RouterFunction<'a>,
}

#[derive(Serialize)]
struct RouterFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

#[derive(Serialize)]
struct FunctionCallAnswer<'a> {
    normal_text: &'a str,
    calls: Vec<Call<'a>>,
    remaining_text: &'a str,
    tool_calls: Vec<RouterCall<'a>>,
    success: bool,
}

impl Found {
    /// The answer, in both SGLang APIs' names (see the module doc).
    fn answer(&self) -> FunctionCallAnswer<'_> {
        FunctionCallAnswer {
            normal_text: &self.text,
            calls: self
                .calls
                .iter()
                .map(|(tool_index, call)| Call {
                    tool_index: *tool_index,
                    name: &call.name,
                    parameters: &call.arguments,
                })
                .collect(),
            remaining_text: &self.text,
            tool_calls: self
                .calls
                .iter()
                .map(|(_, call)| RouterCall {
                    function: RouterFunction {
                        name: &call.name,
                        arguments: &call.arguments,
                    },
                })
                .collect(),
            success: true,
        }
    }
}

#[derive(Serialize)]
struct ReasoningAnswer<'a> {
    normal_text: &'a str,
    reasoning_text: &'a str,
    text: &'a str,
    success: bool,
}

/// The answer of `/parse/reasoning`, in both SGLang APIs' names (see the module doc).
fn reasoning_answer(split: &Split) -> ReasoningAnswer<'_> {
    ReasoningAnswer {
        normal_text: &split.text,
        reasoning_text: &split.reasoning,
        text: &split.text,
        success: true,
    }
}

fn read<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, ParseError> {
    serde_json::from_slice(body).map_err(|err| ParseError::BadBody(err.to_string()))
}

fn parse_function_call(body: &[u8]) -> Result<Found, ParseError> {
    let req: FunctionCallRequest = read(body)?;
    let text = req.text.ok_or(ParseError::Missing("text"))?;
    let name = req
        .tool_call_parser
        .ok_or(ParseError::Missing("tool_call_parser"))?;
    let make = tool::registry::by_name(&name).ok_or(ParseError::UnknownParser {
        kind: Kind::Tool,
        name,
    })?;
    let tools: Tools = req
        .tools
        .unwrap_or_default()
        .into_iter()
        .map(|t| ToolSpec {
            name: t.function.name,
            parameters: t.function.parameters,
        })
        .collect();
    let parsed = tool::parse_whole(make(&tools).as_mut(), &text);
    let calls = parsed
        .calls
        .into_iter()
        .map(|call| (tool_index(&tools, &call.name), call))
        .collect();
    Ok(Found {
        text: parsed.text,
        calls,
    })
}

/// The position of `name` among the declared tools, or -1 (SGLang's "not declared").
fn tool_index(tools: &[ToolSpec], name: &str) -> i64 {
    tools
        .iter()
        .position(|t| t.name == name)
        .and_then(|at| i64::try_from(at).ok())
        .unwrap_or(-1)
}

fn parse_reasoning(body: &[u8]) -> Result<Split, ParseError> {
    let req: ReasoningRequest = read(body)?;
    let text = req.text.ok_or(ParseError::Missing("text"))?;
    let name = req
        .reasoning_parser
        .ok_or(ParseError::Missing("reasoning_parser"))?;
    let make = reasoning::registry::by_name(&name).ok_or(ParseError::UnknownParser {
        kind: Kind::Reasoning,
        name,
    })?;
    let thinking = Thinking {
        enabled: true,
        opened_by_prompt: false,
    };
    Ok(reasoning::split_whole(make(thinking).as_mut(), &text))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(body: Value) -> (u16, Value) {
        send(function_call, body)
    }

    fn split(body: Value) -> (u16, Value) {
        send(reasoning, body)
    }

    fn send(route: fn(&[u8]) -> Response<RespBody>, body: Value) -> (u16, Value) {
        let bytes = serde_json::to_vec(&body).unwrap();
        answer(route(&bytes))
    }

    fn answer(resp: Response<RespBody>) -> (u16, Value) {
        let status = resp.status().as_u16();
        let body = resp.into_body().into_full().unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    fn weather_tools() -> Value {
        json!([
            {"type": "function", "function": {"name": "get_time", "parameters": {}}},
            {"type": "function", "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
            }}
        ])
    }

    #[test]
    fn qwen_call_in_both_apis_names() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let (status, v) = call(json!({
            "text": text,
            "tool_call_parser": "qwen",
            "tools": weather_tools(),
        }));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["normal_text"], "Let me check.\n");
        assert_eq!(v["remaining_text"], v["normal_text"]);
        assert_eq!(v["success"], true);
        let calls = v["calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["tool_index"], 1);
        assert_eq!(calls[0]["name"], "get_weather");
        let params: Value = serde_json::from_str(calls[0]["parameters"].as_str().unwrap()).unwrap();
        assert_eq!(params, json!({"city": "Paris"}));
        let routed = &v["tool_calls"][0]["function"];
        assert_eq!(routed["name"], "get_weather");
        assert_eq!(routed["arguments"], calls[0]["parameters"]);
    }

    #[test]
    fn undeclared_tools_are_kept_with_index_minus_one() {
        let text = r#"{"name": "lookup", "parameters": {"q": 1}}"#;
        let (status, v) = call(json!({"text": text, "tool_call_parser": "llama3"}));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["calls"][0]["tool_index"], -1);
        assert_eq!(v["calls"][0]["name"], "lookup");
        assert_eq!(v["normal_text"], "");
    }

    #[test]
    fn text_without_calls_comes_back_whole() {
        let (status, v) = call(json!({
            "text": "No tools needed.",
            "parser": "mistral",
            "tools": [],
        }));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["normal_text"], "No tools needed.");
        assert_eq!(v["calls"], json!([]));
        assert_eq!(v["tool_calls"], json!([]));
    }

    #[test]
    fn reasoning_split_in_both_apis_names() {
        let (status, v) = split(json!({
            "text": "Step one.</think>The answer is 42.",
            "reasoning_parser": "deepseek-r1",
        }));
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["reasoning_text"], "Step one.");
        assert_eq!(v["normal_text"], "The answer is 42.");
        assert_eq!(v["text"], "The answer is 42.");
        assert_eq!(v["success"], true);
        // qwen3 reasons only inside a leading `<think>`.
        let (_, v) = split(json!({"text": "plain answer", "parser": "qwen3"}));
        assert_eq!(
            (v["reasoning_text"].as_str(), v["text"].as_str()),
            (Some(""), Some("plain answer"))
        );
        let (_, v) = split(json!({"text": "<think>hm</think>yes", "reasoning_parser": "qwen3"}));
        assert_eq!(
            (v["reasoning_text"].as_str(), v["text"].as_str()),
            (Some("hm"), Some("yes"))
        );
    }

    fn refused(resp: (u16, Value)) -> String {
        let (status, v) = resp;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["success"], false, "{v}");
        assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{v}");
        v["error"].as_str().unwrap().to_owned()
    }

    #[test]
    fn each_refusal_is_400_in_the_spec_shape() {
        let msg = refused(call(json!({"text": "x", "tool_call_parser": "nope"})));
        assert!(
            msg.starts_with("Unknown tool parser: nope (known: json, "),
            "{msg}"
        );
        let msg = refused(split(json!({"text": "x", "reasoning_parser": "nope"})));
        assert!(
            msg.starts_with("Unknown reasoning parser: nope (known: "),
            "{msg}"
        );
        let msg = refused(call(json!({"tool_call_parser": "qwen"})));
        assert_eq!(msg, "missing required field `text`");
        let msg = refused(call(json!({"text": "x", "tools": []})));
        assert_eq!(msg, "missing required field `tool_call_parser`");
        let msg = refused(split(json!({"text": null, "reasoning_parser": "qwen3"})));
        assert_eq!(msg, "missing required field `text`");
        let msg = refused(split(json!({"text": "x"})));
        assert_eq!(msg, "missing required field `reasoning_parser`");
        // Wrong types, and tools without a function name.
        for body in [
            json!({"text": 5, "tool_call_parser": "qwen"}),
            json!({"text": "x", "tool_call_parser": "qwen", "tools": {}}),
            json!({"text": "x", "tool_call_parser": "qwen", "tools": [{"type": "function"}]}),
            json!([1, 2]),
        ] {
            let msg = refused(call(body));
            assert!(msg.starts_with("invalid request body: "), "{msg}");
        }
        for bytes in [&b"{not json"[..], b"", b"\xff"] {
            let msg = refused(answer(function_call(bytes)));
            assert!(msg.starts_with("invalid request body: "), "{msg}");
            refused(answer(reasoning(bytes)));
        }
    }
}

//! Model turns from an external provider's own Responses API (spec 2: "forwarded
//! upstream; gateway executes MCP tools and stores responses").
//!
//! The gateway keeps the state, so every turn is self-contained for the provider: the
//! whole context goes as `input` (earlier turns' items, the request's, and those of this
//! response's earlier turns), with `store: false` and neither `previous_response_id` nor
//! `conversation`. Items go without their gateway ids; an MCP call the gateway ran is
//! the `function_call` and `function_call_output` pair the provider's model made it from;
//! listings and reasoning (without encrypted content the provider cannot resume it) stay
//! home. `mcp` tools become the function tools of their servers; every other tool (the
//! client's functions, `web_search`, …) goes as it came.
//!
//! The answer, whole or streamed, is read as deltas ([`events`]); an error status before
//! anything was produced is the provider's answer for the client, as it is.

pub mod events;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Map, Value};

use super::mcp::McpTools;
use super::{Refused, RESPONSES_PATH};
use crate::fleet::Worker;
use crate::generation::delta::Delta;
use crate::generation::delta::{ClientGone, Sink, TurnEnd};
use crate::http::body::{FrameSender, RespBody};
use crate::http::error::GatewayError;
use crate::mcp::McpHttp;
use crate::transport::is_sse;
use crate::transport::provider::read_incoming;
use crate::transport::SendError;
use events::Reading;

/// Largest provider answer read in one turn, whole or streamed.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// Request fields the gateway answers for itself and the provider never sees.
const KEPT_HOME: [&str; 7] = [
    "input",
    "previous_response_id",
    "conversation",
    "store",
    "max_tool_calls",
    "background",
    "tools",
];

/// Where the provider is and what goes with each call to it.
pub struct Upstream {
    http: McpHttp,
    /// `<worker URL>/v1/responses`.
    uri: Uri,
    /// The worker's headers (credentials settled), with the JSON `Content-Type`.
    headers: HeaderMap,
}

/// A provider turn answered: its body whole, or its event stream still to be read.
pub enum Leg {
    Whole(Value),
    Stream(Incoming),
}

impl Upstream {
    /// `headers`: what the worker receives, credentials already in.
    pub fn new(
        http: McpHttp,
        worker: &Worker,
        mut headers: HeaderMap,
    ) -> Result<Upstream, SendError> {
        let uri = format!("{}{RESPONSES_PATH}", worker.url.trim_end_matches('/'))
            .parse()
            .map_err(|_| SendError::Exchange(GatewayError::UpstreamConnect))?;
        headers.remove(CONTENT_LENGTH);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(Upstream { http, uri, headers })
    }

    /// Sends one turn's `request` and reads the answer's head (a whole body entirely).
    pub(super) async fn turn(
        &self,
        request: Map<String, Value>,
        deadline: Instant,
    ) -> Result<Leg, Refused> {
        let send = |err| Refused::Send(SendError::Exchange(err));
        let body = Bytes::from(serde_json::to_vec(&request).unwrap_or_default());
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone());
        if let Some(headers) = req.headers_mut() {
            headers.clone_from(&self.headers);
        }
        let req = req
            .body(Full::new(body))
            .map_err(|_| send(GatewayError::UpstreamBroken))?;
        let deadline = tokio::time::Instant::from_std(deadline);
        let resp = match tokio::time::timeout_at(deadline, self.http.request(req)).await {
            Err(_) => return Err(Refused::Send(SendError::Timeout)),
            Ok(Err(err)) => {
                tracing::debug!(provider = %self.uri, error = %err, "provider request failed");
                return Err(send(if err.is_connect() {
                    GatewayError::UpstreamConnect
                } else {
                    GatewayError::UpstreamBroken
                }));
            }
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        if status.is_success() && is_sse(&resp) {
            return Ok(Leg::Stream(resp.into_body()));
        }
        let content_type = resp.headers().get(CONTENT_TYPE).cloned();
        let read = read_incoming(resp.into_body(), MAX_ANSWER_BYTES);
        let whole = tokio::time::timeout_at(deadline, read)
            .await
            .map_err(|_| Refused::Send(SendError::Timeout))?
            .map_err(send)?;
        if !status.is_success() {
            let mut answer = Response::new(RespBody::full(whole));
            *answer.status_mut() = status;
            if let Some(content_type) = content_type {
                answer.headers_mut().insert(CONTENT_TYPE, content_type);
            }
            return Err(Refused::Answer(Box::new(answer)));
        }
        // A provider that answered 2xx did the work (and billed it): a body that is not a
        // response is the client's 502, never a reason to ask again.
        match serde_json::from_slice::<Value>(&whole) {
            Ok(answer @ Value::Object(_)) => Ok(Leg::Whole(answer)),
            _ => Err(Refused::Send(SendError::Refused(
                GatewayError::ProviderParse {
                    message: "the provider's answer is not a Responses object".into(),
                },
            ))),
        }
    }
}

impl Leg {
    /// Reads the turn to its end, each delta to `sink` (and the frames it returns to
    /// `tx`). A stream that breaks, stalls past `stall` or outlives `deadline` ends the
    /// turn with what was read and the failure.
    pub(super) async fn drive(
        self,
        deadline: Instant,
        stall: Option<Duration>,
        sink: &mut Sink<'_>,
        tx: Option<&FrameSender>,
    ) -> Result<TurnEnd, ClientGone> {
        let mut body = match self {
            Leg::Whole(answer) => {
                let (delta, end) = events::whole(&answer);
                pass(sink, &delta, tx).await?;
                return Ok(end);
            }
            Leg::Stream(body) => body,
        };
        let mut reading = Reading::default();
        let mut read = 0usize;
        loop {
            let now = Instant::now();
            let wait = stall.map_or(deadline, |s| deadline.min(now + s));
            let next = tokio::time::timeout_at(wait.into(), body.frame());
            let frame = match tx {
                Some(tx) => tokio::select! {
                    frame = next => frame,
                    () = tx.closed() => return Err(ClientGone),
                },
                None => next.await,
            };
            let chunk = match frame {
                Err(_) if Instant::now() >= deadline => {
                    return Ok(broken(GatewayError::UpstreamTimeout))
                }
                Err(_) => {
                    let secs = stall.map_or(0, |s| s.as_secs());
                    return Ok(broken(GatewayError::UpstreamStalled { secs }));
                }
                Ok(None) | Ok(Some(Err(_))) => return Ok(broken(GatewayError::UpstreamBroken)),
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(chunk) => chunk,
                    Err(_) => continue,
                },
            };
            read += chunk.len();
            if read > MAX_ANSWER_BYTES {
                return Ok(broken(GatewayError::ProviderParse {
                    message: format!("the stream is longer than {MAX_ANSWER_BYTES} bytes"),
                }));
            }
            if let Err(message) = reading.feed(&chunk) {
                return Ok(broken(GatewayError::ProviderParse { message }));
            }
            pass(sink, &reading.delta, tx).await?;
            reading.delta.clear();
            if let Some(end) = reading.take_end() {
                return Ok(end);
            }
        }
    }
}

/// Hands a non-empty delta to `sink` and its frames to the client.
async fn pass(
    sink: &mut Sink<'_>,
    delta: &Delta,
    tx: Option<&FrameSender>,
) -> Result<(), ClientGone> {
    if delta.is_empty() {
        return Ok(());
    }
    match (sink(delta), tx) {
        (Some(frames), Some(tx)) => tx.send(frames).await.map_err(|_| ClientGone),
        _ => Ok(()),
    }
}

/// A turn that broke off after it started.
fn broken(err: GatewayError) -> TurnEnd {
    TurnEnd {
        finish: None,
        error: Some(err),
        usage: Default::default(),
    }
}

/// The request for one turn: the client's fields but those the gateway keeps, the whole
/// context as `input`, the tools with the MCP servers' as functions (`functions`, in the
/// chat's shape the MCP module lists them in).
/// Built-in tool types in `backed` run through the gateway's MCP servers, so they go as
/// functions too, not as themselves.
pub fn request(
    client: &Map<String, Value>,
    input: Vec<Value>,
    functions: &[Value],
    backed: &[&str],
) -> Map<String, Value> {
    let mut out: Map<String, Value> = client
        .iter()
        .filter(|(key, _)| !KEPT_HOME.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    out.insert("input".into(), Value::Array(input));
    out.insert("store".into(), Value::Bool(false));
    let mut tools: Vec<Value> = match client.get("tools") {
        Some(Value::Array(tools)) => tools
            .iter()
            .filter(|tool| {
                let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
                kind != "mcp" && !backed.contains(&kind)
            })
            .cloned()
            .collect(),
        _ => Vec::new(),
    };
    tools.extend(functions.iter().map(|chat| {
        let function = chat.get("function").unwrap_or(chat);
        json!({"type": "function", "name": function.get("name"),
               "description": function.get("description"),
               "parameters": function.get("parameters")})
    }));
    // `{type: mcp}` names a server the provider does not know: any of its tools will do.
    let mcp_choice = client
        .get("tool_choice")
        .and_then(|choice| choice.get("type"))
        .and_then(Value::as_str)
        == Some("mcp");
    if mcp_choice {
        let choice = if functions.is_empty() {
            "auto"
        } else {
            "required"
        };
        out.insert("tool_choice".into(), Value::String(choice.into()));
    }
    if tools.is_empty() {
        out.remove("tool_choice");
    } else {
        out.insert("tools".into(), Value::Array(tools));
    }
    out
}

/// The items of the context as the provider gets them; `ran` gives the built-in calls
/// this response ran as the function call and output the provider's model made them from.
pub fn input<'a>(items: impl Iterator<Item = &'a Value>, ran: Option<&McpTools>) -> Vec<Value> {
    let mut out = Vec::new();
    for item in items {
        if let Some((call, shown)) = ran.and_then(|mcp| mcp.pair_of(item)) {
            out.push(json!({"type": "function_call", "call_id": call.call_id,
                            "name": call.name, "arguments": call.arguments}));
            out.push(
                json!({"type": "function_call_output", "call_id": call.call_id,
                            "output": shown}),
            );
            continue;
        }
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => out.push(json!({"type": "message", "role": item.get("role"),
                                         "content": item.get("content")})),
            "mcp_call" => {
                let call_id = item.get("id").cloned().unwrap_or(Value::Null);
                let output = match item.get("output") {
                    Some(Value::String(output)) => output.clone(),
                    _ => mcp_error_text(item.get("error")),
                };
                out.push(json!({"type": "function_call", "call_id": call_id,
                                "name": item.get("name"), "arguments": item.get("arguments")}));
                out.push(json!({"type": "function_call_output", "call_id": call_id,
                                "output": output}));
            }
            // The gateway's own items, and built-in calls whose results the provider cannot
            // take back (the answer that used them stays).
            "mcp_list_tools"
            | "reasoning"
            | "mcp_approval_request"
            | "mcp_approval_response"
            | "item_reference"
            | "web_search_call"
            | "code_interpreter_call"
            | "file_search_call"
            | "image_generation_call" => {}
            _ => {
                let mut copy = item.clone();
                if let Value::Object(map) = &mut copy {
                    map.remove("id");
                    map.remove("status");
                }
                out.push(copy);
            }
        }
    }
    out
}

/// What a failed MCP call's `error` says, as the text its model was shown.
fn mcp_error_text(error: Option<&Value>) -> String {
    let Some(error) = error else {
        return String::new();
    };
    if let Some(text) = error.as_str() {
        return text.to_owned();
    }
    let parts = error.get("content").and_then(Value::as_array);
    match parts {
        Some(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        None => error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_keeps_state_home_and_offers_mcp_tools_as_functions() {
        let client = json!({
            "model": "m", "input": "hi", "instructions": "be brief", "store": true,
            "previous_response_id": "resp_1", "conversation": "conv_1", "max_tool_calls": 3,
            "stream": true, "temperature": 0.5, "metadata": {"k": "v"},
            "tools": [{"type": "function", "name": "mine", "parameters": {}},
                      {"type": "mcp", "server_label": "s", "server_url": "http://x"},
                      {"type": "web_search", "external_web_access": false}],
            "tool_choice": {"type": "mcp", "server_label": "s"},
        });
        let functions = [json!({"type": "function", "function": {"name": "add",
                                "description": "adds", "parameters": {"type": "object"}}})];
        let out = request(
            client.as_object().unwrap(),
            vec![json!({"type": "message"})],
            &functions,
            &[],
        );
        for gone in ["previous_response_id", "conversation", "max_tool_calls"] {
            assert!(!out.contains_key(gone), "{gone}");
        }
        assert_eq!(out["store"], false);
        assert_eq!(out["stream"], true);
        assert_eq!(out["instructions"], "be brief");
        assert_eq!(out["metadata"], json!({"k": "v"}));
        assert_eq!(out["input"], json!([{"type": "message"}]));
        assert_eq!(
            out["tools"],
            json!([{"type": "function", "name": "mine", "parameters": {}},
                   {"type": "web_search", "external_web_access": false},
                   {"type": "function", "name": "add", "description": "adds",
                    "parameters": {"type": "object"}}])
        );
        assert_eq!(out["tool_choice"], "required");
        // Without tools left, no tool_choice either.
        let bare = json!({"model": "m", "tools": [{"type": "mcp", "server_label": "s"}],
                          "tool_choice": "auto"});
        let out = request(bare.as_object().unwrap(), Vec::new(), &[], &[]);
        assert!(!out.contains_key("tools") && !out.contains_key("tool_choice"));
        // A backed built-in goes as its function, not as itself.
        let built = json!({"model": "m", "tools": [{"type": "web_search_preview"},
                                                    {"type": "code_interpreter"}]});
        let out = request(
            built.as_object().unwrap(),
            Vec::new(),
            &[],
            &["web_search_preview"],
        );
        assert_eq!(out["tools"], json!([{"type": "code_interpreter"}]));
    }

    #[test]
    fn context_items_go_without_ids_and_mcp_calls_as_their_function_pairs() {
        let items = [
            json!({"id": "msg_1", "type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "hi"}]}),
            json!({"id": "rs_1", "type": "reasoning", "summary": []}),
            json!({"id": "mcpl_1", "type": "mcp_list_tools", "tools": []}),
            json!({"id": "mcp_1", "type": "mcp_call", "name": "add", "arguments": "{}",
                   "status": "completed", "output": "5"}),
            json!({"id": "mcp_2", "type": "mcp_call", "name": "add", "arguments": "{}",
                   "status": "failed", "output": null,
                   "error": {"type": "mcp_tool_execution_error",
                             "content": [{"type": "text", "text": "boom"}]}}),
            json!({"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f",
                   "arguments": "{}", "status": "completed"}),
            json!({"id": "fco_1", "type": "function_call_output", "call_id": "c1", "output": "x"}),
        ];
        let out = input(items.iter(), None);
        assert_eq!(
            out,
            [
                json!({"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "hi"}]}),
                json!({"type": "function_call", "call_id": "mcp_1", "name": "add", "arguments": "{}"}),
                json!({"type": "function_call_output", "call_id": "mcp_1", "output": "5"}),
                json!({"type": "function_call", "call_id": "mcp_2", "name": "add", "arguments": "{}"}),
                json!({"type": "function_call_output", "call_id": "mcp_2", "output": "boom"}),
                json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}),
                json!({"type": "function_call_output", "call_id": "c1", "output": "x"}),
            ]
        );
    }
}

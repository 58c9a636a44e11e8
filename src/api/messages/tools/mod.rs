//! The MCP tool loop of the provider backend (spec 2): with `X-GW-MCP: enabled` and an
//! `mcp_toolset` among the tools, the gateway itself connects to the request's MCP
//! servers, offers their tools to the model as ordinary tools, runs the calls the model
//! makes and sends the results back, until the model stops calling MCP tools (at most
//! [`MAX_ROUNDS`] rounds of calls).
//!
//! 1. **connect** every server of `mcp_servers` at once (`authorization_token` as bearer);
//!    when none connects: 502 `mcp_connection_failed`;
//! 2. **rewrite** the request: `mcp_servers` and the toolsets replaced by the enabled MCP
//!    tools ([`toolset`]), `tool_choice` `auto` when absent;
//! 3. **loop**: ask the provider, run the MCP calls of its answer, append the turn and the
//!    results, ask again; a round whose answer calls the client's own tools, or no tool, is
//!    the last;
//! 4. **answer**: each call as an `mcp_tool_use` block (`mcptoolu_` id, `server_name`)
//!    followed by its `mcp_tool_result`, then the final answer's content; usage summed over
//!    the rounds. A stream starts (`message_start`) before the first model call, relays
//!    the provider's streamed blocks of every round as they come ([`relay`]; MCP calls
//!    held back and sent as `mcp_tool_use`/`mcp_tool_result` once run), and ends with one
//!    `message_delta` and `message_stop`; a failure after it started is an `error` event.
//!
//! A tool that fails, or a server that stops answering (each call has
//! `--mcp-call-timeout-secs`), is an `is_error` result the model sees, not a failed
//! request. The whole loop ends by the request's deadline.

mod events;
mod relay;
mod toolset;

use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Map, Value};
use tokio::time::Instant;
use uuid::Uuid;

use crate::api::tool_call;
use crate::fleet::Worker;
use crate::http::body::{FrameSender, RespBody};
use crate::http::error::GatewayError;
use crate::http::upload::LimitedBody;
use crate::mcp::open::{self, Opened};
use crate::mcp::{CallLimits, McpHttp, McpSettings, Session, SessionSettings, Tool, ToolOutcome};
use crate::metrics::Metrics;
use crate::secret::Secret;
use crate::transport::headers::X_GW_MCP;
use crate::transport::http::UpstreamClient;
use crate::transport::is_sse;
use crate::transport::{provider, whole_body, Answer, Attempt, SendError};

/// Serves a Messages `attempt` on the provider `worker`: through the tool loop when the
/// client asked for it (`X-GW-MCP`) and its body has an `mcp_toolset`, else relayed over
/// `http` as any provider request.
pub async fn serve(
    http: &UpstreamClient,
    tools: &LoopClient,
    worker: &Worker,
    mut attempt: Attempt<'_>,
) -> Result<Answer, SendError> {
    if !asked(&attempt.head.headers) {
        return provider::send(http, worker, attempt).await;
    }
    let body = whole_body(attempt.body).await?;
    let limits = tools.mcp.starting_now();
    let Some(plan) = plan(&body, limits) else {
        attempt.body = LimitedBody::whole(body);
        return provider::send(http, worker, attempt).await;
    };
    let upstream = Upstream {
        http: tools.http.clone(),
        uri: provider::messages_uri(worker)?,
        headers: provider::to_provider(&attempt.headers, &attempt.head.headers),
        deadline: Instant::from_std(attempt.deadline),
    };
    run(upstream, plan, tools.metrics.clone())
        .await
        .map_err(SendError::Refused)
}

/// Most rounds of tool calls in one request (spec 2 "Limits").
pub const MAX_ROUNDS: usize = 10;
/// Largest provider answer read in one round, whole or streamed.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// Most MCP servers one request may name: each is a connection the gateway opens.
const MAX_SERVERS: usize = 16;
/// Frames a stream may have waiting for a slow client before the loop waits.
const STREAM_FRAMES: usize = 16;

/// What one data-plane thread's loops share: the pool to MCP servers and providers, the
/// MCP limits, the metrics.
pub struct LoopClient {
    pub http: McpHttp,
    pub mcp: McpSettings,
    pub metrics: Arc<Metrics>,
}

/// Whether the client asked for the gateway's loop (`X-GW-MCP: enabled`).
pub fn asked(headers: &HeaderMap) -> bool {
    headers
        .get(X_GW_MCP)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"enabled"))
}

/// Where the provider is and what goes with each call to it.
pub struct Upstream {
    pub http: McpHttp,
    /// `<worker URL>/v1/messages`.
    pub uri: Uri,
    /// The provider's headers (the client's key and versions), without `Content-Type`.
    pub headers: HeaderMap,
    pub deadline: Instant,
}

/// A request the loop takes on: its body, servers and toolsets.
pub struct Plan {
    request: Map<String, Value>,
    servers: Vec<(String, SessionSettings)>,
    toolsets: Vec<Value>,
    client_tools: Vec<Value>,
    stream: bool,
    model: String,
}

/// The loop's plan for `body`, or `None` when it has no `mcp_toolset` (then it goes to
/// the provider as any request). Its MCP calls are bounded by `limits`.
pub fn plan(body: &[u8], limits: CallLimits) -> Option<Plan> {
    let Ok(Value::Object(mut request)) = serde_json::from_slice(body) else {
        return None;
    };
    let tools = match request.remove("tools") {
        Some(Value::Array(tools)) => tools,
        _ => return None,
    };
    let (toolsets, client_tools): (Vec<Value>, Vec<Value>) = tools
        .into_iter()
        .partition(|t| t.get("type").and_then(Value::as_str) == Some("mcp_toolset"));
    if toolsets.is_empty() {
        return None;
    }
    let servers = match request.remove("mcp_servers") {
        Some(Value::Array(servers)) => servers
            .iter()
            .filter_map(|s| server_of(s, limits))
            .take(MAX_SERVERS)
            .collect(),
        _ => Vec::new(),
    };
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Some(Plan {
        request,
        servers,
        toolsets,
        client_tools,
        stream,
        model,
    })
}

/// An entry of `mcp_servers` as session settings.
fn server_of(server: &Value, limits: CallLimits) -> Option<(String, SessionSettings)> {
    let name = server.get("name")?.as_str()?.to_owned();
    let url = server.get("url")?.as_str()?.to_owned();
    let bearer = server
        .get("authorization_token")
        .and_then(Value::as_str)
        .map(Secret::new);
    Some((
        name,
        SessionSettings {
            url,
            bearer,
            headers: HeaderMap::new(),
            limits,
        },
    ))
}

/// Runs the loop for `plan` and answers the client.
pub async fn run(
    upstream: Upstream,
    plan: Plan,
    metrics: Arc<Metrics>,
) -> Result<Answer, GatewayError> {
    let connected = connect_all(&upstream.http, &plan.servers, upstream.deadline).await;
    let active = Active::new(&metrics, connected.iter().filter(|c| c.1.is_some()).count());
    if active.count == 0 {
        return Err(GatewayError::McpConnectionFailed);
    }
    let listed: Vec<(String, Option<Vec<Tool>>)> = connected
        .iter()
        .map(|(name, c)| (name.clone(), c.as_ref().map(|(_, tools)| tools.clone())))
        .collect();
    let exposed = toolset::expose(&plan.toolsets, &listed, &plan.client_tools);
    let mut request = plan.request;
    let mut tools = plan.client_tools;
    tools.extend(exposed.tools);
    request.insert("tools".into(), Value::Array(tools));
    request
        .entry("tool_choice")
        .or_insert_with(|| json!({"type": "auto"}));
    request.insert("stream".into(), Value::Bool(false));
    let servers = connected
        .into_iter()
        .map(|(name, c)| (name, c.map(|(session, _)| session)))
        .collect();
    let mut tool_loop = Loop {
        upstream,
        request,
        servers,
        owners: exposed.owners,
        metrics,
        model: plan.model,
        usage: Usage::default(),
        _active: active,
    };
    if !plan.stream {
        let mut blocks = Vec::new();
        return match tool_loop.drive(&mut Out::Collect(&mut blocks)).await {
            Ok(last) => Ok(json_answer(tool_loop.message(last, blocks))),
            Err(Failed::Provider(answer)) => Ok(answer.into_response()),
            Err(Failed::Gateway(err)) => Err(err),
            Err(Failed::ClientGone) => Err(GatewayError::ClientBodyBroken),
            Err(Failed::Stream(message)) => Err(GatewayError::ProviderParse { message }),
        };
    }
    let (tx, body) = RespBody::generated(STREAM_FRAMES);
    tokio::spawn(async move { tool_loop.stream(tx).await });
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// A server's name and, when it connected, its session and tools.
type Connected = (String, Option<Opened>);

/// Connects to every server at once, each with its tools listed: `None` for those that
/// failed (said in the log, without the token).
async fn connect_all(
    http: &McpHttp,
    servers: &[(String, SessionSettings)],
    deadline: Instant,
) -> Vec<Connected> {
    let settings = servers.iter().map(|(_, settings)| settings.clone());
    let outcomes = open::open_each(http, settings, deadline.into_std()).await;
    servers
        .iter()
        .zip(outcomes)
        .map(|((name, _), outcome)| match outcome {
            Ok(open) => (name.clone(), Some(open)),
            Err(err) => {
                tracing::warn!(server = %name, error = %err, "MCP server did not connect");
                (name.clone(), None)
            }
        })
        .collect()
}

/// Keeps `gw_mcp_servers_active` true while the sessions are open.
struct Active {
    metrics: Arc<Metrics>,
    count: usize,
}

impl Active {
    fn new(metrics: &Arc<Metrics>, count: usize) -> Active {
        metrics.mcp_servers_active(count as i64);
        Active {
            metrics: metrics.clone(),
            count,
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.metrics.mcp_servers_active(-(self.count as i64));
    }
}

/// Token counts summed over the rounds.
#[derive(Default)]
struct Usage {
    input: u64,
    output: u64,
    cache_creation: u64,
    cache_read: u64,
}

impl Usage {
    fn add(&mut self, usage: Option<&Value>) {
        let get = |key: &str| {
            usage
                .and_then(|u| u.get(key))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        self.input += get("input_tokens");
        self.output += get("output_tokens");
        self.cache_creation += get("cache_creation_input_tokens");
        self.cache_read += get("cache_read_input_tokens");
    }

    fn json(&self) -> Value {
        json!({"input_tokens": self.input, "output_tokens": self.output,
            "cache_creation_input_tokens": self.cache_creation,
            "cache_read_input_tokens": self.cache_read})
    }
}

/// Where the loop's blocks go: a list for one JSON answer, or a stream.
enum Out<'a> {
    Collect(&'a mut Vec<Value>),
    Stream { tx: &'a FrameSender, index: usize },
}

impl Out<'_> {
    async fn block(&mut self, block: Value) -> Result<(), Failed> {
        match self {
            Out::Collect(blocks) => {
                blocks.push(block);
                Ok(())
            }
            Out::Stream { tx, index } => {
                for event in events::block(*index, &block) {
                    tx.send(event).await.map_err(|_| Failed::ClientGone)?;
                }
                *index += 1;
                Ok(())
            }
        }
    }
}

/// Why the loop stopped short.
enum Failed {
    /// The provider answered an error: the client gets it as it is.
    Provider(ProviderError),
    Gateway(GatewayError),
    /// The client went away (its stream closed).
    ClientGone,
    /// The provider's stream failed (an `error` event, or events out of protocol).
    Stream(String),
}

/// The provider's answer to one round.
enum Answered {
    Whole(Value),
    /// A 2xx event stream, still to be read.
    Stream(hyper::body::Incoming),
}

/// A provider's error answer, kept to be relayed.
struct ProviderError {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

impl ProviderError {
    fn into_response(self) -> Answer {
        let mut resp = Response::new(RespBody::full(self.body));
        *resp.status_mut() = self.status;
        if let Some(ct) = self.content_type {
            resp.headers_mut().insert(CONTENT_TYPE, ct);
        }
        resp
    }

    fn describe(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        format!(
            "the provider answered {}: {}",
            self.status.as_u16(),
            crate::bounded::prefix_within(&text, 512)
        )
    }
}

/// One request's loop.
struct Loop {
    upstream: Upstream,
    /// The request as the provider gets it; its messages grow each round.
    request: Map<String, Value>,
    /// Each server's name and session (`None`: did not connect).
    servers: Vec<(String, Option<Session>)>,
    owners: std::collections::HashMap<String, usize>,
    metrics: Arc<Metrics>,
    model: String,
    usage: Usage,
    _active: Active,
}

impl Loop {
    /// Rounds until the model stops calling MCP tools; returns the last answer.
    async fn drive(&mut self, out: &mut Out<'_>) -> Result<Value, Failed> {
        for _ in 0..=MAX_ROUNDS {
            self.metrics.mcp_iteration(&self.model);
            let answer = match out {
                Out::Collect(_) => self.ask_provider(false).await?,
                Out::Stream { tx, index } => self.relay_round(tx, index).await?,
            };
            self.usage.add(answer.get("usage"));
            let content = answer
                .get("content")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let uses: Vec<&Value> = content
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                .collect();
            let all_mcp = uses.iter().all(|b| {
                b.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| self.owners.contains_key(n))
            });
            if uses.is_empty() || !all_mcp {
                return Ok(answer);
            }
            let mut results = Vec::with_capacity(uses.len());
            for call in &uses {
                let (block_pair, result) = self.call(call).await;
                for block in block_pair {
                    out.block(block).await?;
                }
                results.push(result);
            }
            self.append_turn(content, results);
        }
        Err(Failed::Gateway(GatewayError::McpMaxIterations {
            rounds: MAX_ROUNDS,
        }))
    }

    /// Runs one MCP call: the `mcp_tool_use` and `mcp_tool_result` blocks for the client,
    /// and the `tool_result` for the model.
    async fn call(&mut self, call: &Value) -> ([Value; 2], Value) {
        let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
        let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
        let input = call.get("input").cloned().unwrap_or_else(|| json!({}));
        let index = self.owners.get(name).copied().unwrap_or(usize::MAX);
        let (server_name, session) = match self.servers.get_mut(index) {
            Some((server, Some(session))) => (server.clone(), Ok(session)),
            Some((server, None)) => (server.clone(), Err("the server is not connected")),
            None => (String::new(), Err("no server offers this tool")),
        };
        let outcome = tool_call::call(&self.metrics, &self.model, name, session, name, &input)
            .await
            .unwrap_or_else(|message| ToolOutcome {
                content: json!([{"type": "text", "text": message}]),
                is_error: true,
            });
        let content = for_messages(&outcome.content);
        let mcp_id = format!("mcptoolu_{}", id.strip_prefix("toolu_").unwrap_or(id));
        let blocks = [
            json!({"type": "mcp_tool_use", "id": mcp_id, "name": name,
                "server_name": server_name, "input": input}),
            json!({"type": "mcp_tool_result", "tool_use_id": mcp_id,
                "is_error": outcome.is_error, "content": content}),
        ];
        let result = json!({"type": "tool_result", "tool_use_id": id,
            "content": content, "is_error": outcome.is_error});
        (blocks, result)
    }

    /// The model's turn and the results of its calls, appended to the conversation.
    fn append_turn(&mut self, content: Vec<Value>, results: Vec<Value>) {
        let messages = self
            .request
            .entry("messages")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(messages) = messages {
            messages.push(json!({"role": "assistant", "content": content}));
            messages.push(json!({"role": "user", "content": results}));
        }
    }

    /// One round streamed: the provider's blocks relayed to the client as they come (MCP
    /// calls held back), its answer rebuilt for the next turn. A provider that answers a
    /// whole body instead has its blocks sent as they would have streamed.
    async fn relay_round(&self, tx: &FrameSender, index: &mut usize) -> Result<Value, Failed> {
        let mut body = match self.ask(true).await? {
            Answered::Stream(body) => body,
            Answered::Whole(answer) => return self.forward_whole(tx, index, answer).await,
        };
        let mut round = relay::Round::new();
        let relayed = async {
            let mut read = 0;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|_| Failed::Gateway(GatewayError::UpstreamBroken))?;
                let Ok(chunk) = frame.into_data() else {
                    continue;
                };
                read += chunk.len();
                if read > MAX_ANSWER_BYTES {
                    return Err(Failed::Stream(format!(
                        "the round's stream is longer than {MAX_ANSWER_BYTES} bytes"
                    )));
                }
                let steps = round
                    .feed(&chunk, &self.owners, index)
                    .map_err(Failed::Stream)?;
                for step in steps {
                    match step {
                        relay::Step::Quiet => {}
                        relay::Step::Send(event) => {
                            tx.send(event).await.map_err(|_| Failed::ClientGone)?;
                        }
                        relay::Step::Failed(message) => return Err(Failed::Stream(message)),
                    }
                }
                if round.ended() {
                    return Ok(());
                }
            }
            Err(Failed::Gateway(GatewayError::UpstreamBroken))
        };
        tokio::time::timeout_at(self.upstream.deadline, relayed)
            .await
            .map_err(|_| Failed::Gateway(GatewayError::UpstreamTimeout))??;
        Ok(round.answer())
    }

    /// A whole answer to a round asked streamed: its blocks sent as they would have
    /// streamed, MCP calls held back.
    async fn forward_whole(
        &self,
        tx: &FrameSender,
        index: &mut usize,
        answer: Value,
    ) -> Result<Value, Failed> {
        let content = answer.get("content").and_then(Value::as_array);
        for block in content.map(Vec::as_slice).unwrap_or_default() {
            if self.is_mcp_call(block) {
                continue;
            }
            for event in events::block(*index, block) {
                tx.send(event).await.map_err(|_| Failed::ClientGone)?;
            }
            *index += 1;
        }
        Ok(answer)
    }

    /// Whether `block` is a call of one of the servers' tools.
    fn is_mcp_call(&self, block: &Value) -> bool {
        block.get("type").and_then(Value::as_str) == Some("tool_use")
            && block
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| self.owners.contains_key(n))
    }

    /// One whole answer of the provider (by the request's deadline).
    async fn ask_provider(&self, stream: bool) -> Result<Value, Failed> {
        match self.ask(stream).await? {
            Answered::Whole(answer) => Ok(answer),
            Answered::Stream(_) => Err(Failed::Stream(
                "the provider streamed an answer asked whole".into(),
            )),
        }
    }

    /// Asks the provider for the next turn, streamed or whole; an error status or a whole
    /// body that is not a Messages answer fails the round.
    async fn ask(&self, stream: bool) -> Result<Answered, Failed> {
        let mut request = self.request.clone();
        request.insert("stream".into(), Value::Bool(stream));
        let body = serde_json::to_vec(&request).unwrap_or_default();
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.upstream.uri.clone());
        if let Some(headers) = req.headers_mut() {
            headers.clone_from(&self.upstream.headers);
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| Failed::Gateway(GatewayError::UpstreamBroken))?;
        let exchange = async {
            let resp = self
                .upstream
                .http
                .request(req)
                .await
                .map_err(|_| Failed::Gateway(GatewayError::UpstreamConnect))?;
            let status = resp.status();
            if status.is_success() && is_sse(&resp) {
                return Ok(Answered::Stream(resp.into_body()));
            }
            let content_type = resp.headers().get(CONTENT_TYPE).cloned();
            let body = provider::read_incoming(resp.into_body(), MAX_ANSWER_BYTES)
                .await
                .map_err(Failed::Gateway)?;
            if !status.is_success() {
                return Err(Failed::Provider(ProviderError {
                    status,
                    content_type,
                    body,
                }));
            }
            match serde_json::from_slice::<Value>(&body) {
                Ok(answer) if answer.get("content").is_some_and(Value::is_array) => {
                    Ok(Answered::Whole(answer))
                }
                Ok(_) => Err(Failed::Gateway(GatewayError::ProviderParse {
                    message: "the answer has no content array".into(),
                })),
                Err(err) => Err(Failed::Gateway(GatewayError::ProviderParse {
                    message: err.to_string(),
                })),
            }
        };
        tokio::time::timeout_at(self.upstream.deadline, exchange)
            .await
            .map_err(|_| Failed::Gateway(GatewayError::UpstreamTimeout))?
    }

    /// The JSON answer: the MCP blocks, then the last answer's content, usage summed.
    fn message(&self, mut last: Value, mut blocks: Vec<Value>) -> Value {
        if let Some(Value::Array(content)) = last.get_mut("content").map(Value::take) {
            blocks.extend(content);
        }
        if let Value::Object(message) = &mut last {
            message.insert("content".into(), Value::Array(blocks));
            message.insert("usage".into(), self.usage.json());
        }
        last
    }

    /// The streamed answer: started before the first model call, each round's blocks
    /// relayed and each MCP call's blocks as it is done, one `message_delta` and
    /// `message_stop` at the end.
    async fn stream(mut self, tx: FrameSender) {
        let id = format!("msg_{}", Uuid::new_v4().simple());
        if tx
            .send(events::message_start(&id, &self.model))
            .await
            .is_err()
        {
            return;
        }
        let outcome = self.drive(&mut Out::Stream { tx: &tx, index: 0 }).await;
        let last = match outcome {
            Ok(last) => last,
            Err(Failed::ClientGone) => return,
            Err(Failed::Provider(err)) => return fail(tx, &err.describe()).await,
            Err(Failed::Gateway(err)) => return fail(tx, &err.to_string()).await,
            Err(Failed::Stream(message)) => return fail(tx, &message).await,
        };
        let null = Value::Null;
        let [delta, stop] = events::end(
            last.get("stop_reason").unwrap_or(&null),
            last.get("stop_sequence").unwrap_or(&null),
            &self.usage.json(),
        );
        for event in [delta, stop] {
            if tx.send(event).await.is_err() {
                return;
            }
        }
        tx.finish().await;
    }
}

/// Ends a started stream with an `error` event.
async fn fail(tx: FrameSender, message: &str) {
    if tx.send(events::error(message)).await.is_ok() {
        tx.finish().await;
    }
}

/// An MCP result's content as Messages content blocks: text stays text, an image becomes
/// a base64 image block, anything else its JSON as text.
fn for_messages(content: &Value) -> Value {
    let blocks = content.as_array().map(Vec::as_slice).unwrap_or_default();
    Value::Array(
        blocks
            .iter()
            .map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => json!({"type": "text",
                    "text": block.get("text").cloned().unwrap_or_else(|| json!(""))}),
                Some("image") => json!({"type": "image", "source": {"type": "base64",
                    "media_type": block.get("mimeType").cloned().unwrap_or(Value::Null),
                    "data": block.get("data").cloned().unwrap_or(Value::Null)}}),
                _ => json!({"type": "text", "text": block.to_string()}),
            })
            .collect(),
    )
}

/// A JSON answer of the gateway's own.
fn json_answer(message: Value) -> Answer {
    let body = serde_json::to_vec(&message).unwrap_or_default();
    crate::http::reply::json(StatusCode::OK, Bytes::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_and_a_toolset_make_a_plan() {
        let mut h = HeaderMap::new();
        assert!(!asked(&h));
        h.insert(X_GW_MCP, HeaderValue::from_static("Enabled"));
        assert!(asked(&h));
        h.insert(X_GW_MCP, HeaderValue::from_static("off"));
        assert!(!asked(&h));

        let body = json!({"model": "m", "max_tokens": 5, "stream": true, "messages": [],
            "tools": [{"name": "mine", "input_schema": {}},
                {"type": "mcp_toolset", "mcp_server_name": "s"}],
            "mcp_servers": [{"type": "url", "name": "s", "url": "http://127.0.0.1:1/mcp",
                "authorization_token": "secret"}]});
        let minute = std::time::Duration::from_secs(60);
        let minute = CallLimits::starting_now(minute, minute, false);
        let plan = plan(body.to_string().as_bytes(), minute).expect("a plan");
        assert!(plan.stream);
        assert_eq!(plan.model, "m");
        assert_eq!(plan.client_tools.len(), 1);
        assert_eq!(plan.toolsets.len(), 1);
        assert_eq!(plan.servers[0].0, "s");
        assert_eq!(
            plan.servers[0].1.bearer.as_ref().map(Secret::expose),
            Some("secret")
        );
        assert!(!plan.request.contains_key("mcp_servers"));

        let plain = json!({"model": "m", "tools": [{"name": "mine", "input_schema": {}}]});
        assert!(super::plan(plain.to_string().as_bytes(), minute).is_none());
        assert!(super::plan(b"not json", minute).is_none());
    }

    #[test]
    fn mcp_content_becomes_messages_content() {
        let content = json!([{"type": "text", "text": "5"},
            {"type": "image", "data": "AA==", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "x"}}]);
        let out = for_messages(&content);
        assert_eq!(out[0], json!({"type": "text", "text": "5"}));
        assert_eq!(out[1]["source"]["media_type"], "image/png");
        assert_eq!(out[2]["type"], "text");
    }

    #[test]
    fn usage_sums_rounds() {
        let mut usage = Usage::default();
        usage.add(Some(&json!({"input_tokens": 10, "output_tokens": 2})));
        usage.add(Some(
            &json!({"input_tokens": 15, "output_tokens": 3, "cache_read_input_tokens": 4}),
        ));
        usage.add(None);
        assert_eq!(
            usage.json(),
            json!({"input_tokens": 25, "output_tokens": 5,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 4})
        );
    }
}

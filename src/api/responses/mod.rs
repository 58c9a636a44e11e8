//! `/v1/responses` run by the gateway itself: on gRPC engines and on external providers.
//!
//! The request continues what the history store keeps (a `previous_response_id`'s
//! context, or a conversation's items). Each model turn comes from a [`Model`]: a gRPC
//! engine generates it through the gateway's chat pipeline (the request turned into a
//! chat by [`convert`]), an external provider through its own Responses API (the whole
//! context sent with `store: false`, [`provider`]). Either way the turn arrives as the
//! chat pipeline's deltas, so one writer ([`speak`]) makes the output items, whole or as
//! spec 2's event stream, and one loop runs the MCP calls between turns ([`mcp`]). With
//! `store` (the default) the response, its input items and the context the next turn needs
//! are written to the store before the client sees the response (or its terminal event),
//! so a follow-up with `previous_response_id` always finds it. A conversation gets the
//! turn's input and output items appended likewise.
//!
//! A chain costs one store read per turn, whatever its length: each stored response
//! carries its whole context (bounded by [`MAX_CONTEXT_BYTES`]).

pub mod check;
mod convert;
mod mcp;
mod object;
pub mod provider;
mod speak;
pub mod stored;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::engines::{sse_response, unix_now, Engines, GrpcPair, PrefillSide, STREAM_FRAMES};
use crate::engine::Protocol;
use crate::fleet::Worker;
use crate::generation::delta::{ClientGone, Delta, Finish, Sink, TurnEnd, Usage};
use crate::generation::run::{Started, Target};
use crate::history::{
    History, ItemRecord, ItemsQuery, Order, Owner, ResponseRecord, MAX_CONTEXT_BYTES,
    MAX_CONVERSATION_ITEMS,
};
use crate::http::body::{FrameSender, RespBody};
use crate::http::error::{GatewayError, StorageStep};
use crate::http::reply as http_reply;
use crate::mcp::builtins::Builtins;
use crate::mcp::McpSettings;
use crate::metrics::Metrics;
use crate::transport::pd::{PairAnswer, PairFailure};
use crate::transport::{whole_body, Answer, Attempt, SendError};
use stored::owner_of;

use mcp::{HeldCall, McpTools};
use speak::{Ending, Writer};

/// The route an external provider's Responses requests are served on by the gateway.
pub const RESPONSES_PATH: &str = "/v1/responses";

/// What one data-plane thread's gateway-run Responses requests share: the history store,
/// the pool to MCP servers and providers, the limits.
#[derive(Clone)]
pub struct Runner {
    history: Arc<dyn History>,
    /// The pool for MCP servers and for external providers' Responses API.
    http: crate::mcp::McpHttp,
    mcp: McpSettings,
    /// `--stream-stall-timeout-secs`: longest silence of a worker mid-turn.
    stall: Option<Duration>,
    metrics: Arc<Metrics>,
    /// The MCP servers backing built-in tools (`--mcp-config-path`).
    builtins: Arc<Builtins>,
}

impl Runner {
    /// `http`: the thread's pool to MCP servers and providers.
    pub fn new(
        mcp: McpSettings,
        stall: Option<Duration>,
        http: crate::mcp::McpHttp,
        metrics: Arc<Metrics>,
        history: Arc<dyn History>,
        builtins: Arc<Builtins>,
    ) -> Runner {
        Runner {
            builtins,
            history,
            http,
            mcp,
            stall,
            metrics,
        }
    }

    /// Whether the gateway runs `attempt` on `worker` itself: `POST /v1/responses` to an
    /// external provider (an HTTP engine serves its own `/v1/responses`).
    pub fn takes(worker: &Worker, attempt: &Attempt<'_>) -> bool {
        worker.runtime == crate::fleet::RuntimeType::External
            && attempt.route == crate::http::route::Route::ResponsesCreate
    }

    /// Serves a `/v1/responses` attempt on the gRPC engine `worker`, each model turn
    /// through the gateway's chat pipeline.
    pub async fn on_engine(
        &self,
        engines: &Engines,
        worker: &Worker,
        attempt: Attempt<'_>,
    ) -> Result<Answer, SendError> {
        let target = engines.target(worker).map_err(SendError::Exchange)?;
        let body = whole_body(attempt.body).await?;
        let model = Model::Engine(Box::new(EngineTurns {
            engines: engines.clone(),
            target: target.into_owned(),
            pair: None,
        }));
        self.serve(model, attempt.head, attempt.deadline, body)
            .await
    }

    /// Serves a `/v1/responses` attempt on a prefill/decode pair of gRPC engines: each
    /// model turn's prefill leg on `pair.prefill`, its generation on `pair.decode`.
    pub async fn on_engine_pair(
        &self,
        engines: &Engines,
        pair: GrpcPair<'_>,
        how: Protocol,
        attempt: Attempt<'_>,
    ) -> Result<PairAnswer, PairFailure> {
        let refused = |err: GatewayError| PairFailure::Decode(SendError::Refused(err));
        let side = engines.prefill_side(&pair, how).map_err(refused)?;
        let decode = engines.target(pair.decode).map_err(refused)?;
        let body = whole_body(attempt.body)
            .await
            .map_err(PairFailure::Decode)?;
        let model = Model::Engine(Box::new(EngineTurns {
            engines: engines.clone(),
            target: decode.into_owned(),
            pair: Some(side.into_owned()),
        }));
        let answer = self
            .serve(model, attempt.head, attempt.deadline, body)
            .await
            .map_err(PairFailure::Decode)?;
        // Each turn's legs were counted as they ran.
        Ok(PairAnswer {
            answer,
            prefill_secs: None,
            kv_missing: false,
            kv_transfer_secs: None,
        })
    }

    /// Serves a `/v1/responses` attempt on the external provider `worker`.
    pub async fn on_provider(
        &self,
        worker: &Worker,
        mut attempt: Attempt<'_>,
    ) -> Result<Answer, SendError> {
        crate::transport::credentials::present(worker, &mut attempt.headers);
        let upstream = provider::Upstream::new(
            self.http.clone(),
            worker,
            std::mem::take(&mut attempt.headers).into_owned(),
        )?;
        let body = whole_body(attempt.body).await?;
        self.serve(
            Model::Provider(Box::new(upstream)),
            attempt.head,
            attempt.deadline,
            body,
        )
        .await
    }
}

/// Where a response's model turns are generated.
pub(super) enum Model {
    /// A gRPC engine, through the gateway's chat pipeline.
    Engine(Box<EngineTurns>),
    /// An external provider's own Responses API.
    Provider(Box<provider::Upstream>),
}

/// A gRPC engine's client and the worker it generates on: the decode worker of a pair
/// when `pair` is set, whose prefill side runs each turn's prefill leg.
pub(super) struct EngineTurns {
    pub engines: Engines,
    pub target: Target<'static>,
    pub pair: Option<PrefillSide<'static>>,
}

/// One model turn, started.
enum Leg {
    Engine(Box<Started>),
    Provider(provider::Leg),
}

/// Why a turn could not start: a failure of the gateway's, or a provider's error answer,
/// which the client gets as it is when it comes on the first turn.
enum Refused {
    Send(SendError),
    Answer(Box<Answer>),
}

impl Model {
    fn is_engine(&self) -> bool {
        matches!(self, Model::Engine(_))
    }

    /// Starts the next model turn of `turn`; `made` holds the items this response's
    /// earlier turns made (the MCP calls among them).
    async fn turn(&self, turn: &Turn, made: &[Value], deadline: Instant) -> Result<Leg, Refused> {
        let mcp = turn.mcp.as_ref();
        match self {
            Model::Engine(engine) => {
                let extra = mcp.map(McpTools::functions).unwrap_or_default();
                let chat = convert::chat_body(&turn.request, turn.messages.clone(), extra);
                let size = convert::json_len(&chat);
                engine
                    .engines
                    .chat_turn(&engine.target, engine.pair.as_ref(), chat, size, deadline)
                    .await
                    .map(|started| Leg::Engine(Box::new(started)))
                    .map_err(Refused::Send)
            }
            Model::Provider(upstream) => {
                let items =
                    provider::input(turn.context.iter().chain(&turn.input).chain(made), mcp);
                let functions = mcp.map(McpTools::functions).unwrap_or_default();
                let backed = mcp.map(McpTools::backed_types).unwrap_or_default();
                let request = provider::request(&turn.request, items, &functions, &backed);
                upstream.turn(request, deadline).await.map(Leg::Provider)
            }
        }
    }
}

impl Leg {
    /// Runs the turn to its end, each delta to `sink` (and the frames it returns to `tx`).
    async fn drive(
        self,
        deadline: Instant,
        stall: Option<Duration>,
        sink: &mut Sink<'_>,
        tx: Option<&FrameSender>,
    ) -> Result<TurnEnd, ClientGone> {
        match self {
            Leg::Engine(started) => (*started).drive(deadline, stall, sink, tx).await,
            Leg::Provider(leg) => leg.drive(deadline, stall, sink, tx).await,
        }
    }
}

/// One Responses request being served.
struct Turn {
    owner: Owner,
    id: String,
    created_at: u64,
    request: Map<String, Value>,
    /// The items before this request (from the chain or the conversation).
    context: Vec<Value>,
    /// This request's input items, with ids.
    input: Vec<Value>,
    /// The chat so far (engines only): the context, the input, and the turns the gateway
    /// ran.
    messages: Vec<Value>,
    conversation: Option<String>,
    store: bool,
    mcp: Option<McpTools>,
    /// The `mcp_call`s of the calls this request approved, run before its first turn.
    approved: Vec<Value>,
}

/// Why a response ended as it did: its status, the open item's ending, `error` and
/// `incomplete_details`.
struct Settled {
    status: &'static str,
    ending: Ending,
    error: Value,
    incomplete: Value,
}

impl Settled {
    fn completed() -> Settled {
        Settled {
            status: "completed",
            ending: Ending::Done,
            error: Value::Null,
            incomplete: Value::Null,
        }
    }

    fn failed(code: &str, message: String) -> Settled {
        Settled {
            status: "failed",
            ending: Ending::Failed,
            error: json!({"code": code, "message": message}),
            incomplete: Value::Null,
        }
    }

    /// How a model turn that ended so settles the response, if it is the last.
    fn of(end: &TurnEnd) -> Settled {
        match (&end.finish, &end.error) {
            (_, Some(err)) => Settled::failed(failure_code(err), err.to_string()),
            (Some(Finish::Length), None) => Settled {
                status: "incomplete",
                ending: Ending::Cut,
                error: Value::Null,
                incomplete: json!({"reason": "max_output_tokens"}),
            },
            _ => Settled::completed(),
        }
    }
}

/// The gateway's own cap on tool calls it runs for one response (spec 2).
const MAX_TOOL_CALLS: usize = 10;

impl Runner {
    /// Serves a `/v1/responses` body with the turns of `model`.
    pub(super) async fn serve(
        &self,
        model: Model,
        head: &http::request::Parts,
        deadline: Instant,
        body: Bytes,
    ) -> Result<Answer, SendError> {
        let refused = SendError::Refused;
        let request: Map<String, Value> = serde_json::from_slice(&body).map_err(|err| {
            refused(GatewayError::InvalidRequest {
                message: format!("invalid request body: {err}"),
            })
        })?;
        let owner = owner_of(head);
        let (context, conversation) = self.context(&owner, &request).await.map_err(refused)?;
        let input =
            convert::input_items(request.get("input").unwrap_or(&Value::Null)).map_err(refused)?;
        // Only an engine needs the chat; a provider reads the items themselves.
        let messages = if model.is_engine() {
            let instructions = request.get("instructions").and_then(Value::as_str);
            convert::messages(instructions, &context, &input).map_err(refused)?
        } else {
            Vec::new()
        };
        let store = request
            .get("store")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let servers = mcp::Servers {
            http: &self.http,
            builtins: &self.builtins,
            limits: self.mcp.starting_now(),
        };
        let mcp = mcp::connect(servers, &request, self.metrics.clone())
            .await
            .map_err(refused)?;
        let mut turn = Turn {
            owner,
            id: format!("resp_{}", Uuid::new_v4().simple()),
            created_at: unix_now(),
            request,
            context,
            input,
            messages,
            conversation,
            store,
            mcp,
            approved: Vec::new(),
        };
        turn.run_approved(model.is_engine())
            .await
            .map_err(refused)?;
        if store && turn.context_bytes() > MAX_CONTEXT_BYTES {
            return Err(refused(GatewayError::InvalidRequest {
                message: format!(
                    "the conversation is longer than the gateway keeps ({MAX_CONTEXT_BYTES} \
                     bytes of items); start a new one"
                ),
            }));
        }
        let leg = match model.turn(&turn, &turn.approved, deadline).await {
            Ok(leg) => leg,
            // Approved calls have run: another worker would run them again, so the failure
            // is the client's answer rather than a reason to fail over.
            Err(Refused::Send(SendError::Exchange(err))) if !turn.approved.is_empty() => {
                return Err(refused(err))
            }
            Err(Refused::Send(SendError::Timeout)) if !turn.approved.is_empty() => {
                return Err(refused(GatewayError::UpstreamTimeout))
            }
            Err(Refused::Send(err)) => return Err(err),
            Err(Refused::Answer(answer)) => return Ok(*answer),
        };
        let streaming = turn.request.get("stream").and_then(Value::as_bool) == Some(true);
        let mut writer = Writer::new(streaming, turn.namespaces(), turn.gateway_tools());
        if !streaming {
            let object = self
                .run(&model, &mut turn, leg, &mut writer, None, deadline)
                .await
                .map_err(|_| SendError::Exchange(GatewayError::UpstreamBroken))?
                .map_err(refused)?;
            let body = serde_json::to_vec(&object).unwrap_or_default();
            return Ok(http_reply::json(StatusCode::OK, Bytes::from(body)));
        }
        let (tx, body) = RespBody::generated(STREAM_FRAMES);
        let runner = self.clone();
        tokio::spawn(async move {
            runner.stream(&model, turn, leg, writer, tx, deadline).await;
        });
        Ok(sse_response(body))
    }

    /// Runs the response to its end: the model's turns, the MCP calls between them
    /// (within `max_tool_calls` and the gateway's cap), then the response settled and,
    /// when asked, stored. `Err(ClientGone)` when a streaming client went away;
    /// `Ok(Err(_))` when the response could not be stored.
    async fn run(
        &self,
        model: &Model,
        turn: &mut Turn,
        mut leg: Leg,
        writer: &mut Writer,
        tx: Option<&FrameSender>,
        deadline: Instant,
    ) -> Result<Result<Value, GatewayError>, ClientGone> {
        if let Some(mcp) = &turn.mcp {
            for listing in mcp.listings() {
                writer.listing(listing);
            }
        }
        let approved = std::mem::take(&mut turn.approved);
        let mut executed = approved.len();
        for item in approved {
            writer.ran(item);
        }
        send_frames(writer, tx).await?;
        let asked = turn
            .request
            .get("max_tool_calls")
            .and_then(Value::as_u64)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let limit = asked.map_or(MAX_TOOL_CALLS, |n| n.min(MAX_TOOL_CALLS));
        let by_request = asked.is_some_and(|n| n <= MAX_TOOL_CALLS);
        let mut usage = Usage::default();
        let settled = loop {
            let from = writer.len();
            let end = {
                let mut sink = |delta: &Delta| {
                    writer.delta(delta);
                    writer.take_frames()
                };
                leg.drive(deadline, self.stall, &mut sink, tx).await?
            };
            usage = summed(usage, end.usage);
            let held = writer.take_held();
            let settled = Settled::of(&end);
            // A turn cut by length or failed never dispatches tools (spec 2).
            if end.error.is_some() || end.finish == Some(Finish::Length) || held.is_empty() {
                break settled;
            }
            writer.finish(Ending::Done);
            let Some(mcp) = turn.mcp.as_mut() else {
                break settled;
            };
            let (asking, held): (Vec<HeldCall>, Vec<HeldCall>) = held
                .into_iter()
                .partition(|call| mcp.needs_approval(&call.name));
            let fits = held.len().min(limit.saturating_sub(executed));
            let mut calls = Vec::with_capacity(fits);
            let mut outputs = Vec::with_capacity(fits);
            for call in &held[..fits] {
                let (item, shown) = mcp.call(call).await;
                writer.ran(item);
                send_frames(writer, tx).await?;
                executed += 1;
                calls.push(json!({"id": call.call_id, "type": "function",
                                  "function": {"name": call.name, "arguments": call.arguments}}));
                outputs.push(json!({"role": "tool", "tool_call_id": call.call_id,
                                    "content": shown}));
            }
            if fits < held.len() {
                break if by_request {
                    Settled::completed()
                } else {
                    Settled::failed(
                        "max_tool_calls_exceeded",
                        format!("the model called more than {MAX_TOOL_CALLS} tools"),
                    )
                };
            }
            // Calls waiting for approval end the response: the client answers them.
            if !asking.is_empty() {
                for call in &asking {
                    writer.approval_request(mcp.approval_request(call));
                }
                send_frames(writer, tx).await?;
                break settled;
            }
            // Function calls in the same turn go back to the client.
            if writer
                .since(from)
                .iter()
                .any(|item| item["type"] == "function_call")
            {
                break settled;
            }
            let said: String = writer
                .since(from)
                .iter()
                .filter(|item| item["type"] == "message")
                .filter_map(|item| item["content"][0]["text"].as_str())
                .collect();
            turn.messages
                .push(json!({"role": "assistant", "content": said, "tool_calls": calls}));
            turn.messages.extend(outputs);
            writer.next_turn();
            leg = match model.turn(turn, writer.since(0), deadline).await {
                Ok(leg) => leg,
                Err(Refused::Send(SendError::Refused(err) | SendError::Exchange(err))) => {
                    break Settled::failed(failure_code(&err), err.to_string())
                }
                Err(Refused::Answer(answer)) => {
                    break Settled::failed(
                        "server_error",
                        format!("the provider answered {}", answer.status().as_u16()),
                    )
                }
                Err(_) => {
                    break Settled::failed("server_error", "Upstream generation failed".into())
                }
            };
        };
        Ok(self.conclude(turn, writer, settled, usage).await)
    }

    /// The items the request continues: a stored response's context, or a
    /// conversation's items; and the conversation's id.
    async fn context(
        &self,
        owner: &Owner,
        request: &Map<String, Value>,
    ) -> Result<(Vec<Value>, Option<String>), GatewayError> {
        if let Some(previous) = request.get("previous_response_id").and_then(Value::as_str) {
            let record = self
                .history
                .get_response(owner, previous)
                .await
                .map_err(|err| GatewayError::storage(StorageStep::LoadChain, err))?
                .ok_or_else(|| GatewayError::PreviousResponseNotFound {
                    // The client's string, cut short: it is repeated in the message.
                    id: crate::history::shown(previous),
                })?;
            let context: Vec<Value> = serde_json::from_str(&record.context).map_err(|err| {
                GatewayError::storage(StorageStep::LoadChain, format!("stored context: {err}"))
            })?;
            // A response that was part of a conversation keeps adding to it.
            return Ok((context, record.conversation));
        }
        let conversation = match request.get("conversation") {
            Some(Value::String(id)) => id.clone(),
            Some(Value::Object(conv)) => match conv.get("id").and_then(Value::as_str) {
                Some(id) => id.to_owned(),
                None => return Ok((Vec::new(), None)),
            },
            _ => return Ok((Vec::new(), None)),
        };
        let query = ItemsQuery {
            limit: MAX_CONVERSATION_ITEMS,
            order: Order::Asc,
            after: None,
        };
        let items = self
            .history
            .list_items(owner, &conversation, &query)
            .await
            .map_err(|err| GatewayError::storage(StorageStep::CheckConversation, err))?
            .ok_or(GatewayError::ConversationNotFound)?;
        let context = items
            .iter()
            .map(|record| serde_json::from_str(&record.item))
            .collect::<Result<Vec<Value>, _>>()
            .map_err(|err| {
                GatewayError::storage(
                    StorageStep::CheckConversation,
                    format!("stored item: {err}"),
                )
            })?;
        Ok((context, Some(conversation)))
    }

    /// A streamed response: `response.created`, `response.in_progress`, the items' events
    /// as the model writes them (and as MCP calls run), then — once stored — the terminal
    /// event.
    async fn stream(
        self,
        model: &Model,
        mut turn: Turn,
        leg: Leg,
        mut writer: Writer,
        tx: FrameSender,
        deadline: Instant,
    ) {
        let opening = turn.object("in_progress", &[], None, Value::Null, Value::Null);
        writer.event("response.created", json!({"response": opening}));
        writer.event("response.in_progress", json!({"response": opening}));
        let Ok(outcome) = self
            .run(model, &mut turn, leg, &mut writer, Some(&tx), deadline)
            .await
        else {
            return;
        };
        match outcome {
            Ok(object) => {
                let kind = match object["status"].as_str() {
                    Some("incomplete") => "response.incomplete",
                    Some("failed") => "response.failed",
                    _ => "response.completed",
                };
                writer.event(kind, json!({"response": object}));
            }
            Err(err) => {
                // The items are closed; what could not be stored ends the stream as an
                // error event rather than a completion the store does not back.
                // OpenAI's flat fields, and the `error` payload the Open Responses
                // schema reads.
                let (code, message) = (err.code(), err.to_string());
                writer.event(
                    "error",
                    json!({"code": code, "message": message, "param": null,
                           "error": {"type": "server_error", "code": code,
                                     "message": message, "param": null}}),
                );
            }
        }
        if send_frames(&mut writer, Some(&tx)).await.is_ok() {
            tx.finish().await;
        }
    }

    /// The response's end: the open item closed, the object built, and — when asked —
    /// stored with its context (and appended to its conversation) before anyone sees it.
    async fn conclude(
        &self,
        turn: &Turn,
        writer: &mut Writer,
        settled: Settled,
        usage: Usage,
    ) -> Result<Value, GatewayError> {
        writer.finish(settled.ending);
        let output = writer.take_items();
        let object = turn.object(
            settled.status,
            &output,
            Some(usage),
            settled.error,
            settled.incomplete,
        );
        if turn.store {
            self.keep(turn, &object, &output).await?;
        }
        if let Some(conversation) = &turn.conversation {
            let items = turn
                .input
                .iter()
                .chain(&output)
                .map(|item| ItemRecord {
                    id: item["id"].as_str().unwrap_or_default().to_owned(),
                    created_at: turn.created_at as i64,
                    item: item.to_string(),
                })
                .collect();
            match self
                .history
                .append_items(&turn.owner, conversation, items)
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(refused)) => {
                    return Err(GatewayError::storage(
                        StorageStep::Other,
                        format!("the conversation did not take the items: {refused:?}"),
                    ))
                }
                Err(err) => return Err(GatewayError::storage(StorageStep::Other, err)),
            }
        }
        Ok(object)
    }

    /// Stores the response with its input items and the context the next turn needs.
    async fn keep(
        &self,
        turn: &Turn,
        object: &Value,
        output: &[Value],
    ) -> Result<(), GatewayError> {
        let context: Vec<&Value> = turn
            .context
            .iter()
            .chain(&turn.input)
            .chain(output)
            .collect();
        let record = ResponseRecord {
            id: turn.id.clone(),
            owner: turn.owner.clone(),
            created_at: turn.created_at as i64,
            status: object["status"].as_str().unwrap_or("completed").to_owned(),
            conversation: turn.conversation.clone(),
            object: object.to_string(),
            input_items: Value::Array(turn.input.clone()).to_string(),
            context: serde_json::to_string(&context).unwrap_or_default(),
        };
        self.history
            .put_response(record)
            .await
            .map_err(|err| GatewayError::storage(StorageStep::Other, err))
    }
}

impl Turn {
    /// Runs the calls this request's `mcp_approval_response`s approve; an engine's chat
    /// gets each call and its result after the input.
    async fn run_approved(&mut self, engine: bool) -> Result<(), GatewayError> {
        let Some(mcp) = self.mcp.as_mut() else {
            return Ok(());
        };
        for (item, call, shown) in mcp.approved(&self.context, &self.input).await? {
            if engine {
                self.messages
                    .push(json!({"role": "assistant", "content": "", "tool_calls": [
                    {"id": call.call_id, "type": "function",
                     "function": {"name": call.name, "arguments": call.arguments}}]}));
                self.messages
                    .push(json!({"role": "tool", "tool_call_id": call.call_id, "content": shown}));
            }
            self.approved.push(item);
        }
        Ok(())
    }

    /// Bytes of the items the stored context would hold before this turn's output.
    fn context_bytes(&self) -> usize {
        self.context
            .iter()
            .chain(&self.input)
            .map(|item| convert::json_len(item) + 1)
            .sum()
    }

    /// Names of the tools the gateway runs itself (the MCP servers').
    fn gateway_tools(&self) -> HashSet<String> {
        self.mcp
            .as_ref()
            .map(|mcp| mcp.names().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Names of the request's `namespace` tools.
    fn namespaces(&self) -> HashSet<String> {
        let Some(Value::Array(tools)) = self.request.get("tools") else {
            return HashSet::new();
        };
        tools
            .iter()
            .filter(|tool| tool["type"] == "namespace")
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect()
    }

    /// The response object (spec 2's fields, OpenAI's shape, every field of the Open
    /// Responses `ResponseResource` present with its type): the request's settings echoed
    /// ([`object::settings`]) and this response's state. `completed_at` is set once the
    /// response has completed, null before and for a failed or incomplete one.
    fn object(
        &self,
        status: &str,
        output: &[Value],
        usage: Option<Usage>,
        error: Value,
        incomplete: Value,
    ) -> Value {
        let usage = usage.map_or(Value::Null, |usage| {
            json!({
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            })
        });
        let completed_at = if status == "completed" {
            json!(unix_now())
        } else {
            Value::Null
        };
        let mut fields = Map::new();
        let mut put = |name: &str, value: Value| {
            fields.insert(name.to_owned(), value);
        };
        put("id", Value::String(self.id.clone()));
        put("object", Value::String("response".into()));
        put("created_at", json!(self.created_at));
        put("completed_at", completed_at);
        put("status", Value::String(status.to_owned()));
        put("background", Value::Bool(false));
        put("error", error);
        put("incomplete_details", incomplete);
        put("output", Value::Array(output.to_vec()));
        put(
            "conversation",
            self.conversation
                .as_ref()
                .map_or(Value::Null, |id| json!({"id": id})),
        );
        put("store", Value::Bool(self.store));
        put("usage", usage);
        fields.extend(object::settings(&self.request));
        Value::Object(fields)
    }
}

/// Usage over the turns of one response: a turn that reports none leaves the totals.
fn summed(total: Usage, turn: Usage) -> Usage {
    Usage::new(
        total.prompt_tokens.saturating_add(turn.prompt_tokens),
        total
            .completion_tokens
            .saturating_add(turn.completion_tokens),
    )
}

/// Sends the events the writer holds, when streaming.
async fn send_frames(writer: &mut Writer, tx: Option<&FrameSender>) -> Result<(), ClientGone> {
    match (tx, writer.take_frames()) {
        (Some(tx), Some(frames)) => tx.send(frames).await.map_err(|_| ClientGone),
        _ => Ok(()),
    }
}

/// The `error.code` of a failed response: the engine's failure as the gateway names it,
/// `server_error` for a broken or silent worker (spec 2).
fn failure_code(err: &GatewayError) -> &'static str {
    match err {
        GatewayError::UpstreamStalled { .. } | GatewayError::UpstreamBroken => "stream_error",
        GatewayError::EngineFailed { .. } => "server_error",
        other => other.code(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(request: Value) -> Turn {
        Turn {
            owner: Owner::shared(),
            id: "resp_1".into(),
            created_at: 1_700_000_000,
            request: request.as_object().unwrap().clone(),
            context: Vec::new(),
            input: Vec::new(),
            messages: Vec::new(),
            conversation: None,
            store: true,
            mcp: None,
            approved: Vec::new(),
        }
    }

    /// The fields the Open Responses `ResponseResource` requires, by JSON type ("?" after a
    /// type: null allowed).
    const REQUIRED: &[(&str, &str)] = &[
        ("id", "string"),
        ("object", "string"),
        ("created_at", "integer"),
        ("completed_at", "integer?"),
        ("status", "string"),
        ("incomplete_details", "object?"),
        ("model", "string"),
        ("previous_response_id", "string?"),
        ("instructions", "string?"),
        ("output", "array"),
        ("error", "object?"),
        ("tools", "array"),
        ("truncation", "string"),
        ("parallel_tool_calls", "boolean"),
        ("text", "object"),
        ("top_p", "number"),
        ("presence_penalty", "number"),
        ("frequency_penalty", "number"),
        ("top_logprobs", "integer"),
        ("temperature", "number"),
        ("reasoning", "object?"),
        ("usage", "object?"),
        ("max_output_tokens", "integer?"),
        ("max_tool_calls", "integer?"),
        ("store", "boolean"),
        ("background", "boolean"),
        ("service_tier", "string"),
        ("metadata", "object"),
        ("safety_identifier", "string?"),
        ("prompt_cache_key", "string?"),
    ];

    fn conforms(object: &Value) {
        for (name, kind) in REQUIRED {
            let value = object
                .get(*name)
                .unwrap_or_else(|| panic!("`{name}` missing"));
            let (kind, nullable) = kind.strip_suffix('?').map_or((*kind, false), |k| (k, true));
            let fits = match kind {
                "string" => value.is_string(),
                "integer" => value.is_i64() || value.is_u64(),
                "number" => value.is_number(),
                "boolean" => value.is_boolean(),
                "array" => value.is_array(),
                _ => value.is_object(),
            };
            assert!(
                fits || (nullable && value.is_null()),
                "`{name}` is {value}, not {kind}"
            );
        }
        assert!(object["tool_choice"].is_string() || object["tool_choice"].is_object());
    }

    #[test]
    fn every_object_carries_the_schema_fields() {
        let t = turn(json!({"model": "m", "input": "hi"}));
        let opening = t.object("in_progress", &[], None, Value::Null, Value::Null);
        conforms(&opening);
        assert_eq!(opening["completed_at"], Value::Null);
        assert_eq!(opening["usage"], Value::Null);
        let done = t.object(
            "completed",
            &[],
            Some(Usage::new(3, 4)),
            Value::Null,
            Value::Null,
        );
        conforms(&done);
        assert!(done["completed_at"].as_u64().unwrap() >= t.created_at);
        assert_eq!(done["usage"]["total_tokens"], 7);
        assert_eq!(done["service_tier"], "default");
        let failed = t.object(
            "failed",
            &[],
            None,
            json!({"code": "server_error", "message": "x"}),
            Value::Null,
        );
        conforms(&failed);
        assert_eq!(failed["completed_at"], Value::Null);
        let cut = t.object(
            "incomplete",
            &[],
            None,
            Value::Null,
            json!({"reason": "max_output_tokens"}),
        );
        conforms(&cut);
        assert_eq!(cut["completed_at"], Value::Null);
    }

    #[test]
    fn the_request_settings_are_echoed() {
        let t = turn(json!({
            "model": "m", "input": "hi", "presence_penalty": 0.25, "frequency_penalty": 0.5,
            "top_logprobs": 2, "service_tier": "priority", "safety_identifier": "s",
            "prompt_cache_key": "k", "tools": [{"type": "function", "name": "f"}],
        }));
        let object = t.object("completed", &[], None, Value::Null, Value::Null);
        conforms(&object);
        assert_eq!(object["presence_penalty"], json!(0.25));
        assert_eq!(object["frequency_penalty"], json!(0.5));
        assert_eq!(object["top_logprobs"], 2);
        assert_eq!(object["service_tier"], "priority");
        assert_eq!(object["safety_identifier"], "s");
        assert_eq!(object["prompt_cache_key"], "k");
        assert_eq!(object["tool_choice"], "auto");
        assert_eq!(
            object["tools"],
            json!([{"type": "function", "name": "f", "description": null,
                    "parameters": null, "strict": null}])
        );
        assert_eq!(object["id"], "resp_1");
        assert_eq!(object["object"], "response");
        assert_eq!(object["store"], true);
        assert_eq!(object["background"], false);
        assert_eq!(object["conversation"], Value::Null);
    }
}

//! The front-ends on token engines: OpenAI's chat completions, completions and
//! `/generate`, and Messages, served by the gateway's own generation
//! ([`crate::generation`]) on a token engine ([`crate::engine`]).
//!
//! An attempt is served in the gateway: the body is read by its front-end (the OpenAI
//! routes' [`Ask::parse`], Messages' conversion in [`messages`]), the prompt rendered and
//! tokenized, the generation run ([`run::start`]), and what its choices make final written
//! as OpenAI JSON or SSE ([`crate::api::openai`]) or as Messages. The engine always streams to the
//! gateway, so a stop string or a client that goes away ends the generation at once.
//! `/v1/tokenize` and `/v1/detokenize` are answered from the worker's tokenizer.
//!
//! Until the engine's first message the attempt can still fail over to another worker;
//! after it, a failure ends the client's stream with an error event.

mod pair;
mod tokenize;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use ::http::{Response, StatusCode};
use bytes::Bytes;

use crate::api::messages;
use crate::api::openai::{Reply, Spelling, WholeChoice};
use crate::engine::grpc::{self, Engine, Wire};
use crate::engine::{AnyEngine, AnyEvents, Event};
use crate::fleet::{Transport, Worker};
use crate::generation::ask::{Api, Ask, Invalid};
use crate::generation::choices::Applied;
use crate::generation::delta::{self, Finish};
use crate::generation::prompt::{self, on_budget};
use crate::generation::run::{self, EngineStream, Generation, Started, Target};
use crate::http::body::{terminal, Dialect, FrameSender, RespBody};
use crate::http::error::GatewayError;
use crate::http::reply as http_reply;
use crate::http::route::Route;
use crate::http::tls::UpstreamTls;
use crate::metrics::{GenerationTiming, Metrics, RouteLabels};
use crate::transport::{Answer, Attempt, SendError, Waits};

pub use pair::GrpcPair;
pub(super) use pair::PrefillSide;

fn transport_name(transport: &Transport) -> &'static str {
    match transport {
        Transport::Http { .. } => "http",
        Transport::Grpc { .. } => "grpc",
        Transport::Zmq { .. } => "zmq",
    }
}

/// Frames a stream may have waiting for a slow client before the producer waits.
pub(super) const STREAM_FRAMES: usize = 16;

/// One data-plane thread's client to gRPC engines (cloned into the tasks that produce
/// streamed Responses).
#[derive(Clone)]
pub struct Engines {
    wire: Wire,
    /// `--stream-stall-timeout-secs`: longest silence of an engine mid-generation.
    stall: Option<Duration>,
    /// Where streamed generations report their timing and tokens.
    metrics: Arc<Metrics>,
}

impl Engines {
    /// `tls`: the roots `grpcs://` engines are verified against.
    pub fn new(waits: Waits, tls: &UpstreamTls, metrics: Arc<Metrics>) -> Engines {
        Engines {
            wire: grpc::client::wire(waits.pool_idle, tls),
            stall: waits.stall,
            metrics,
        }
    }

    /// Whether this build serves `worker` as a token engine: a `grpc://` or `grpcs://`
    /// engine of a service the gateway speaks, or an `ipc://` (ZMQ) worker, with its
    /// tokenizer.
    pub fn reaches(&self, worker: &Worker) -> Result<(), GatewayError> {
        let engine = match (&worker.transport, &worker.zmq) {
            (Transport::Grpc { .. }, _) => worker.runtime.grpc_service().is_some(),
            (Transport::Zmq { .. }, zmq) => zmq.is_some(),
            (Transport::Http { .. }, _) => false,
        };
        if engine && worker.language.is_some() {
            Ok(())
        } else {
            Err(GatewayError::UnsupportedTransport {
                transport: transport_name(&worker.transport),
            })
        }
    }

    /// What a generation on `worker` reads of it, its engine reached through this thread's
    /// pool (gRPC) or the worker's link (ZMQ); a worker that is neither, with its
    /// tokenizer, is not one.
    pub(super) fn target<'w>(&self, worker: &'w Worker) -> Result<Target<'w>, GatewayError> {
        let engine = match (&worker.transport, &worker.zmq) {
            (Transport::Grpc { authority, tls }, _) => {
                let service = worker
                    .runtime
                    .grpc_service()
                    .ok_or(GatewayError::UnsupportedTransport { transport: "grpc" })?;
                AnyEngine::Grpc(Engine::new(service, self.wire.clone(), authority, *tls))
            }
            (Transport::Zmq { .. }, Some(engine)) => AnyEngine::Zmq(engine.clone()),
            (transport, _) => {
                return Err(GatewayError::UnsupportedTransport {
                    transport: transport_name(transport),
                })
            }
        };
        let language = worker
            .language
            .clone()
            .ok_or(GatewayError::UnsupportedTransport {
                transport: transport_name(&worker.transport),
            })?;
        // A ZMQ worker's window is what its ranks registered with.
        let context_window = worker.context_window.or_else(|| match &engine {
            AnyEngine::Zmq(engine) => engine.link().max_model_len(),
            AnyEngine::Grpc(_) => None,
        });
        Ok(Target {
            context_window,
            parsers: worker.parsers.clone(),
            model_id: worker.model_id.as_deref().map(Cow::Borrowed),
            language,
            engine,
        })
    }

    /// Serves `attempt` on `worker` through the gateway's chat pipeline.
    pub async fn send(&self, worker: &Worker, attempt: Attempt<'_>) -> Result<Answer, SendError> {
        let target = self.target(worker).map_err(SendError::Exchange)?;
        let route = Api::of(attempt.route);
        let local = matches!(attempt.route, Route::Tokenize | Route::Detokenize);
        if route.is_none() && !local {
            return Err(SendError::Refused(GatewayError::NotImplemented {
                route: "this route on gRPC workers",
            }));
        }
        let body = crate::transport::whole_body(attempt.body).await?;
        let Some(route) = route else {
            return answer_locally(attempt.route, &target, body, attempt.deadline).await;
        };
        let (ask, prompt) = understand(&target, route, body, attempt.deadline).await?;
        let started = run::start(
            &target,
            route,
            &ask,
            prompt,
            attempt.deadline,
            None,
            self.stall,
        )
        .await?;
        self.answer(
            started,
            route,
            &ask,
            &target,
            attempt.deadline,
            attempt.arrived,
        )
        .await
    }

    /// The client's answer from a generation whose engine has begun: streamed by a task
    /// of its own, or collected whole.
    async fn answer(
        &self,
        started: Started,
        route: Api,
        ask: &Ask,
        target: &Target<'_>,
        deadline: Instant,
        arrived: Instant,
    ) -> Result<Answer, SendError> {
        let Started {
            generation,
            mut events,
            first,
            dispatched,
            id,
        } = started;
        let reply = Reply {
            route,
            id,
            created: unix_now(),
            model: ask
                .model
                .clone()
                .or_else(|| target.model_id.as_deref().map(str::to_owned))
                .unwrap_or_default(),
            spelling: ask.logprobs.map(|top| Spelling {
                language: target.language.clone(),
                top: top as usize,
            }),
        };
        let mut answering = Answering {
            generation,
            reply,
            text: (route == Api::Generate).then(String::new),
            speaker: (route == Api::Messages).then(|| messages::Speaker::new(ask.stops.clone())),
        };
        if ask.stream {
            let (tx, body) = RespBody::generated(STREAM_FRAMES);
            let stall = self.stall;
            let metrics = self.metrics.clone();
            let include_usage = ask.include_usage;
            tokio::spawn(async move {
                answering
                    .stream(tx, events, first, deadline, stall, include_usage)
                    .await;
                answering.record(&metrics, arrived, dispatched);
            });
            Ok(sse_response(body))
        } else {
            let stream = EngineStream {
                events: &mut events,
                deadline,
                stall: self.stall,
            };
            answering.collect(stream, first).await
        }
    }

    /// One model turn of a gateway-run Responses request: `chat` (a chat completions body
    /// of `size` bytes as JSON, built by the runner) rendered and sent, and the engine's
    /// first message in. On a prefill/decode pair, `target` is the decode worker and `pair`
    /// the prefill side.
    pub(super) async fn chat_turn(
        &self,
        target: &Target<'_>,
        pair: Option<&PrefillSide<'_>>,
        chat: serde_json::Value,
        size: usize,
        deadline: Instant,
    ) -> Result<Started, SendError> {
        let (ask, prompt) = prompt::understand_chat(
            &target.language,
            target.context_window,
            chat,
            size,
            deadline,
        )
        .await?;
        match pair {
            Some(side) => self.pair_turn(side, target, &ask, prompt, deadline).await,
            None => {
                Ok(run::start(target, Api::Chat, &ask, prompt, deadline, None, self.stall).await?)
            }
        }
    }
}

/// A started generation and how its answer is written: OpenAI's chat and completions
/// shapes, `/generate`'s whole-text events, or Messages'.
struct Answering {
    generation: Generation,
    reply: Reply,
    /// `/generate` repeats the whole text so far: kept here; `None` for the OpenAI routes,
    /// which send deltas.
    text: Option<String>,
    /// `/v1/messages` answers in Messages' shapes, written by this; `None` elsewhere.
    speaker: Option<messages::Speaker>,
}

impl Answering {
    /// Reports a finished stream's timing: time to first token from the request's
    /// arrival, the mean gap between tokens after it, the generation from dispatch.
    fn record(&self, metrics: &Metrics, arrived: Instant, dispatched: Instant) {
        let now = Instant::now();
        let usage = self.generation.usage();
        let tokens = usage.completion_tokens;
        let first_token = self.generation.first_token();
        let timing = GenerationTiming {
            ttft: first_token.map(|t| (t - arrived).as_secs_f64()),
            tpot: first_token
                .filter(|_| tokens > 1)
                .map(|t| (now - t).as_secs_f64() / f64::from(tokens - 1)),
            duration: (now - dispatched).as_secs_f64(),
            input_tokens: u64::from(usage.prompt_tokens),
            output_tokens: u64::from(tokens),
        };
        let route = RouteLabels {
            connection_mode: "grpc",
            model: Some(&self.reply.model),
            endpoint: self.reply.route.endpoint(),
        };
        metrics.generation(&route, &timing);
    }

    /// A non-streamed answer: every event read, one JSON body.
    async fn collect(
        mut self,
        mut stream: EngineStream<'_>,
        first: Event,
    ) -> Result<Answer, SendError> {
        let mut event = first;
        loop {
            self.generation.apply(event).map_err(SendError::Exchange)?;
            if self.generation.choices.all_finished() {
                break;
            }
            event = match stream.next().await {
                Ok(Some(event)) => event,
                Ok(None) => return Err(SendError::Exchange(GatewayError::UpstreamBroken)),
                Err(err) => return Err(SendError::Exchange(err)),
            };
        }
        if let (Some(speaker), Some(choice)) =
            (&self.speaker, self.generation.choices.iter().next())
        {
            let outcome = WholeChoice {
                text: &choice.delta.text,
                logprobs: &choice.delta.logprobs,
                finish: choice.finish.unwrap_or(Finish::Stop),
                reasoning: &choice.delta.reasoning,
                calls: delta::calls(&choice.delta.calls),
            };
            let stopped_by = choice.decoding.stop_index();
            let body = speaker.body(&self.reply, &outcome, stopped_by, self.generation.usage());
            return Ok(http_reply::json(StatusCode::OK, body));
        }
        let ids = self.generation.kept_ids();
        let outcomes: Vec<WholeChoice<'_>> = self
            .generation
            .choices
            .iter()
            .map(|c| WholeChoice {
                text: &c.delta.text,
                logprobs: &c.delta.logprobs,
                finish: c.finish.unwrap_or(Finish::Stop),
                reasoning: &c.delta.reasoning,
                calls: delta::calls(&c.delta.calls),
            })
            .collect();
        let body = self.reply.body(&outcomes, ids, self.generation.usage());
        Ok(http_reply::json(StatusCode::OK, body))
    }

    /// A streamed answer: SSE events sent as the text becomes final, each choice ending
    /// with its finishing event; then the usage event when asked, and `[DONE]` (Messages:
    /// `message_start` first, and `message_stop` is the end). A client that goes away
    /// stops the engine at once.
    async fn stream(
        &mut self,
        tx: FrameSender,
        mut events: AnyEvents,
        first: Event,
        deadline: Instant,
        stall: Option<Duration>,
        include_usage: bool,
    ) {
        let mut stream = EngineStream {
            events: &mut events,
            deadline,
            stall,
        };
        if let Some(speaker) = &self.speaker {
            if tx.send(speaker.start(&self.reply)).await.is_err() {
                return;
            }
        }
        for index in 0..self.generation.choices.len() as u32 {
            if let Some(role) = self.reply.role_event(index) {
                if tx.send(role).await.is_err() {
                    return;
                }
            }
        }
        let mut event = Some(first);
        loop {
            let step = match event.take() {
                Some(event) => self.generation.apply(event),
                None => {
                    let next = tokio::select! {
                        next = stream.next() => next,
                        () = tx.closed() => return,
                    };
                    match next {
                        Ok(Some(next)) => {
                            event = Some(next);
                            continue;
                        }
                        Ok(None) => Err(GatewayError::UpstreamBroken),
                        Err(err) => Err(err),
                    }
                }
            };
            match step {
                Ok(Applied::Going(index)) => {
                    if let Some(frame) = self.progress(index) {
                        if tx.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(Applied::Finished(index, finish)) => {
                    for frame in self.finishing(index, finish) {
                        if tx.send(frame).await.is_err() {
                            return;
                        }
                    }
                }
                Ok(Applied::Ignored) => {}
                Err(err) => {
                    // A stream that already started reports the failure (an engine that
                    // died, stalled or failed) as its dialect's error event and ends
                    // cleanly, as a relayed stream does: a body that merely broke off reads
                    // as a short answer to most SDKs. Spec 2 has Messages do the same.
                    let dialect = if self.speaker.is_some() {
                        Dialect::Messages
                    } else {
                        Dialect::OpenAi
                    };
                    if tx.send(terminal::render(dialect, &err, 0)).await.is_ok() {
                        tx.finish().await;
                    }
                    return;
                }
            }
            if self.generation.choices.all_finished() {
                break;
            }
        }
        if self.speaker.is_none() {
            if include_usage
                && self.text.is_none()
                && tx
                    .send(self.reply.usage_event(self.generation.usage()))
                    .await
                    .is_err()
            {
                return;
            }
            if tx.send(Reply::done_event()).await.is_err() {
                return;
            }
        }
        tx.finish().await;
    }

    /// The events that end choice `index`: for the OpenAI routes its last text and its
    /// finishing event; for `/generate` one event with the whole text and the reason.
    fn finishing(&mut self, index: u32, finish: Finish) -> Vec<Bytes> {
        let usage = self.generation.usage();
        let (choices, ids) = self.generation.split();
        let Some(choice) = choices.get_mut(index) else {
            return Vec::new();
        };
        let mut events = Vec::with_capacity(2);
        if let Some(speaker) = &mut self.speaker {
            let stopped_by = choice.decoding.stop_index();
            events.push(speaker.end(&choice.delta, finish, stopped_by, usage));
        } else if let Some(text) = &mut self.text {
            text.push_str(&choice.delta.text);
            events.push(self.reply.generate_event(text, ids, Some(finish), usage));
        } else {
            if !choice.delta.is_empty() {
                events.push(self.reply.delta_event(index, &choice.delta, None));
            }
            choice.delta.clear();
            events.push(self.reply.delta_event(index, &choice.delta, Some(finish)));
        }
        choice.delta.clear();
        events
    }

    /// The event for what choice `index` made final mid-stream (taken from its delta): a
    /// delta, or for `/generate` the whole text so far; `None` when there is nothing new.
    fn progress(&mut self, index: u32) -> Option<Bytes> {
        let usage = self.generation.usage();
        let (choices, ids) = self.generation.split();
        let choice = choices.get_mut(index)?;
        if choice.delta.is_empty() {
            return None;
        }
        if let Some(speaker) = &mut self.speaker {
            let frame = speaker.delta(&choice.delta);
            choice.delta.clear();
            return frame;
        }
        let frame = match &mut self.text {
            Some(text) => {
                text.push_str(&choice.delta.text);
                self.reply.generate_event(text, ids, None, usage)
            }
            None => self.reply.delta_event(index, &choice.delta, None),
        };
        choice.delta.clear();
        Some(frame)
    }
}

/// `/v1/tokenize` and `/v1/detokenize`: answered from the worker's tokenizer.
async fn answer_locally(
    route: Route,
    target: &Target<'_>,
    body: Bytes,
    deadline: Instant,
) -> Result<Answer, SendError> {
    let window = target.context_window;
    let json = if route == Route::Tokenize {
        on_budget(&target.language, body, deadline, move |language, body| {
            tokenize::tokenize(language, body, window)
        })
        .await?
    } else {
        on_budget(&target.language, body, deadline, tokenize::detokenize).await?
    };
    Ok(http_reply::json(StatusCode::OK, json))
}

/// The request read by its front-end (Messages converted, the OpenAI routes parsed) and
/// its prompt's ids made, within the process's prompt budget ([`prompt::understand`]).
async fn understand(
    target: &Target<'_>,
    route: Api,
    body: Bytes,
    deadline: Instant,
) -> Result<(Ask, Vec<u32>), SendError> {
    let read = move |body: &[u8]| match route {
        Api::Messages => messages::ask(body),
        _ => Ask::parse(route, body)
            .map_err(|Invalid(message)| GatewayError::InvalidRequest { message }),
    };
    let understood = prompt::understand(
        &target.language,
        target.context_window,
        read,
        body,
        deadline,
    )
    .await?;
    Ok(understood)
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The head of a streamed answer.
pub(super) fn sse_response(body: RespBody) -> Answer {
    let mut resp = Response::new(body);
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

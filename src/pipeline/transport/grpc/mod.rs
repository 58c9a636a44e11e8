//! The gRPC transport: the gateway's own chat pipeline in front of an SGLang scheduler.
//!
//! An attempt is served in the gateway: the OpenAI body is read ([`request`]), the prompt
//! rendered with the model's chat template and tokenized (off the event loop when large),
//! the token ids sent with `Generate`, and the ids that stream back decoded, cut at stop
//! strings ([`decode`]) and answered as OpenAI JSON or SSE ([`reply`]). The engine always
//! streams to the gateway, so a stop string or a client that goes away ends the
//! generation at once: the engine is told with `Abort` ([`AbortOnDrop`]). With `n` > 1
//! the engine generates the choices side by side and each is decoded on its own
//! ([`choices`]); a stop string ends its choice only, and the engine is stopped when
//! every choice is over before the engine finished them all.
//!
//! `/v1/messages` is the same chat with Messages at both ends ([`messages`]).
//!
//! Until the engine's first message the attempt can still fail over to another worker;
//! after it, a failure ends the client's stream with an error event.

mod messages;
mod pair;
mod reply;
mod tokenize;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use ::http::{Response, StatusCode};
use bytes::Bytes;
use uuid::Uuid;

use super::{Answer, Attempt, SendError};
use crate::chat::language::Language;
use crate::chat::stops::StopsError;
use crate::engine::grpc::{self, Engine, Events, Wire};
use crate::engine::{
    AbortOnDrop, EngineError, Event, EventStream, Failure, Generate, Handoff, TokenEngine,
};
use crate::fleet::{Transport, Worker};
use crate::http::body::{terminal, Dialect, FrameSender, RespBody};
use crate::http::error::GatewayError;
use crate::http::reply as http_reply;
use crate::http::tls::UpstreamTls;
use crate::metrics::{GenerationTiming, Metrics, RouteLabels};
use crate::pipeline::PipelineSettings;

use crate::generation::ask::{Ask, Invalid, Route};
use crate::generation::choices::{Applied, Choices};
use crate::generation::decode::Decoding;
use crate::generation::delta::{self, ClientGone, Finish, Sink, TurnEnd, Usage};
use crate::generation::parse::Parsing;
use crate::generation::prompt::{self, on_budget};
use reply::{Outcome, Reply, Spelling};

// What the gateway-run Responses API reads of the chat pipeline's output (and makes of a
// provider's answer).
pub use pair::GrpcPair;
pub(super) use pair::PrefillSide;

/// How long an `Abort` may take; it is sent after the client's answer, in the background.
const ABORT_TIMEOUT: Duration = Duration::from_secs(5);
/// What the engine is told when a generation is aborted.
const ABORT_REASON: &str = "client went away or stop matched";
/// Frames a stream may have waiting for a slow client before the producer waits.
pub(super) const STREAM_FRAMES: usize = 16;
/// Longest engine message quoted back to a client.
const MAX_ENGINE_MESSAGE: usize = 512;

/// One data-plane thread's client to gRPC engines (cloned into the tasks that produce
/// streamed Responses).
#[derive(Clone)]
pub struct GrpcClient {
    wire: Wire,
    /// `--stream-stall-timeout-secs`: longest silence of an engine mid-generation.
    stall: Option<Duration>,
    /// Where streamed generations report their timing and tokens.
    metrics: Arc<Metrics>,
}

impl GrpcClient {
    /// `tls`: the roots `grpcs://` engines are verified against.
    pub fn new(
        settings: &PipelineSettings,
        tls: &UpstreamTls,
        metrics: Arc<Metrics>,
    ) -> GrpcClient {
        GrpcClient {
            wire: grpc::client::wire(settings.upstream_pool_idle_timeout, tls),
            stall: settings.stream_stall_timeout,
            metrics,
        }
    }

    /// Whether this build serves `worker` over gRPC: a `grpc://` or `grpcs://` engine of
    /// a service the gateway speaks, whose tokenizer the gateway holds.
    pub fn reaches(&self, worker: &Worker) -> Result<(), GatewayError> {
        let spoken = worker.runtime.grpc_service().is_some();
        match (&worker.transport, &worker.language) {
            (Transport::Grpc { .. }, Some(_)) if spoken => Ok(()),
            _ => Err(GatewayError::UnsupportedTransport { transport: "grpc" }),
        }
    }

    /// Serves `attempt` on `worker` through the gateway's chat pipeline.
    pub async fn send(&self, worker: &Worker, attempt: Attempt<'_>) -> Result<Answer, SendError> {
        let target = Target::of(worker).map_err(SendError::Exchange)?;
        let path = attempt.head.uri.path();
        let route = Route::of_path(path);
        let local = matches!(path, "/v1/tokenize" | "/v1/detokenize");
        if route.is_none() && !local {
            return Err(SendError::Refused(GatewayError::NotImplemented {
                route: "this route on gRPC workers",
            }));
        }
        let body = super::whole_body(attempt.body).await?;
        let Some(route) = route else {
            return answer_locally(path, &target, body, attempt.deadline).await;
        };
        let (ask, prompt) = understand(&target, route, body, attempt.deadline).await?;
        let started = self
            .start(&target, route, &ask, prompt, attempt.deadline, None)
            .await?;
        self.answer(started, &ask, attempt.deadline, attempt.arrived)
            .await
    }

    /// The client's answer from a generation whose engine has begun: streamed by a task
    /// of its own, or collected whole.
    async fn answer(
        &self,
        started: Started,
        ask: &Ask,
        deadline: Instant,
        arrived: Instant,
    ) -> Result<Answer, SendError> {
        let Started {
            mut generation,
            mut events,
            first,
            dispatched,
        } = started;
        if ask.stream {
            let (tx, body) = RespBody::generated(STREAM_FRAMES);
            let stall = self.stall;
            let metrics = self.metrics.clone();
            let include_usage = ask.include_usage;
            tokio::spawn(async move {
                generation
                    .stream(tx, events, first, deadline, stall, include_usage)
                    .await;
                generation.record(&metrics, arrived, dispatched);
            });
            Ok(sse_response(body))
        } else {
            let stream = EngineStream {
                events: &mut events,
                deadline,
                stall: self.stall,
            };
            generation.collect(stream, first).await
        }
    }

    /// One model turn of a gateway-run Responses request: `chat` (a chat completions body)
    /// rendered and sent, and the engine's first message in.
    /// On a prefill/decode pair, `target` is the decode worker and `pair` the prefill side.
    pub(super) async fn chat_turn(
        &self,
        target: &Target<'_>,
        pair: Option<&PrefillSide<'_>>,
        chat: Bytes,
        deadline: Instant,
    ) -> Result<Started, SendError> {
        let (ask, prompt) = understand(target, Route::Chat, chat, deadline).await?;
        match pair {
            Some(side) => self.pair_turn(side, target, &ask, prompt, deadline).await,
            None => {
                self.start(target, Route::Chat, &ask, prompt, deadline, None)
                    .await
            }
        }
    }

    /// The generation `ask` makes on `target`, once checked against what the engine
    /// offers (a refusal here can still go to another worker).
    fn checked_job(
        target: &Target<'_>,
        route: Route,
        ask: &Ask,
        prompt: Vec<u32>,
    ) -> Result<Generate, SendError> {
        let service = target.service;
        if ask.schema.is_some() && !service.caps().constrains {
            return Err(SendError::Refused(GatewayError::InvalidRequest {
                message: format!(
                    "tool_choice required or a named function needs constrained decoding, \
                     which {} workers do not offer through this gateway",
                    service.runtime()
                ),
            }));
        }
        if route == Route::Messages && !ask.stops.is_empty() && !service.caps().stop_sequences {
            return Err(SendError::Refused(GatewayError::InvalidRequest {
                message: format!(
                    "stop_sequences are not supported on {} workers",
                    service.runtime()
                ),
            }));
        }
        if ask.n > 1 && !service.caps().samples_many {
            return Err(SendError::Refused(GatewayError::InvalidRequest {
                message: format!(
                    "n must be 1 on {} workers: the engine generates one sequence per request",
                    service.runtime()
                ),
            }));
        }
        // Checked before dispatch (spec 2): whether prompt plus max_tokens fits is the
        // engine's to say.
        if let Some(window) = target.context_window {
            if prompt.len() > window as usize {
                return Err(SendError::Refused(GatewayError::ContextLengthExceeded {
                    prompt_tokens: prompt.len(),
                    window,
                }));
            }
        }

        let prefix = match route {
            Route::Chat => "chatcmpl-",
            Route::Completions => "cmpl-",
            Route::Generate => "",
            Route::Messages => "msg_",
        };
        let prompt_tokens = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        Ok(Generate {
            request_id: format!("{prefix}{}", Uuid::new_v4().simple()),
            input_ids: prompt,
            params: ask.sampling_params(),
            room: target
                .context_window
                .map(|window| window.saturating_sub(prompt_tokens)),
            handoff: None,
        })
    }

    /// Checks `ask` against what the engine offers, sends the generation (a leg of a
    /// prefill/decode pair with `handoff`) and waits for the engine's first message,
    /// which settles whether this engine serves it (a refusal until then can still go to
    /// another worker).
    async fn start(
        &self,
        target: &Target<'_>,
        route: Route,
        ask: &Ask,
        prompt: Vec<u32>,
        deadline: Instant,
        handoff: Option<Handoff>,
    ) -> Result<Started, SendError> {
        let mut job = Self::checked_job(target, route, ask, prompt)?;
        job.handoff = handoff;
        let Target {
            parsers,
            model_id,
            language,
            ..
        } = target;
        let id = job.request_id.clone();
        let prompt_tokens = u32::try_from(job.input_ids.len()).unwrap_or(u32::MAX);
        let ending_ids = ask.ending_ids(&language.eos_ids);
        // Chat output goes through the worker's parsers; Harmony's are read from the
        // format's special tokens, so those stay in the text.
        let parsers = parsers.as_deref().filter(|_| route.is_chat());
        let skip_special_tokens = ask.skip_special_tokens && !parsers.is_some_and(|p| p.harmony);
        let decodings = (0..ask.n)
            .map(|_| {
                let decoding = Decoding::new(
                    language,
                    &ask.stops,
                    ask.visible_stops,
                    skip_special_tokens,
                    ending_ids.clone(),
                    ask.logprobs.is_some(),
                )?;
                let parsing =
                    parsers.and_then(|p| Parsing::for_request(p, ask, ask.opened_by_prompt));
                Ok((decoding, parsing))
            })
            .collect::<Result<Vec<_>, StopsError>>()
            .map_err(|err| {
                SendError::Refused(GatewayError::InvalidRequest {
                    message: err.to_string(),
                })
            })?;
        let dispatched = Instant::now();
        let (mut events, abort) = self.launch(target, job, deadline).await?;
        let mut stream = EngineStream {
            events: &mut events,
            deadline,
            stall: self.stall,
        };
        // The first message settles whether this engine serves the request: a refusal
        // here can still go to another worker.
        let first = match stream.next().await {
            Ok(Some(Event::Error(err))) => return Err(refusal(&err)),
            Ok(Some(event)) => event,
            Ok(None) => return Err(SendError::Exchange(GatewayError::UpstreamBroken)),
            Err(err) => return Err(SendError::Exchange(err)),
        };
        let reply = Reply {
            route,
            id,
            created: unix_now(),
            model: ask
                .model
                .clone()
                .or_else(|| model_id.as_deref().map(str::to_owned))
                .unwrap_or_default(),
            spelling: ask.logprobs.map(|top| Spelling {
                language: language.clone(),
                top: top as usize,
            }),
        };
        let generation = Generation {
            choices: Choices::new(decodings),
            reply,
            prompt_tokens,
            abort,
            first_token: None,
            keep: (route == Route::Generate).then(Kept::default),
            speaker: (route == Route::Messages).then(|| messages::Speaker::new(ask.stops.clone())),
        };
        Ok(Started {
            generation,
            events,
            first,
            dispatched,
        })
    }
}

impl GrpcClient {
    /// Sends `job` to `target`'s engine; its stream once the engine answered the call,
    /// and the guard that aborts the generation if it is dropped unfinished.
    async fn launch(
        &self,
        target: &Target<'_>,
        job: Generate,
        deadline: Instant,
    ) -> Result<(Events, AbortOnDrop<Engine>), SendError> {
        let engine = Engine::new(
            target.service,
            self.wire.clone(),
            &target.authority,
            target.tls,
        );
        let request_id = job.request_id.clone();
        let remaining = deadline.saturating_duration_since(Instant::now());
        let events = engine
            .generate(job, remaining)
            .await
            .map_err(|failure| match failure {
                // The same request would be refused by every engine: not retried.
                Failure::Refused(message) => refusal(&EngineError {
                    message,
                    blames_request: true,
                }),
                other => SendError::Exchange(engine_failure(other)),
            })?;
        let abort = AbortOnDrop::new(engine, request_id, ABORT_REASON, ABORT_TIMEOUT);
        Ok((events, abort))
    }
}

/// The worker a generation goes to, as the transport reaches it: what of the worker the
/// pipeline reads. Borrowed from the worker on the request's path (the clones are
/// reference counts); [`Target::into_owned`] for the turns of a Responses request, which
/// may run in a task of their own.
#[derive(Clone)]
pub(super) struct Target<'a> {
    context_window: Option<u32>,
    parsers: Option<Arc<crate::parsers::Choice>>,
    model_id: Option<Cow<'a, str>>,
    language: Arc<Language>,
    service: grpc::Service,
    authority: ::http::uri::Authority,
    tls: bool,
}

impl<'w> Target<'w> {
    /// What of `worker` the pipeline reads; a worker that is not a gRPC engine of a
    /// service the gateway speaks, with its tokenizer, is not one.
    pub(super) fn of(worker: &'w Worker) -> Result<Target<'w>, GatewayError> {
        let (Transport::Grpc { authority, tls }, Some(language), Some(service)) = (
            &worker.transport,
            worker.language.clone(),
            worker.runtime.grpc_service(),
        ) else {
            return Err(GatewayError::UnsupportedTransport { transport: "grpc" });
        };
        Ok(Target {
            context_window: worker.context_window,
            parsers: worker.parsers.clone(),
            model_id: worker.model_id.as_deref().map(Cow::Borrowed),
            language,
            service,
            authority: authority.clone(),
            tls: *tls,
        })
    }
}

impl Target<'_> {
    pub(super) fn into_owned(self) -> Target<'static> {
        Target {
            model_id: self.model_id.map(|id| Cow::Owned(id.into_owned())),
            ..self
        }
    }
}

/// A generation whose engine sent its first message.
pub(super) struct Started {
    generation: Generation,
    events: Events,
    first: Event,
    dispatched: Instant,
}

impl Started {
    /// Runs the generation to its end: each delta made final goes to `sink`, and the
    /// frames it returns to `tx` when streaming. A failure partway ends the turn with
    /// what was made so far (the failure in [`TurnEnd::error`]).
    pub(super) async fn drive(
        self,
        deadline: Instant,
        stall: Option<Duration>,
        sink: &mut Sink<'_>,
        tx: Option<&FrameSender>,
    ) -> Result<TurnEnd, ClientGone> {
        let Started {
            mut generation,
            mut events,
            first,
            ..
        } = self;
        let mut stream = EngineStream {
            events: &mut events,
            deadline,
            stall,
        };
        let mut event = Some(first);
        let mut finish = None;
        let mut error = None;
        while finish.is_none() {
            let next = match event.take() {
                Some(event) => Ok(Some(event)),
                None => match tx {
                    Some(tx) => tokio::select! {
                        next = stream.next() => next,
                        () = tx.closed() => return Err(ClientGone),
                    },
                    None => stream.next().await,
                },
            };
            let applied = match next {
                Ok(Some(event)) => generation.apply(event),
                Ok(None) => Err(GatewayError::UpstreamBroken),
                Err(err) => Err(err),
            };
            let index = match applied {
                Ok(Applied::Going(index)) => index,
                Ok(Applied::Finished(index, done)) => {
                    finish = Some(done);
                    index
                }
                Ok(Applied::Ignored) => continue,
                Err(err) => {
                    error = Some(err);
                    break;
                }
            };
            let Some(choice) = generation.choices.get_mut(index) else {
                continue;
            };
            let frames = sink(&choice.delta);
            choice.delta.clear();
            if let (Some(tx), Some(frames)) = (tx, frames) {
                if tx.send(frames).await.is_err() {
                    return Err(ClientGone);
                }
            }
        }
        Ok(TurnEnd {
            finish,
            error,
            usage: generation.usage(),
        })
    }
}

/// `/v1/tokenize` and `/v1/detokenize`: answered from the worker's tokenizer.
async fn answer_locally(
    path: &str,
    target: &Target<'_>,
    body: Bytes,
    deadline: Instant,
) -> Result<Answer, SendError> {
    let window = target.context_window;
    let json = if path == "/v1/tokenize" {
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
    route: Route,
    body: Bytes,
    deadline: Instant,
) -> Result<(Ask, Vec<u32>), SendError> {
    let read = move |body: &[u8]| match route {
        Route::Messages => messages::ask(body),
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

/// An engine's refusal before anything was sent: one that blames the request (e.g. a
/// prompt over its context window) answers the client; any other may go to another
/// worker.
fn refusal(err: &EngineError) -> SendError {
    let message = bounded_message(&err.message);
    if err.blames_request {
        SendError::Refused(GatewayError::InvalidRequest { message })
    } else {
        SendError::Exchange(GatewayError::EngineFailed { message })
    }
}

/// The engine's message stream, each message awaited within the request's deadline and
/// the stall limit.
struct EngineStream<'a> {
    events: &'a mut Events,
    deadline: Instant,
    stall: Option<Duration>,
}

impl EngineStream<'_> {
    /// The next event; `None` when the engine ended the stream.
    async fn next(&mut self) -> Result<Option<Event>, GatewayError> {
        let by = match self.stall {
            Some(stall) => self.deadline.min(Instant::now() + stall),
            None => self.deadline,
        };
        match tokio::time::timeout_at(by.into(), self.events.next()).await {
            Err(_) if Instant::now() >= self.deadline => Err(GatewayError::UpstreamTimeout),
            Err(_) => Err(GatewayError::UpstreamStalled {
                secs: self.stall.map_or(0, |s| s.as_secs()),
            }),
            Ok(Err(failure)) => Err(engine_failure(failure)),
            Ok(Ok(event)) => Ok(event),
        }
    }
}

/// One generation in progress: its choices so far and what its answer repeats.
struct Generation {
    choices: Choices,
    reply: Reply,
    prompt_tokens: u32,
    abort: AbortOnDrop<Engine>,
    /// When the first generated id arrived.
    first_token: Option<Instant>,
    /// `/generate` answers with the whole text and ids so far: kept here; `None` for the
    /// OpenAI routes, which send deltas.
    keep: Option<Kept>,
    /// `/v1/messages` answers in Messages' shapes, written by this; `None` elsewhere.
    speaker: Option<messages::Speaker>,
}

/// The whole output so far, for `/generate`.
#[derive(Default)]
struct Kept {
    text: String,
    ids: Vec<u32>,
}

impl Generation {
    /// Applies `event` to its choice, whose delta takes the text and scores it made final.
    fn apply(&mut self, event: Event) -> Result<Applied, GatewayError> {
        match event {
            Event::Chunk {
                index,
                ids,
                prompt_tokens,
                logprobs,
            } => {
                if self.first_token.is_none() && !ids.is_empty() {
                    self.first_token = Some(Instant::now());
                }
                if prompt_tokens > 0 {
                    self.prompt_tokens = prompt_tokens;
                }
                let applied = self.choices.chunk(index, &ids, logprobs)?;
                self.keep_ids(&ids);
                Ok(applied)
            }
            Event::Complete(complete) => {
                if complete.prompt_tokens > 0 {
                    self.prompt_tokens = complete.prompt_tokens;
                }
                let applied = self.choices.complete(complete);
                if self.choices.engine_done() {
                    // The engine finished every sequence: nothing to abort.
                    self.abort.disarm();
                }
                applied
            }
            Event::Error(err) => Err(GatewayError::EngineFailed {
                message: bounded_message(&err.message),
            }),
        }
    }

    /// Keeps the ids the decoding consumed of `ids` (those after a stop are dropped);
    /// `/generate` has one choice.
    fn keep_ids(&mut self, ids: &[u32]) {
        if let (Some(kept), Some(choice)) = (&mut self.keep, self.choices.iter().next()) {
            kept.ids.extend_from_slice(ids);
            kept.ids.truncate(choice.decoding.tokens as usize);
        }
    }

    /// Reports a finished stream's timing: time to first token from the request's
    /// arrival, the mean gap between tokens after it, the generation from dispatch.
    fn record(&self, metrics: &Metrics, arrived: Instant, dispatched: Instant) {
        let now = Instant::now();
        let tokens = self.choices.tokens();
        let timing = GenerationTiming {
            ttft: self.first_token.map(|t| (t - arrived).as_secs_f64()),
            tpot: self
                .first_token
                .filter(|_| tokens > 1)
                .map(|t| (now - t).as_secs_f64() / f64::from(tokens - 1)),
            duration: (now - dispatched).as_secs_f64(),
            input_tokens: u64::from(self.prompt_tokens),
            output_tokens: u64::from(tokens),
        };
        let route = RouteLabels {
            connection_mode: "grpc",
            model: Some(&self.reply.model),
            endpoint: self.reply.route.endpoint(),
        };
        metrics.generation(&route, &timing);
    }

    /// Completion tokens summed over the choices.
    fn usage(&self) -> Usage {
        Usage::new(self.prompt_tokens, self.choices.tokens())
    }

    /// A non-streamed answer: every event read, one JSON body.
    async fn collect(
        mut self,
        mut stream: EngineStream<'_>,
        first: Event,
    ) -> Result<Answer, SendError> {
        let mut event = first;
        loop {
            self.apply(event).map_err(SendError::Exchange)?;
            if self.choices.all_finished() {
                break;
            }
            event = match stream.next().await {
                Ok(Some(event)) => event,
                Ok(None) => return Err(SendError::Exchange(GatewayError::UpstreamBroken)),
                Err(err) => return Err(SendError::Exchange(err)),
            };
        }
        if let (Some(speaker), Some(choice)) = (&self.speaker, self.choices.iter().next()) {
            let outcome = Outcome {
                text: &choice.delta.text,
                logprobs: &choice.delta.logprobs,
                finish: choice.finish.unwrap_or(Finish::Stop),
                reasoning: &choice.delta.reasoning,
                calls: delta::calls(&choice.delta.calls),
            };
            let stopped_by = choice.decoding.stop_index();
            let body = speaker.body(&self.reply, &outcome, stopped_by, self.usage());
            return Ok(http_reply::json(StatusCode::OK, body));
        }
        let ids = self.keep.as_ref().map_or(&[][..], |k| &k.ids[..]);
        let outcomes: Vec<Outcome<'_>> = self
            .choices
            .iter()
            .map(|c| Outcome {
                text: &c.delta.text,
                logprobs: &c.delta.logprobs,
                finish: c.finish.unwrap_or(Finish::Stop),
                reasoning: &c.delta.reasoning,
                calls: delta::calls(&c.delta.calls),
            })
            .collect();
        let body = self.reply.body(&outcomes, ids, self.usage());
        Ok(http_reply::json(StatusCode::OK, body))
    }

    /// A streamed answer: SSE events sent as the text becomes final, each choice ending
    /// with its finishing event; then the usage event when asked, and `[DONE]` (Messages:
    /// `message_start` first, and `message_stop` is the end). A client that goes away
    /// stops the engine at once.
    async fn stream(
        &mut self,
        tx: FrameSender,
        mut events: Events,
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
        for index in 0..self.choices.len() as u32 {
            if let Some(role) = self.reply.role_event(index) {
                if tx.send(role).await.is_err() {
                    return;
                }
            }
        }
        let mut event = Some(first);
        loop {
            let step = match event.take() {
                Some(event) => self.apply(event),
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
                Err(err) if self.speaker.is_some() => {
                    // Spec 2: a Messages stream that already started reports the failure
                    // as its `error` event and ends there.
                    if tx
                        .send(terminal::render(Dialect::Messages, &err, 0))
                        .await
                        .is_ok()
                    {
                        tx.finish().await;
                    }
                    return;
                }
                Err(err) => {
                    tx.fail(err).await;
                    return;
                }
            }
            if self.choices.all_finished() {
                break;
            }
        }
        if self.speaker.is_none() {
            if include_usage
                && self.keep.is_none()
                && tx.send(self.reply.usage_event(self.usage())).await.is_err()
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
        let usage = self.usage();
        let Some(choice) = self.choices.get_mut(index) else {
            return Vec::new();
        };
        let mut events = Vec::with_capacity(2);
        if let Some(speaker) = &mut self.speaker {
            let stopped_by = choice.decoding.stop_index();
            events.push(speaker.end(&choice.delta, finish, stopped_by, usage));
        } else if let Some(kept) = &mut self.keep {
            kept.text.push_str(&choice.delta.text);
            events.push(
                self.reply
                    .generate_event(&kept.text, &kept.ids, Some(finish), usage),
            );
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
}

impl Generation {
    /// The event for what choice `index` made final mid-stream (taken from its delta): a
    /// delta, or for `/generate` the whole text so far; `None` when there is nothing new.
    fn progress(&mut self, index: u32) -> Option<Bytes> {
        let usage = self.usage();
        let choice = self.choices.get_mut(index)?;
        if choice.delta.is_empty() {
            return None;
        }
        if let Some(speaker) = &mut self.speaker {
            let frame = speaker.delta(&choice.delta);
            choice.delta.clear();
            return frame;
        }
        let frame = match &mut self.keep {
            Some(kept) => {
                kept.text.push_str(&choice.delta.text);
                self.reply
                    .generate_event(&kept.text, &kept.ids, None, usage)
            }
            None => self.reply.delta_event(index, &choice.delta, None),
        };
        choice.delta.clear();
        Some(frame)
    }
}

/// How a failed engine call is answered: a deadline is the worker's timeout, an engine
/// out of reach a connect failure, anything else the engine failing (in its words, cut).
fn engine_failure(failure: Failure) -> GatewayError {
    match failure {
        Failure::Timeout => GatewayError::UpstreamTimeout,
        Failure::Unreachable(_) => GatewayError::UpstreamConnect,
        Failure::Refused(message) | Failure::Failed(message) => GatewayError::EngineFailed {
            message: bounded_message(&message),
        },
    }
}

/// An engine's message, cut to [`MAX_ENGINE_MESSAGE`] bytes at a character boundary.
fn bounded_message(message: &str) -> String {
    let mut end = message.len().min(MAX_ENGINE_MESSAGE);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_owned()
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

//! Running one generation on a token engine, whatever its transport: the ask checked
//! against what the engine can do, the job sent, the engine's first message awaited (until
//! then another worker may still take the request), and each event after it applied to the
//! choices, every wait bounded by the request's deadline and the stall limit. The
//! front-ends write what the choices make in their own shapes; a generation dropped
//! unfinished tells its engine to stop ([`AbortOnDrop`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::ask::{Api, Ask};
use super::choices::{Applied, Choices};
use super::decode::Decoding;
use super::delta::{ClientGone, Sink, TurnEnd, Usage};
use super::parse::Parsing;
use super::prompt::Refused;
use crate::chat::language::Language;
use crate::chat::stops::StopsError;
use crate::engine::{
    AbortOnDrop, AnyEngine, AnyEvents, EngineError, Event, EventStream, Failure, Generate, Handoff,
    TokenEngine,
};
use crate::http::body::FrameSender;
use crate::http::error::GatewayError;

/// How long an `Abort` may take; it is sent after the client's answer, in the background.
const ABORT_TIMEOUT: Duration = Duration::from_secs(5);
/// What the engine is told when a generation is aborted.
const ABORT_REASON: &str = "client went away or stop matched";
/// Longest engine message quoted back to a client.
const MAX_ENGINE_MESSAGE: usize = 512;

/// Why a generation did not start.
#[derive(Debug)]
pub enum StartError {
    /// The request cannot be served as asked (by any engine): the client's answer.
    Refused(GatewayError),
    /// This worker failed it; another may not.
    Worker(GatewayError),
}

impl From<Refused> for StartError {
    fn from(refused: Refused) -> StartError {
        StartError::Refused(refused.0)
    }
}

/// The worker a generation goes to, as the generation reads it: its engine and language
/// kit. Borrowed from the worker on the request's path (the clones are reference counts);
/// [`Target::into_owned`] for the turns of a Responses request, which may run in a task of
/// their own.
#[derive(Clone)]
pub struct Target<'a> {
    pub context_window: Option<u32>,
    pub parsers: Option<Arc<crate::parsers::Choice>>,
    pub model_id: Option<Cow<'a, str>>,
    pub language: Arc<Language>,
    pub engine: AnyEngine,
}

impl Target<'_> {
    pub fn into_owned(self) -> Target<'static> {
        Target {
            model_id: self.model_id.map(|id| Cow::Owned(id.into_owned())),
            ..self
        }
    }
}

/// The generation `ask` makes on `target`, once checked against what the engine offers
/// (a refusal here can still go to another worker).
pub fn checked_job(
    target: &Target<'_>,
    route: Api,
    ask: &Ask,
    prompt: Vec<u32>,
) -> Result<Generate, StartError> {
    let caps = target.engine.caps();
    let runtime = target.engine.runtime();
    if ask.schema.is_some() && !caps.constrains {
        return Err(StartError::Refused(GatewayError::InvalidRequest {
            message: format!(
                "tool_choice required or a named function needs constrained decoding, \
                 which {runtime} workers do not offer through this gateway"
            ),
        }));
    }
    if route == Api::Messages && !ask.stops.is_empty() && !caps.stop_sequences {
        return Err(StartError::Refused(GatewayError::InvalidRequest {
            message: format!("stop_sequences are not supported on {runtime} workers"),
        }));
    }
    if ask.n > 1 && !caps.samples_many {
        return Err(StartError::Refused(GatewayError::InvalidRequest {
            message: format!(
                "n must be 1 on {runtime} workers: the engine generates one sequence per request"
            ),
        }));
    }
    // Checked before dispatch (spec 2): whether prompt plus max_tokens fits is the
    // engine's to say.
    if let Some(window) = target.context_window {
        if prompt.len() > window as usize {
            return Err(StartError::Refused(GatewayError::ContextLengthExceeded {
                prompt_tokens: prompt.len(),
                window,
            }));
        }
    }

    let prefix = match route {
        Api::Chat => "chatcmpl-",
        Api::Completions => "cmpl-",
        Api::Generate => "",
        Api::Messages => "msg_",
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

/// Sends `job` to `target`'s engine; its stream once the engine answered the call, and the
/// guard that aborts the generation if it is dropped unfinished.
pub async fn launch(
    target: &Target<'_>,
    job: Generate,
    deadline: Instant,
) -> Result<(AnyEvents, AbortOnDrop<AnyEngine>), StartError> {
    let request_id = job.request_id.clone();
    let remaining = deadline.saturating_duration_since(Instant::now());
    let events = target
        .engine
        .generate(job, remaining)
        .await
        .map_err(|failure| match failure {
            // The same request would be refused by every engine: not retried.
            Failure::Refused(message) => refusal(&EngineError {
                message,
                blames_request: true,
            }),
            other => StartError::Worker(engine_failure(other)),
        })?;
    let abort = AbortOnDrop::new(
        target.engine.clone(),
        request_id,
        ABORT_REASON,
        ABORT_TIMEOUT,
    );
    Ok((events, abort))
}

/// Checks `ask` against what the engine offers, sends the generation (a leg of a
/// prefill/decode pair with `handoff`) and waits for the engine's first message, which
/// settles whether this engine serves it (a refusal until then can still go to another
/// worker). `/generate` keeps the ids it consumed ([`Generation::kept_ids`]).
pub async fn start(
    target: &Target<'_>,
    route: Api,
    ask: &Ask,
    prompt: Vec<u32>,
    deadline: Instant,
    handoff: Option<Handoff>,
    stall: Option<Duration>,
) -> Result<Started, StartError> {
    let mut job = checked_job(target, route, ask, prompt)?;
    job.handoff = handoff;
    let id = job.request_id.clone();
    let prompt_tokens = u32::try_from(job.input_ids.len()).unwrap_or(u32::MAX);
    let language = &target.language;
    let ending_ids = ask.ending_ids(&language.eos_ids);
    // Chat output goes through the worker's parsers; Harmony's are read from the format's
    // special tokens, so those stay in the text.
    let parsers = target.parsers.as_deref().filter(|_| route.is_chat());
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
            let parsing = parsers.and_then(|p| Parsing::for_request(p, ask, ask.opened_by_prompt));
            Ok((decoding, parsing))
        })
        .collect::<Result<Vec<_>, StopsError>>()
        .map_err(|err| {
            StartError::Refused(GatewayError::InvalidRequest {
                message: err.to_string(),
            })
        })?;
    let dispatched = Instant::now();
    let (mut events, abort) = launch(target, job, deadline).await?;
    let mut stream = EngineStream {
        events: &mut events,
        deadline,
        stall,
    };
    let first = match stream.next().await {
        Ok(Some(Event::Error(err))) => return Err(refusal(&err)),
        Ok(Some(event)) => event,
        Ok(None) => return Err(StartError::Worker(GatewayError::UpstreamBroken)),
        Err(err) => return Err(StartError::Worker(err)),
    };
    Ok(Started {
        generation: Generation {
            choices: Choices::new(decodings),
            prompt_tokens,
            abort,
            first_token: None,
            kept: (route == Api::Generate).then(Vec::new),
        },
        events,
        first,
        dispatched,
        id,
    })
}

/// The engine's message stream, each message awaited within the request's deadline and
/// the stall limit.
pub struct EngineStream<'a> {
    pub events: &'a mut AnyEvents,
    pub deadline: Instant,
    pub stall: Option<Duration>,
}

impl EngineStream<'_> {
    /// The next event; `None` when the engine ended the stream.
    pub async fn next(&mut self) -> Result<Option<Event>, GatewayError> {
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

/// A generation whose engine sent its first message.
pub struct Started {
    pub generation: Generation,
    pub events: AnyEvents,
    pub first: Event,
    /// When the job was sent.
    pub dispatched: Instant,
    /// The engine's request id (`chatcmpl-…`, `msg_…`), which answers repeat.
    pub id: String,
}

impl Started {
    /// Runs the generation to its end: each delta made final goes to `sink`, and the
    /// frames it returns to `tx` when streaming. A failure partway ends the turn with what
    /// was made so far (the failure in [`TurnEnd::error`]).
    pub async fn drive(
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

/// One generation in progress: its choices so far and its counts.
pub struct Generation {
    pub choices: Choices,
    prompt_tokens: u32,
    abort: AbortOnDrop<AnyEngine>,
    /// When the first generated id arrived.
    first_token: Option<Instant>,
    /// The ids the decoding consumed, for answers that repeat them (`/generate`); `None`
    /// where nobody reads them.
    kept: Option<Vec<u32>>,
}

impl Generation {
    /// Applies `event` to its choice, whose delta takes the text and scores it made final.
    pub fn apply(&mut self, event: Event) -> Result<Applied, GatewayError> {
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

    /// Keeps the ids the decoding consumed of `ids` (those after a stop are dropped); kept
    /// for answers of one choice.
    fn keep_ids(&mut self, ids: &[u32]) {
        if let (Some(kept), Some(choice)) = (&mut self.kept, self.choices.iter().next()) {
            kept.extend_from_slice(ids);
            kept.truncate(choice.decoding.tokens as usize);
        }
    }

    /// The choices to write from, and the ids consumed so far beside them.
    pub fn split(&mut self) -> (&mut Choices, &[u32]) {
        (&mut self.choices, self.kept.as_deref().unwrap_or_default())
    }

    /// The ids the decoding consumed so far, where they are kept.
    pub fn kept_ids(&self) -> &[u32] {
        self.kept.as_deref().unwrap_or_default()
    }

    /// When the first generated id arrived.
    pub fn first_token(&self) -> Option<Instant> {
        self.first_token
    }

    /// Prompt tokens (as the engine counted them, once it said) and completion tokens
    /// summed over the choices.
    pub fn usage(&self) -> Usage {
        Usage::new(self.prompt_tokens, self.choices.tokens())
    }
}

/// An engine's refusal before anything was sent: one that blames the request (e.g. a
/// prompt over its context window) answers the client; any other may go to another
/// worker.
pub fn refusal(err: &EngineError) -> StartError {
    let message = bounded_message(&err.message);
    if err.blames_request {
        StartError::Refused(GatewayError::InvalidRequest { message })
    } else {
        StartError::Worker(GatewayError::EngineFailed { message })
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

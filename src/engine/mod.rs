//! The token-engine seam: what the gateway asks an engine that takes token ids to generate,
//! what comes back, and what such an engine can do, in the gateway's own types.
//!
//! Everything above this module (the generation pipeline, the API front-ends) speaks only
//! these types and the [`TokenEngine`] trait; each way of reaching engines lives below it
//! and maps its own messages: [`grpc`] (SGLang's, vLLM's, TensorRT-LLM's, TokenSpeed's and
//! MLX's gRPC services, tonic kept inside) and [`zmq`] (vLLM's engine core over ZMQ).
//! Nothing here knows a gateway or API type, so an engine transport is added beside them
//! without touching the pipeline.

pub mod grpc;
pub mod zmq;

use std::fmt;
use std::future::Future;
use std::time::Duration;

/// The two ways engines share a prefill's KV cache with a decode engine (prefill/decode
/// disaggregation), the same for HTTP pairs and token-engine pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// SGLang: both legs run at once and meet at the prefill's bootstrap server, in one
    /// room.
    Bootstrap,
    /// vLLM's KV connectors: the prefill runs first and answers where its KV cache is;
    /// the decode leg is sent that.
    KvTransfer,
}

/// A generation's part in a prefill/decode pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handoff {
    /// SGLang's `disaggregated_params`, the same on both legs.
    Bootstrap { host: String, port: u16, room: u32 },
    /// vLLM's `kv_transfer_params`, a JSON object given to the engine as it is.
    KvTransfer(String),
}

/// The sampling knobs, every value explicit (proto3 zeroes are not the engines'
/// defaults, so nothing is left to them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    pub temperature: f32,
    pub top_p: f32,
    /// `-1`: off.
    pub top_k: i32,
    pub min_p: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub repetition_penalty: f32,
}

impl Sampling {
    /// `top_k` when it limits anything (services whose field is optional leave "off"
    /// unset; those whose "off" is 0 read `None` as 0).
    pub fn top_k_limit(self) -> Option<u32> {
        u32::try_from(self.top_k).ok().filter(|k| *k > 0)
    }
}

/// How one generation samples and when it ends (stop strings stay with the gateway).
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub sampling: Sampling,
    /// `None`: up to the context window.
    pub max_tokens: Option<u32>,
    /// Stop strings the engine stops on too, for the services whose request has them
    /// (vLLM's, TokenSpeed's); the gateway matches them on its own text either way, so an
    /// engine without them only generates a little longer.
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub skip_special_tokens: bool,
    pub ignore_eos: bool,
    /// Sequences generated from the one prompt (OpenAI's `n`), at least 1.
    pub n: u32,
    /// Log probabilities of every generated token with this many likeliest alternatives
    /// each; `None`: none asked.
    pub logprobs: Option<u32>,
    /// A JSON schema the output must match (constrained decoding), for the engines that
    /// take one ([`Caps::constrains`]).
    pub json_schema: Option<String>,
}

/// One generation to start. It is always streamed from the engine, so the gateway sees
/// every step and can stop the engine at once.
#[derive(Clone, Debug)]
pub struct Generate {
    pub request_id: String,
    pub input_ids: Vec<u32>,
    pub params: Params,
    /// Tokens left in the worker's context window after the prompt, when the window is
    /// known: the bound sent to engines that need one when the client gave no
    /// `max_tokens` (TensorRT-LLM has no "up to the window").
    pub room: Option<u32>,
    /// Set on the legs of a prefill/decode pair; sent by the engines that take it
    /// ([`Caps::disaggregation`]).
    pub handoff: Option<Handoff>,
}

/// What the engine sent, in the gateway's terms.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// New token ids of sequence `index`; `prompt_tokens` is 0 when the engine did not
    /// say; `logprobs` is empty or one entry per id.
    Chunk {
        index: u32,
        ids: Vec<u32>,
        prompt_tokens: u32,
        logprobs: Vec<Option<TokenLogprob>>,
    },
    /// Sequence `Complete::index` ended.
    Complete(Complete),
    /// The engine refused or failed the generation.
    Error(EngineError),
}

/// The end of one sequence of a generation. It carries no ids: streamed, every service
/// sent them in chunks already (see the module's doc).
#[derive(Debug, PartialEq)]
pub struct Complete {
    pub index: u32,
    /// `stop`, `length` or `abort`.
    pub finish_reason: String,
    pub prompt_tokens: u32,
    /// The ids the engine generated for this sequence, as it counts them (the EOS or stop
    /// id it ended on included). The service modules leave it 0 where the complete does
    /// not report the whole sequence; [`Events`] then fills in the ids the chunks carried.
    pub completion_tokens: u32,
    /// A vLLM prefill's answer for its decode leg (`kv_transfer_params`, a JSON object).
    pub kv_transfer_params: Option<String>,
}

impl Complete {
    /// A complete with no counts beyond the prompt's; the service modules fill in what
    /// their message carries.
    pub fn new(index: u32, finish_reason: String, prompt_tokens: u32) -> Complete {
        Complete {
            index,
            finish_reason,
            prompt_tokens,
            completion_tokens: 0,
            kv_transfer_params: None,
        }
    }
}

/// A generated token's log probability and the likeliest tokens at its position.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TokenLogprob {
    pub logprob: f32,
    /// `(id, log probability)`, in the engine's order (likeliest first).
    pub top: Vec<(u32, f32)>,
}

/// An engine's refusal or failure.
#[derive(Debug, PartialEq)]
pub struct EngineError {
    pub message: String,
    /// The engine blames the request (a 4xx or `INVALID_ARGUMENT`): the client is told,
    /// and no other worker would do better.
    pub blames_request: bool,
}

/// What an engine can do beyond generating: the pipeline refuses or adapts what an engine
/// cannot do instead of sending it a request it would misread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Takes a JSON schema the output must match ([`Params::json_schema`]).
    pub constrains: bool,
    /// Takes Messages `stop_sequences` (spec 2 has engines without stop strings of their
    /// own refuse them with 400).
    pub stop_sequences: bool,
    /// Generates several sequences from one prompt (OpenAI's `n`).
    pub samples_many: bool,
    /// How the engine hands a prefill's KV cache to a decode engine; `None`: it has no
    /// prefill/decode fields the gateway speaks.
    pub disaggregation: Option<Protocol>,
}

/// Why a call to an engine gave no answer, as the pipeline tells the client and the
/// worker's breaker.
#[derive(Debug, PartialEq)]
pub enum Failure {
    /// No answer in time: the call's bound, or the engine's own deadline.
    Timeout,
    /// The engine could not be reached (connection refused or lost).
    Unreachable(String),
    /// The engine blames the request itself: every engine would refuse it the same, so
    /// it is the client's answer and not retried.
    Refused(String),
    /// Any other failure, in the engine's (or the transport's) words.
    Failed(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Timeout => f.write_str("no answer in time"),
            Failure::Unreachable(why) => write!(f, "unreachable: {why}"),
            Failure::Refused(why) => write!(f, "refused: {why}"),
            Failure::Failed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Failure {}

/// One engine that generates from token ids, however it is reached. Cheap to clone: a
/// handle on a pooled connection or a socket, never the connection itself.
pub trait TokenEngine: Clone + Send + Sync + 'static {
    /// The events of one generation.
    type Events: EventStream;

    /// What the engine can do.
    fn caps(&self) -> Caps;

    /// The runtime the engine belongs to (`sglang`, `vllm`, ...), as errors name it.
    fn runtime(&self) -> &'static str;

    /// Starts `job`, always streamed; the stream once the engine accepted the call,
    /// within `timeout`.
    fn generate(
        &self,
        job: Generate,
        timeout: Duration,
    ) -> impl Future<Output = Result<Self::Events, Failure>> + Send;

    /// Asks the engine to stop generating for `request_id`, within `timeout`.
    fn abort(
        &self,
        request_id: String,
        reason: &'static str,
        timeout: Duration,
    ) -> impl Future<Output = Result<(), Failure>> + Send;
}

/// The events of one generation, in the engine's order.
pub trait EventStream: Send {
    /// The next event; `None` once the engine ended the stream. Not bounded in time: the
    /// caller waits with its own deadline and stall limit.
    fn next(&mut self) -> impl Future<Output = Result<Option<Event>, Failure>> + Send;
}

/// An engine of any transport this build speaks: what the generation pipeline holds, so
/// that it is written once for all of them (a transport joins as a variant). Held by value:
/// boxing the larger gRPC variant would cost every gRPC generation an allocation to save a
/// ZMQ one a few hundred bytes of stack.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
pub enum AnyEngine {
    Grpc(grpc::Engine),
    Zmq(zmq::Engine),
}

/// The events of an [`AnyEngine`]'s generation (by value, as [`AnyEngine`]).
#[allow(clippy::large_enum_variant)]
pub enum AnyEvents {
    Grpc(grpc::Events),
    Zmq(zmq::Events),
}

impl TokenEngine for AnyEngine {
    type Events = AnyEvents;

    fn caps(&self) -> Caps {
        match self {
            AnyEngine::Grpc(engine) => engine.caps(),
            AnyEngine::Zmq(engine) => engine.caps(),
        }
    }

    fn runtime(&self) -> &'static str {
        match self {
            AnyEngine::Grpc(engine) => engine.runtime(),
            AnyEngine::Zmq(engine) => engine.runtime(),
        }
    }

    async fn generate(&self, job: Generate, timeout: Duration) -> Result<AnyEvents, Failure> {
        match self {
            AnyEngine::Grpc(engine) => engine.generate(job, timeout).await.map(AnyEvents::Grpc),
            AnyEngine::Zmq(engine) => engine.generate(job, timeout).await.map(AnyEvents::Zmq),
        }
    }

    async fn abort(
        &self,
        request_id: String,
        reason: &'static str,
        timeout: Duration,
    ) -> Result<(), Failure> {
        match self {
            AnyEngine::Grpc(engine) => engine.abort(request_id, reason, timeout).await,
            AnyEngine::Zmq(engine) => engine.abort(request_id, reason, timeout).await,
        }
    }
}

impl EventStream for AnyEvents {
    async fn next(&mut self) -> Result<Option<Event>, Failure> {
        match self {
            AnyEvents::Grpc(events) => events.next().await,
            AnyEvents::Zmq(events) => events.next().await,
        }
    }
}

/// Sends `Abort` for a generation the gateway stops waiting for (the client went away, a
/// stop string matched, the attempt failed) unless it was [`disarm`](Self::disarm)ed
/// because the engine finished it first. The abort is sent in the background, bounded by
/// `timeout`, so dropping never waits.
pub struct AbortOnDrop<E: TokenEngine> {
    engine: E,
    /// `None` once there is nothing to abort.
    request_id: Option<String>,
    reason: &'static str,
    timeout: Duration,
}

impl<E: TokenEngine> AbortOnDrop<E> {
    pub fn new(engine: E, request_id: String, reason: &'static str, timeout: Duration) -> Self {
        AbortOnDrop {
            engine,
            request_id: Some(request_id),
            reason,
            timeout,
        }
    }

    /// The engine finished the generation: nothing to abort any more.
    pub fn disarm(&mut self) {
        self.request_id = None;
    }
}

impl<E: TokenEngine> Drop for AbortOnDrop<E> {
    fn drop(&mut self) {
        let Some(request_id) = self.request_id.take() else {
            return;
        };
        // A generation dropped with its runtime (shutdown) has no one left to tell.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let engine = self.engine.clone();
        let (reason, timeout) = (self.reason, self.timeout);
        runtime.spawn(async move {
            if let Err(err) = engine.abort(request_id.clone(), reason, timeout).await {
                tracing::debug!(request_id, error = %err, "abort not delivered");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_off_is_none() {
        let mut k = Sampling {
            temperature: 1.0,
            top_p: 1.0,
            top_k: -1,
            min_p: 0.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repetition_penalty: 1.0,
        };
        assert_eq!(k.top_k_limit(), None);
        k.top_k = 0;
        assert_eq!(k.top_k_limit(), None);
        k.top_k = 40;
        assert_eq!(k.top_k_limit(), Some(40));
    }
}

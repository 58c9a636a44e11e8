//! One face for every gRPC engine the gateway speaks to: what to generate, what comes
//! back and what the engine serves, in the gateway's own types. Each service's messages
//! are mapped in its own module here and nowhere else, so the chat pipeline, registration,
//! the admin fan-out and the load monitor do not know which engine they talk to.
//!
//! The services differ in more than field names. SGLang reports a refused request as a
//! `GenerateError` message; the others refuse with an `INVALID_ARGUMENT` status. The
//! gateway always asks for a streamed generation, and streamed, no service's complete
//! carries an id that a chunk did not: SGLang's, vLLM's and TokenSpeed's repeat their
//! sequence's last chunk, TensorRT-LLM's every id, MLX's none (each module names the
//! servicer function it follows). A complete's ids are therefore never decoded. What a
//! complete counts differs too: SGLang, TokenSpeed and TensorRT-LLM report the sequence's
//! whole `completion_tokens`, vLLM only its last delta's, so [`Events`] counts the ids the
//! chunks carried and hands every complete the sequence's true total.
//!
//! With `n` > 1 the engines interleave the sequences' messages, each chunk and complete
//! naming its sequence by index, and send one complete per sequence (MLX generates one
//! sequence only). Log probabilities come beside the ids they score; they are handed on
//! aligned with the ids of their message.

mod mlx;
mod scores;
mod sglang;
mod tokenspeed;
mod trtllm;
mod vllm;

use std::time::Duration;

use http::uri::Authority;
use tonic::{Code, Status, Streaming};

use super::client::{bounded, origin, timed, CallError, Wire};
use super::common::{
    FlushCacheRequest, GetTokenizerChunk, GetTokenizerRequest, StartProfileRequest,
};
use super::mlx::mlx_engine_client::MlxEngineClient;
use super::sglang::sglang_scheduler_client::SglangSchedulerClient;
use super::tokenspeed::token_speed_scheduler_client::TokenSpeedSchedulerClient;
use super::trtllm::trtllm_service_client::TrtllmServiceClient;
use super::vllm::vllm_engine_client::VllmEngineClient;
use crate::engine::{
    Caps, EngineError, Event, EventStream, Failure, Generate, Protocol, TokenEngine,
};

/// The gRPC services the gateway speaks, in the order registration tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// SGLang's `sglang.grpc.scheduler.SglangScheduler`.
    Sglang,
    /// vLLM's `vllm.grpc.engine.VllmEngine`.
    Vllm,
    /// TensorRT-LLM's `trtllm.TrtllmService`.
    Trtllm,
    /// TokenSpeed's `tokenspeed.grpc.scheduler.TokenSpeedScheduler`.
    Tokenspeed,
    /// MLX's `mlx.grpc.engine.MlxEngine`.
    Mlx,
}

impl Service {
    /// Detection order (spec 1: SGLang, vLLM, TensorRT-LLM, TokenSpeed, MLX).
    pub const DETECTION_ORDER: [Service; 5] = [
        Service::Sglang,
        Service::Vllm,
        Service::Trtllm,
        Service::Tokenspeed,
        Service::Mlx,
    ];

    /// The runtime name the service belongs to.
    pub fn runtime(self) -> &'static str {
        match self {
            Service::Sglang => "sglang",
            Service::Vllm => "vllm",
            Service::Trtllm => "trtllm",
            Service::Tokenspeed => "tokenspeed",
            Service::Mlx => "mlx",
        }
    }

    /// Whether the service reports its scheduler's load (`GetLoads`).
    pub fn reports_loads(self) -> bool {
        matches!(self, Service::Sglang | Service::Vllm | Service::Tokenspeed)
    }

    /// What the service's engines can do. SGLang and vLLM take a JSON schema the output
    /// must match (the others' constraint fields are not spoken here). MLX has no stop
    /// strings of its own (spec 2: its workers refuse Messages `stop_sequences` with 400)
    /// and no `n` (it would answer one sequence where several were asked). SGLang hands a
    /// prefill's KV cache over by bootstrap fields, vLLM by its connectors' parameters.
    pub fn caps(self) -> Caps {
        Caps {
            constrains: matches!(self, Service::Sglang | Service::Vllm),
            stop_sequences: !matches!(self, Service::Mlx),
            samples_many: !matches!(self, Service::Mlx),
            disaggregation: match self {
                Service::Sglang => Some(Protocol::Bootstrap),
                Service::Vllm => Some(Protocol::KvTransfer),
                Service::Trtllm | Service::Tokenspeed | Service::Mlx => None,
            },
        }
    }
}

/// Counts a non-negative int32 the way the gateway counts (a negative one is 0).
fn count(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// An engine's KV-transfer configuration as it reports it (vLLM's `GetServerInfo`); a
/// field the engine leaves empty is `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvFacts {
    pub connector: Option<String>,
    pub role: Option<String>,
    pub engine_id: Option<String>,
}

/// What an engine serves.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelInfo {
    pub served_model_name: String,
    pub model_path: String,
    pub tokenizer_path: String,
    /// 0 when not reported.
    pub max_context_length: u32,
}

/// One data-parallel rank's load as the engine reports it (`GetLoads`); figures it does
/// not fill are 0.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Load {
    pub dp_rank: i32,
    pub num_running_reqs: i32,
    pub num_waiting_reqs: i32,
    pub num_used_tokens: i32,
    pub max_total_num_tokens: i32,
    pub token_usage: f64,
    pub gen_throughput: f64,
    pub cache_hit_rate: f64,
    pub utilization: f64,
    pub max_running_requests: i32,
}

/// A [`Load`] from any service's `SchedulerLoad`: the messages carry the same fields
/// under the same names.
macro_rules! load_of {
    ($l:expr) => {
        Load {
            dp_rank: $l.dp_rank,
            num_running_reqs: $l.num_running_reqs,
            num_waiting_reqs: $l.num_waiting_reqs,
            num_used_tokens: $l.num_used_tokens,
            max_total_num_tokens: $l.max_total_num_tokens,
            token_usage: $l.token_usage,
            gen_throughput: $l.gen_throughput,
            cache_hit_rate: $l.cache_hit_rate,
            utilization: $l.utilization,
            max_running_requests: $l.max_running_requests,
        }
    };
}

/// A unary or stream-opening call on a clone of `rpc` (the generated clients take
/// `&mut self`), bounded by `timeout`, which the engine is told as its deadline.
macro_rules! call {
    ($rpc:expr, $method:ident, $request:expr, $timeout:expr) => {{
        let mut rpc = $rpc.clone();
        bounded($timeout, rpc.$method(timed($request, $timeout))).await
    }};
}

/// Why an administrative call (flush, profile) did not succeed, worded for the fan-out's
/// `failed` list.
#[derive(Debug, PartialEq)]
pub struct AdminFailure(pub String);

/// The stream of an engine's tokenizer archive (`GetTokenizer`): every service sends the
/// shared `smg.grpc.common` chunks.
pub type TokenizerChunks = Streaming<GetTokenizerChunk>;

/// One engine, reached through a thread's [`Wire`]. Cheap to build per call: it holds
/// the pool handle and the engine's origin.
#[derive(Clone)]
pub struct Engine(Client);

#[derive(Clone)]
enum Client {
    Sglang(SglangSchedulerClient<Wire>),
    Vllm(VllmEngineClient<Wire>),
    Trtllm(TrtllmServiceClient<Wire>),
    Tokenspeed(TokenSpeedSchedulerClient<Wire>),
    Mlx(MlxEngineClient<Wire>),
}

impl Engine {
    /// The engine at `authority` speaking `service`, over TLS when `tls` (`grpcs://`).
    pub fn new(service: Service, wire: Wire, authority: &Authority, tls: bool) -> Engine {
        let origin = origin(authority, tls);
        Engine(match service {
            Service::Sglang => Client::Sglang(SglangSchedulerClient::with_origin(wire, origin)),
            Service::Vllm => Client::Vllm(VllmEngineClient::with_origin(wire, origin)),
            Service::Trtllm => Client::Trtllm(TrtllmServiceClient::with_origin(wire, origin)),
            Service::Tokenspeed => {
                Client::Tokenspeed(TokenSpeedSchedulerClient::with_origin(wire, origin))
            }
            Service::Mlx => Client::Mlx(MlxEngineClient::with_origin(wire, origin)),
        })
    }

    /// The service this engine speaks.
    pub fn service(&self) -> Service {
        match &self.0 {
            Client::Sglang(_) => Service::Sglang,
            Client::Vllm(_) => Service::Vllm,
            Client::Trtllm(_) => Service::Trtllm,
            Client::Tokenspeed(_) => Service::Tokenspeed,
            Client::Mlx(_) => Service::Mlx,
        }
    }

    /// `HealthCheck`: whether the engine says it can generate.
    pub async fn health(&self, timeout: Duration) -> Result<bool, CallError> {
        Ok(match &self.0 {
            Client::Sglang(rpc) => call!(rpc, health_check, Default::default(), timeout)?.healthy,
            Client::Vllm(rpc) => call!(rpc, health_check, Default::default(), timeout)?.healthy,
            Client::Trtllm(rpc) => {
                trtllm::healthy(&call!(rpc, health_check, Default::default(), timeout)?)
            }
            Client::Tokenspeed(rpc) => {
                call!(rpc, health_check, Default::default(), timeout)?.healthy
            }
            Client::Mlx(rpc) => call!(rpc, health_check, Default::default(), timeout)?.healthy,
        })
    }

    /// `GetModelInfo`.
    pub async fn model_info(&self, timeout: Duration) -> Result<ModelInfo, CallError> {
        Ok(match &self.0 {
            Client::Sglang(rpc) => {
                sglang::model_info(call!(rpc, get_model_info, Default::default(), timeout)?)
            }
            Client::Vllm(rpc) => {
                vllm::model_info(call!(rpc, get_model_info, Default::default(), timeout)?)
            }
            Client::Trtllm(rpc) => {
                trtllm::model_info(call!(rpc, get_model_info, Default::default(), timeout)?)
            }
            Client::Tokenspeed(rpc) => {
                tokenspeed::model_info(call!(rpc, get_model_info, Default::default(), timeout)?)
            }
            Client::Mlx(rpc) => {
                mlx::model_info(call!(rpc, get_model_info, Default::default(), timeout)?)
            }
        })
    }

    /// `Generate`, streamed; the stream is returned once the engine answered the call.
    async fn generate_call(&self, job: Generate, timeout: Duration) -> Result<Events, CallError> {
        Ok(Events::new(match &self.0 {
            Client::Sglang(rpc) => {
                Stream::Sglang(call!(rpc, generate, sglang::request(job), timeout)?)
            }
            Client::Vllm(rpc) => Stream::Vllm(call!(rpc, generate, vllm::request(job), timeout)?),
            Client::Trtllm(rpc) => {
                Stream::Trtllm(call!(rpc, generate, trtllm::request(job), timeout)?)
            }
            Client::Tokenspeed(rpc) => {
                Stream::Tokenspeed(call!(rpc, generate, tokenspeed::request(job), timeout)?)
            }
            Client::Mlx(rpc) => Stream::Mlx(call!(rpc, generate, mlx::request(job), timeout)?),
        }))
    }

    /// The engine's KV-transfer configuration: vLLM's `GetServerInfo`; `None` for the
    /// services that report none.
    pub async fn kv_facts(&self, timeout: Duration) -> Result<Option<KvFacts>, CallError> {
        match &self.0 {
            Client::Vllm(rpc) => {
                let info = call!(rpc, get_server_info, Default::default(), timeout)?;
                Ok(Some(vllm::kv_facts(info)))
            }
            _ => Ok(None),
        }
    }

    /// `GetLoads`: the engine's load per DP rank (core figures). Services without the
    /// RPC answer as an engine would, UNIMPLEMENTED, without a call.
    pub async fn loads(&self, timeout: Duration) -> Result<Vec<Load>, CallError> {
        Ok(match &self.0 {
            Client::Sglang(rpc) => call!(rpc, get_loads, sglang::loads_request(), timeout)?
                .loads
                .into_iter()
                .map(|l| load_of!(l))
                .collect(),
            Client::Vllm(rpc) => call!(rpc, get_loads, vllm::loads_request(), timeout)?
                .loads
                .into_iter()
                .map(|l| load_of!(l))
                .collect(),
            Client::Tokenspeed(rpc) => call!(rpc, get_loads, tokenspeed::loads_request(), timeout)?
                .loads
                .into_iter()
                .map(|l| load_of!(l))
                .collect(),
            Client::Trtllm(_) | Client::Mlx(_) => {
                return Err(CallError::Status(Status::unimplemented(format!(
                    "{} workers do not report loads",
                    self.service().runtime()
                ))))
            }
        })
    }

    /// `FlushCache`, at once (the engine refuses while requests are in flight, as its
    /// HTTP route does). A refusal counts as a failure; TensorRT-LLM and MLX have no such
    /// RPC (spec 1: reported as UNIMPLEMENTED).
    pub async fn flush_cache(&self, timeout: Duration) -> Result<(), AdminFailure> {
        let request = FlushCacheRequest { timeout_s: 0.0 };
        let answer = match &self.0 {
            Client::Sglang(rpc) => call!(rpc, flush_cache, request, timeout),
            Client::Vllm(rpc) => call!(rpc, flush_cache, request, timeout),
            Client::Tokenspeed(rpc) => call!(rpc, flush_cache, request, timeout),
            Client::Trtllm(_) | Client::Mlx(_) => {
                return Err(unimplemented(self.service(), "FlushCache"))
            }
        };
        let answer = answer.map_err(|err| admin_failure(self.service(), "FlushCache", &err))?;
        refused_unless(answer.success, "FlushCache", &answer.message)
    }

    /// `StartProfile` (SGLang and TokenSpeed; the other services have no profiler RPC).
    pub async fn start_profile(
        &self,
        request: StartProfileRequest,
        timeout: Duration,
    ) -> Result<(), AdminFailure> {
        let answer = match &self.0 {
            Client::Sglang(rpc) => call!(rpc, start_profile, request, timeout),
            Client::Tokenspeed(rpc) => call!(rpc, start_profile, request, timeout),
            _ => return Err(unimplemented(self.service(), "StartProfile")),
        };
        let answer = answer.map_err(|err| admin_failure(self.service(), "StartProfile", &err))?;
        refused_unless(answer.success, "StartProfile", &answer.message)
    }

    /// `StopProfile` (SGLang and TokenSpeed).
    pub async fn stop_profile(&self, timeout: Duration) -> Result<(), AdminFailure> {
        let answer = match &self.0 {
            Client::Sglang(rpc) => call!(rpc, stop_profile, Default::default(), timeout),
            Client::Tokenspeed(rpc) => call!(rpc, stop_profile, Default::default(), timeout),
            _ => return Err(unimplemented(self.service(), "StopProfile")),
        };
        let answer = answer.map_err(|err| admin_failure(self.service(), "StopProfile", &err))?;
        refused_unless(answer.success, "StopProfile", &answer.message)
    }

    /// `GetTokenizer`: the stream of the engine's tokenizer archive, once the engine
    /// answered the call (the chunks are read by the caller within its own bound).
    pub async fn tokenizer(&self, timeout: Duration) -> Result<TokenizerChunks, CallError> {
        let request = GetTokenizerRequest {};
        match &self.0 {
            Client::Sglang(rpc) => call!(rpc, get_tokenizer, request, timeout),
            Client::Vllm(rpc) => call!(rpc, get_tokenizer, request, timeout),
            Client::Trtllm(rpc) => call!(rpc, get_tokenizer, request, timeout),
            Client::Tokenspeed(rpc) => call!(rpc, get_tokenizer, request, timeout),
            Client::Mlx(rpc) => call!(rpc, get_tokenizer, request, timeout),
        }
    }

    /// `Abort`: asks the engine to stop generating for `request_id`.
    async fn abort_call(
        &self,
        request_id: String,
        reason: &str,
        timeout: Duration,
    ) -> Result<(), CallError> {
        match &self.0 {
            Client::Sglang(rpc) => {
                let request = sglang::abort_request(request_id, reason);
                call!(rpc, abort, request, timeout).map(drop)
            }
            Client::Vllm(rpc) => {
                call!(rpc, abort, vllm::abort_request(request_id), timeout).map(drop)
            }
            Client::Trtllm(rpc) => {
                call!(rpc, abort, trtllm::abort_request(request_id), timeout).map(drop)
            }
            Client::Tokenspeed(rpc) => {
                let request = tokenspeed::abort_request(request_id, reason);
                call!(rpc, abort, request, timeout).map(drop)
            }
            Client::Mlx(rpc) => {
                call!(rpc, abort, mlx::abort_request(request_id), timeout).map(drop)
            }
        }
    }
}

/// A failed administrative call, worded as the fan-out reports it; an engine without the
/// RPC is `UNIMPLEMENTED`, as the spec words it.
fn admin_failure(service: Service, rpc: &str, err: &CallError) -> AdminFailure {
    if err.is_unimplemented() {
        unimplemented(service, rpc)
    } else {
        AdminFailure(format!("{rpc} failed: {err}"))
    }
}

fn unimplemented(service: Service, rpc: &str) -> AdminFailure {
    AdminFailure(format!(
        "UNIMPLEMENTED: {} workers do not support {rpc}",
        service.runtime()
    ))
}

/// An answer's `success: false` as a failure carrying the engine's words.
fn refused_unless(success: bool, rpc: &str, message: &str) -> Result<(), AdminFailure> {
    if success {
        Ok(())
    } else if message.is_empty() {
        Err(AdminFailure(format!("{rpc} refused by the engine")))
    } else {
        let message: String = message.chars().take(200).collect();
        Err(AdminFailure(format!(
            "{rpc} refused by the engine: {message}"
        )))
    }
}

/// Whether a failed call's status blames the request, so that no other engine would do
/// better and a retry would be refused the same: `INVALID_ARGUMENT`, and a request over the
/// engine's message size limit (grpcio's `RESOURCE_EXHAUSTED` "Received message larger
/// than max", tonic's `OUT_OF_RANGE` "decoded message length too large"). Any other
/// `RESOURCE_EXHAUSTED` is load, which another engine may not have.
pub fn blames_request(status: &Status) -> bool {
    match status.code() {
        Code::InvalidArgument => true,
        Code::ResourceExhausted => status.message().contains("larger than max"),
        Code::OutOfRange => status.message().contains("too large"),
        _ => false,
    }
}

/// A generation's messages as [`Event`]s, with the ids each sequence's chunks carried
/// (the count of a complete that does not report its sequence's whole).
pub struct Events {
    stream: Stream,
    streamed: Vec<u32>,
}

/// Most sequences whose ids are counted; a request asks for at most 16 (`n`), so an index
/// beyond this is the engine's error, reported by the pipeline, and not counted here.
const MAX_SEQUENCES: usize = 64;

enum Stream {
    Sglang(Streaming<super::sglang::GenerateResponse>),
    Vllm(Streaming<super::vllm::GenerateResponse>),
    Trtllm(Streaming<super::trtllm::GenerateResponse>),
    Tokenspeed(Streaming<super::tokenspeed::GenerateResponse>),
    Mlx(Streaming<super::mlx::GenerateResponse>),
}

/// The next message of `stream` mapped by `event`; `Some(None)` for a message without a
/// body.
macro_rules! next_of {
    ($stream:expr, $event:path) => {
        $stream
            .message()
            .await
            .map(|m| m.map(|m| m.response.map($event)))
    };
}

impl Events {
    fn new(stream: Stream) -> Events {
        Events {
            stream,
            streamed: Vec::new(),
        }
    }

    /// The next event; `None` when the engine ended the stream. Messages without a body
    /// carry nothing and are skipped. Not bounded in time: the caller waits with its own
    /// deadline.
    async fn next_message(&mut self) -> Result<Option<Event>, Status> {
        loop {
            let event = match &mut self.stream {
                Stream::Sglang(stream) => next_of!(stream, sglang::event),
                Stream::Vllm(stream) => next_of!(stream, vllm::event),
                Stream::Trtllm(stream) => next_of!(stream, trtllm::event),
                Stream::Tokenspeed(stream) => next_of!(stream, tokenspeed::event),
                Stream::Mlx(stream) => next_of!(stream, mlx::event),
            };
            match event {
                // Every service but SGLang's older servicers refuses with a status.
                Err(status) if blames_request(&status) => {
                    return Ok(Some(Event::Error(EngineError {
                        message: status.message().to_owned(),
                        blames_request: true,
                    })))
                }
                Err(status) => return Err(status),
                Ok(None) => return Ok(None),
                Ok(Some(Some(event))) => return Ok(Some(self.tally(event))),
                Ok(Some(None)) => continue,
            }
        }
    }

    /// Counts a chunk's ids under its sequence; gives a complete that did not report its
    /// sequence's whole count the ids its chunks carried.
    fn tally(&mut self, mut event: Event) -> Event {
        match &mut event {
            Event::Chunk { index, ids, .. } => {
                let index = *index as usize;
                if index < MAX_SEQUENCES {
                    if self.streamed.len() <= index {
                        self.streamed.resize(index + 1, 0);
                    }
                    let added = u32::try_from(ids.len()).unwrap_or(u32::MAX);
                    self.streamed[index] = self.streamed[index].saturating_add(added);
                }
            }
            Event::Complete(complete) if complete.completion_tokens == 0 => {
                complete.completion_tokens = self
                    .streamed
                    .get(complete.index as usize)
                    .copied()
                    .unwrap_or(0);
            }
            Event::Complete(_) | Event::Error(_) => {}
        }
        event
    }
}

impl TokenEngine for Engine {
    type Events = Events;

    fn caps(&self) -> Caps {
        self.service().caps()
    }

    fn runtime(&self) -> &'static str {
        self.service().runtime()
    }

    async fn generate(&self, job: Generate, timeout: Duration) -> Result<Events, Failure> {
        self.generate_call(job, timeout).await.map_err(failure)
    }

    async fn abort(
        &self,
        request_id: String,
        reason: &'static str,
        timeout: Duration,
    ) -> Result<(), Failure> {
        self.abort_call(request_id, reason, timeout)
            .await
            .map_err(failure)
    }
}

impl EventStream for Events {
    async fn next(&mut self) -> Result<Option<Event>, Failure> {
        self.next_message()
            .await
            .map_err(|status| failure(CallError::Status(status)))
    }
}

/// A failed call in the seam's terms: a deadline is a timeout, `UNAVAILABLE` an engine
/// that cannot be reached, a status that blames the request ([`blames_request`]) a
/// refusal, anything else a failure in the engine's words.
fn failure(err: CallError) -> Failure {
    match err {
        CallError::Timeout => Failure::Timeout,
        CallError::Status(status) => match status.code() {
            Code::DeadlineExceeded => Failure::Timeout,
            Code::Unavailable => Failure::Unreachable(status.message().to_owned()),
            _ if blames_request(&status) => Failure::Refused(status.message().to_owned()),
            _ => Failure::Failed(status.message().to_owned()),
        },
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::engine::{Params, Sampling};

    pub(super) fn params() -> Params {
        Params {
            sampling: Sampling {
                temperature: 0.5,
                top_p: 0.9,
                top_k: -1,
                min_p: 0.0,
                frequency_penalty: 0.1,
                presence_penalty: 0.2,
                repetition_penalty: 1.0,
            },
            max_tokens: Some(7),
            stop: vec!["END".into()],
            stop_token_ids: vec![3],
            skip_special_tokens: true,
            ignore_eos: false,
            n: 1,
            logprobs: None,
            json_schema: None,
        }
    }

    pub(super) fn job() -> Generate {
        Generate {
            request_id: "r1".into(),
            input_ids: vec![1, 2],
            params: params(),
            room: None,
            handoff: None,
        }
    }

    #[test]
    fn detection_order_and_capabilities_follow_the_spec() {
        let names: Vec<&str> = Service::DETECTION_ORDER
            .iter()
            .map(|s| s.runtime())
            .collect();
        assert_eq!(names, ["sglang", "vllm", "trtllm", "tokenspeed", "mlx"]);
        let loads: Vec<bool> = Service::DETECTION_ORDER
            .iter()
            .map(|s| s.reports_loads())
            .collect();
        assert_eq!(loads, [true, true, false, true, false]);
        assert!(!Service::Mlx.caps().samples_many && Service::Trtllm.caps().samples_many);
    }

    #[test]
    fn oversized_requests_blame_the_request_and_load_does_not() {
        let larger = Status::resource_exhausted("Received message larger than max (12 vs. 4)");
        assert!(blames_request(&larger));
        let tonic = Status::out_of_range("Error, decoded message length too large: found 9");
        assert!(blames_request(&tonic));
        assert!(blames_request(&Status::invalid_argument("bad")));
        assert!(!blames_request(&Status::resource_exhausted(
            "too many requests"
        )));
        assert!(!blames_request(&Status::internal("boom")));
    }
}

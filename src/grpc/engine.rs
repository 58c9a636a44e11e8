//! One face for every gRPC engine the gateway speaks to: what to generate, what comes
//! back and what the engine serves, in the gateway's own types. Each service's messages
//! are mapped here and nowhere else, so the chat pipeline and registration do not know
//! which engine they talk to.
//!
//! The services differ in more than field names: SGLang reports a refused request as a
//! `GenerateError` message and ends a stream with the ids no chunk carried; vLLM refuses
//! with an `INVALID_ARGUMENT` status and repeats the last chunk's ids in its complete.
//! Both become the same [`Event`]s.

use std::time::Duration;

use http::uri::Authority;
use tonic::{Code, Status, Streaming};

use super::client::{CallError, Scheduler, Wire};
use super::common::{FlushCacheRequest, StartProfileRequest};
use super::vllm_client::Vllm;
use super::{sglang, vllm};

/// The gRPC services the gateway speaks, in the order registration tries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// SGLang's `sglang.grpc.scheduler.SglangScheduler`.
    Sglang,
    /// vLLM's `vllm.grpc.engine.VllmEngine`.
    Vllm,
}

impl Service {
    /// Detection order (spec 1: SGLang, then vLLM; the others are not spoken).
    pub const DETECTION_ORDER: [Service; 2] = [Service::Sglang, Service::Vllm];

    /// The runtime name the service belongs to.
    pub fn runtime(self) -> &'static str {
        match self {
            Service::Sglang => "sglang",
            Service::Vllm => "vllm",
        }
    }
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

/// How one generation samples and when it ends (stop strings stay with the gateway).
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub sampling: Sampling,
    /// `None`: up to the context window.
    pub max_tokens: Option<u32>,
    pub stop_token_ids: Vec<u32>,
    pub skip_special_tokens: bool,
    pub ignore_eos: bool,
}

/// One generation to start. It is always streamed from the engine, so the gateway sees
/// every step and can stop the engine at once.
#[derive(Clone, Debug)]
pub struct Generate {
    pub request_id: String,
    pub input_ids: Vec<u32>,
    pub params: Params,
}

/// What the engine sent, in the gateway's terms.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// New token ids; `prompt_tokens` is 0 when the engine did not say.
    Chunk { ids: Vec<u32>, prompt_tokens: u32 },
    /// The generation ended.
    Complete(Complete),
    /// The engine refused or failed the generation.
    Error(EngineError),
}

/// The end of a generation.
#[derive(Debug, PartialEq)]
pub struct Complete {
    /// Ids no chunk carried (SGLang sends the last step's here; vLLM repeats them, so
    /// this is empty for it).
    pub ids: Vec<u32>,
    /// `stop`, `length` or `abort`.
    pub finish_reason: String,
    pub prompt_tokens: u32,
}

/// An engine's refusal or failure.
#[derive(Debug, PartialEq)]
pub struct EngineError {
    pub message: String,
    /// The engine blames the request (a 4xx or `INVALID_ARGUMENT`): the client is told,
    /// and no other worker would do better.
    pub blames_request: bool,
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

/// A [`Load`] from either service's `SchedulerLoad`: the two messages carry the same
/// fields under the same names.
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

/// Why an administrative call (flush, profile) did not succeed, worded for the fan-out's
/// `failed` list.
#[derive(Debug, PartialEq)]
pub struct AdminFailure(pub String);

/// One engine, reached through a thread's [`Wire`]. Cheap to build per call.
#[derive(Clone)]
pub enum Engine {
    Sglang(Scheduler),
    Vllm(Vllm),
}

impl Engine {
    /// The engine at `authority` speaking `service`, over TLS when `tls` (`grpcs://`).
    pub fn new(service: Service, wire: Wire, authority: &Authority, tls: bool) -> Engine {
        match service {
            Service::Sglang => Engine::Sglang(Scheduler::new(wire, authority, tls)),
            Service::Vllm => Engine::Vllm(Vllm::new(wire, authority, tls)),
        }
    }

    /// `HealthCheck`: whether the engine says it can generate.
    pub async fn health(&self, timeout: Duration) -> Result<bool, CallError> {
        match self {
            Engine::Sglang(s) => s.health(timeout).await,
            Engine::Vllm(v) => v.health(timeout).await,
        }
    }

    /// `GetModelInfo`.
    pub async fn model_info(&self, timeout: Duration) -> Result<ModelInfo, CallError> {
        Ok(match self {
            Engine::Sglang(s) => {
                let info = s.model_info(timeout).await?;
                ModelInfo {
                    served_model_name: info.served_model_name,
                    model_path: info.model_path,
                    tokenizer_path: info.tokenizer_path,
                    max_context_length: u32::try_from(info.max_context_length).unwrap_or(0),
                }
            }
            Engine::Vllm(v) => {
                let info = v.model_info(timeout).await?;
                ModelInfo {
                    served_model_name: info.served_model_name,
                    model_path: info.model_path,
                    tokenizer_path: info.tokenizer_path,
                    max_context_length: info.max_context_length,
                }
            }
        })
    }

    /// `Generate`, streamed; the stream is returned once the engine answered the call.
    pub async fn generate(&self, job: Generate, timeout: Duration) -> Result<Events, CallError> {
        match self {
            Engine::Sglang(s) => {
                let stream = s.generate(sglang_request(job), timeout).await?;
                Ok(Events(Stream::Sglang(stream)))
            }
            Engine::Vllm(v) => {
                let stream = v.generate(vllm_request(job), timeout).await?;
                Ok(Events(Stream::Vllm(stream)))
            }
        }
    }

    /// `GetLoads`: the engine's load per DP rank (SGLang's core, memory and queue
    /// sections; vLLM reports one rank).
    pub async fn loads(&self, timeout: Duration) -> Result<Vec<Load>, CallError> {
        Ok(match self {
            Engine::Sglang(s) => s
                .loads(&["core"], timeout)
                .await?
                .loads
                .into_iter()
                .map(|l| load_of!(l))
                .collect(),
            Engine::Vllm(v) => v
                .loads(timeout)
                .await?
                .loads
                .into_iter()
                .map(|l| load_of!(l))
                .collect(),
        })
    }

    /// `FlushCache`, at once (the engine refuses while requests are in flight, as its
    /// HTTP route does). A refusal counts as a failure.
    pub async fn flush_cache(&self, timeout: Duration) -> Result<(), AdminFailure> {
        let request = FlushCacheRequest { timeout_s: 0.0 };
        let answer = match self {
            Engine::Sglang(s) => s.flush_cache(request, timeout).await,
            Engine::Vllm(v) => v.flush_cache(request, timeout).await,
        };
        let answer = answer.map_err(|err| admin_failure(self.service(), "FlushCache", &err))?;
        refused_unless(answer.success, "FlushCache", &answer.message)
    }

    /// `StartProfile` (SGLang only; vLLM's service has no profiler RPC).
    pub async fn start_profile(
        &self,
        request: StartProfileRequest,
        timeout: Duration,
    ) -> Result<(), AdminFailure> {
        let Engine::Sglang(s) = self else {
            return Err(unimplemented(self.service(), "StartProfile"));
        };
        let answer = s
            .start_profile(request, timeout)
            .await
            .map_err(|err| admin_failure(Service::Sglang, "StartProfile", &err))?;
        refused_unless(answer.success, "StartProfile", &answer.message)
    }

    /// `StopProfile` (SGLang only).
    pub async fn stop_profile(&self, timeout: Duration) -> Result<(), AdminFailure> {
        let Engine::Sglang(s) = self else {
            return Err(unimplemented(self.service(), "StopProfile"));
        };
        let answer = s
            .stop_profile(timeout)
            .await
            .map_err(|err| admin_failure(Service::Sglang, "StopProfile", &err))?;
        refused_unless(answer.success, "StopProfile", &answer.message)
    }

    /// The service this engine speaks.
    pub fn service(&self) -> Service {
        match self {
            Engine::Sglang(_) => Service::Sglang,
            Engine::Vllm(_) => Service::Vllm,
        }
    }

    /// `Abort`: asks the engine to stop generating for `request_id`.
    pub async fn abort(
        &self,
        request_id: String,
        reason: &str,
        timeout: Duration,
    ) -> Result<(), CallError> {
        match self {
            Engine::Sglang(s) => s.abort(request_id, reason, timeout).await,
            Engine::Vllm(v) => v.abort(request_id, timeout).await,
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

/// A generation's messages as [`Event`]s.
pub struct Events(Stream);

enum Stream {
    Sglang(Streaming<sglang::GenerateResponse>),
    Vllm(Streaming<vllm::GenerateResponse>),
}

impl Events {
    /// The next event; `None` when the engine ended the stream. Messages without a body
    /// carry nothing and are skipped. Not bounded in time: the caller waits with its own
    /// deadline.
    pub async fn next(&mut self) -> Result<Option<Event>, Status> {
        match &mut self.0 {
            Stream::Sglang(stream) => loop {
                match stream.message().await? {
                    None => return Ok(None),
                    Some(message) => {
                        if let Some(event) = message.response.map(from_sglang) {
                            return Ok(Some(event));
                        }
                    }
                }
            },
            Stream::Vllm(stream) => loop {
                match stream.message().await {
                    Err(status) if status.code() == Code::InvalidArgument => {
                        return Ok(Some(Event::Error(EngineError {
                            message: status.message().to_owned(),
                            blames_request: true,
                        })))
                    }
                    Err(status) => return Err(status),
                    Ok(None) => return Ok(None),
                    Ok(Some(message)) => {
                        if let Some(event) = message.response.map(from_vllm) {
                            return Ok(Some(event));
                        }
                    }
                }
            },
        }
    }
}

fn sglang_request(job: Generate) -> sglang::GenerateRequest {
    let p = job.params;
    let k = p.sampling;
    sglang::GenerateRequest {
        request_id: job.request_id,
        tokenized: Some(sglang::TokenizedInput {
            original_text: String::new(),
            input_ids: job.input_ids,
        }),
        sampling_params: Some(sglang::SamplingParams {
            temperature: k.temperature,
            top_p: k.top_p,
            top_k: k.top_k,
            min_p: k.min_p,
            frequency_penalty: k.frequency_penalty,
            presence_penalty: k.presence_penalty,
            repetition_penalty: k.repetition_penalty,
            max_new_tokens: p.max_tokens.map(|n| n.min(i32::MAX as u32) as i32),
            stop_token_ids: p.stop_token_ids,
            skip_special_tokens: p.skip_special_tokens,
            spaces_between_special_tokens: true,
            n: 1,
            ignore_eos: p.ignore_eos,
            ..sglang::SamplingParams::default()
        }),
        stream: true,
        ..sglang::GenerateRequest::default()
    }
}

fn vllm_request(job: Generate) -> vllm::GenerateRequest {
    let p = job.params;
    let k = p.sampling;
    vllm::GenerateRequest {
        request_id: job.request_id,
        input: Some(vllm::generate_request::Input::Tokenized(
            vllm::TokenizedInput {
                original_text: String::new(),
                input_ids: job.input_ids,
            },
        )),
        sampling_params: Some(vllm::SamplingParams {
            temperature: Some(k.temperature),
            top_p: k.top_p,
            // vLLM's "off" is 0.
            top_k: u32::try_from(k.top_k).unwrap_or(0),
            min_p: k.min_p,
            frequency_penalty: k.frequency_penalty,
            presence_penalty: k.presence_penalty,
            repetition_penalty: k.repetition_penalty,
            max_tokens: p.max_tokens,
            stop_token_ids: p.stop_token_ids,
            skip_special_tokens: p.skip_special_tokens,
            spaces_between_special_tokens: true,
            ignore_eos: p.ignore_eos,
            n: 1,
            ..vllm::SamplingParams::default()
        }),
        stream: true,
    }
}

fn from_sglang(response: sglang::generate_response::Response) -> Event {
    use sglang::generate_response::Response;
    match response {
        Response::Chunk(chunk) => Event::Chunk {
            ids: chunk.token_ids,
            prompt_tokens: u32::try_from(chunk.prompt_tokens).unwrap_or(0),
        },
        Response::Complete(complete) => Event::Complete(Complete {
            ids: complete.output_ids,
            finish_reason: complete.finish_reason,
            prompt_tokens: u32::try_from(complete.prompt_tokens).unwrap_or(0),
        }),
        Response::Error(err) => Event::Error(EngineError {
            blames_request: err
                .http_status_code
                .parse::<u16>()
                .is_ok_and(|code| (400..500).contains(&code)),
            message: err.message,
        }),
    }
}

fn from_vllm(response: vllm::generate_response::Response) -> Event {
    use vllm::generate_response::Response;
    match response {
        Response::Chunk(chunk) => Event::Chunk {
            ids: chunk.token_ids,
            prompt_tokens: chunk.prompt_tokens,
        },
        // Streamed, the complete repeats the ids of the chunk just before it.
        Response::Complete(complete) => Event::Complete(Complete {
            ids: Vec::new(),
            finish_reason: complete.finish_reason,
            prompt_tokens: complete.prompt_tokens,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
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
            stop_token_ids: vec![3],
            skip_special_tokens: true,
            ignore_eos: false,
        }
    }

    fn job() -> Generate {
        Generate {
            request_id: "r1".into(),
            input_ids: vec![1, 2],
            params: params(),
        }
    }

    #[test]
    fn sglang_request_sets_every_default_and_streams() {
        let r = sglang_request(job());
        let p = r.sampling_params.unwrap();
        assert!(r.stream);
        assert_eq!(r.tokenized.unwrap().input_ids, vec![1, 2]);
        assert_eq!((p.top_k, p.max_new_tokens, p.n), (-1, Some(7), 1));
        assert_eq!(
            (p.temperature, p.top_p, p.repetition_penalty),
            (0.5, 0.9, 1.0)
        );
        assert_eq!(p.stop_token_ids, vec![3]);
        assert!(p.spaces_between_special_tokens && p.skip_special_tokens);
    }

    #[test]
    fn vllm_request_maps_top_k_off_to_zero_and_streams() {
        let r = vllm_request(job());
        let p = r.sampling_params.unwrap();
        assert!(r.stream);
        let Some(vllm::generate_request::Input::Tokenized(t)) = r.input else {
            panic!("tokenized input expected");
        };
        assert_eq!(t.input_ids, vec![1, 2]);
        assert_eq!((p.top_k, p.max_tokens, p.n), (0, Some(7), 1));
        assert_eq!(p.temperature, Some(0.5));
        let mut with_k = job();
        with_k.params.sampling.top_k = 40;
        assert_eq!(vllm_request(with_k).sampling_params.unwrap().top_k, 40);
    }

    #[test]
    fn vllm_complete_drops_the_repeated_ids() {
        let event = from_vllm(vllm::generate_response::Response::Complete(
            vllm::GenerateComplete {
                output_ids: vec![5, 6],
                finish_reason: "length".into(),
                prompt_tokens: 4,
                ..Default::default()
            },
        ));
        assert_eq!(
            event,
            Event::Complete(Complete {
                ids: vec![],
                finish_reason: "length".into(),
                prompt_tokens: 4
            })
        );
    }

    #[test]
    fn sglang_complete_keeps_the_last_step_and_errors_say_who_is_to_blame() {
        use sglang::generate_response::Response;
        let event = from_sglang(Response::Complete(sglang::GenerateComplete {
            output_ids: vec![9],
            finish_reason: "stop".into(),
            prompt_tokens: 2,
            ..Default::default()
        }));
        let Event::Complete(complete) = event else {
            panic!("complete expected");
        };
        assert_eq!(complete.ids, vec![9]);
        for (code, blames) in [("400", true), ("422", true), ("500", false), ("", false)] {
            let event = from_sglang(Response::Error(sglang::GenerateError {
                message: "m".into(),
                http_status_code: code.into(),
                details: String::new(),
            }));
            assert_eq!(
                event,
                Event::Error(EngineError {
                    message: "m".into(),
                    blames_request: blames
                })
            );
        }
    }
}

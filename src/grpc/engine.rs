//! One face for every gRPC engine the gateway speaks to: what to generate, what comes
//! back and what the engine serves, in the gateway's own types. Each service's messages
//! are mapped here and nowhere else, so the chat pipeline and registration do not know
//! which engine they talk to.
//!
//! The services differ in more than field names: SGLang reports a refused request as a
//! `GenerateError` message and ends a stream with the ids no chunk carried; vLLM refuses
//! with an `INVALID_ARGUMENT` status and repeats the last chunk's ids in its complete.
//! Both become the same [`Event`]s.
//!
//! With `n` > 1 both engines interleave the sequences' messages, each chunk and complete
//! naming its sequence by `index`, and send one complete per sequence. Log probabilities
//! come beside the ids they score (SGLang may send a complete's cumulatively); they are
//! handed on aligned with the ids of their message, so the pipeline never guesses which
//! score belongs to which token.

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
    /// Sequences generated from the one prompt (OpenAI's `n`), at least 1.
    pub n: u32,
    /// Log probabilities of every generated token with this many likeliest alternatives
    /// each; `None`: none asked.
    pub logprobs: Option<u32>,
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

/// The end of one sequence of a generation.
#[derive(Debug, PartialEq)]
pub struct Complete {
    pub index: u32,
    /// Ids no chunk carried (SGLang sends the last step's here; vLLM repeats them, so
    /// this is empty for it).
    pub ids: Vec<u32>,
    /// Empty or one entry per id of `ids`.
    pub logprobs: Vec<Option<TokenLogprob>>,
    /// `stop`, `length` or `abort`.
    pub finish_reason: String,
    pub prompt_tokens: u32,
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
        loop {
            let event = match &mut self.0 {
                Stream::Sglang(stream) => stream
                    .message()
                    .await
                    .map(|m| m.map(|m| m.response.map(from_sglang))),
                Stream::Vllm(stream) => stream
                    .message()
                    .await
                    .map(|m| m.map(|m| m.response.map(from_vllm))),
            };
            match event {
                // vLLM (and SGLang's newer servicers) refuse a request with a status.
                Err(status) if status.code() == Code::InvalidArgument => {
                    return Ok(Some(Event::Error(EngineError {
                        message: status.message().to_owned(),
                        blames_request: true,
                    })))
                }
                Err(status) => return Err(status),
                Ok(None) => return Ok(None),
                Ok(Some(Some(event))) => return Ok(Some(event)),
                Ok(Some(None)) => continue,
            }
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
            n: i32::try_from(p.n.max(1)).unwrap_or(1),
            ignore_eos: p.ignore_eos,
            ..sglang::SamplingParams::default()
        }),
        return_logprob: p.logprobs.is_some(),
        // Generated tokens only: no prompt log probabilities.
        logprob_start_len: -1,
        top_logprobs_num: p
            .logprobs
            .map_or(0, |k| i32::try_from(k).unwrap_or(i32::MAX)),
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
            n: p.n.max(1),
            logprobs: p.logprobs.map(|k| i32::try_from(k).unwrap_or(i32::MAX)),
            ..vllm::SamplingParams::default()
        }),
        stream: true,
    }
}

fn from_sglang(response: sglang::generate_response::Response) -> Event {
    use sglang::generate_response::Response;
    match response {
        Response::Chunk(chunk) => Event::Chunk {
            index: chunk.index,
            logprobs: aligned(&chunk.token_ids, chunk.output_logprobs.map(Scores::from)),
            ids: chunk.token_ids,
            prompt_tokens: u32::try_from(chunk.prompt_tokens).unwrap_or(0),
        },
        Response::Complete(complete) => Event::Complete(Complete {
            index: complete.index,
            logprobs: aligned(
                &complete.output_ids,
                complete.output_logprobs.map(Scores::from),
            ),
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
            index: chunk.index,
            logprobs: aligned(&chunk.token_ids, chunk.output_logprobs.map(Scores::from)),
            ids: chunk.token_ids,
            prompt_tokens: chunk.prompt_tokens,
        },
        // Streamed, the complete repeats the ids (and scores) of its sequence's last chunk.
        Response::Complete(complete) => Event::Complete(Complete {
            index: complete.index,
            ids: Vec::new(),
            logprobs: Vec::new(),
            finish_reason: complete.finish_reason,
            prompt_tokens: complete.prompt_tokens,
        }),
    }
}

/// Either service's `OutputLogProbs` (the two messages are alike).
struct Scores {
    values: Vec<f32>,
    ids: Vec<u32>,
    top: Vec<Vec<(u32, f32)>>,
}

/// `From` for each service's `OutputLogProbs`: the messages are alike field for field.
macro_rules! scores_from {
    ($($message:ty),+) => {$(
        impl From<$message> for Scores {
            fn from(lp: $message) -> Scores {
                let top = lp
                    .top_logprobs
                    .into_iter()
                    .map(|t| t.token_ids.into_iter().zip(t.values).collect())
                    .collect();
                Scores {
                    values: lp.token_logprobs,
                    ids: lp.token_ids,
                    top,
                }
            }
        }
    )+};
}

scores_from!(sglang::OutputLogProbs, vllm::OutputLogProbs);

/// The scores of `ids`, one entry per id (empty when the engine sent none). The engine's
/// entries are matched from the end: a message may score more ids than it carries (a
/// cumulative complete), never the ids of a later one; an id the engine did not score
/// (vLLM leaves out a position it has no score for) gets `None`.
fn aligned(ids: &[u32], scores: Option<Scores>) -> Vec<Option<TokenLogprob>> {
    let Some(scores) = scores else {
        return Vec::new();
    };
    let len = scores.values.len().min(scores.ids.len());
    if len == 0 {
        return Vec::new();
    }
    // Top lists run beside the entries, or are absent when none were asked.
    let mut tops: Vec<Vec<(u32, f32)>> = scores.top.into_iter().take(len).collect();
    tops.resize(len, Vec::new());
    let mut next = len.saturating_sub(ids.len());
    ids.iter()
        .map(|&id| {
            if next < len && scores.ids[next] == id {
                let entry = TokenLogprob {
                    logprob: scores.values[next],
                    top: std::mem::take(&mut tops[next]),
                };
                next += 1;
                Some(entry)
            } else {
                None
            }
        })
        .collect()
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
            n: 1,
            logprobs: None,
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
                index: 0,
                ids: vec![],
                logprobs: vec![],
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

    #[test]
    fn n_and_logprobs_reach_both_services() {
        let mut j = job();
        j.params.n = 3;
        j.params.logprobs = Some(2);
        let r = sglang_request(j.clone());
        assert_eq!(r.sampling_params.unwrap().n, 3);
        assert!(r.return_logprob);
        assert_eq!((r.top_logprobs_num, r.logprob_start_len), (2, -1));
        let v = vllm_request(j).sampling_params.unwrap();
        assert_eq!((v.n, v.logprobs), (3, Some(2)));
        let none = sglang_request(job());
        assert!(!none.return_logprob);
        assert_eq!(vllm_request(job()).sampling_params.unwrap().logprobs, None);
    }

    fn scores(ids: &[u32]) -> Scores {
        Scores {
            values: ids.iter().map(|&id| -(id as f32)).collect(),
            ids: ids.to_vec(),
            top: ids
                .iter()
                .map(|&id| vec![(id, -(id as f32)), (id + 1, -9.0)])
                .collect(),
        }
    }

    #[test]
    fn scores_align_with_the_ids_of_their_message() {
        assert!(aligned(&[1, 2], None).is_empty());
        let same = aligned(&[1, 2], Some(scores(&[1, 2])));
        assert_eq!(same.len(), 2);
        assert_eq!(same[1].as_ref().unwrap().logprob, -2.0);
        assert_eq!(same[1].as_ref().unwrap().top, vec![(2, -2.0), (3, -9.0)]);
        // A cumulative complete: the last entries are this message's.
        let tail = aligned(&[7], Some(scores(&[5, 6, 7])));
        assert_eq!(
            tail,
            vec![Some(TokenLogprob {
                logprob: -7.0,
                top: vec![(7, -7.0), (8, -9.0)]
            })]
        );
        // A position the engine did not score.
        let gap = aligned(&[4, 5, 6], Some(scores(&[4, 6])));
        assert!(gap[0].is_some() && gap[1].is_none() && gap[2].is_some());
        let gap = aligned(&[4, 5], Some(scores(&[5])));
        assert!(gap[0].is_none() && gap[1].is_some());
    }

    #[test]
    fn chunks_and_completes_carry_their_index_and_scores() {
        use sglang::generate_response::Response;
        let lp = sglang::OutputLogProbs {
            token_logprobs: vec![-0.5],
            token_ids: vec![9],
            top_logprobs: vec![sglang::TopLogProbs {
                values: vec![-0.5, -1.5],
                token_ids: vec![9, 10],
            }],
        };
        let event = from_sglang(Response::Chunk(sglang::GenerateStreamChunk {
            token_ids: vec![9],
            index: 2,
            output_logprobs: Some(lp),
            ..Default::default()
        }));
        let Event::Chunk {
            index, logprobs, ..
        } = event
        else {
            panic!("chunk expected");
        };
        assert_eq!(index, 2);
        assert_eq!(
            logprobs[0].as_ref().unwrap().top,
            vec![(9, -0.5), (10, -1.5)]
        );
        let event = from_vllm(vllm::generate_response::Response::Complete(
            vllm::GenerateComplete {
                output_ids: vec![9],
                index: 1,
                output_logprobs: Some(vllm::OutputLogProbs {
                    token_logprobs: vec![-0.5],
                    token_ids: vec![9],
                    top_logprobs: vec![],
                }),
                ..Default::default()
            },
        ));
        let Event::Complete(complete) = event else {
            panic!("complete expected");
        };
        assert_eq!(complete.index, 1);
        assert!(complete.ids.is_empty() && complete.logprobs.is_empty());
    }
}

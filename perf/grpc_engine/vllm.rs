//! vLLM's `VllmEngine` service over the same engine (`--service vllm`).
//!
//! Requests are read into the SGLang shape the backends take, and the generation's
//! messages are reshaped as vLLM's servicer sends them (`reshape.rs`): a chunk per step,
//! then, streamed, a complete that repeats the last chunk's ids and scores, per sequence
//! (`index`) when `n` > 1.

use std::pin::Pin;
use std::sync::Arc;

use tonic::codegen::tokio_stream::{Stream, StreamExt};

use tollgate::engine::grpc::common::{FlushCacheRequest, FlushCacheResponse, GetTokenizerRequest};
use tollgate::engine::grpc::sglang::{self, generate_complete::MatchedStop};
use tollgate::engine::grpc::vllm::generate_response::Response as VllmEvent;
use tollgate::engine::grpc::vllm::vllm_engine_server::VllmEngine;
use tollgate::engine::grpc::vllm::{
    self, AbortRequest, AbortResponse, GenerateResponse, GetLoadsRequest, GetLoadsResponse,
    GetModelInfoRequest, GetModelInfoResponse, GetServerInfoRequest, GetServerInfoResponse,
    HealthCheckRequest, HealthCheckResponse, SchedulerLoad,
};
use tonic::{Request, Response, Status};

use crate::cli::Role;
use crate::disagg::Handoff;
use crate::reshape::{Reshaped, Reshaper, Servicer, Step};
use crate::service::Engine;

/// The tonic service: a cheap handle on the shared [`Engine`].
#[derive(Clone)]
pub struct VllmService(pub Arc<Engine>);

#[tonic::async_trait]
impl VllmEngine for VllmService {
    type GenerateStream = Pin<Box<dyn Stream<Item = Result<GenerateResponse, Status>> + Send>>;

    async fn generate(
        &self,
        request: Request<vllm::GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let request = request.into_inner();
        let handoff = request
            .kv_transfer_params_json
            .clone()
            .map_or(Handoff::None, Handoff::KvTransfer);
        let request = to_sglang(request)?;
        let answer_params = self.0.answer_params(&request.request_id, &handoff);
        let reshaper = Reshaper::for_request(Servicer::Vllm, &request);
        let rx = self.0.start(request, handoff).await?;
        let stream = Reshaped::new(rx, reshaper, wrap);
        Ok(Response::new(match answer_params {
            // A prefill's completes say where its KV cache is.
            Some(params) => Box::pin(stream.map(move |message| {
                message.map(|mut message| {
                    if let Some(VllmEvent::Complete(complete)) = &mut message.response {
                        complete.kv_transfer_params_json = Some(params.clone());
                    }
                    message
                })
            })),
            None => Box::pin(stream),
        }))
    }

    async fn health_check(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let (healthy, message) = self.0.health().await;
        Ok(Response::new(HealthCheckResponse { healthy, message }))
    }

    async fn abort(
        &self,
        request: Request<AbortRequest>,
    ) -> Result<Response<AbortResponse>, Status> {
        for request_id in request.into_inner().request_ids {
            self.0.abort(&request_id);
        }
        Ok(Response::new(AbortResponse {}))
    }

    async fn get_model_info(
        &self,
        _request: Request<GetModelInfoRequest>,
    ) -> Result<Response<GetModelInfoResponse>, Status> {
        let info = self.0.model_info().await?;
        let unsigned = |n: i32| u32::try_from(n).unwrap_or(0);
        Ok(Response::new(GetModelInfoResponse {
            model_path: info.model_path,
            is_generation: info.is_generation,
            max_context_length: unsigned(info.max_context_length),
            vocab_size: unsigned(info.vocab_size),
            supports_vision: false,
            served_model_name: info.served_model_name,
            tokenizer_path: info.tokenizer_path,
            model_type: info.model_type,
            architectures: Vec::new(),
            eos_token_ids: info.eos_token_ids,
            pad_token_id: info.pad_token_id,
            bos_token_id: info.bos_token_id,
            max_req_input_len: info.max_req_input_len,
        }))
    }

    async fn get_loads(
        &self,
        _request: Request<GetLoadsRequest>,
    ) -> Result<Response<GetLoadsResponse>, Status> {
        let l = self.0.load();
        Ok(Response::new(GetLoadsResponse {
            timestamp: String::new(),
            version: "grpc-engine".to_string(),
            dp_rank_count: 1,
            loads: vec![SchedulerLoad {
                dp_rank: l.dp_rank,
                num_running_reqs: l.num_running_reqs,
                num_total_reqs: l.num_total_reqs,
                max_running_requests: l.max_running_requests,
                ..SchedulerLoad::default()
            }],
        }))
    }

    async fn get_server_info(
        &self,
        _request: Request<GetServerInfoRequest>,
    ) -> Result<Response<GetServerInfoResponse>, Status> {
        let flags = self.0.flags();
        let kv_role = match flags.role {
            Role::Prefill => "kv_producer",
            Role::Decode => "kv_consumer",
            Role::Null => "",
        };
        Ok(Response::new(GetServerInfoResponse {
            kv_connector: flags.kv_connector.clone().unwrap_or_default(),
            kv_role: kv_role.to_owned(),
            kv_engine_id: flags.kv_engine_id.clone().unwrap_or_default(),
        }))
    }

    async fn flush_cache(
        &self,
        _request: Request<FlushCacheRequest>,
    ) -> Result<Response<FlushCacheResponse>, Status> {
        Ok(Response::new(self.0.flush_cache()))
    }

    type GetTokenizerStream = crate::tokenizer::Chunks;

    async fn get_tokenizer(
        &self,
        _request: Request<GetTokenizerRequest>,
    ) -> Result<Response<Self::GetTokenizerStream>, Status> {
        self.0.tokenizer().map(Response::new)
    }
}

/// A vLLM request in the shape the backends take. vLLM's zeroes differ from SGLang's:
/// top_k 0 is off, n 0 is one, an unset temperature is 1; `logprobs` set asks for scores
/// with that many alternatives (vLLM's -1, every token, is refused).
fn to_sglang(request: vllm::GenerateRequest) -> Result<sglang::GenerateRequest, Status> {
    let input_ids = match request.input {
        Some(vllm::generate_request::Input::Tokenized(t)) => t.input_ids,
        Some(vllm::generate_request::Input::Text(_)) => {
            return Err(Status::invalid_argument(
                "grpc-engine takes tokenized input only",
            ))
        }
        None => return Err(Status::invalid_argument("GenerateRequest has no input")),
    };
    let p = request.sampling_params.unwrap_or_default();
    let top_logprobs_num = match p.logprobs {
        None => 0,
        Some(k) if k >= 0 => k,
        Some(k) => {
            return Err(Status::invalid_argument(format!(
                "grpc-engine takes logprobs >= 0, not {k}"
            )))
        }
    };
    let top_k = match p.top_k {
        0 => -1,
        k => i32::try_from(k).unwrap_or(i32::MAX),
    };
    Ok(sglang::GenerateRequest {
        request_id: request.request_id,
        tokenized: Some(sglang::TokenizedInput {
            original_text: String::new(),
            input_ids,
        }),
        sampling_params: Some(sglang::SamplingParams {
            temperature: p.temperature.unwrap_or(1.0),
            top_p: p.top_p,
            top_k,
            min_p: p.min_p,
            frequency_penalty: p.frequency_penalty,
            presence_penalty: p.presence_penalty,
            repetition_penalty: p.repetition_penalty,
            max_new_tokens: p.max_tokens.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            stop: p.stop,
            stop_token_ids: p.stop_token_ids,
            skip_special_tokens: p.skip_special_tokens,
            spaces_between_special_tokens: p.spaces_between_special_tokens,
            n: i32::try_from(p.n.max(1)).unwrap_or(i32::MAX),
            ignore_eos: p.ignore_eos,
            constraint: p.constraint.map(|c| match c {
                vllm::sampling_params::Constraint::JsonSchema(schema) => {
                    sglang::sampling_params::Constraint::JsonSchema(schema)
                }
            }),
            ..sglang::SamplingParams::default()
        }),
        return_logprob: p.logprobs.is_some(),
        top_logprobs_num,
        logprob_start_len: -1,
        stream: request.stream,
        ..sglang::GenerateRequest::default()
    })
}

/// A step as vLLM's message.
fn wrap(step: Step) -> GenerateResponse {
    let event = match step {
        Step::Chunk {
            index,
            ids,
            scores,
            prompt_tokens,
            completion_tokens: _,
            cached_tokens,
        } => VllmEvent::Chunk(vllm::GenerateStreamChunk {
            // `_chunk_response`: the delta's count, not the sequence's.
            completion_tokens: u32::try_from(ids.len()).unwrap_or(u32::MAX),
            token_ids: ids,
            prompt_tokens,
            cached_tokens,
            output_logprobs: scores.map(to_vllm_scores),
            index,
        }),
        Step::Complete {
            index,
            ids,
            scores,
            finish_reason,
            matched_stop,
            prompt_tokens,
            completion_tokens: _,
            cached_tokens,
        } => VllmEvent::Complete(vllm::GenerateComplete {
            // `_complete_response`: `len(completion.token_ids)`, the ids of this message
            // only (streamed, the last delta; not streamed, every id).
            completion_tokens: u32::try_from(ids.len()).unwrap_or(u32::MAX),
            output_ids: ids,
            finish_reason,
            prompt_tokens,
            cached_tokens,
            output_logprobs: scores.map(to_vllm_scores),
            index,
            matched_stop: matched_stop.map(|m| match m {
                MatchedStop::MatchedTokenId(id) => {
                    vllm::generate_complete::MatchedStop::MatchedTokenId(id)
                }
                MatchedStop::MatchedStopStr(s) => {
                    vllm::generate_complete::MatchedStop::MatchedStopStr(s)
                }
            }),
            kv_transfer_params_json: None,
        }),
    };
    GenerateResponse {
        response: Some(event),
    }
}

/// SGLang's scores message as vLLM's (the two are alike).
fn to_vllm_scores(scores: sglang::OutputLogProbs) -> vllm::OutputLogProbs {
    vllm::OutputLogProbs {
        token_logprobs: scores.token_logprobs,
        token_ids: scores.token_ids,
        top_logprobs: scores
            .top_logprobs
            .into_iter()
            .map(|t| vllm::TopLogProbs {
                values: t.values,
                token_ids: t.token_ids,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A streamed request for one id with `params`.
    fn request_with(params: vllm::SamplingParams) -> vllm::GenerateRequest {
        vllm::GenerateRequest {
            request_id: "r".into(),
            input: Some(vllm::generate_request::Input::Tokenized(
                vllm::TokenizedInput {
                    original_text: String::new(),
                    input_ids: vec![1],
                },
            )),
            sampling_params: Some(params),
            stream: true,
            kv_transfer_params_json: None,
        }
    }

    #[test]
    fn vllm_zeroes_read_as_its_defaults() {
        let request = request_with(vllm::SamplingParams::default());
        let p = to_sglang(request).unwrap().sampling_params.unwrap();
        assert_eq!((p.temperature, p.top_k, p.n), (1.0, -1, 1));
    }

    #[test]
    fn n_and_logprobs_reach_the_backend() {
        let params = vllm::SamplingParams {
            n: 3,
            logprobs: Some(2),
            ..Default::default()
        };
        let r = to_sglang(request_with(params)).unwrap();
        assert_eq!(r.sampling_params.unwrap().n, 3);
        assert!(r.return_logprob);
        assert_eq!(r.top_logprobs_num, 2);
    }

    #[test]
    fn steps_become_vllm_messages() {
        let message = wrap(Step::Complete {
            index: 1,
            ids: vec![4],
            scores: None,
            finish_reason: "stop".into(),
            matched_stop: Some(MatchedStop::MatchedTokenId(4)),
            prompt_tokens: 3,
            completion_tokens: 2,
            cached_tokens: 0,
        });
        let Some(VllmEvent::Complete(c)) = message.response else {
            panic!("a complete");
        };
        // `_complete_response` counts the ids of its own message, not the sequence's 2.
        assert_eq!(
            (c.index, c.output_ids, c.completion_tokens),
            (1, vec![4], 1)
        );
        assert_eq!(
            c.matched_stop,
            Some(vllm::generate_complete::MatchedStop::MatchedTokenId(4))
        );
    }
}

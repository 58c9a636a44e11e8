//! TokenSpeed's `TokenSpeedScheduler` over the same engine (`--service tokenspeed`).
//!
//! SGLang's lineage: the same RPCs (loads, flush, profiler), but every sampling scalar is
//! optional (unset: the engine's default), refusals are `INVALID_ARGUMENT` statuses, and a
//! streamed complete repeats its step's ids like vLLM's (`reshape.rs`).

use std::sync::Arc;

use tollgate::engine::grpc::common::{
    FlushCacheRequest, FlushCacheResponse, GetTokenizerRequest, ProfileResponse,
    StartProfileRequest, StopProfileRequest,
};
use tollgate::engine::grpc::sglang::{self, generate_complete::MatchedStop, OutputLogProbs};
use tollgate::engine::grpc::tokenspeed::generate_response::Response as TsEvent;
use tollgate::engine::grpc::tokenspeed::token_speed_scheduler_server::TokenSpeedScheduler;
use tollgate::engine::grpc::tokenspeed::{
    self, AbortRequest, AbortResponse, GenerateResponse, GetLoadsRequest, GetLoadsResponse,
    GetModelInfoRequest, GetModelInfoResponse, HealthCheckRequest, HealthCheckResponse,
    SchedulerLoad,
};
use tonic::{Request, Response, Status};

use crate::disagg::Handoff;
use crate::reshape::{Reshaped, Reshaper, Servicer, Step};
use crate::service::Engine;

/// The tonic service: a cheap handle on the shared [`Engine`].
#[derive(Clone)]
pub struct TsService(pub Arc<Engine>);

#[tonic::async_trait]
impl TokenSpeedScheduler for TsService {
    type GenerateStream = Reshaped<GenerateResponse>;

    async fn generate(
        &self,
        request: Request<tokenspeed::GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let request = to_sglang(request.into_inner())?;
        let reshaper = Reshaper::for_request(Servicer::Tokenspeed, &request);
        let rx = self.0.start(request, Handoff::None).await?;
        Ok(Response::new(Reshaped::new(rx, reshaper, wrap)))
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
        let request_id = request.into_inner().request_id;
        let success = self.0.abort(&request_id);
        Ok(Response::new(AbortResponse {
            success,
            message: String::new(),
        }))
    }

    async fn get_model_info(
        &self,
        _request: Request<GetModelInfoRequest>,
    ) -> Result<Response<GetModelInfoResponse>, Status> {
        let info = self.0.model_info().await?;
        Ok(Response::new(GetModelInfoResponse {
            model_path: info.model_path,
            tokenizer_path: info.tokenizer_path,
            served_model_name: info.served_model_name,
            model_type: info.model_type,
            architectures: Vec::new(),
            max_context_length: info.max_context_length,
            max_req_input_len: info.max_req_input_len,
            vocab_size: info.vocab_size,
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

    async fn flush_cache(
        &self,
        _request: Request<FlushCacheRequest>,
    ) -> Result<Response<FlushCacheResponse>, Status> {
        Ok(Response::new(self.0.flush_cache()))
    }

    async fn start_profile(
        &self,
        request: Request<StartProfileRequest>,
    ) -> Result<Response<ProfileResponse>, Status> {
        Ok(Response::new(self.0.start_profile(&request.into_inner())))
    }

    async fn stop_profile(
        &self,
        _request: Request<StopProfileRequest>,
    ) -> Result<Response<ProfileResponse>, Status> {
        Ok(Response::new(self.0.stop_profile()))
    }

    type GetTokenizerStream = crate::tokenizer::Chunks;

    async fn get_tokenizer(
        &self,
        _request: Request<GetTokenizerRequest>,
    ) -> Result<Response<Self::GetTokenizerStream>, Status> {
        self.0.tokenizer().map(Response::new)
    }
}

/// A TokenSpeed request in the shape the backends take: unset scalars are the engine's
/// defaults.
fn to_sglang(request: tokenspeed::GenerateRequest) -> Result<sglang::GenerateRequest, Status> {
    let input_ids = request
        .tokenized
        .ok_or_else(|| Status::invalid_argument("GenerateRequest has no tokenized input"))?
        .input_ids;
    if request.top_logprobs_num < 0 {
        return Err(Status::invalid_argument(format!(
            "grpc-engine takes top_logprobs_num >= 0, not {}",
            request.top_logprobs_num
        )));
    }
    let p = request.sampling_params.unwrap_or_default();
    Ok(sglang::GenerateRequest {
        request_id: request.request_id,
        tokenized: Some(sglang::TokenizedInput {
            original_text: String::new(),
            input_ids,
        }),
        sampling_params: Some(sglang::SamplingParams {
            temperature: p.temperature.unwrap_or(1.0),
            top_p: p.top_p.unwrap_or(1.0),
            top_k: p.top_k.filter(|k| *k > 0).unwrap_or(-1),
            min_p: p.min_p.unwrap_or(0.0),
            frequency_penalty: p.frequency_penalty.unwrap_or(0.0),
            presence_penalty: p.presence_penalty.unwrap_or(0.0),
            repetition_penalty: p.repetition_penalty.unwrap_or(1.0),
            max_new_tokens: p
                .max_new_tokens
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            stop: p.stop,
            stop_token_ids: p.stop_token_ids,
            skip_special_tokens: p.skip_special_tokens,
            spaces_between_special_tokens: p.spaces_between_special_tokens,
            n: i32::try_from(p.n.max(1)).unwrap_or(i32::MAX),
            ignore_eos: p.ignore_eos,
            ..sglang::SamplingParams::default()
        }),
        return_logprob: request.return_logprob,
        top_logprobs_num: request.top_logprobs_num,
        logprob_start_len: request.logprob_start_len.unwrap_or(-1),
        stream: request.stream,
        ..sglang::GenerateRequest::default()
    })
}

/// A step as TokenSpeed's message.
fn wrap(step: Step) -> GenerateResponse {
    let event = match step {
        Step::Chunk {
            index,
            ids,
            scores,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        } => TsEvent::Chunk(tokenspeed::GenerateStreamChunk {
            completion_tokens,
            token_ids: ids,
            prompt_tokens,
            cached_tokens,
            output_logprobs: scores.map(to_scores),
            index,
        }),
        Step::Complete {
            index,
            ids,
            scores,
            finish_reason,
            matched_stop,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        } => TsEvent::Complete(tokenspeed::GenerateComplete {
            output_ids: ids,
            finish_reason,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            output_logprobs: scores.map(to_scores),
            matched_stop: matched_stop.map(|m| match m {
                MatchedStop::MatchedTokenId(id) => {
                    tokenspeed::generate_complete::MatchedStop::MatchedTokenId(id)
                }
                MatchedStop::MatchedStopStr(s) => {
                    tokenspeed::generate_complete::MatchedStop::MatchedStopStr(s)
                }
            }),
            index,
        }),
    };
    GenerateResponse {
        request_id: String::new(),
        response: Some(event),
    }
}

fn to_scores(scores: OutputLogProbs) -> tokenspeed::OutputLogProbs {
    tokenspeed::OutputLogProbs {
        token_logprobs: scores.token_logprobs,
        token_ids: scores.token_ids,
        top_logprobs: scores
            .top_logprobs
            .into_iter()
            .map(|t| tokenspeed::TopLogProbs {
                values: t.values,
                token_ids: t.token_ids,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_scalars_are_the_engines_defaults() {
        let request = tokenspeed::GenerateRequest {
            request_id: "r".into(),
            tokenized: Some(tokenspeed::TokenizedInput {
                input_ids: vec![1],
                original_text: String::new(),
            }),
            stream: true,
            ..Default::default()
        };
        let r = to_sglang(request).unwrap();
        let p = r.sampling_params.unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k, p.n), (1.0, 1.0, -1, 1));
        assert_eq!((p.repetition_penalty, p.max_new_tokens), (1.0, None));
        assert_eq!(r.logprob_start_len, -1);
    }

    #[test]
    fn explicit_values_reach_the_backend() {
        let request = tokenspeed::GenerateRequest {
            request_id: "r".into(),
            tokenized: Some(tokenspeed::TokenizedInput::default()),
            sampling_params: Some(tokenspeed::SamplingParams {
                temperature: Some(0.0),
                top_k: Some(40),
                max_new_tokens: Some(9),
                n: 2,
                ..Default::default()
            }),
            return_logprob: true,
            top_logprobs_num: 3,
            ..Default::default()
        };
        let r = to_sglang(request).unwrap();
        let p = r.sampling_params.unwrap();
        assert_eq!(
            (p.temperature, p.top_k, p.n, p.max_new_tokens),
            (0.0, 40, 2, Some(9))
        );
        assert!(r.return_logprob);
        assert_eq!(r.top_logprobs_num, 3);
    }
}

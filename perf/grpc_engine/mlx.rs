//! MLX's `MlxEngine` over the same engine (`--service mlx`).
//!
//! vLLM's message shapes (top_k 0 is off, an unset temperature is the engine's default)
//! with one sequence per request (the request has no `n`), refusals as `INVALID_ARGUMENT`
//! statuses, and a streamed complete that carries no ids (`reshape.rs`).

use std::sync::Arc;

use tollgate::engine::grpc::common::GetTokenizerRequest;
use tollgate::engine::grpc::mlx::generate_response::Response as MlxEvent;
use tollgate::engine::grpc::mlx::mlx_engine_server::MlxEngine;
use tollgate::engine::grpc::mlx::{
    self, AbortRequest, AbortResponse, GenerateResponse, GetModelInfoRequest, GetModelInfoResponse,
    HealthCheckRequest, HealthCheckResponse,
};
use tollgate::engine::grpc::sglang::{self, generate_complete::MatchedStop, OutputLogProbs};
use tonic::{Request, Response, Status};

use crate::disagg::Handoff;
use crate::reshape::{Reshaped, Reshaper, Servicer, Step};
use crate::service::Engine;

/// The tonic service: a cheap handle on the shared [`Engine`].
#[derive(Clone)]
pub struct MlxService(pub Arc<Engine>);

#[tonic::async_trait]
impl MlxEngine for MlxService {
    type GenerateStream = Reshaped<GenerateResponse>;

    async fn generate(
        &self,
        request: Request<mlx::GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let request = to_sglang(request.into_inner())?;
        let reshaper = Reshaper::for_request(Servicer::Mlx, &request);
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
            served_model_name: info.served_model_name,
            model_type: info.model_type,
            architectures: Vec::new(),
            eos_token_ids: info.eos_token_ids.into_iter().map(unsigned).collect(),
        }))
    }

    type GetTokenizerStream = crate::tokenizer::Chunks;

    async fn get_tokenizer(
        &self,
        _request: Request<GetTokenizerRequest>,
    ) -> Result<Response<Self::GetTokenizerStream>, Status> {
        self.0.tokenizer().map(Response::new)
    }
}

/// An MLX request in the shape the backends take: one sequence.
fn to_sglang(request: mlx::GenerateRequest) -> Result<sglang::GenerateRequest, Status> {
    let input_ids = match request.input {
        Some(mlx::generate_request::Input::Tokenized(t)) => t.input_ids,
        Some(mlx::generate_request::Input::Text(_)) => {
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
    Ok(sglang::GenerateRequest {
        request_id: request.request_id,
        tokenized: Some(sglang::TokenizedInput {
            original_text: String::new(),
            input_ids,
        }),
        sampling_params: Some(sglang::SamplingParams {
            temperature: p.temperature.unwrap_or(1.0),
            top_p: p.top_p,
            top_k: match p.top_k {
                0 => -1,
                k => i32::try_from(k).unwrap_or(i32::MAX),
            },
            min_p: p.min_p,
            frequency_penalty: p.frequency_penalty,
            presence_penalty: p.presence_penalty,
            repetition_penalty: p.repetition_penalty,
            max_new_tokens: p.max_tokens.map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            stop_token_ids: p.stop_token_ids,
            skip_special_tokens: true,
            n: 1,
            ignore_eos: p.ignore_eos,
            ..sglang::SamplingParams::default()
        }),
        return_logprob: p.logprobs.is_some(),
        top_logprobs_num,
        logprob_start_len: -1,
        stream: request.stream,
        ..sglang::GenerateRequest::default()
    })
}

/// A step as MLX's message.
fn wrap(step: Step) -> GenerateResponse {
    let event = match step {
        Step::Chunk {
            index,
            ids,
            scores,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        } => MlxEvent::Chunk(mlx::GenerateStreamChunk {
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
        } => MlxEvent::Complete(mlx::GenerateComplete {
            output_ids: ids,
            finish_reason,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            output_logprobs: scores.map(to_scores),
            index,
            matched_stop_token_id: match matched_stop {
                Some(MatchedStop::MatchedTokenId(id)) => Some(id),
                _ => None,
            },
        }),
    };
    GenerateResponse {
        response: Some(event),
    }
}

fn to_scores(scores: OutputLogProbs) -> mlx::OutputLogProbs {
    mlx::OutputLogProbs {
        token_logprobs: scores.token_logprobs,
        token_ids: scores.token_ids,
        top_logprobs: scores
            .top_logprobs
            .into_iter()
            .map(|t| mlx::TopLogProbs {
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
    fn one_sequence_with_the_real_defaults() {
        let request = mlx::GenerateRequest {
            request_id: "r".into(),
            input: Some(mlx::generate_request::Input::Tokenized(
                mlx::TokenizedInput {
                    original_text: String::new(),
                    input_ids: vec![1, 2],
                },
            )),
            sampling_params: Some(mlx::SamplingParams {
                top_p: 1.0,
                repetition_penalty: 1.0,
                logprobs: Some(2),
                ..Default::default()
            }),
            stream: true,
        };
        let r = to_sglang(request).unwrap();
        let p = r.sampling_params.unwrap();
        assert_eq!((p.temperature, p.top_k, p.n), (1.0, -1, 1));
        assert!(r.return_logprob);
        assert_eq!(r.top_logprobs_num, 2);
    }

    #[test]
    fn text_input_is_refused() {
        let request = mlx::GenerateRequest {
            input: Some(mlx::generate_request::Input::Text("hi".into())),
            ..Default::default()
        };
        assert_eq!(
            to_sglang(request).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }
}

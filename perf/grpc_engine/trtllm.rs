//! TensorRT-LLM's `TrtllmService` over the same engine (`--service trtllm`).
//!
//! The request needs `max_tokens` (0 is refused: the engine has no "up to the window"),
//! its sampling scalars are optional (unset: the engine's default), and the prompt is
//! echoed unless `exclude_input_from_output` is set, which the mock insists on. Streamed,
//! the complete repeats every id of its sequence (`reshape.rs`); scores come one message
//! per token; health is a status word.

use std::sync::Arc;

use tollgate::engine::grpc::common::GetTokenizerRequest;
use tollgate::engine::grpc::sglang::{self, generate_complete::MatchedStop, OutputLogProbs};
use tollgate::engine::grpc::trtllm::generate_response::Response as TrtEvent;
use tollgate::engine::grpc::trtllm::trtllm_service_server::TrtllmService;
use tollgate::engine::grpc::trtllm::{
    self, AbortRequest, AbortResponse, GenerateResponse, GetModelInfoRequest, GetModelInfoResponse,
    HealthCheckRequest, HealthCheckResponse,
};
use tonic::{Request, Response, Status};

use crate::disagg::Handoff;
use crate::reshape::{Reshaped, Reshaper, Servicer, Step};
use crate::service::Engine;

/// The tonic service: a cheap handle on the shared [`Engine`].
#[derive(Clone)]
pub struct TrtService(pub Arc<Engine>);

#[tonic::async_trait]
impl TrtllmService for TrtService {
    type GenerateStream = Reshaped<GenerateResponse>;

    async fn generate(
        &self,
        request: Request<trtllm::GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let request = to_sglang(request.into_inner())?;
        let reshaper = Reshaper::for_request(Servicer::Trtllm, &request);
        let rx = self.0.start(request, Handoff::None).await?;
        Ok(Response::new(Reshaped::new(rx, reshaper, wrap)))
    }

    async fn health_check(
        &self,
        _request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        let (healthy, message) = self.0.health().await;
        let status = if healthy { "OK".to_string() } else { message };
        Ok(Response::new(HealthCheckResponse { status }))
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
            model_id: info.served_model_name,
            max_input_len: info.max_req_input_len,
            max_seq_len: info.max_context_length,
            max_batch_size: 0,
            vocab_size: info.vocab_size,
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

/// A TensorRT-LLM request in the shape the backends take.
fn to_sglang(request: trtllm::GenerateRequest) -> Result<sglang::GenerateRequest, Status> {
    let input_ids = request
        .tokenized
        .ok_or_else(|| Status::invalid_argument("GenerateRequest has no tokenized input"))?
        .input_token_ids;
    if request.max_tokens == 0 {
        return Err(Status::invalid_argument("max_tokens must be at least 1"));
    }
    let output = request.output_config.unwrap_or_default();
    if !output.exclude_input_from_output {
        return Err(Status::invalid_argument(
            "grpc-engine sends generated ids only: set exclude_input_from_output",
        ));
    }
    let c = request.sampling_config.unwrap_or_default();
    let top_logprobs_num = match output.logprobs {
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
            temperature: c.temperature.unwrap_or(1.0),
            top_p: c.top_p.unwrap_or(1.0),
            top_k: c.top_k.filter(|k| *k > 0).unwrap_or(-1),
            min_p: c.min_p.unwrap_or(0.0),
            frequency_penalty: c.frequency_penalty.unwrap_or(0.0),
            presence_penalty: c.presence_penalty.unwrap_or(0.0),
            repetition_penalty: c.repetition_penalty.unwrap_or(1.0),
            max_new_tokens: Some(i32::try_from(request.max_tokens).unwrap_or(i32::MAX)),
            stop_token_ids: request.stop_token_ids,
            n: i32::try_from(c.num_return_sequences.max(1)).unwrap_or(i32::MAX),
            ignore_eos: request.ignore_eos,
            skip_special_tokens: true,
            ..sglang::SamplingParams::default()
        }),
        return_logprob: output.logprobs.is_some(),
        top_logprobs_num,
        logprob_start_len: -1,
        stream: request.streaming,
        ..sglang::GenerateRequest::default()
    })
}

/// A step as TensorRT-LLM's message.
fn wrap(step: Step) -> GenerateResponse {
    let event = match step {
        Step::Chunk {
            index,
            ids,
            scores,
            prompt_tokens,
            completion_tokens,
            cached_tokens,
        } => TrtEvent::Chunk(trtllm::GenerateStreamChunk {
            completion_tokens,
            token_ids: ids,
            sequence_index: index,
            prompt_tokens,
            cached_tokens,
            logprobs: per_token(scores),
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
        } => TrtEvent::Complete(trtllm::GenerateComplete {
            output_token_ids: ids,
            sequence_index: index,
            finish_reason,
            matched_stop: matched_stop.map(|m| match m {
                MatchedStop::MatchedTokenId(id) => {
                    trtllm::generate_complete::MatchedStop::MatchedTokenId(id)
                }
                MatchedStop::MatchedStopStr(s) => {
                    trtllm::generate_complete::MatchedStop::MatchedStopStr(s)
                }
            }),
            prompt_tokens,
            completion_tokens,
            cached_tokens,
            logprobs: per_token(scores),
        }),
    };
    GenerateResponse {
        request_id: String::new(),
        response: Some(event),
    }
}

/// SGLang's parallel score lists as TensorRT-LLM's one message per token.
fn per_token(scores: Option<OutputLogProbs>) -> Vec<trtllm::TokenLogprob> {
    let Some(scores) = scores else {
        return Vec::new();
    };
    let mut top = scores.top_logprobs.into_iter();
    scores
        .token_ids
        .into_iter()
        .zip(scores.token_logprobs)
        .map(|(token_id, logprob)| trtllm::TokenLogprob {
            token_id,
            logprob,
            top_logprobs: top
                .next()
                .map(|t| {
                    t.token_ids
                        .into_iter()
                        .zip(t.values)
                        .map(|(token_id, logprob)| trtllm::TopLogprob { token_id, logprob })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> trtllm::GenerateRequest {
        trtllm::GenerateRequest {
            request_id: "r".into(),
            tokenized: Some(trtllm::TokenizedInput {
                original_text: String::new(),
                input_token_ids: vec![1, 2],
            }),
            output_config: Some(trtllm::OutputConfig {
                logprobs: None,
                exclude_input_from_output: true,
            }),
            max_tokens: 5,
            streaming: true,
            ..Default::default()
        }
    }

    #[test]
    fn unset_scalars_are_the_engines_defaults() {
        let r = to_sglang(request()).unwrap();
        let p = r.sampling_params.unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k, p.n), (1.0, 1.0, -1, 1));
        assert_eq!((p.repetition_penalty, p.max_new_tokens), (1.0, Some(5)));
        assert!(r.stream && !r.return_logprob);
    }

    #[test]
    fn max_tokens_and_exclusion_are_required() {
        let mut r = request();
        r.max_tokens = 0;
        assert_eq!(
            to_sglang(r).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let mut r = request();
        r.output_config = None;
        assert_eq!(
            to_sglang(r).unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
    }

    #[test]
    fn scores_go_out_per_token() {
        let scores = per_token(Some(OutputLogProbs {
            token_logprobs: vec![-0.1, -0.2],
            token_ids: vec![7, 8],
            top_logprobs: vec![sglang::TopLogProbs {
                values: vec![-0.1],
                token_ids: vec![7],
            }],
        }));
        assert_eq!(scores.len(), 2);
        assert_eq!((scores[1].token_id, scores[1].logprob), (8, -0.2));
        assert_eq!(scores[0].top_logprobs[0].token_id, 7);
        assert!(scores[1].top_logprobs.is_empty());
    }
}

//! vLLM's `VllmEngine` service over the same engine (`--service vllm`).
//!
//! Requests are read into the SGLang shape the backends take, and the generation's
//! messages are reshaped as vLLM's servicer sends them: a chunk per step, then, streamed,
//! a complete that repeats the last chunk's ids and scores (not streamed, one complete
//! with every id), per sequence (`index`) when `n` > 1; a refusal is an
//! `INVALID_ARGUMENT` status, a failure `INTERNAL`, since vLLM's service has no error
//! message.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tollgate::grpc::common::{FlushCacheRequest, FlushCacheResponse};
use tollgate::grpc::sglang::{self, generate_response::Response as SglangEvent};
use tollgate::grpc::vllm::generate_response::Response as VllmEvent;
use tollgate::grpc::vllm::vllm_engine_server::VllmEngine;
use tollgate::grpc::vllm::{
    self, AbortRequest, AbortResponse, GenerateResponse, GetLoadsRequest, GetLoadsResponse,
    GetModelInfoRequest, GetModelInfoResponse, HealthCheckRequest, HealthCheckResponse,
    SchedulerLoad,
};
use tonic::{Request, Response, Status};

use crate::service::Engine;
use crate::sink::Item;

/// The tonic service: a cheap handle on the shared [`Engine`].
#[derive(Clone)]
pub struct VllmService(pub Arc<Engine>);

#[tonic::async_trait]
impl VllmEngine for VllmService {
    type GenerateStream = VllmStream;

    async fn generate(
        &self,
        request: Request<vllm::GenerateRequest>,
    ) -> Result<Response<VllmStream>, Status> {
        let request = to_sglang(request.into_inner())?;
        let stream = request.stream;
        let rx = self.0.start(request).await?;
        Ok(Response::new(VllmStream {
            rx,
            stream,
            last: Vec::new(),
            ready: VecDeque::new(),
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

    async fn flush_cache(
        &self,
        _request: Request<FlushCacheRequest>,
    ) -> Result<Response<FlushCacheResponse>, Status> {
        Ok(Response::new(self.0.flush_cache()))
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
            ..sglang::SamplingParams::default()
        }),
        return_logprob: p.logprobs.is_some(),
        top_logprobs_num,
        logprob_start_len: -1,
        stream: request.stream,
        ..sglang::GenerateRequest::default()
    })
}

/// Most sequences one stream tracks (the backends allow fewer).
const MAX_SEQUENCES: usize = 64;

/// A sequence's last chunk, which its streamed complete repeats.
#[derive(Default)]
struct Last {
    ids: Vec<u32>,
    scores: Option<vllm::OutputLogProbs>,
}

/// The generation's messages, reshaped as vLLM sends them.
pub struct VllmStream {
    rx: mpsc::Receiver<Item>,
    stream: bool,
    /// By sequence index.
    last: Vec<Last>,
    /// Messages made from one SGLang message and not yet sent.
    ready: VecDeque<Result<GenerateResponse, Status>>,
}

impl VllmStream {
    /// Queues the vLLM messages one SGLang message becomes.
    fn reshape(&mut self, item: Item) {
        let event = match item {
            Err(status) => return self.ready.push_back(Err(status)),
            Ok(message) => match message.response {
                Some(event) => event,
                None => return,
            },
        };
        match event {
            SglangEvent::Chunk(chunk) => {
                let Some(last) = self.last(chunk.index) else {
                    return self.too_many(chunk.index);
                };
                last.ids.clone_from(&chunk.token_ids);
                let scores = chunk.output_logprobs.map(to_vllm_scores);
                last.scores.clone_from(&scores);
                self.push_chunk(
                    chunk.index,
                    chunk.token_ids,
                    scores,
                    chunk.prompt_tokens,
                    chunk.cached_tokens,
                );
            }
            SglangEvent::Complete(complete) => {
                let index = complete.index;
                let prompt_tokens = unsigned(complete.prompt_tokens);
                let scores = complete.output_logprobs.map(to_vllm_scores);
                let (output_ids, output_logprobs) = if self.stream {
                    // SGLang's complete carries the last step's ids: vLLM sends them as
                    // a chunk, then repeats them.
                    if !complete.output_ids.is_empty() {
                        let Some(last) = self.last(index) else {
                            return self.too_many(index);
                        };
                        last.ids.clone_from(&complete.output_ids);
                        last.scores.clone_from(&scores);
                        self.push_chunk(
                            index,
                            complete.output_ids,
                            scores,
                            complete.prompt_tokens,
                            complete.cached_tokens,
                        );
                    }
                    let last = self.last(index).map(std::mem::take).unwrap_or_default();
                    (last.ids, last.scores)
                } else {
                    (complete.output_ids, scores)
                };
                let matched_stop = complete.matched_stop.map(|m| match m {
                    sglang::generate_complete::MatchedStop::MatchedTokenId(id) => {
                        vllm::generate_complete::MatchedStop::MatchedTokenId(id)
                    }
                    sglang::generate_complete::MatchedStop::MatchedStopStr(s) => {
                        vllm::generate_complete::MatchedStop::MatchedStopStr(s)
                    }
                });
                let completion_tokens = u32::try_from(output_ids.len()).unwrap_or(u32::MAX);
                self.push(VllmEvent::Complete(vllm::GenerateComplete {
                    output_ids,
                    finish_reason: complete.finish_reason,
                    prompt_tokens,
                    completion_tokens,
                    cached_tokens: unsigned(complete.cached_tokens),
                    output_logprobs,
                    index,
                    matched_stop,
                }));
            }
            SglangEvent::Error(err) => {
                let client_fault = err.http_status_code.starts_with('4');
                self.ready.push_back(Err(if client_fault {
                    Status::invalid_argument(err.message)
                } else {
                    Status::internal(err.message)
                }));
            }
        }
    }

    /// The last chunk of sequence `index`; `None` past [`MAX_SEQUENCES`].
    fn last(&mut self, index: u32) -> Option<&mut Last> {
        let at = index as usize;
        if at >= MAX_SEQUENCES {
            return None;
        }
        if self.last.len() <= at {
            self.last.resize_with(at + 1, Last::default);
        }
        self.last.get_mut(at)
    }

    fn too_many(&mut self, index: u32) {
        self.ready.push_back(Err(Status::internal(format!(
            "grpc-engine: sequence {index}, at most {MAX_SEQUENCES}"
        ))));
    }

    fn push_chunk(
        &mut self,
        index: u32,
        ids: Vec<u32>,
        scores: Option<vllm::OutputLogProbs>,
        prompt_tokens: i32,
        cached_tokens: i32,
    ) {
        let completion_tokens = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        self.push(VllmEvent::Chunk(vllm::GenerateStreamChunk {
            token_ids: ids,
            prompt_tokens: unsigned(prompt_tokens),
            completion_tokens,
            cached_tokens: unsigned(cached_tokens),
            output_logprobs: scores,
            index,
        }));
    }

    fn push(&mut self, event: VllmEvent) {
        self.ready.push_back(Ok(GenerateResponse {
            response: Some(event),
        }));
    }
}

impl tonic::codegen::tokio_stream::Stream for VllmStream {
    type Item = Result<GenerateResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(next) = self.ready.pop_front() {
                return Poll::Ready(Some(next));
            }
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(item)) => self.reshape(item),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

fn unsigned(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
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

    fn sglang_message(event: SglangEvent) -> Item {
        Ok(sglang::GenerateResponse {
            request_id: "r".into(),
            response: Some(event),
        })
    }

    fn stream(streamed: bool) -> VllmStream {
        let (_tx, rx) = mpsc::channel(1);
        VllmStream {
            rx,
            stream: streamed,
            last: Vec::new(),
            ready: VecDeque::new(),
        }
    }

    fn drained(s: &mut VllmStream) -> Vec<VllmEvent> {
        s.ready
            .drain(..)
            .map(|m| m.ok().and_then(|m| m.response).expect("a message"))
            .collect()
    }

    #[test]
    fn a_streamed_complete_repeats_the_last_chunk() {
        let mut s = stream(true);
        s.reshape(sglang_message(SglangEvent::Chunk(
            sglang::GenerateStreamChunk {
                token_ids: vec![1, 2],
                prompt_tokens: 3,
                ..Default::default()
            },
        )));
        s.reshape(sglang_message(SglangEvent::Complete(
            sglang::GenerateComplete {
                output_ids: vec![4],
                finish_reason: "length".into(),
                prompt_tokens: 3,
                ..Default::default()
            },
        )));
        let events = drained(&mut s);
        let ids: Vec<(bool, Vec<u32>)> = events
            .iter()
            .map(|e| match e {
                VllmEvent::Chunk(c) => (false, c.token_ids.clone()),
                VllmEvent::Complete(c) => (true, c.output_ids.clone()),
            })
            .collect();
        assert_eq!(
            ids,
            vec![(false, vec![1, 2]), (false, vec![4]), (true, vec![4])]
        );
    }

    #[test]
    fn a_request_error_is_invalid_argument() {
        let mut s = stream(true);
        s.reshape(sglang_message(SglangEvent::Error(sglang::GenerateError {
            message: "too long".into(),
            http_status_code: "400".into(),
            details: String::new(),
        })));
        let status = s.ready.pop_front().and_then(Result::err).expect("status");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }

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
        }
    }

    #[test]
    fn vllm_zeroes_read_as_its_defaults() {
        let request = request_with(vllm::SamplingParams::default());
        let p = to_sglang(request).unwrap().sampling_params.unwrap();
        assert_eq!((p.temperature, p.top_k, p.n), (1.0, -1, 1));
    }

    #[test]
    fn each_sequence_repeats_its_own_last_chunk_and_scores() {
        let mut s = stream(true);
        let scored = |id: u32| {
            Some(sglang::OutputLogProbs {
                token_logprobs: vec![-1.0],
                token_ids: vec![id],
                top_logprobs: vec![],
            })
        };
        for (index, id) in [(0, 5), (1, 6), (0, 7)] {
            s.reshape(sglang_message(SglangEvent::Chunk(
                sglang::GenerateStreamChunk {
                    token_ids: vec![id],
                    index,
                    output_logprobs: scored(id),
                    ..Default::default()
                },
            )));
        }
        for index in [1, 0] {
            s.reshape(sglang_message(SglangEvent::Complete(
                sglang::GenerateComplete {
                    finish_reason: "length".into(),
                    index,
                    ..Default::default()
                },
            )));
        }
        let completes: Vec<(u32, Vec<u32>, Vec<u32>)> = drained(&mut s)
            .into_iter()
            .filter_map(|e| match e {
                VllmEvent::Complete(c) => Some((
                    c.index,
                    c.output_ids,
                    c.output_logprobs.map(|l| l.token_ids).unwrap_or_default(),
                )),
                VllmEvent::Chunk(_) => None,
            })
            .collect();
        assert_eq!(completes, [(1, vec![6], vec![6]), (0, vec![7], vec![7])]);
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
}

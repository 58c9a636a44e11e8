//! TensorRT-LLM's service: the request needs `max_tokens`, sampling scalars are
//! optional (unset is the engine's default, top_k 0 is off), scores come one message per
//! token, a streamed complete repeats every generated id, and health is a status word.

use super::scores::{aligned, Scores};
use super::ModelInfo;
use crate::engine::grpc::trtllm::{
    generate_response::Response, AbortRequest, GenerateRequest, GetModelInfoResponse,
    HealthCheckResponse, OutputConfig, SamplingConfig, TokenizedInput,
};
use crate::engine::{Complete, Event, Generate};

/// `max_tokens` when neither the client nor the worker's context window gives one: the
/// engine has no "up to the window", and registration normally learns the window from
/// `GetModelInfo`'s `max_seq_len`, so this only applies to an engine that reports none.
const UNBOUNDED_MAX_TOKENS: u32 = 4096;

pub(super) fn request(job: Generate) -> GenerateRequest {
    let p = job.params;
    let k = p.sampling;
    GenerateRequest {
        request_id: job.request_id,
        tokenized: Some(TokenizedInput {
            original_text: String::new(),
            input_token_ids: job.input_ids,
        }),
        sampling_config: Some(SamplingConfig {
            beam_width: 1,
            num_return_sequences: p.n.max(1),
            top_k: k.top_k_limit().and_then(|k| i32::try_from(k).ok()),
            top_p: Some(k.top_p),
            seed: None,
            temperature: Some(k.temperature),
            repetition_penalty: Some(k.repetition_penalty),
            presence_penalty: Some(k.presence_penalty),
            frequency_penalty: Some(k.frequency_penalty),
            min_p: Some(k.min_p),
        }),
        output_config: Some(OutputConfig {
            logprobs: p.logprobs.map(|k| i32::try_from(k).unwrap_or(i32::MAX)),
            exclude_input_from_output: true,
        }),
        max_tokens: p
            .max_tokens
            .or(job.room)
            .unwrap_or(UNBOUNDED_MAX_TOKENS)
            .max(1),
        streaming: true,
        stop_token_ids: p.stop_token_ids,
        ignore_eos: p.ignore_eos,
    }
}

pub(super) fn event(response: Response) -> Event {
    match response {
        Response::Chunk(chunk) => Event::Chunk {
            index: chunk.sequence_index,
            logprobs: aligned(&chunk.token_ids, Scores::of_tokens(chunk.logprobs)),
            ids: chunk.token_ids,
            prompt_tokens: chunk.prompt_tokens,
        },
        Response::Complete(complete) => {
            // A matched stop word is the OpenAI "stop".
            let finish_reason = match complete.finish_reason.as_str() {
                "stop_word" => "stop".to_owned(),
                _ => complete.finish_reason,
            };
            Event::Complete(Complete {
                completion_tokens: complete.completion_tokens,
                ..Complete::new(
                    complete.sequence_index,
                    finish_reason,
                    complete.prompt_tokens,
                )
            })
        }
    }
}

pub(super) fn model_info(info: GetModelInfoResponse) -> ModelInfo {
    ModelInfo {
        served_model_name: info.model_id.clone(),
        model_path: info.model_id,
        tokenizer_path: String::new(),
        max_context_length: u32::try_from(info.max_seq_len).unwrap_or(0),
    }
}

pub(super) fn healthy(answer: &HealthCheckResponse) -> bool {
    answer.status.eq_ignore_ascii_case("ok")
}

pub(super) fn abort_request(request_id: String) -> AbortRequest {
    AbortRequest { request_id }
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::*;
    use crate::engine::grpc::trtllm;

    #[test]
    fn request_always_bounds_max_tokens() {
        let r = request(job());
        assert_eq!(r.max_tokens, 7);
        assert!(r.streaming);
        assert_eq!(r.tokenized.unwrap().input_token_ids, vec![1, 2]);
        let c = r.sampling_config.unwrap();
        assert_eq!(
            (c.beam_width, c.num_return_sequences, c.top_k),
            (1, 1, None)
        );
        assert_eq!((c.temperature, c.top_p), (Some(0.5), Some(0.9)));
        let o = r.output_config.unwrap();
        assert!(o.exclude_input_from_output);
        assert_eq!(o.logprobs, None);

        let mut open = job();
        open.params.max_tokens = None;
        open.room = Some(100);
        assert_eq!(request(open.clone()).max_tokens, 100);
        open.room = None;
        assert_eq!(request(open).max_tokens, UNBOUNDED_MAX_TOKENS);
    }

    #[test]
    fn n_top_k_and_logprobs_reach_the_engine() {
        let mut j = job();
        j.params.n = 4;
        j.params.sampling.top_k = 5;
        j.params.logprobs = Some(1);
        let r = request(j);
        let c = r.sampling_config.unwrap();
        assert_eq!((c.num_return_sequences, c.top_k), (4, Some(5)));
        assert_eq!(r.output_config.unwrap().logprobs, Some(1));
    }

    #[test]
    fn complete_drops_the_cumulative_ids_and_names_stop_words_stop() {
        let got = event(Response::Complete(trtllm::GenerateComplete {
            output_token_ids: vec![1, 2, 3],
            sequence_index: 1,
            finish_reason: "stop_word".into(),
            prompt_tokens: 5,
            ..Default::default()
        }));
        assert_eq!(got, Event::Complete(Complete::new(1, "stop".into(), 5)));
        let Event::Chunk {
            index,
            ids,
            logprobs,
            ..
        } = event(Response::Chunk(trtllm::GenerateStreamChunk {
            token_ids: vec![3],
            sequence_index: 1,
            logprobs: vec![trtllm::TokenLogprob {
                token_id: 3,
                logprob: -0.5,
                top_logprobs: Vec::new(),
            }],
            ..Default::default()
        }))
        else {
            panic!("chunk expected");
        };
        assert_eq!((index, ids), (1, vec![3]));
        assert_eq!(logprobs[0].as_ref().unwrap().logprob, -0.5);
    }

    #[test]
    fn health_and_model_info() {
        assert!(healthy(&HealthCheckResponse {
            status: "OK".into()
        }));
        assert!(!healthy(&HealthCheckResponse {
            status: "engine not ready".into()
        }));
        let info = model_info(trtllm::GetModelInfoResponse {
            model_id: "llama".into(),
            max_seq_len: 8192,
            ..Default::default()
        });
        assert_eq!(info.served_model_name, "llama");
        assert_eq!(info.max_context_length, 8192);
    }
}

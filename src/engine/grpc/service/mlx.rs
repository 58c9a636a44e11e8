//! MLX's engine service: vLLM's message shapes (top_k "off" is 0), one sequence per
//! request, refusals as `INVALID_ARGUMENT` statuses, and a streamed complete without ids.

use super::scores::{aligned, Scores};
use super::ModelInfo;
use crate::engine::grpc::mlx::{
    generate_request, generate_response::Response, AbortRequest, GenerateRequest,
    GetModelInfoResponse, SamplingParams, TokenizedInput,
};
use crate::engine::{Complete, Event, Generate};

/// `n` is not sent: the service has no field for it, and the pipeline refuses `n` > 1
/// for MLX workers before dispatch.
pub(super) fn request(job: Generate) -> GenerateRequest {
    let p = job.params;
    let k = p.sampling;
    GenerateRequest {
        request_id: job.request_id,
        input: Some(generate_request::Input::Tokenized(TokenizedInput {
            original_text: String::new(),
            input_ids: job.input_ids,
        })),
        sampling_params: Some(SamplingParams {
            temperature: Some(k.temperature),
            top_p: k.top_p,
            top_k: k.top_k_limit().unwrap_or(0),
            min_p: k.min_p,
            repetition_penalty: k.repetition_penalty,
            frequency_penalty: k.frequency_penalty,
            presence_penalty: k.presence_penalty,
            max_tokens: p.max_tokens,
            stop_token_ids: p.stop_token_ids,
            ignore_eos: p.ignore_eos,
            logprobs: p.logprobs.map(|k| i32::try_from(k).unwrap_or(i32::MAX)),
            seed: None,
        }),
        stream: true,
    }
}

pub(super) fn event(response: Response) -> Event {
    match response {
        Response::Chunk(chunk) => Event::Chunk {
            index: chunk.index,
            logprobs: aligned(&chunk.token_ids, chunk.output_logprobs.map(Scores::from)),
            ids: chunk.token_ids,
            prompt_tokens: chunk.prompt_tokens,
        },
        Response::Complete(complete) => Event::Complete(Complete {
            completion_tokens: complete.completion_tokens,
            ..Complete::new(
                complete.index,
                complete.finish_reason,
                complete.prompt_tokens,
            )
        }),
    }
}

pub(super) fn model_info(info: GetModelInfoResponse) -> ModelInfo {
    ModelInfo {
        served_model_name: info.served_model_name,
        model_path: info.model_path,
        // The service does not say where the tokenizer is: it is the model's directory.
        tokenizer_path: String::new(),
        max_context_length: info.max_context_length,
    }
}

pub(super) fn abort_request(request_id: String) -> AbortRequest {
    AbortRequest {
        request_ids: vec![request_id],
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::*;
    use crate::engine::grpc::mlx;

    #[test]
    fn request_sets_the_real_defaults_and_streams() {
        let mut j = job();
        j.params.logprobs = Some(2);
        let r = request(j);
        assert!(r.stream);
        let Some(generate_request::Input::Tokenized(t)) = r.input else {
            panic!("tokenized input expected");
        };
        assert_eq!(t.input_ids, vec![1, 2]);
        let p = r.sampling_params.unwrap();
        assert_eq!((p.top_k, p.max_tokens, p.logprobs), (0, Some(7), Some(2)));
        assert_eq!((p.temperature, p.top_p), (Some(0.5), 0.9));
        assert_eq!(p.stop_token_ids, vec![3]);
    }

    #[test]
    fn streamed_chunks_carry_the_ids_and_the_complete_none() {
        let Event::Chunk { ids, .. } = event(Response::Chunk(mlx::GenerateStreamChunk {
            token_ids: vec![4],
            prompt_tokens: 2,
            ..Default::default()
        })) else {
            panic!("chunk expected");
        };
        assert_eq!(ids, vec![4]);
        let got = event(Response::Complete(mlx::GenerateComplete {
            finish_reason: "length".into(),
            prompt_tokens: 2,
            ..Default::default()
        }));
        assert_eq!(got, Event::Complete(Complete::new(0, "length".into(), 2)));
    }

    #[test]
    fn model_info_reads_the_context_window() {
        let info = model_info(mlx::GetModelInfoResponse {
            model_path: "/models/m".into(),
            served_model_name: "m".into(),
            max_context_length: 4096,
            ..Default::default()
        });
        assert_eq!(
            (info.max_context_length, info.tokenizer_path.as_str()),
            (4096, "")
        );
    }
}

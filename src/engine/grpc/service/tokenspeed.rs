//! TokenSpeed's scheduler service: SGLang's lineage with every sampling scalar optional
//! (unset is the engine's default, so "off" top_k is left unset), refusals as
//! `INVALID_ARGUMENT` statuses, and a streamed complete that repeats its step's ids.

use super::scores::{aligned, Scores};
use super::ModelInfo;
use crate::engine::grpc::tokenspeed::{
    generate_response::Response, AbortRequest, GenerateRequest, GetLoadsRequest,
    GetModelInfoResponse, SamplingParams, TokenizedInput,
};
use crate::engine::{Complete, Event, Generate};

pub(super) fn request(job: Generate) -> GenerateRequest {
    let p = job.params;
    let k = p.sampling;
    GenerateRequest {
        request_id: job.request_id,
        tokenized: Some(TokenizedInput {
            input_ids: job.input_ids,
            original_text: String::new(),
        }),
        sampling_params: Some(SamplingParams {
            temperature: Some(k.temperature),
            top_p: Some(k.top_p),
            top_k: k.top_k_limit().and_then(|k| i32::try_from(k).ok()),
            min_p: Some(k.min_p),
            frequency_penalty: Some(k.frequency_penalty),
            presence_penalty: Some(k.presence_penalty),
            repetition_penalty: Some(k.repetition_penalty),
            max_new_tokens: p.max_tokens,
            stop: p.stop,
            stop_token_ids: p.stop_token_ids,
            skip_special_tokens: p.skip_special_tokens,
            spaces_between_special_tokens: true,
            ignore_eos: p.ignore_eos,
            n: p.n.max(1),
            ..SamplingParams::default()
        }),
        return_logprob: p.logprobs.is_some(),
        // Unset: no prompt log probabilities.
        logprob_start_len: None,
        top_logprobs_num: p
            .logprobs
            .map_or(0, |k| i32::try_from(k).unwrap_or(i32::MAX)),
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
        tokenizer_path: info.tokenizer_path,
        max_context_length: u32::try_from(info.max_context_length).unwrap_or(0),
    }
}

/// The core section of every DP rank.
pub(super) fn loads_request() -> GetLoadsRequest {
    GetLoadsRequest {
        dp_rank: None,
        include: vec!["core".to_owned()],
    }
}

pub(super) fn abort_request(request_id: String, reason: &str) -> AbortRequest {
    AbortRequest {
        request_id,
        reason: reason.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::*;
    use crate::engine::grpc::tokenspeed;

    #[test]
    fn request_sets_every_scalar_but_an_unlimited_top_k() {
        let r = request(job());
        let p = r.sampling_params.unwrap();
        assert!(r.stream && !r.return_logprob);
        assert_eq!(r.logprob_start_len, None);
        assert_eq!(r.tokenized.unwrap().input_ids, vec![1, 2]);
        assert_eq!((p.top_k, p.max_new_tokens, p.n), (None, Some(7), 1));
        assert_eq!(p.stop, ["END"]);
        assert_eq!(
            (p.temperature, p.top_p, p.repetition_penalty, p.min_p),
            (Some(0.5), Some(0.9), Some(1.0), Some(0.0))
        );
        let mut j = job();
        j.params.sampling.top_k = 20;
        j.params.n = 2;
        j.params.logprobs = Some(3);
        let r = request(j);
        assert!(r.return_logprob);
        assert_eq!(r.top_logprobs_num, 3);
        let p = r.sampling_params.unwrap();
        assert_eq!((p.top_k, p.n), (Some(20), 2));
    }

    #[test]
    fn complete_drops_the_repeated_ids() {
        let got = event(Response::Complete(tokenspeed::GenerateComplete {
            output_ids: vec![8],
            finish_reason: "stop".into(),
            prompt_tokens: 3,
            index: 2,
            ..Default::default()
        }));
        assert_eq!(got, Event::Complete(Complete::new(2, "stop".into(), 3)));
        let Event::Chunk { ids, index, .. } =
            event(Response::Chunk(tokenspeed::GenerateStreamChunk {
                token_ids: vec![8],
                index: 2,
                ..Default::default()
            }))
        else {
            panic!("chunk expected");
        };
        assert_eq!((ids, index), (vec![8], 2));
    }
}

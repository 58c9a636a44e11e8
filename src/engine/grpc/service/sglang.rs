//! SGLang's scheduler service: top_k "off" is -1, a refusal is a `GenerateError` message
//! with an HTTP status.
//!
//! Streamed (`smg_grpc_servicer/sglang/servicer.py`, `Generate`): every scheduler output
//! becomes a chunk (`_create_chunk_response`) with that step's ids and scores; the output
//! that finishes a sequence is sent as a chunk **and then** as a complete built from the
//! same output (`_create_completion_response`), so the complete's `output_ids` and
//! `output_logprobs` repeat the last chunk's and are not read here. Its `completion_tokens`
//! is the scheduler's cumulative count (`meta_info`), the sequence's whole. With `n` > 1
//! (`request_manager.py`, `generate_request`) the sub-requests' outputs are interleaved and
//! each carries its `index`.

use super::scores::{aligned, Scores};
use super::{count, ModelInfo};
use crate::engine::grpc::sglang::{
    generate_response::Response, sampling_params::Constraint, AbortRequest, DisaggregatedParams,
    GenerateRequest, GetLoadsRequest, GetModelInfoResponse, SamplingParams, TokenizedInput,
};
use crate::engine::{Complete, EngineError, Event, Generate, Handoff};

pub(super) fn request(job: Generate) -> GenerateRequest {
    let p = job.params;
    let k = p.sampling;
    GenerateRequest {
        request_id: job.request_id,
        tokenized: Some(TokenizedInput {
            original_text: String::new(),
            input_ids: job.input_ids,
        }),
        sampling_params: Some(SamplingParams {
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
            constraint: p.json_schema.map(Constraint::JsonSchema),
            ..SamplingParams::default()
        }),
        return_logprob: p.logprobs.is_some(),
        // Generated tokens only: no prompt log probabilities.
        logprob_start_len: -1,
        top_logprobs_num: p
            .logprobs
            .map_or(0, |k| i32::try_from(k).unwrap_or(i32::MAX)),
        disaggregated_params: match job.handoff {
            Some(Handoff::Bootstrap { host, port, room }) => Some(DisaggregatedParams {
                bootstrap_host: host,
                bootstrap_port: i32::from(port),
                // Rooms are drawn below 2^31 (the field is an int32).
                bootstrap_room: i32::try_from(room).unwrap_or(i32::MAX),
            }),
            Some(Handoff::KvTransfer(_)) | None => None,
        },
        stream: true,
        ..GenerateRequest::default()
    }
}

pub(super) fn event(response: Response) -> Event {
    match response {
        Response::Chunk(chunk) => Event::Chunk {
            index: chunk.index,
            logprobs: aligned(&chunk.token_ids, chunk.output_logprobs.map(Scores::from)),
            ids: chunk.token_ids,
            prompt_tokens: u32::try_from(chunk.prompt_tokens).unwrap_or(0),
        },
        Response::Complete(complete) => Event::Complete(Complete {
            completion_tokens: count(complete.completion_tokens),
            ..Complete::new(
                complete.index,
                complete.finish_reason,
                count(complete.prompt_tokens),
            )
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
    use crate::engine::grpc::sglang;

    #[test]
    fn request_sets_every_default_and_streams() {
        let r = request(job());
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
        assert_eq!(r.disaggregated_params, None);
    }

    #[test]
    fn bootstrap_fields_reach_the_engine() {
        let mut j = job();
        j.handoff = Some(Handoff::Bootstrap {
            host: "10.0.0.7".into(),
            port: 8998,
            room: 42,
        });
        let d = request(j).disaggregated_params.unwrap();
        assert_eq!(
            (
                d.bootstrap_host.as_str(),
                d.bootstrap_port,
                d.bootstrap_room
            ),
            ("10.0.0.7", 8998, 42)
        );
    }

    #[test]
    fn n_and_logprobs_reach_the_engine() {
        let mut j = job();
        j.params.n = 3;
        j.params.logprobs = Some(2);
        let r = request(j);
        assert_eq!(r.sampling_params.unwrap().n, 3);
        assert!(r.return_logprob);
        assert_eq!((r.top_logprobs_num, r.logprob_start_len), (2, -1));
        assert!(!request(job()).return_logprob);
    }

    #[test]
    fn complete_repeats_the_last_chunk_and_reports_the_whole_count() {
        // `_create_completion_response` of the finishing output: the last chunk's ids
        // again and the scheduler's cumulative count.
        let Event::Complete(complete) = event(Response::Complete(sglang::GenerateComplete {
            output_ids: vec![9],
            finish_reason: "stop".into(),
            prompt_tokens: 2,
            completion_tokens: 32,
            cached_tokens: 1,
            matched_stop: Some(sglang::generate_complete::MatchedStop::MatchedTokenId(9)),
            ..Default::default()
        })) else {
            panic!("complete expected");
        };
        assert_eq!(
            complete,
            Complete {
                completion_tokens: 32,
                ..Complete::new(0, "stop".into(), 2)
            }
        );
    }

    #[test]
    fn errors_say_who_is_to_blame() {
        for (code, blames) in [("400", true), ("422", true), ("500", false), ("", false)] {
            let got = event(Response::Error(sglang::GenerateError {
                message: "m".into(),
                http_status_code: code.into(),
                details: String::new(),
            }));
            assert_eq!(
                got,
                Event::Error(EngineError {
                    message: "m".into(),
                    blames_request: blames
                })
            );
        }
    }

    #[test]
    fn chunks_carry_their_index_and_scores() {
        let lp = sglang::OutputLogProbs {
            token_logprobs: vec![-0.5],
            token_ids: vec![9],
            top_logprobs: vec![sglang::TopLogProbs {
                values: vec![-0.5, -1.5],
                token_ids: vec![9, 10],
            }],
        };
        let Event::Chunk {
            index, logprobs, ..
        } = event(Response::Chunk(sglang::GenerateStreamChunk {
            token_ids: vec![9],
            index: 2,
            output_logprobs: Some(lp),
            ..Default::default()
        }))
        else {
            panic!("chunk expected");
        };
        assert_eq!(index, 2);
        assert_eq!(
            logprobs[0].as_ref().unwrap().top,
            vec![(9, -0.5), (10, -1.5)]
        );
    }
}

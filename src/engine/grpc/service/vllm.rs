//! vLLM's engine service: top_k "off" is 0, a refusal is an `INVALID_ARGUMENT` status.
//!
//! Streamed (`smg_grpc_servicer/vllm/servicer.py`, `Generate` with `output_kind=DELTA`):
//! every engine output is a chunk per sequence (`_chunk_response`) with the new ids, their
//! scores and `completion_tokens` = the number of those ids; a sequence with a
//! `finish_reason` is then also sent as a complete (`_complete_response`) built from the
//! same delta: its ids and scores repeat the chunk's and its `completion_tokens` counts only
//! them. The sequence's whole count is the sum over its chunks, which [`super::Events`]
//! keeps; the complete's figure is not read.

use super::scores::{aligned, Scores};
use super::{KvFacts, ModelInfo};
use crate::engine::grpc::vllm::{
    generate_request, generate_response::Response, sampling_params::Constraint, AbortRequest,
    GenerateRequest, GetLoadsRequest, GetModelInfoResponse, GetServerInfoResponse, SamplingParams,
    TokenizedInput,
};
use crate::engine::{Complete, Event, Generate, Handoff};

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
            frequency_penalty: k.frequency_penalty,
            presence_penalty: k.presence_penalty,
            repetition_penalty: k.repetition_penalty,
            max_tokens: p.max_tokens,
            stop: p.stop,
            stop_token_ids: p.stop_token_ids,
            skip_special_tokens: p.skip_special_tokens,
            spaces_between_special_tokens: true,
            ignore_eos: p.ignore_eos,
            n: p.n.max(1),
            logprobs: p.logprobs.map(|k| i32::try_from(k).unwrap_or(i32::MAX)),
            constraint: p.json_schema.map(Constraint::JsonSchema),
            ..SamplingParams::default()
        }),
        stream: true,
        kv_transfer_params_json: match job.handoff {
            Some(Handoff::KvTransfer(params)) => Some(params),
            Some(Handoff::Bootstrap { .. }) | None => None,
        },
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
            // The last delta's count, not the sequence's: left for the chunks' tally.
            completion_tokens: 0,
            kv_transfer_params: complete.kv_transfer_params_json,
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
        max_context_length: info.max_context_length,
    }
}

pub(super) fn kv_facts(info: GetServerInfoResponse) -> KvFacts {
    let given = |s: String| Some(s).filter(|s| !s.is_empty());
    KvFacts {
        connector: given(info.kv_connector),
        role: given(info.kv_role),
        engine_id: given(info.kv_engine_id),
    }
}

/// vLLM reports one rank, core figures only.
pub(super) fn loads_request() -> GetLoadsRequest {
    GetLoadsRequest {
        dp_rank: None,
        include: Vec::new(),
    }
}

/// vLLM takes no reason.
pub(super) fn abort_request(request_id: String) -> AbortRequest {
    AbortRequest {
        request_ids: vec![request_id],
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::job;
    use super::*;
    use crate::engine::grpc::vllm;

    #[test]
    fn request_maps_top_k_off_to_zero_and_streams() {
        let r = request(job());
        let p = r.sampling_params.unwrap();
        assert!(r.stream);
        let Some(generate_request::Input::Tokenized(t)) = r.input else {
            panic!("tokenized input expected");
        };
        assert_eq!(t.input_ids, vec![1, 2]);
        assert_eq!((p.top_k, p.max_tokens, p.n), (0, Some(7), 1));
        assert_eq!(p.temperature, Some(0.5));
        assert_eq!(p.stop, ["END"]);
        let mut with_k = job();
        with_k.params.sampling.top_k = 40;
        assert_eq!(request(with_k).sampling_params.unwrap().top_k, 40);
    }

    #[test]
    fn n_and_logprobs_reach_the_engine() {
        let mut j = job();
        j.params.n = 3;
        j.params.logprobs = Some(2);
        let v = request(j).sampling_params.unwrap();
        assert_eq!((v.n, v.logprobs), (3, Some(2)));
        assert_eq!(request(job()).sampling_params.unwrap().logprobs, None);
    }

    #[test]
    fn empty_kv_fields_are_not_reported() {
        let facts = kv_facts(GetServerInfoResponse {
            kv_connector: "NixlConnector".into(),
            kv_role: String::new(),
            kv_engine_id: "e-1".into(),
        });
        assert_eq!(facts.connector.as_deref(), Some("NixlConnector"));
        assert_eq!(
            (facts.role, facts.engine_id.as_deref()),
            (None, Some("e-1"))
        );
    }

    #[test]
    fn kv_transfer_params_go_out_and_come_back() {
        let mut j = job();
        j.handoff = Some(Handoff::KvTransfer(r#"{"do_remote_decode":true}"#.into()));
        assert_eq!(
            request(j).kv_transfer_params_json.as_deref(),
            Some(r#"{"do_remote_decode":true}"#)
        );
        assert_eq!(request(job()).kv_transfer_params_json, None);
        let Event::Complete(complete) = event(Response::Complete(vllm::GenerateComplete {
            finish_reason: "length".into(),
            kv_transfer_params_json: Some(r#"{"remote_port":7}"#.into()),
            ..Default::default()
        })) else {
            panic!("complete expected");
        };
        assert_eq!(
            complete.kv_transfer_params.as_deref(),
            Some(r#"{"remote_port":7}"#)
        );
    }

    #[test]
    fn complete_leaves_the_count_to_the_chunks() {
        // `_complete_response` of a streamed (DELTA) output: the last delta again, counted
        // as that delta alone.
        let got = event(Response::Complete(vllm::GenerateComplete {
            output_ids: vec![5, 6],
            finish_reason: "stop".into(),
            prompt_tokens: 4,
            completion_tokens: 2,
            cached_tokens: 3,
            index: 1,
            output_logprobs: Some(vllm::OutputLogProbs {
                token_logprobs: vec![-0.5, -0.1],
                token_ids: vec![5, 6],
                top_logprobs: vec![],
            }),
            matched_stop: Some(vllm::generate_complete::MatchedStop::MatchedStopStr(
                "END".into(),
            )),
            ..Default::default()
        }));
        assert_eq!(got, Event::Complete(Complete::new(1, "stop".into(), 4)));
    }
}

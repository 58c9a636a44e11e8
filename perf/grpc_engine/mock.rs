//! The fake engine: deterministic output, so a gateway test can predict every token.
//!
//! The output is the prompt's ids echoed back in order, cycling, one token per chunk,
//! until `max_new_tokens` (16 when absent), clipped to the room the context window leaves
//! after the prompt. Each token is then checked the way SGLang's scheduler checks it
//! (`Req.check_finished`): first the length limit, then, unless `ignore_eos`, the request's
//! `stop_token_ids` and the engine's EOS ids; a match finishes with "stop" and
//! `matched_token_id`, the matched id being the last id of the output (SGLang keeps it in
//! `output_ids` and counts it in `completion_tokens`; the gateway hides it). Stop strings
//! need a tokenizer, which the mock does not have: they are left to the gateway.
//!
//! With `n` > 1, sequence `i` echoes the prompt rotated by `i` (its first id is the
//! prompt's `i`-th, cycling); the sequences step together, one chunk each per step in
//! index order, and each ends on its own with its own complete. Asked for log
//! probabilities (`return_logprob`), the `k`-th generated token of a sequence (from 1)
//! scores `-0.1 * k`, and its `top_logprobs_num` alternatives are the token itself, then
//! the next ids up, `j` below it scoring `-0.1 * k - j`: fake, but predictable.

use std::time::Duration;

use tollgate::engine::grpc::sglang::generate_complete::MatchedStop;
use tollgate::engine::grpc::sglang::{
    GenerateRequest, OutputLogProbs, SamplingParams, TopLogProbs,
};

use crate::cli::Timing;
use crate::sink::{Counts, Finish, Sink, Stop};

/// `max_new_tokens` when the request leaves it out.
pub const DEFAULT_MAX_NEW_TOKENS: u32 = 16;

/// Most sequences (`n`) and alternatives per token one request may ask for.
const MAX_SEQUENCES: u32 = 64;
const MAX_TOP_LOGPROBS: u32 = 64;

pub struct Mock {
    pub timing: Timing,
    pub eos_token_ids: Vec<u32>,
    pub max_context: u32,
}

impl Mock {
    pub async fn generate(&self, request: &GenerateRequest, sink: &mut Sink) -> Result<(), Stop> {
        let prompt = request
            .tokenized
            .as_ref()
            .map_or(&[][..], |tokenized| &tokenized.input_ids[..]);
        let default = SamplingParams::default();
        let params = request.sampling_params.as_ref().unwrap_or(&default);
        let plan = match self.plan(prompt, request) {
            Ok(plan) => plan,
            Err(message) => return sink.fail(&message, 400).await,
        };
        let mut counts = Counts {
            prompt_tokens: u32::try_from(prompt.len()).unwrap_or(u32::MAX),
            completion_tokens: 0,
            cached_tokens: 0,
        };
        sink.sequences(plan.n as usize);
        if plan.max_new_tokens == 0 {
            return sink.finish(Finish::Length, counts).await;
        }
        pause(self.timing.ttft_ms).await;
        let mut live = vec![true; plan.n as usize];
        for step in 1..=plan.max_new_tokens {
            if step > 1 {
                pause(self.timing.itl_ms).await;
            }
            counts.completion_tokens = step;
            for (index, running) in (0u32..).zip(live.iter_mut()) {
                if !*running {
                    continue;
                }
                let at = (index as usize + step as usize - 1) % prompt.len();
                let id = prompt[at];
                let scores = plan.top.map(|top| fake_scores(id, step, top));
                sink.step(index, &[id], scores, counts).await?;
                // The length limit is checked first: the last token never counts as a stop.
                let last = step == plan.max_new_tokens;
                if !last
                    && !params.ignore_eos
                    && (params.stop_token_ids.contains(&id) || self.eos_token_ids.contains(&id))
                {
                    let matched = Some(MatchedStop::MatchedTokenId(id));
                    sink.finish_one(index, Finish::Stop(matched), counts)
                        .await?;
                    *running = false;
                }
            }
            if !live.contains(&true) {
                return Ok(());
            }
        }
        sink.finish(Finish::Length, counts).await
    }

    /// Validates the request the way an engine would, and settles the token limit.
    fn plan(&self, prompt: &[u32], request: &GenerateRequest) -> Result<Plan, String> {
        let default = SamplingParams::default();
        let params = request.sampling_params.as_ref().unwrap_or(&default);
        if prompt.is_empty() {
            return Err("the request has no input_ids".to_string());
        }
        let room = usize::try_from(self.max_context)
            .unwrap_or(usize::MAX)
            .saturating_sub(prompt.len());
        if room == 0 {
            return Err(format!(
                "the prompt has {} tokens, the context window {}",
                prompt.len(),
                self.max_context
            ));
        }
        // Proto3's zero is SGLang's default of one sequence.
        let n = u32::try_from(params.n.max(1)).unwrap_or(1);
        if n > MAX_SEQUENCES {
            return Err(format!("n = {n}, at most {MAX_SEQUENCES}"));
        }
        let top = match (
            request.return_logprob,
            u32::try_from(request.top_logprobs_num),
        ) {
            (false, _) => None,
            (true, Ok(top)) if top <= MAX_TOP_LOGPROBS => Some(top),
            (true, _) => {
                return Err(format!(
                    "top_logprobs_num = {}, between 0 and {MAX_TOP_LOGPROBS}",
                    request.top_logprobs_num
                ))
            }
        };
        let asked = match params.max_new_tokens {
            None => DEFAULT_MAX_NEW_TOKENS,
            Some(n) => u32::try_from(n).map_err(|_| format!("max_new_tokens = {n}"))?,
        };
        Ok(Plan {
            max_new_tokens: asked.min(u32::try_from(room).unwrap_or(u32::MAX)),
            n,
            top,
        })
    }
}

struct Plan {
    max_new_tokens: u32,
    n: u32,
    /// Alternatives per token when log probabilities are asked for.
    top: Option<u32>,
}

/// The mock's scores for `id`, the `step`-th token of its sequence (see the module doc).
pub fn fake_scores(id: u32, step: u32, top: u32) -> OutputLogProbs {
    let logprob = -0.1 * step as f32;
    let alternatives = (0..top)
        .map(|j| (id.saturating_add(j), logprob - j as f32))
        .unzip();
    let (token_ids, values): (Vec<u32>, Vec<f32>) = alternatives;
    OutputLogProbs {
        token_logprobs: vec![logprob],
        token_ids: vec![id],
        top_logprobs: vec![TopLogProbs { values, token_ids }],
    }
}

async fn pause(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;
    use tollgate::engine::grpc::sglang::generate_response::Response;
    use tollgate::engine::grpc::sglang::{GenerateComplete, TokenizedInput};

    use super::*;
    use crate::sink::Item;

    fn mock() -> Mock {
        Mock {
            timing: Timing::default(),
            eos_token_ids: vec![2],
            max_context: 32,
        }
    }

    fn request(ids: &[u32], params: SamplingParams, stream: bool) -> GenerateRequest {
        GenerateRequest {
            request_id: "r".into(),
            tokenized: Some(TokenizedInput {
                original_text: String::new(),
                input_ids: ids.to_vec(),
            }),
            sampling_params: Some(params),
            stream,
            ..Default::default()
        }
    }

    fn params(max_new_tokens: Option<i32>) -> SamplingParams {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: -1,
            repetition_penalty: 1.0,
            max_new_tokens,
            ..Default::default()
        }
    }

    /// (chunk ids, the complete) of one generation.
    async fn run(m: &Mock, req: GenerateRequest) -> (Vec<Vec<u32>>, GenerateComplete) {
        let (tx, mut rx) = mpsc::channel::<Item>(1024);
        let mut sink = Sink::new(tx, "r".into(), req.stream, None);
        m.generate(&req, &mut sink).await.unwrap();
        drop(sink);
        let mut chunks = Vec::new();
        while let Some(item) = rx.recv().await {
            match item.unwrap().response {
                Some(Response::Chunk(c)) => chunks.push(c.token_ids),
                Some(Response::Complete(c)) => return (chunks, c),
                other => panic!("{other:?}"),
            }
        }
        panic!("no complete")
    }

    #[tokio::test]
    async fn echoes_the_prompt_cycling_until_the_limit() {
        let (chunks, done) = run(&mock(), request(&[5, 6, 7], params(Some(5)), true)).await;
        assert_eq!(chunks, [[5], [6], [7], [5], [6]]);
        assert_eq!(done.finish_reason, "length");
        assert_eq!((done.prompt_tokens, done.completion_tokens), (3, 5));
        // The last step again, as SGLang's servicer repeats it in the complete.
        assert_eq!(done.output_ids, [6]);
        assert!(done.matched_stop.is_none());
    }

    #[tokio::test]
    async fn sixteen_tokens_by_default() {
        let (chunks, done) = run(&mock(), request(&[9], params(None), true)).await;
        assert_eq!(chunks.len(), 16);
        assert_eq!(done.completion_tokens, 16);
    }

    #[tokio::test]
    async fn eos_and_stop_ids_stop_with_the_id_kept() {
        let (chunks, done) = run(&mock(), request(&[5, 2, 7], params(Some(9)), true)).await;
        assert_eq!(chunks, [[5], [2]]);
        assert_eq!(done.finish_reason, "stop");
        assert_eq!(done.matched_stop, Some(MatchedStop::MatchedTokenId(2)));
        assert_eq!(done.completion_tokens, 2);

        let p = SamplingParams {
            stop_token_ids: vec![7],
            ..params(Some(9))
        };
        let (chunks, done) = run(&mock(), request(&[5, 6, 7, 8], p, true)).await;
        assert_eq!(chunks, [[5], [6], [7]]);
        assert_eq!(done.matched_stop, Some(MatchedStop::MatchedTokenId(7)));
    }

    #[tokio::test]
    async fn ignore_eos_ignores_stop_ids_too_and_length_wins_a_tie() {
        let p = SamplingParams {
            ignore_eos: true,
            stop_token_ids: vec![5],
            ..params(Some(4))
        };
        let (chunks, done) = run(&mock(), request(&[5, 2], p, true)).await;
        assert_eq!(chunks, [[5], [2], [5], [2]]);
        assert_eq!(done.finish_reason, "length");
        // The limit is checked before the stop ids, as in SGLang.
        let (_, done) = run(&mock(), request(&[5, 2], params(Some(2)), true)).await;
        assert_eq!(done.finish_reason, "length");
    }

    #[tokio::test]
    async fn unstreamed_is_one_complete_with_every_id() {
        let (chunks, done) = run(&mock(), request(&[5, 6], params(Some(3)), false)).await;
        assert!(chunks.is_empty());
        assert_eq!(done.output_ids, [5, 6, 5]);
        assert_eq!(done.completion_tokens, 3);
    }

    #[tokio::test]
    async fn the_context_window_clips_the_output() {
        let prompt: Vec<u32> = (100..130).collect();
        let (chunks, done) = run(&mock(), request(&prompt, params(Some(100)), true)).await;
        assert_eq!(chunks.len(), 2);
        assert_eq!(done.finish_reason, "length");
    }

    #[tokio::test]
    async fn bad_requests_are_generate_errors() {
        for req in [
            request(&[], params(None), true),
            request(&[1; 32], params(None), true),
            request(&[1], params(Some(-1)), true),
            request(
                &[1],
                SamplingParams {
                    n: 65,
                    ..params(None)
                },
                true,
            ),
        ] {
            let (tx, mut rx) = mpsc::channel::<Item>(8);
            let mut sink = Sink::new(tx, "r".into(), true, None);
            mock().generate(&req, &mut sink).await.unwrap();
            let Some(Response::Error(e)) = rx.recv().await.unwrap().unwrap().response else {
                panic!("{req:?}")
            };
            assert_eq!(e.http_status_code, "400");
        }
    }

    #[tokio::test]
    async fn zero_new_tokens_finishes_at_once() {
        let (chunks, done) = run(&mock(), request(&[1], params(Some(0)), true)).await;
        assert!(chunks.is_empty());
        assert_eq!(
            (done.finish_reason.as_str(), done.completion_tokens),
            ("length", 0)
        );
    }

    /// Every message of one generation, in order: (index, chunk ids or None for a
    /// complete, the complete's ids, scores).
    async fn messages(m: &Mock, req: GenerateRequest) -> Vec<Response> {
        let (tx, mut rx) = mpsc::channel::<Item>(1024);
        let mut sink = Sink::new(tx, "r".into(), req.stream, None);
        m.generate(&req, &mut sink).await.unwrap();
        drop(sink);
        let mut out = Vec::new();
        while let Some(item) = rx.recv().await {
            out.extend(item.unwrap().response);
        }
        out
    }

    #[tokio::test]
    async fn sequences_echo_the_prompt_rotated_and_step_together() {
        let p = SamplingParams {
            n: 3,
            ..params(Some(4))
        };
        let all = messages(&mock(), request(&[5, 6, 7], p, true)).await;
        let chunks: Vec<(u32, Vec<u32>)> = all
            .iter()
            .filter_map(|r| match r {
                Response::Chunk(c) => Some((c.index, c.token_ids.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            chunks[..6],
            [
                (0, vec![5]),
                (1, vec![6]),
                (2, vec![7]),
                (0, vec![6]),
                (1, vec![7]),
                (2, vec![5])
            ]
        );
        let completes: Vec<u32> = all
            .iter()
            .filter_map(|r| match r {
                Response::Complete(c) => Some(c.index),
                _ => None,
            })
            .collect();
        assert_eq!(completes, [0, 1, 2]);
    }

    #[tokio::test]
    async fn a_sequence_that_hits_eos_ends_alone() {
        let p = SamplingParams {
            n: 2,
            ..params(Some(3))
        };
        // Sequence 0 starts at the EOS id 2 and ends at once; sequence 1 runs to the limit
        // (its last id is the EOS id, but the limit is checked first).
        let all = messages(&mock(), request(&[2, 5, 6], p, false)).await;
        let completes: Vec<(u32, Vec<u32>, String)> = all
            .into_iter()
            .map(|r| match r {
                Response::Complete(c) => (c.index, c.output_ids, c.finish_reason),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            completes,
            [
                (0, vec![2], "stop".to_string()),
                (1, vec![5, 6, 2], "length".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn logprobs_are_fake_but_predictable() {
        let mut req = request(&[5, 6], params(Some(3)), true);
        req.return_logprob = true;
        req.top_logprobs_num = 2;
        let all = messages(&mock(), req).await;
        let Response::Chunk(third) = &all[2] else {
            panic!("{all:?}")
        };
        let lp = third.output_logprobs.as_ref().unwrap();
        assert_eq!(
            (lp.token_ids.clone(), lp.token_logprobs.clone()),
            (vec![5], vec![-0.1 * 3.0])
        );
        assert_eq!(lp.top_logprobs[0].token_ids, [5, 6]);
        assert_eq!(lp.top_logprobs[0].values, [-0.1 * 3.0, -0.1 * 3.0 - 1.0]);
        // Not streamed: the complete carries every score.
        let mut req = request(&[5, 6], params(Some(3)), false);
        req.return_logprob = true;
        let all = messages(&mock(), req).await;
        let Response::Complete(done) = &all[0] else {
            panic!("{all:?}")
        };
        assert_eq!(done.output_logprobs.as_ref().unwrap().token_ids, [5, 6, 5]);
    }
}

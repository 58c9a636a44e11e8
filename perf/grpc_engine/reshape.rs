//! The generation's messages, produced in one neutral SGLang-like shape by the backends
//! (`sink.rs`), sent as each service's published servicer sends them. Every rule here
//! names the servicer function it mirrors (`smg_grpc_servicer/<engine>/servicer.py` in
//! lightseekorg/smg for SGLang, vLLM, TokenSpeed and MLX; `tensorrt_llm/grpc/smg/
//! servicer.py` in NVIDIA/TensorRT-LLM). Streamed, per sequence:
//!
//! | | chunk ids | chunk `completion_tokens` | complete ids | complete `completion_tokens` | the gateway's Abort |
//! |---|---|---|---|---|---|
//! | SGLang | delta | cumulative | the last chunk's again | cumulative | nothing more, stream left open |
//! | vLLM | delta | the delta's | the last chunk's again | the last chunk's | an empty chunk, a complete `abort` |
//! | TokenSpeed | delta, the matched stop token trimmed | cumulative | the last chunk's again | cumulative | nothing more, stream left open |
//! | TensorRT-LLM | delta, a matched stop token never sent | cumulative | every id but a matched stop token (with `n` > 1 all completes at the end) | the ids it sends | a complete `cancelled` with every id |
//! | MLX | one id per chunk | cumulative | none | cumulative | the stream ends, no complete |
//!
//! Not streamed, each sequence is one complete with every id and score; SGLang's name
//! index 0 whatever the sequence (`request_manager.py`, `generate_request`, never sets the
//! index on that path). Errors are gRPC statuses on every service (smg's servicers call
//! `context.abort`; SGLang's `GenerateError` message is gone from its proto): a 400 is
//! `INVALID_ARGUMENT`, a 503 `UNAVAILABLE`, anything else `INTERNAL`.
//!
//! Each service turns the neutral [`Step`]s into its own messages with a plain function;
//! the counts it puts in them are its own rule (vLLM's are per message).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tollgate::engine::grpc::sglang::generate_complete::MatchedStop;
use tollgate::engine::grpc::sglang::generate_response::Response as SglangEvent;
use tollgate::engine::grpc::sglang::{
    GenerateComplete, GenerateRequest, GenerateStreamChunk, OutputLogProbs,
};
use tonic::Status;

use crate::sink::Item;

/// The servicer whose message sequence a stream follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Servicer {
    Sglang,
    Vllm,
    Tokenspeed,
    Trtllm,
    Mlx,
}

/// One message of a generation, in no service's shape. Counts are the sequence's, as
/// the engine's scheduler keeps them (cumulative).
#[derive(Debug, PartialEq)]
pub enum Step {
    Chunk {
        index: u32,
        ids: Vec<u32>,
        scores: Option<OutputLogProbs>,
        prompt_tokens: u32,
        completion_tokens: u32,
        cached_tokens: u32,
    },
    Complete {
        index: u32,
        ids: Vec<u32>,
        scores: Option<OutputLogProbs>,
        finish_reason: String,
        matched_stop: Option<MatchedStop>,
        prompt_tokens: u32,
        completion_tokens: u32,
        cached_tokens: u32,
    },
}

/// Most sequences one stream tracks (the backends allow fewer).
const MAX_SEQUENCES: usize = 64;

/// One sequence's ids so far: the last chunk's, and all of them.
#[derive(Default)]
struct Seq {
    last: Vec<u32>,
    last_scores: Option<OutputLogProbs>,
    all: Vec<u32>,
    all_scores: Option<OutputLogProbs>,
    /// Ids sent (MLX's one-id chunks count from it).
    sent: u32,
}

/// SGLang-like messages from the sink in, [`Step`]s out.
pub struct Reshaper {
    servicer: Servicer,
    stream: bool,
    /// Sequences the request asked for.
    n: usize,
    /// The request's stop token ids: a matched id among them is a stop word, any other an
    /// EOS id, which vLLM and TensorRT-LLM report and trim differently.
    stop_ids: Vec<u32>,
    seqs: Vec<Seq>,
    /// TokenSpeed's latest chunk, held until the next message says whether it ended its
    /// sequence on a stop token (which TokenSpeed trims).
    held: Option<GenerateStreamChunk>,
    /// TensorRT-LLM's completes of a generation of several sequences, sent when the last
    /// sequence ends.
    deferred: Vec<Step>,
    ended: usize,
    /// The gateway aborted a servicer that then sends nothing more and leaves the stream
    /// open: the stream stays pending until the gateway drops it.
    silent: bool,
}

impl Reshaper {
    /// The reshaper of `request`'s generation (its `stream`, `n` and stop token ids).
    pub fn for_request(servicer: Servicer, request: &GenerateRequest) -> Reshaper {
        let params = request.sampling_params.as_ref();
        let mut reshaper = Reshaper::new(
            servicer,
            request.stream,
            params.map_or(1, |p| u32::try_from(p.n).unwrap_or(1)),
        );
        reshaper.stop_ids = params.map_or_else(Vec::new, |p| p.stop_token_ids.clone());
        reshaper
    }

    pub fn new(servicer: Servicer, stream: bool, n: u32) -> Reshaper {
        Reshaper {
            servicer,
            stream,
            n: usize::try_from(n.max(1)).unwrap_or(1),
            stop_ids: Vec::new(),
            seqs: Vec::new(),
            held: None,
            deferred: Vec::new(),
            ended: 0,
            silent: false,
        }
    }

    /// Appends what one sink message becomes.
    pub fn reshape(&mut self, item: Item, out: &mut VecDeque<Result<Step, Status>>) {
        let event = match item {
            Err(status) => {
                self.release(None, out);
                return out.push_back(Err(status));
            }
            Ok(message) => match message.response {
                Some(event) => event,
                None => return,
            },
        };
        match event {
            SglangEvent::Chunk(chunk) => {
                if self
                    .record(
                        chunk.index,
                        &chunk.token_ids,
                        chunk.output_logprobs.as_ref(),
                    )
                    .is_none()
                {
                    return out.push_back(Err(too_many(chunk.index)));
                }
                match self.servicer {
                    Servicer::Tokenspeed | Servicer::Trtllm => {
                        self.release(None, out);
                        self.held = Some(chunk);
                    }
                    Servicer::Mlx => self.one_id_each(chunk, out),
                    _ => out.push_back(Ok(chunk_step(chunk))),
                }
            }
            SglangEvent::Complete(complete) if self.stream && complete.finish_reason == "abort" => {
                self.aborted(complete, out)
            }
            SglangEvent::Complete(complete) if self.stream => self.streamed_end(complete, out),
            SglangEvent::Complete(mut complete) => {
                if self.servicer == Servicer::Sglang {
                    // `_create_completion_response`: `output.get("index", 0)`, unset here.
                    complete.index = 0;
                }
                out.push_back(Ok(complete_step(complete)));
            }
            SglangEvent::Error(err) => {
                self.release(None, out);
                let code = match err.http_status_code.as_str() {
                    "400" => tonic::Code::InvalidArgument,
                    "503" => tonic::Code::Unavailable,
                    _ => tonic::Code::Internal,
                };
                out.push_back(Err(Status::new(code, err.message)))
            }
        }
    }

    /// A streamed sequence's natural end.
    fn streamed_end(
        &mut self,
        mut complete: GenerateComplete,
        out: &mut VecDeque<Result<Step, Status>>,
    ) {
        let index = complete.index;
        let matched = match &complete.matched_stop {
            Some(MatchedStop::MatchedTokenId(id)) => Some(*id),
            _ => None,
        };
        let eos = matched.filter(|id| !self.stop_ids.contains(id));
        if eos.is_some() && matches!(self.servicer, Servicer::Vllm | Servicer::Trtllm) {
            // An EOS is no stop word to these: vLLM's `stop_reason` stays None, TensorRT-LLM's
            // END_ID finish names nothing (`_handle_sequence`), and nothing is trimmed.
            complete.matched_stop = None;
        }
        // TokenSpeed trims any matched token (`_generated_output_ids`), TensorRT-LLM only a
        // stop word.
        let trim = match self.servicer {
            Servicer::Tokenspeed => matched,
            Servicer::Trtllm => matched.filter(|_| eos.is_none()),
            _ => None,
        };
        self.release(trim.map(|id| (index, id)), out);
        let seq = self.seq(index).map(std::mem::take).unwrap_or_default();
        let mut step = complete_step(complete);
        if let Step::Complete {
            ids,
            scores,
            completion_tokens,
            ..
        } = &mut step
        {
            (*ids, *scores) = match self.servicer {
                // `_create_completion_response` / `_complete_response` of the same output
                // as the last chunk.
                Servicer::Sglang | Servicer::Vllm => (seq.last, seq.last_scores),
                // `_complete_response` with `_generated_output_ids`: the last delta, the
                // matched stop token trimmed (still counted).
                Servicer::Tokenspeed => trimmed(seq.last, seq.last_scores, trim),
                // `_complete_responses`: every id of the sequence, a matched stop token
                // trimmed from the final result (`_handle_sequence`) and not counted.
                Servicer::Trtllm => {
                    let (all, scores) = trimmed(seq.all, seq.all_scores, trim);
                    *completion_tokens = u32::try_from(all.len()).unwrap_or(u32::MAX);
                    (all, scores)
                }
                // `_complete_response(output_ids=[])`, no scores.
                Servicer::Mlx => (Vec::new(), None),
            };
        }
        self.ended += 1;
        if self.servicer == Servicer::Trtllm && self.n > 1 {
            // `Generate` sends completes once `gen_result.finished`: all at the end.
            self.deferred.push(step);
            if self.ended >= self.n {
                out.extend(self.deferred.drain(..).map(Ok));
            }
        } else {
            out.push_back(Ok(step));
        }
    }

    /// The gateway's Abort ended a streamed sequence.
    fn aborted(&mut self, complete: GenerateComplete, out: &mut VecDeque<Result<Step, Status>>) {
        self.release(None, out);
        let index = complete.index;
        let seq = self.seq(index).map(std::mem::take).unwrap_or_default();
        match self.servicer {
            // SGLang's `abort_request` marks the request finished, so its last output is
            // dropped (`_handle_batch_output`); TokenSpeed's deletes its state and streams
            // no finish: nothing more comes, and the call stays open.
            Servicer::Sglang | Servicer::Tokenspeed => self.silent = true,
            // vLLM's output processor answers an abort with a final empty output: an empty
            // chunk, then its complete (`Generate`).
            Servicer::Vllm => {
                let counts = (
                    unsigned(complete.prompt_tokens),
                    unsigned(complete.cached_tokens),
                );
                out.push_back(Ok(Step::Chunk {
                    index,
                    ids: Vec::new(),
                    scores: None,
                    prompt_tokens: counts.0,
                    completion_tokens: unsigned(complete.completion_tokens),
                    cached_tokens: counts.1,
                }));
                out.push_back(Ok(complete_step(complete)));
            }
            // The executor's CANCELLED final response: a complete with every id so far.
            Servicer::Trtllm => {
                out.extend(self.deferred.drain(..).map(Ok));
                let mut step = complete_step(complete);
                if let Step::Complete {
                    ids,
                    scores,
                    finish_reason,
                    ..
                } = &mut step
                {
                    (*ids, *scores) = (seq.all, seq.all_scores);
                    *finish_reason = "cancelled".to_owned();
                }
                out.push_back(Ok(step));
            }
            // The generation loop's `None` sentinel: the stream ends with no complete.
            Servicer::Mlx => {}
        }
    }

    /// Whether the stream has ended its say and stays open until the gateway drops it.
    fn silent(&self) -> bool {
        self.silent
    }

    /// Sends the held chunk (TokenSpeed's, TensorRT-LLM's), its last id trimmed when it
    /// is the stop token `matched` its sequence ended on: TokenSpeed sends what is left,
    /// even nothing (`_generated_output_ids`); TensorRT-LLM sends no chunk without ids.
    fn release(&mut self, matched: Option<(u32, u32)>, out: &mut VecDeque<Result<Step, Status>>) {
        let Some(mut chunk) = self.held.take() else {
            return;
        };
        if let Some((index, id)) = matched {
            if chunk.index == index && chunk.token_ids.last() == Some(&id) {
                chunk.token_ids.pop();
                let keep = chunk.token_ids.len();
                chunk.output_logprobs = chunk.output_logprobs.map(|s| first_scores(s, keep));
                if self.servicer == Servicer::Trtllm {
                    // Its count is the ids it sends (`len(all tokens)`).
                    chunk.completion_tokens = chunk.completion_tokens.saturating_sub(1);
                    if chunk.token_ids.is_empty() {
                        return;
                    }
                }
            }
        }
        out.push_back(Ok(chunk_step(chunk)));
    }

    /// MLX's generation loop yields one token per step: a chunk per id, each with the
    /// sequence's count so far.
    fn one_id_each(
        &mut self,
        chunk: GenerateStreamChunk,
        out: &mut VecDeque<Result<Step, Status>>,
    ) {
        let index = chunk.index;
        let Some(seq) = self.seq(index) else {
            return out.push_back(Err(too_many(index)));
        };
        for (at, id) in chunk.token_ids.iter().enumerate() {
            seq.sent = seq.sent.saturating_add(1);
            out.push_back(Ok(Step::Chunk {
                index,
                ids: vec![*id],
                scores: chunk.output_logprobs.as_ref().map(|s| nth_score(s, at)),
                prompt_tokens: unsigned(chunk.prompt_tokens),
                completion_tokens: seq.sent,
                cached_tokens: 0,
            }));
        }
    }

    /// Notes a chunk of sequence `index`; `None` past [`MAX_SEQUENCES`].
    fn record(&mut self, index: u32, ids: &[u32], scores: Option<&OutputLogProbs>) -> Option<()> {
        let seq = self.seq(index)?;
        seq.last = ids.to_vec();
        seq.last_scores = scores.cloned();
        seq.all.extend_from_slice(ids);
        if let Some(scores) = scores {
            let all = seq.all_scores.get_or_insert_with(OutputLogProbs::default);
            all.token_logprobs.extend_from_slice(&scores.token_logprobs);
            all.token_ids.extend_from_slice(&scores.token_ids);
            all.top_logprobs.extend(scores.top_logprobs.iter().cloned());
        }
        Some(())
    }

    fn seq(&mut self, index: u32) -> Option<&mut Seq> {
        let at = usize::try_from(index)
            .ok()
            .filter(|at| *at < MAX_SEQUENCES)?;
        if self.seqs.len() <= at {
            self.seqs.resize_with(at + 1, Seq::default);
        }
        self.seqs.get_mut(at)
    }
}

/// `ids` and their `scores` without a last id that is the stop token `matched`.
fn trimmed(
    mut ids: Vec<u32>,
    scores: Option<OutputLogProbs>,
    matched: Option<u32>,
) -> (Vec<u32>, Option<OutputLogProbs>) {
    if matched.is_some() && ids.last().copied() == matched {
        ids.pop();
    }
    let keep = ids.len();
    (ids, scores.map(|s| first_scores(s, keep)))
}

fn chunk_step(chunk: GenerateStreamChunk) -> Step {
    Step::Chunk {
        index: chunk.index,
        ids: chunk.token_ids,
        scores: chunk.output_logprobs,
        prompt_tokens: unsigned(chunk.prompt_tokens),
        completion_tokens: unsigned(chunk.completion_tokens),
        cached_tokens: unsigned(chunk.cached_tokens),
    }
}

fn complete_step(complete: GenerateComplete) -> Step {
    Step::Complete {
        index: complete.index,
        ids: complete.output_ids,
        scores: complete.output_logprobs,
        finish_reason: complete.finish_reason,
        matched_stop: complete.matched_stop,
        prompt_tokens: unsigned(complete.prompt_tokens),
        completion_tokens: unsigned(complete.completion_tokens),
        cached_tokens: unsigned(complete.cached_tokens),
    }
}

/// The first `n` entries of `scores`.
fn first_scores(mut scores: OutputLogProbs, n: usize) -> OutputLogProbs {
    scores.token_logprobs.truncate(n);
    scores.token_ids.truncate(n);
    scores.top_logprobs.truncate(n);
    scores
}

/// Entry `at` of `scores` alone.
fn nth_score(scores: &OutputLogProbs, at: usize) -> OutputLogProbs {
    OutputLogProbs {
        token_logprobs: scores.token_logprobs.get(at).copied().into_iter().collect(),
        token_ids: scores.token_ids.get(at).copied().into_iter().collect(),
        top_logprobs: scores.top_logprobs.get(at).cloned().into_iter().collect(),
    }
}

fn too_many(index: u32) -> Status {
    Status::internal(format!(
        "grpc-engine: sequence {index}, at most {MAX_SEQUENCES}"
    ))
}

fn unsigned(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// A generation's messages in one service's shape: `wrap` makes that service's message
/// of each step.
pub struct Reshaped<M> {
    rx: mpsc::Receiver<Item>,
    reshaper: Reshaper,
    steps: VecDeque<Result<Step, Status>>,
    wrap: fn(Step) -> M,
}

impl<M> Reshaped<M> {
    pub fn new(rx: mpsc::Receiver<Item>, reshaper: Reshaper, wrap: fn(Step) -> M) -> Self {
        Reshaped {
            rx,
            reshaper,
            steps: VecDeque::new(),
            wrap,
        }
    }
}

impl<M> tonic::codegen::tokio_stream::Stream for Reshaped<M> {
    type Item = Result<M, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(next) = this.steps.pop_front() {
                return Poll::Ready(Some(next.map(this.wrap)));
            }
            if this.reshaper.silent() {
                // Nothing will wake this: the gateway drops the call.
                return Poll::Pending;
            }
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(item)) => this.reshaper.reshape(item, &mut this.steps),
                Poll::Ready(None) => {
                    this.reshaper.release(None, &mut this.steps);
                    return Poll::Ready(this.steps.pop_front().map(|next| next.map(this.wrap)));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::engine::grpc::sglang;

    fn message(event: SglangEvent) -> Item {
        Ok(sglang::GenerateResponse {
            request_id: "r".into(),
            response: Some(event),
        })
    }

    /// A step of sequence `index` with `ids`, `count` ids generated so far.
    fn chunk(index: u32, ids: &[u32], count: i32) -> Item {
        message(SglangEvent::Chunk(sglang::GenerateStreamChunk {
            token_ids: ids.to_vec(),
            index,
            prompt_tokens: 3,
            completion_tokens: count,
            output_logprobs: Some(OutputLogProbs {
                token_logprobs: vec![-1.0; ids.len()],
                token_ids: ids.to_vec(),
                top_logprobs: Vec::new(),
            }),
            ..Default::default()
        }))
    }

    /// The sink's end of sequence `index` (streamed: the last chunk's ids again).
    fn complete(index: u32, ids: &[u32], count: i32, reason: &str, stop: Option<u32>) -> Item {
        message(SglangEvent::Complete(sglang::GenerateComplete {
            output_ids: ids.to_vec(),
            finish_reason: reason.into(),
            prompt_tokens: 3,
            completion_tokens: count,
            index,
            matched_stop: stop.map(MatchedStop::MatchedTokenId),
            ..Default::default()
        }))
    }

    /// `(is_complete, index, ids, completion_tokens)` of a step.
    type Seen = (bool, u32, Vec<u32>, u32);

    /// Every step, and whether the stream went silent.
    fn run(servicer: Servicer, stream: bool, n: u32, items: Vec<Item>) -> (Vec<Seen>, bool) {
        run_stopping(servicer, stream, n, &[], items)
    }

    /// [`run`] for a request whose stop token ids are `stop_ids`.
    fn run_stopping(
        servicer: Servicer,
        stream: bool,
        n: u32,
        stop_ids: &[u32],
        items: Vec<Item>,
    ) -> (Vec<Seen>, bool) {
        let mut r = Reshaper::new(servicer, stream, n);
        r.stop_ids = stop_ids.to_vec();
        let mut out = VecDeque::new();
        for item in items {
            r.reshape(item, &mut out);
        }
        r.release(None, &mut out);
        let steps = out
            .into_iter()
            .map(|step| match step.expect("a step") {
                Step::Chunk {
                    index,
                    ids,
                    completion_tokens,
                    ..
                } => (false, index, ids, completion_tokens),
                Step::Complete {
                    index,
                    ids,
                    completion_tokens,
                    ..
                } => (true, index, ids, completion_tokens),
            })
            .collect();
        (steps, r.silent())
    }

    /// Three ids, the last an EOS (id 2) the sequence stopped on.
    fn eos_run() -> Vec<Item> {
        vec![
            chunk(0, &[7, 8], 2),
            chunk(0, &[2], 3),
            complete(0, &[2], 3, "stop", Some(2)),
        ]
    }

    #[test]
    fn each_servicer_ends_a_streamed_sequence_its_own_way() {
        let c = |ids: &[u32], n| (false, 0, ids.to_vec(), n);
        let x = |ids: &[u32], n| (true, 0, ids.to_vec(), n);
        // SGLang and vLLM: the last chunk again (vLLM's counts are the wrapper's).
        for servicer in [Servicer::Sglang, Servicer::Vllm] {
            let (steps, _) = run(servicer, true, 1, eos_run());
            assert_eq!(
                steps,
                [c(&[7, 8], 2), c(&[2], 3), x(&[2], 3)],
                "{servicer:?}"
            );
        }
        // TokenSpeed: the EOS or stop token trimmed from the chunk and the complete, still
        // counted.
        for stop_ids in [&[][..], &[2]] {
            let (steps, _) = run_stopping(Servicer::Tokenspeed, true, 1, stop_ids, eos_run());
            assert_eq!(steps, [c(&[7, 8], 2), c(&[], 3), x(&[], 3)]);
        }
        // TensorRT-LLM: every id in the complete; a stop word (not an EOS) is never sent
        // nor counted.
        let (steps, _) = run(Servicer::Trtllm, true, 1, eos_run());
        assert_eq!(steps, [c(&[7, 8], 2), c(&[2], 3), x(&[7, 8, 2], 3)]);
        let (steps, _) = run_stopping(Servicer::Trtllm, true, 1, &[2], eos_run());
        assert_eq!(steps, [c(&[7, 8], 2), x(&[7, 8], 2)]);
        // MLX: one id per chunk, a complete without ids.
        let (steps, _) = run(Servicer::Mlx, true, 1, eos_run());
        assert_eq!(steps, [c(&[7], 1), c(&[8], 2), c(&[2], 3), x(&[], 3)]);
    }

    #[test]
    fn unstreamed_sequences_come_whole_and_sglang_names_them_all_zero() {
        let items = || {
            vec![
                complete(0, &[1, 2], 2, "length", None),
                complete(1, &[3, 4], 2, "length", None),
            ]
        };
        let (steps, _) = run(Servicer::Sglang, false, 2, items());
        assert_eq!(steps, [(true, 0, vec![1, 2], 2), (true, 0, vec![3, 4], 2)]);
        let (steps, _) = run(Servicer::Vllm, false, 2, items());
        assert_eq!(steps, [(true, 0, vec![1, 2], 2), (true, 1, vec![3, 4], 2)]);
    }

    #[test]
    fn trtllm_sends_the_completes_of_several_sequences_at_the_end() {
        let items = vec![
            chunk(0, &[5], 1),
            chunk(1, &[6], 1),
            complete(1, &[6], 1, "length", None),
            chunk(0, &[7], 2),
            complete(0, &[7], 2, "length", None),
        ];
        let (steps, _) = run(Servicer::Trtllm, true, 2, items);
        assert_eq!(
            steps,
            [
                (false, 0, vec![5], 1),
                (false, 1, vec![6], 1),
                (false, 0, vec![7], 2),
                (true, 1, vec![6], 1),
                (true, 0, vec![5, 7], 2),
            ]
        );
    }

    #[test]
    fn an_abort_ends_each_servicer_its_own_way() {
        let items = || vec![chunk(0, &[5, 6], 2), complete(0, &[], 2, "abort", None)];
        let (steps, silent) = run(Servicer::Sglang, true, 1, items());
        assert_eq!((steps.len(), silent), (1, true));
        let (steps, silent) = run(Servicer::Tokenspeed, true, 1, items());
        assert_eq!((steps.len(), silent), (1, true));
        let (steps, silent) = run(Servicer::Vllm, true, 1, items());
        assert!(!silent);
        assert_eq!(steps[1..], [(false, 0, vec![], 2), (true, 0, vec![], 2)]);
        let (steps, _) = run(Servicer::Trtllm, true, 1, items());
        assert_eq!(steps[1], (true, 0, vec![5, 6], 2));
        let (steps, silent) = run(Servicer::Mlx, true, 1, items());
        assert_eq!((steps.len(), silent), (2, false));
    }

    #[test]
    fn errors_become_statuses() {
        let mut r = Reshaper::new(Servicer::Sglang, true, 1);
        let mut out = VecDeque::new();
        for (code, expected) in [
            ("400", tonic::Code::InvalidArgument),
            ("503", tonic::Code::Unavailable),
            ("500", tonic::Code::Internal),
        ] {
            r.reshape(
                message(SglangEvent::Error(sglang::GenerateError {
                    message: "no".into(),
                    http_status_code: code.into(),
                    details: String::new(),
                })),
                &mut out,
            );
            let status = out.pop_front().and_then(Result::err).expect("a status");
            assert_eq!(status.code(), expected);
        }
        r.reshape(chunk(64, &[1], 1), &mut out);
        assert!(out.pop_front().is_some_and(|s| s.is_err()));
    }
}

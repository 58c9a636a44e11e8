//! The generation's messages, produced in SGLang's shape by the backends, reshaped as the
//! other services send them. The services differ in what a streamed complete carries:
//! vLLM and TokenSpeed repeat the last chunk's ids, TensorRT-LLM every id of the
//! sequence, MLX none. A non-streamed sequence gets one complete with every id whatever
//! the service. A refusal (SGLang's 4xx `GenerateError`) becomes an `INVALID_ARGUMENT`
//! status and any other error `INTERNAL`, since these services have no error message.
//!
//! Each service turns the neutral [`Step`]s into its own messages with a plain function,
//! so this module holds every rule they share.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tollgate::grpc::sglang::generate_complete::MatchedStop;
use tollgate::grpc::sglang::generate_response::Response as SglangEvent;
use tollgate::grpc::sglang::OutputLogProbs;
use tonic::Status;

use crate::sink::Item;

/// What a streamed complete repeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// The ids of the sequence's last chunk (vLLM, TokenSpeed).
    LastChunk,
    /// Every id of the sequence (TensorRT-LLM).
    Everything,
    /// None (MLX).
    Nothing,
}

/// One message of a generation, in no service's shape.
#[derive(Debug, PartialEq)]
pub enum Step {
    Chunk {
        index: u32,
        ids: Vec<u32>,
        scores: Option<OutputLogProbs>,
        prompt_tokens: u32,
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

/// One sequence's ids so far: the last chunk's, and all of them when the service's
/// complete repeats everything.
#[derive(Default)]
struct Seq {
    last: Vec<u32>,
    last_scores: Option<OutputLogProbs>,
    all: Vec<u32>,
    all_scores: Option<OutputLogProbs>,
    completion_tokens: u32,
}

/// SGLang-shaped messages in, [`Step`]s out.
pub struct Reshaper {
    stream: bool,
    repeat: Repeat,
    seqs: Vec<Seq>,
}

impl Reshaper {
    pub fn new(stream: bool, repeat: Repeat) -> Reshaper {
        Reshaper {
            stream,
            repeat,
            seqs: Vec::new(),
        }
    }

    /// Appends what one SGLang message becomes.
    pub fn reshape(&mut self, item: Item, out: &mut VecDeque<Result<Step, Status>>) {
        let event = match item {
            Err(status) => return out.push_back(Err(status)),
            Ok(message) => match message.response {
                Some(event) => event,
                None => return,
            },
        };
        match event {
            SglangEvent::Chunk(chunk) => {
                let prompt_tokens = unsigned(chunk.prompt_tokens);
                let cached_tokens = unsigned(chunk.cached_tokens);
                let scores = chunk.output_logprobs;
                match self.record(chunk.index, &chunk.token_ids, scores.as_ref()) {
                    Some(()) => out.push_back(Ok(Step::Chunk {
                        index: chunk.index,
                        ids: chunk.token_ids,
                        scores,
                        prompt_tokens,
                        cached_tokens,
                    })),
                    None => out.push_back(Err(too_many(chunk.index))),
                }
            }
            SglangEvent::Complete(complete) => {
                let index = complete.index;
                let prompt_tokens = unsigned(complete.prompt_tokens);
                let cached_tokens = unsigned(complete.cached_tokens);
                let scores = complete.output_logprobs;
                let (ids, scores) = if self.stream {
                    // SGLang's streamed complete carries the last step's ids: the other
                    // services send them as a chunk first.
                    if !complete.output_ids.is_empty() {
                        if self
                            .record(index, &complete.output_ids, scores.as_ref())
                            .is_none()
                        {
                            return out.push_back(Err(too_many(index)));
                        }
                        out.push_back(Ok(Step::Chunk {
                            index,
                            ids: complete.output_ids,
                            scores,
                            prompt_tokens,
                            cached_tokens,
                        }));
                    }
                    let seq = self.seq(index).map(std::mem::take).unwrap_or_default();
                    match self.repeat {
                        Repeat::LastChunk => (seq.last, seq.last_scores),
                        Repeat::Everything => (seq.all, seq.all_scores),
                        Repeat::Nothing => (Vec::new(), None),
                    }
                } else {
                    (complete.output_ids, scores)
                };
                let completion_tokens = if self.stream {
                    self.seq(index).map_or(0, |s| s.completion_tokens)
                } else {
                    u32::try_from(ids.len()).unwrap_or(u32::MAX)
                };
                out.push_back(Ok(Step::Complete {
                    index,
                    completion_tokens: completion_tokens.max(len(&ids)),
                    ids,
                    scores,
                    finish_reason: complete.finish_reason,
                    matched_stop: complete.matched_stop,
                    prompt_tokens,
                    cached_tokens,
                }));
            }
            SglangEvent::Error(err) => {
                out.push_back(Err(if err.http_status_code.starts_with('4') {
                    Status::invalid_argument(err.message)
                } else {
                    Status::internal(err.message)
                }))
            }
        }
    }

    /// Notes a chunk of sequence `index`; `None` past [`MAX_SEQUENCES`].
    fn record(&mut self, index: u32, ids: &[u32], scores: Option<&OutputLogProbs>) -> Option<()> {
        let repeat = self.repeat;
        let seq = self.seq(index)?;
        seq.completion_tokens = seq.completion_tokens.saturating_add(len(ids));
        match repeat {
            Repeat::LastChunk => {
                seq.last = ids.to_vec();
                seq.last_scores = scores.cloned();
            }
            Repeat::Everything => {
                seq.all.extend_from_slice(ids);
                if let Some(scores) = scores {
                    let all = seq.all_scores.get_or_insert_with(OutputLogProbs::default);
                    all.token_logprobs.extend_from_slice(&scores.token_logprobs);
                    all.token_ids.extend_from_slice(&scores.token_ids);
                    all.top_logprobs.extend(scores.top_logprobs.iter().cloned());
                }
            }
            Repeat::Nothing => {}
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

fn too_many(index: u32) -> Status {
    Status::internal(format!(
        "grpc-engine: sequence {index}, at most {MAX_SEQUENCES}"
    ))
}

fn unsigned(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn len(ids: &[u32]) -> u32 {
    u32::try_from(ids.len()).unwrap_or(u32::MAX)
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
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(item)) => this.reshaper.reshape(item, &mut this.steps),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate::grpc::sglang;

    fn message(event: SglangEvent) -> Item {
        Ok(sglang::GenerateResponse {
            request_id: "r".into(),
            response: Some(event),
        })
    }

    fn chunk(index: u32, ids: &[u32]) -> Item {
        message(SglangEvent::Chunk(sglang::GenerateStreamChunk {
            token_ids: ids.to_vec(),
            index,
            prompt_tokens: 3,
            output_logprobs: Some(OutputLogProbs {
                token_logprobs: vec![-1.0; ids.len()],
                token_ids: ids.to_vec(),
                top_logprobs: Vec::new(),
            }),
            ..Default::default()
        }))
    }

    fn complete(index: u32, ids: &[u32]) -> Item {
        message(SglangEvent::Complete(sglang::GenerateComplete {
            output_ids: ids.to_vec(),
            finish_reason: "length".into(),
            prompt_tokens: 3,
            index,
            ..Default::default()
        }))
    }

    /// `(is_complete, index, ids)` of every step.
    fn run(stream: bool, repeat: Repeat, items: Vec<Item>) -> Vec<(bool, u32, Vec<u32>)> {
        let mut r = Reshaper::new(stream, repeat);
        let mut out = VecDeque::new();
        for item in items {
            r.reshape(item, &mut out);
        }
        out.into_iter()
            .map(|step| match step.expect("a step") {
                Step::Chunk { index, ids, .. } => (false, index, ids),
                Step::Complete { index, ids, .. } => (true, index, ids),
            })
            .collect()
    }

    #[test]
    fn each_service_repeats_what_it_repeats() {
        let items = || vec![chunk(0, &[1, 2]), chunk(0, &[3]), complete(0, &[4])];
        let streamed = |ids: &[u32]| {
            vec![
                (false, 0, vec![1, 2]),
                (false, 0, vec![3]),
                (false, 0, vec![4]),
                (true, 0, ids.to_vec()),
            ]
        };
        assert_eq!(run(true, Repeat::LastChunk, items()), streamed(&[4]));
        assert_eq!(
            run(true, Repeat::Everything, items()),
            streamed(&[1, 2, 3, 4])
        );
        assert_eq!(run(true, Repeat::Nothing, items()), streamed(&[]));
        // Not streamed: one complete with every id, whatever the service.
        let whole = vec![complete(0, &[1, 2, 3])];
        assert_eq!(
            run(false, Repeat::Nothing, whole),
            vec![(true, 0, vec![1, 2, 3])]
        );
    }

    #[test]
    fn sequences_are_kept_apart_with_their_scores() {
        let mut r = Reshaper::new(true, Repeat::Everything);
        let mut out = VecDeque::new();
        for item in [chunk(0, &[5]), chunk(1, &[6]), chunk(0, &[7])] {
            r.reshape(item, &mut out);
        }
        r.reshape(complete(1, &[]), &mut out);
        r.reshape(complete(0, &[]), &mut out);
        let completes: Vec<(u32, Vec<u32>, Vec<u32>, u32)> = out
            .into_iter()
            .filter_map(|s| match s.ok()? {
                Step::Complete {
                    index,
                    ids,
                    scores,
                    completion_tokens,
                    ..
                } => Some((
                    index,
                    ids,
                    scores.map(|s| s.token_ids).unwrap_or_default(),
                    completion_tokens,
                )),
                Step::Chunk { .. } => None,
            })
            .collect();
        assert_eq!(
            completes,
            [(1, vec![6], vec![6], 1), (0, vec![5, 7], vec![5, 7], 2)]
        );
    }

    #[test]
    fn errors_become_statuses() {
        let mut r = Reshaper::new(true, Repeat::LastChunk);
        let mut out = VecDeque::new();
        for (code, expected) in [
            ("400", tonic::Code::InvalidArgument),
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
        r.reshape(chunk(64, &[1]), &mut out);
        assert!(out.pop_front().is_some_and(|s| s.is_err()));
    }
}

//! One generation's way out: token chunks, then one complete per sequence or one error,
//! shaped the way SGLang's servicer answers `Generate` (`smg_grpc_servicer/sglang/
//! servicer.py`, `Generate`, with `request_manager.py`'s `_handle_single_request`).
//!
//! Both backends hand their tokens here, so the rules that do not depend on where tokens
//! come from live in one place:
//! - streamed, each step is a chunk (`_create_chunk_response`) with its ids, their scores
//!   and the cumulative counts; the step that ends a sequence is a chunk and then a complete
//!   built from the same output (`_create_completion_response`), so the complete repeats the
//!   last chunk's ids and scores and carries the cumulative `completion_tokens`. An ending
//!   that comes with no step of its own (the gateway's Abort) has no ids to repeat;
//! - not streamed, a sequence gets a single `GenerateComplete` with every id and score
//!   (`_handle_single_request` hands `state.output_ids` on);
//! - a generation of `n` sequences names each sequence's chunks and complete by `index`;
//! - the `--drop-after` fault breaks the stream; a gateway that went away is noticed on the
//!   next send and reported as [`Stop::Cancelled`].

use tokio::sync::mpsc;
use tollgate::engine::grpc::sglang::generate_complete::MatchedStop;
use tollgate::engine::grpc::sglang::generate_response::Response;
use tollgate::engine::grpc::sglang::{
    GenerateComplete, GenerateError, GenerateResponse, GenerateStreamChunk, OutputLogProbs,
};
use tonic::Status;

use crate::say::{self, Id};

/// What the gRPC stream carries.
pub type Item = Result<GenerateResponse, Status>;

/// Responses waiting for the HTTP/2 stream: a few, so a slow reader slows the generation
/// instead of growing a queue.
pub const CHANNEL_CAPACITY: usize = 16;

/// Token counts as the engine reports them, cumulative.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
}

/// Why a generation ended normally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// A stop token (the id is in the output, as SGLang keeps it) or a stop string.
    Stop(Option<MatchedStop>),
    /// `max_new_tokens` or the context window.
    Length,
    /// The gateway called Abort.
    Abort,
}

impl Finish {
    fn reason(&self) -> &'static str {
        match self {
            Finish::Stop(_) => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
        }
    }
}

/// Why a backend must stop generating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The gateway dropped the stream.
    Cancelled,
    /// The `--drop-after` fault broke the stream.
    Dropped,
    /// The generation already sent its complete or error.
    Ended,
}

/// One sequence's state.
#[derive(Default)]
struct Seq {
    /// A non-streamed sequence's ids and scores, held for its complete. Bounded by the
    /// backend's token limit (the context window).
    held: Vec<u32>,
    held_scores: Option<OutputLogProbs>,
    /// A streamed sequence's last chunk, which its complete repeats.
    last: Vec<u32>,
    last_scores: Option<OutputLogProbs>,
    counts: Counts,
    ended: bool,
}

/// The sending half of one generation.
pub struct Sink {
    tx: mpsc::Sender<Item>,
    request_id: String,
    stream: bool,
    drop_after: Option<u32>,
    /// Tokens accepted so far, over all sequences (drives `--drop-after`).
    sent: u32,
    seqs: Vec<Seq>,
    /// Every sequence completed, or the generation failed.
    ended: bool,
}

impl Sink {
    /// A sink for one sequence (see [`Sink::sequences`]).
    pub fn new(
        tx: mpsc::Sender<Item>,
        request_id: String,
        stream: bool,
        drop_after: Option<u32>,
    ) -> Sink {
        Sink {
            tx,
            request_id,
            stream,
            drop_after,
            sent: 0,
            seqs: vec![Seq::default()],
            ended: false,
        }
    }

    /// The generation has `n` sequences (at least one), indexed from 0.
    pub fn sequences(&mut self, n: usize) {
        self.seqs.resize_with(n.max(1), Seq::default);
    }

    /// The latest counts a backend reported for sequence 0 (the only one of most
    /// generations).
    pub fn counts(&self) -> Counts {
        self.seqs.first().map(|s| s.counts).unwrap_or_default()
    }

    /// New tokens of sequence 0 and the counts after them.
    pub async fn tokens(&mut self, ids: &[u32], counts: Counts) -> Result<(), Stop> {
        self.step(0, ids, None, counts).await
    }

    /// New tokens of sequence `index`, their scores when asked, and its counts after them.
    pub async fn step(
        &mut self,
        index: u32,
        ids: &[u32],
        scores: Option<OutputLogProbs>,
        counts: Counts,
    ) -> Result<(), Stop> {
        let stream = self.stream;
        let seq = self.live(index)?;
        seq.counts = counts;
        let room = self
            .drop_after
            .map_or(usize::MAX, |n| n.saturating_sub(self.sent) as usize);
        let now = &ids[..ids.len().min(room)];
        let scores = scores.map(|s| first_scores(s, now.len()));
        if !now.is_empty() {
            self.sent = self
                .sent
                .saturating_add(u32::try_from(now.len()).unwrap_or(u32::MAX));
            if stream {
                let seq = self.live(index)?;
                seq.last = now.to_vec();
                seq.last_scores = scores.clone();
                let chunk = GenerateStreamChunk {
                    token_ids: now.to_vec(),
                    prompt_tokens: to_i32(counts.prompt_tokens),
                    completion_tokens: to_i32(counts.completion_tokens),
                    cached_tokens: to_i32(counts.cached_tokens),
                    output_logprobs: scores,
                    index,
                };
                self.send(Response::Chunk(chunk)).await?;
            } else {
                let seq = self.live(index)?;
                seq.held.extend_from_slice(now);
                if let Some(scores) = scores {
                    let held = seq.held_scores.get_or_insert_with(OutputLogProbs::default);
                    held.token_logprobs.extend(scores.token_logprobs);
                    held.token_ids.extend(scores.token_ids);
                    held.top_logprobs.extend(scores.top_logprobs);
                }
            }
        }
        // The fault fires as soon as the count is reached: nothing more, not even a
        // complete, follows the N-th token.
        if self.drop_after.is_some_and(|n| self.sent >= n) {
            return self.drop_stream().await;
        }
        Ok(())
    }

    /// The end of the generation: every sequence still running ends with `finish`,
    /// sequence 0 with `counts`, the others with their own.
    pub async fn finish(&mut self, finish: Finish, counts: Counts) -> Result<(), Stop> {
        if self.ended {
            return Err(Stop::Ended);
        }
        if let Some(first) = self.seqs.first_mut() {
            first.counts = counts;
        }
        for index in 0..self.seqs.len() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            if !self.seqs[index as usize].ended {
                let own = self.seqs[index as usize].counts;
                self.finish_one(index, finish.clone(), own).await?;
            }
        }
        Ok(())
    }

    /// The end of sequence `index`.
    pub async fn finish_one(
        &mut self,
        index: u32,
        finish: Finish,
        counts: Counts,
    ) -> Result<(), Stop> {
        let several = self.seqs.len() > 1;
        let stream = self.stream;
        let seq = self.live(index)?;
        seq.counts = counts;
        seq.ended = true;
        let (output_ids, output_logprobs) = match (stream, &finish) {
            // The gateway's Abort ends the sequence between steps: nothing to repeat.
            (true, Finish::Abort) => (Vec::new(), None),
            (true, _) => (std::mem::take(&mut seq.last), seq.last_scores.take()),
            (false, _) => (std::mem::take(&mut seq.held), seq.held_scores.take()),
        };
        say::line(format_args!(
            "finish request_id={} reason={} completion_tokens={}{}",
            Id(&self.request_id),
            finish.reason(),
            counts.completion_tokens,
            if several {
                format!(" index={index}")
            } else {
                String::new()
            }
        ));
        let complete = GenerateComplete {
            output_ids,
            finish_reason: finish.reason().to_string(),
            prompt_tokens: to_i32(counts.prompt_tokens),
            completion_tokens: to_i32(counts.completion_tokens),
            cached_tokens: to_i32(counts.cached_tokens),
            output_logprobs,
            index,
            matched_stop: match finish {
                Finish::Stop(matched) => matched,
                Finish::Length | Finish::Abort => None,
            },
        };
        let sent = self.send(Response::Complete(complete)).await;
        if self.seqs.iter().all(|s| s.ended) {
            self.ended = true;
        }
        sent
    }

    /// Sequence `index`, while it and the generation go on.
    fn live(&mut self, index: u32) -> Result<&mut Seq, Stop> {
        if self.ended {
            return Err(Stop::Ended);
        }
        match self.seqs.get_mut(index as usize) {
            Some(seq) if !seq.ended => Ok(seq),
            _ => Err(Stop::Ended),
        }
    }

    /// The generation failed; `status` is the HTTP status the gateway should answer with.
    pub async fn fail(&mut self, message: &str, status: u16) -> Result<(), Stop> {
        if self.ended {
            return Err(Stop::Ended);
        }
        say::line(format_args!(
            "error request_id={} message={}",
            Id(&self.request_id),
            serde_json::to_string(message).unwrap_or_default()
        ));
        let error = GenerateError {
            message: message.to_string(),
            http_status_code: status.to_string(),
            details: String::new(),
        };
        let sent = self.send(Response::Error(error)).await;
        self.ended = true;
        sent
    }

    async fn drop_stream(&mut self) -> Result<(), Stop> {
        self.ended = true;
        let status = Status::internal(format!(
            "grpc-engine: stream dropped after {} tokens (--drop-after)",
            self.sent
        ));
        self.tx
            .send(Err(status))
            .await
            .map_err(|_| Stop::Cancelled)?;
        Err(Stop::Dropped)
    }

    async fn send(&mut self, response: Response) -> Result<(), Stop> {
        let message = GenerateResponse {
            request_id: self.request_id.clone(),
            response: Some(response),
        };
        self.tx.send(Ok(message)).await.map_err(|_| Stop::Cancelled)
    }
}

/// The first `n` entries of `scores` (the ids a `--drop-after` fault lets through).
fn first_scores(mut scores: OutputLogProbs, n: usize) -> OutputLogProbs {
    scores.token_logprobs.truncate(n);
    scores.token_ids.truncate(n);
    scores.top_logprobs.truncate(n);
    scores
}

/// Counts travel as int32; a count past it is clamped rather than wrapped.
pub fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(stream: bool, drop_after: Option<u32>) -> (Sink, mpsc::Receiver<Item>) {
        let (tx, rx) = mpsc::channel(64);
        (Sink::new(tx, "r".into(), stream, drop_after), rx)
    }

    fn counts(completion_tokens: u32) -> Counts {
        Counts {
            prompt_tokens: 3,
            completion_tokens,
            cached_tokens: 0,
        }
    }

    fn drain(rx: &mut mpsc::Receiver<Item>) -> Vec<Item> {
        let mut out = Vec::new();
        while let Ok(item) = rx.try_recv() {
            out.push(item);
        }
        out
    }

    #[tokio::test]
    async fn streamed_tokens_go_out_as_chunks_then_a_complete_repeating_the_last() {
        let (mut s, mut rx) = sink(true, None);
        s.tokens(&[5], counts(1)).await.unwrap();
        s.tokens(&[6, 7], counts(3)).await.unwrap();
        s.finish(Finish::Length, counts(3)).await.unwrap();
        let items = drain(&mut rx);
        assert_eq!(items.len(), 3);
        let Some(Response::Chunk(c)) = items[1].as_ref().unwrap().response.clone() else {
            panic!("{items:?}")
        };
        assert_eq!(
            (c.token_ids, c.prompt_tokens, c.completion_tokens),
            (vec![6, 7], 3, 3)
        );
        let Some(Response::Complete(done)) = items[2].as_ref().unwrap().response.clone() else {
            panic!("{items:?}")
        };
        assert_eq!((done.output_ids, done.completion_tokens), (vec![6, 7], 3));
        assert_eq!(done.finish_reason, "length");
        assert_eq!(s.tokens(&[1], counts(4)).await, Err(Stop::Ended));
    }

    #[tokio::test]
    async fn unstreamed_tokens_arrive_in_one_complete() {
        let (mut s, mut rx) = sink(false, None);
        s.tokens(&[5], counts(1)).await.unwrap();
        s.tokens(&[2], counts(2)).await.unwrap();
        s.finish(
            Finish::Stop(Some(MatchedStop::MatchedTokenId(2))),
            counts(2),
        )
        .await
        .unwrap();
        let items = drain(&mut rx);
        assert_eq!(items.len(), 1);
        let Some(Response::Complete(done)) = items[0].as_ref().unwrap().response.clone() else {
            panic!("{items:?}")
        };
        assert_eq!(done.output_ids, [5, 2]);
        assert_eq!(done.matched_stop, Some(MatchedStop::MatchedTokenId(2)));
        assert_eq!(done.completion_tokens, 2);
    }

    #[tokio::test]
    async fn drop_after_sends_the_allowed_tokens_then_a_status() {
        let (mut s, mut rx) = sink(true, Some(2));
        s.tokens(&[1], counts(1)).await.unwrap();
        assert_eq!(s.tokens(&[2, 3], counts(3)).await, Err(Stop::Dropped));
        let items = drain(&mut rx);
        assert_eq!(items.len(), 3);
        let Some(Response::Chunk(c)) = items[1].as_ref().unwrap().response.clone() else {
            panic!("{items:?}")
        };
        assert_eq!(c.token_ids, [2]);
        assert_eq!(items[2].as_ref().unwrap_err().code(), tonic::Code::Internal);
    }

    #[tokio::test]
    async fn drop_after_zero_breaks_before_any_token() {
        let (mut s, mut rx) = sink(true, Some(0));
        assert_eq!(s.tokens(&[1], counts(1)).await, Err(Stop::Dropped));
        let items = drain(&mut rx);
        assert_eq!(items.len(), 1);
        assert!(items[0].is_err());
    }

    #[tokio::test]
    async fn a_gone_receiver_is_a_cancellation() {
        let (mut s, rx) = sink(true, None);
        drop(rx);
        assert_eq!(s.tokens(&[1], counts(1)).await, Err(Stop::Cancelled));
    }

    #[tokio::test]
    async fn errors_carry_the_http_status() {
        let (mut s, mut rx) = sink(true, None);
        s.fail("boom", 503).await.unwrap();
        let Some(Response::Error(e)) = drain(&mut rx)[0].as_ref().unwrap().response.clone() else {
            panic!()
        };
        assert_eq!(
            (e.message.as_str(), e.http_status_code.as_str()),
            ("boom", "503")
        );
        assert_eq!(s.finish(Finish::Length, counts(0)).await, Err(Stop::Ended));
    }
}

//! A generation's text as the client sees it: token ids from the engine go through the
//! incremental detokenizer, then the stop strings; what comes out is final (never taken
//! back), and the count of ids consumed is the completion's token count. Asked for, the
//! tokens' log probabilities come out beside the text they made ([`scores`]).
//!
//! [`scores`]: super::scores

use super::delta::Delta;
use super::scores::Scoring;
use crate::chat::detokenize::Detokenizer;
use crate::chat::language::Language;
use crate::chat::stops::{StopMatcher, StopsError, Verdict};
use crate::engine::TokenLogprob;

pub struct Decoding {
    detokenizer: Detokenizer,
    /// Ids that end the generation (the model's EOS ids and the request's stop ids, unless
    /// `ignore_eos`): the engine reports the one it stopped on as the last id; it counts
    /// as a generated token but is not text, as in SGLang's own detokenizer.
    ending_ids: Vec<u32>,
    stops: StopMatcher,
    /// The detokenizer's output for one id, before the stop strings see it (reused).
    piece: String,
    /// Ids consumed, up to and including the one that completed a stop string.
    pub tokens: u32,
    /// Present when the request asked for log probabilities.
    scoring: Option<Scoring>,
}

impl Decoding {
    /// `visible`: a matched stop string stays in the text. `ending_ids`: see the field.
    /// `scored`: the tokens' log probabilities are handed on.
    pub fn new(
        language: &Language,
        stops: &[String],
        visible: bool,
        skip_special_tokens: bool,
        ending_ids: Vec<u32>,
        scored: bool,
    ) -> Result<Decoding, StopsError> {
        Ok(Decoding {
            ending_ids,
            detokenizer: Detokenizer::new(
                language.bytes.clone(),
                language.tokenizer.clone(),
                skip_special_tokens,
            ),
            stops: StopMatcher::new(stops, visible)?,
            piece: String::new(),
            tokens: 0,
            scoring: scored.then(Scoring::default),
        })
    }

    /// Feeds `ids` with their scores (empty, or one per id), appending what became final
    /// to `out`. Returns whether a stop string ended the generation (ids after it are
    /// ignored).
    pub fn push(
        &mut self,
        ids: &[u32],
        mut scores: Vec<Option<TokenLogprob>>,
        out: &mut Delta,
    ) -> bool {
        for (at, &id) in ids.iter().enumerate() {
            if self.stopped() {
                break;
            }
            self.tokens += 1;
            if self.ending_ids.contains(&id) {
                continue;
            }
            self.piece.clear();
            self.detokenizer.push(id, &mut self.piece);
            if let Some(scoring) = &mut self.scoring {
                let score = scores.get_mut(at).and_then(Option::take);
                scoring.token(id, score, &self.piece);
            }
            if !self.piece.is_empty() {
                let before = out.text.len();
                self.stops.push(&self.piece, &mut out.text);
                if let Some(scoring) = &mut self.scoring {
                    scoring.shown(out.text.len() - before, &mut out.logprobs);
                }
            }
        }
        let stopped = self.stopped();
        if let (true, Some(scoring)) = (stopped, &mut self.scoring) {
            scoring.stopped(&mut out.logprobs);
        }
        stopped
    }

    /// The end of the generation: releases what was held back for a possible stop string
    /// or an unfinished character; a match that was waiting for a longer one wins now.
    pub fn finish(&mut self, out: &mut Delta) {
        if self.stopped() {
            return;
        }
        self.piece.clear();
        self.detokenizer.finish(&mut self.piece);
        let before = out.text.len();
        if let Verdict::Continue = self.stops.push(&self.piece, &mut out.text) {
            self.stops.finish(&mut out.text);
        }
        if let Some(scoring) = &mut self.scoring {
            scoring.text(&self.piece);
            scoring.shown(out.text.len() - before, &mut out.logprobs);
            if self.stops.stopped().is_some() {
                scoring.stopped(&mut out.logprobs);
            } else {
                scoring.finish(&mut out.logprobs);
            }
        }
    }

    /// Whether a stop string ended the generation (the matcher remembers it).
    pub fn stopped(&self) -> bool {
        self.stops.stopped().is_some()
    }

    /// Which of the request's stop strings ended the generation: Messages names it in
    /// `stop_sequence`.
    pub fn stop_index(&self) -> Option<usize> {
        self.stops.stopped()
    }
}

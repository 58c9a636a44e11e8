//! A generation's text as the client sees it: token ids from the engine go through the
//! incremental detokenizer, then the stop strings; what comes out is final (never taken
//! back), and the count of ids consumed is the completion's token count.

use crate::chat::detokenize::Detokenizer;
use crate::chat::language::Language;
use crate::chat::stops::{Outcome, StopMatcher, StopsError};

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
}

impl Decoding {
    /// `visible`: a matched stop string stays in the text. `ending_ids`: see the field.
    pub fn new(
        language: &Language,
        stops: Vec<String>,
        visible: bool,
        skip_special_tokens: bool,
        ending_ids: Vec<u32>,
    ) -> Result<Decoding, StopsError> {
        Ok(Decoding {
            ending_ids,
            detokenizer: Detokenizer::new(
                language.bytes.clone(),
                language.tokenizer.clone(),
                skip_special_tokens,
            ),
            stops: StopMatcher::new(&stops, visible)?,
            piece: String::new(),
            tokens: 0,
        })
    }

    /// Feeds `ids`, appending the text that became final to `out`. Returns whether a stop
    /// string ended the generation (ids after it are ignored).
    pub fn push(&mut self, ids: &[u32], out: &mut String) -> bool {
        for &id in ids {
            if self.stopped() {
                break;
            }
            self.tokens += 1;
            if self.ending_ids.contains(&id) {
                continue;
            }
            self.piece.clear();
            self.detokenizer.push(id, &mut self.piece);
            if !self.piece.is_empty() {
                self.stops.push(&self.piece, out);
            }
        }
        self.stopped()
    }

    /// The end of the generation: releases what was held back for a possible stop string
    /// or an unfinished character; a match that was waiting for a longer one wins now.
    pub fn finish(&mut self, out: &mut String) {
        if self.stopped() {
            return;
        }
        self.piece.clear();
        self.detokenizer.finish(&mut self.piece);
        if let Outcome::Continue = self.stops.push(&self.piece, out) {
            self.stops.finish(out);
        }
    }

    /// Whether a stop string ended the generation (the matcher remembers it).
    pub fn stopped(&self) -> bool {
        self.stops.stopped().is_some()
    }
}

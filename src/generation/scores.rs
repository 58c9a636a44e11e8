//! Which log probabilities go out with which text.
//!
//! The rule: a token's entry goes out with the text that carries the last byte of what the
//! detokenizer made of it, so a client that pairs entries with text never sees an entry
//! ahead of its text. A token that made no text of its own (a byte of a character a later
//! token finishes, a skipped special token) goes out with the next token that makes text.
//! Text held back by a possible stop string holds its tokens' entries back too. When a
//! stop string ends the text, the tokens any of whose text was shown go out and the rest
//! never do; at the natural end every token still waiting goes out with the last text. Ids
//! that end a generation and are not shown (EOS, stop ids) have no entry; neither has a
//! token the engine sent no score for.
//!
//! Positions are byte counts of the detokenized text before stop strings (the text the
//! client sees is a prefix of it), so the bookkeeping is a few integers per token.

use std::collections::VecDeque;

use crate::engine::TokenLogprob;

/// A token's score, released with its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    pub id: u32,
    pub score: TokenLogprob,
    /// Where the token's text starts in the choice's text, in characters.
    pub offset: u32,
}

/// One choice's tokens whose text is not all shown yet. Holds at most the tokens of the
/// text a stop string can hold back plus the run of tokens that made no text, both
/// bounded by the generation's length.
#[derive(Debug, Default)]
pub struct Scoring {
    waiting: VecDeque<Waiting>,
    /// Bytes of text the tokens made so far.
    made: usize,
    made_chars: u32,
    /// Bytes of it shown to the client.
    shown: usize,
}

#[derive(Debug)]
struct Waiting {
    scored: Scored,
    /// Where its text starts and ends (bytes); `None` until a token makes text.
    start: usize,
    end: Option<usize>,
}

impl Scoring {
    /// A token that made `text` (possibly nothing); `score` is `None` when the engine
    /// sent none for it.
    pub fn token(&mut self, id: u32, score: Option<TokenLogprob>, text: &str) {
        let start = self.made;
        let offset = self.made_chars;
        self.text(text);
        if let Some(score) = score {
            self.waiting.push_back(Waiting {
                scored: Scored { id, score, offset },
                start,
                end: (!text.is_empty()).then_some(self.made),
            });
        }
    }

    /// Text that belongs to the tokens still without text (the end of the stream
    /// releasing held bytes), or a token's own.
    pub fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.made += text.len();
        self.made_chars = self
            .made_chars
            .saturating_add(u32::try_from(text.chars().count()).unwrap_or(u32::MAX));
        for waiting in self.waiting.iter_mut().rev() {
            if waiting.end.is_some() {
                break;
            }
            waiting.end = Some(self.made);
        }
    }

    /// `bytes` more of the text were shown: the tokens whose text is all shown go to `out`.
    pub fn shown(&mut self, bytes: usize, out: &mut Vec<Scored>) {
        self.shown += bytes;
        while let Some(front) = self.waiting.front() {
            if front.end.is_none_or(|end| end > self.shown) {
                break;
            }
            if let Some(waiting) = self.waiting.pop_front() {
                out.push(waiting.scored);
            }
        }
    }

    /// A stop string ended the text: the tokens that showed any of their text go to `out`,
    /// the others are dropped.
    pub fn stopped(&mut self, out: &mut Vec<Scored>) {
        while let Some(waiting) = self.waiting.pop_front() {
            if waiting.start >= self.shown {
                break;
            }
            out.push(waiting.scored);
        }
        self.waiting.clear();
    }

    /// The natural end, all text shown: every token still waiting goes to `out`.
    pub fn finish(&mut self, out: &mut Vec<Scored>) {
        out.extend(self.waiting.drain(..).map(|waiting| waiting.scored));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(logprob: f32) -> Option<TokenLogprob> {
        Some(TokenLogprob {
            logprob,
            top: Vec::new(),
        })
    }

    fn ids(out: &[Scored]) -> Vec<u32> {
        out.iter().map(|s| s.id).collect()
    }

    #[test]
    fn a_token_goes_out_when_its_text_is_shown() {
        let mut s = Scoring::default();
        let mut out = Vec::new();
        s.token(1, score(-0.1), "ab");
        s.shown(1, &mut out);
        assert!(out.is_empty(), "half its text is still held");
        s.shown(1, &mut out);
        assert_eq!(ids(&out), [1]);
        s.token(2, score(-0.2), "é");
        s.shown(2, &mut out);
        assert_eq!(ids(&out), [1, 2]);
        assert_eq!((out[0].offset, out[1].offset), (0, 2));
    }

    #[test]
    fn a_token_without_text_waits_for_the_next_with_text() {
        let mut s = Scoring::default();
        let mut out = Vec::new();
        s.token(1, score(-0.1), "x");
        s.shown(1, &mut out);
        // The first byte of a character: no text yet.
        s.token(2, score(-0.2), "");
        s.shown(0, &mut out);
        assert_eq!(ids(&out), [1]);
        s.token(3, score(-0.3), "é");
        s.shown(2, &mut out);
        assert_eq!(ids(&out), [1, 2, 3]);
        assert_eq!((out[1].offset, out[2].offset), (1, 1));
    }

    #[test]
    fn a_stop_string_keeps_the_tokens_that_showed_text() {
        let mut s = Scoring::default();
        let mut out = Vec::new();
        s.token(1, score(-0.1), "he");
        s.token(2, score(-0.2), "ll");
        s.token(3, score(-0.3), "o");
        // The stop string starts inside token 2: "hel" is shown.
        s.shown(3, &mut out);
        assert_eq!(ids(&out), [1]);
        s.stopped(&mut out);
        assert_eq!(ids(&out), [1, 2], "token 3 never showed text");
        s.finish(&mut out);
        assert_eq!(ids(&out), [1, 2]);
    }

    #[test]
    fn unscored_tokens_have_no_entry_and_the_end_releases_the_rest() {
        let mut s = Scoring::default();
        let mut out = Vec::new();
        s.token(1, None, "a");
        s.token(2, score(-0.2), "");
        s.shown(1, &mut out);
        assert!(out.is_empty());
        // What the detokenizer flushes at the end belongs to the waiting token.
        s.text("\u{fffd}");
        s.shown(3, &mut out);
        assert_eq!(ids(&out), [2]);
        s.token(3, score(-0.3), "");
        s.finish(&mut out);
        assert_eq!(ids(&out), [2, 3]);
    }
}

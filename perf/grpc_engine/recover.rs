//! Puts back the token ids llama-server leaves out of its stream.
//!
//! llama-server streams one chunk per sampled token: its id and the text it completes.
//! A token that ends in the middle of a UTF-8 character gets no chunk: its bytes wait for
//! the next chunk's text, but its id is never sent (the chunk carries only the id of the
//! token that completed the character). The cumulative `tokens_predicted` counter still
//! counts it, so the gap shows; the missing ids are the pieces that spell the text bytes
//! in front of the completing token's own piece, found with the vocabulary.
//!
//! When several splits spell the same bytes, the one preferring longer pieces is taken:
//! the text is exact either way, the ids may differ from the ones the model sampled.
//! Ids lost at the very end of a generation (stopped mid-character) come with no text at
//! all and cannot be restored; the caller counts them.

use std::fmt;

use crate::vocab::Vocab;

#[derive(Debug, PartialEq, Eq)]
pub enum RecoverError {
    /// A gap, but no vocabulary (no `--tokenizer-path`) or an id outside it earlier on.
    NoVocabulary { missing: u64 },
    /// An id outside the vocabulary in a chunk that has a gap.
    UnknownId(u32),
    /// The chunk's text does not end with its own tokens' pieces, or is shorter than the
    /// text still owed: llama-server held text back for a reason this module cannot follow.
    Misaligned,
    /// No `missing` pieces spell the held-back bytes.
    Unspellable { missing: u64, bytes: usize },
}

impl fmt::Display for RecoverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecoverError::NoVocabulary { missing } => write!(
                f,
                "llama-server left {missing} token ids out of its stream and there is no \
                 vocabulary to restore them (pass --tokenizer-path)"
            ),
            RecoverError::UnknownId(id) => {
                write!(f, "llama-server sent token id {id}, outside the vocabulary")
            }
            RecoverError::Misaligned => f.write_str(
                "llama-server left token ids out of its stream and its text does not line up \
                 with the ids it sent",
            ),
            RecoverError::Unspellable { missing, bytes } => write!(
                f,
                "llama-server left {missing} token ids out of its stream and no {missing} \
                 tokens spell the {bytes} bytes of text they stood for"
            ),
        }
    }
}

/// What one stream has carried so far.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Ids handed on, restored ones included.
    emitted: u64,
    /// Bytes of text received.
    text: u64,
    /// Bytes the handed-on ids spell; `None` once an id was outside the vocabulary (or
    /// there is none), which only matters if a gap follows.
    pieces: Option<u64>,
}

impl Recovery {
    pub fn new(vocab: Option<&Vocab>) -> Recovery {
        Recovery {
            emitted: 0,
            text: 0,
            pieces: vocab.map(|_| 0),
        }
    }

    /// Ids handed on so far.
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    /// One chunk: its ids, its text and its `tokens_predicted`; returns the ids to hand
    /// on, restored ones first.
    pub fn accept(
        &mut self,
        vocab: Option<&Vocab>,
        tokens: &[u32],
        content: &str,
        predicted: Option<u64>,
    ) -> Result<Vec<u32>, RecoverError> {
        let expected = self.emitted + tokens.len() as u64;
        let missing = predicted.map_or(0, |p| p.saturating_sub(expected));
        // A final chunk carries no ids: whatever it still counts was lost with no text.
        if missing == 0 || tokens.is_empty() {
            self.pieces = match (self.pieces, vocab) {
                (Some(before), Some(vocab)) => spelled_len(vocab, tokens).map(|n| before + n),
                _ => None,
            };
            self.text += content.len() as u64;
            self.emitted = expected;
            return Ok(tokens.to_vec());
        }
        let (Some(vocab), Some(pieces)) = (vocab, self.pieces) else {
            return Err(RecoverError::NoVocabulary { missing });
        };
        let mut tail = Vec::new();
        for &id in tokens {
            tail.extend_from_slice(vocab.piece(id).ok_or(RecoverError::UnknownId(id))?);
        }
        // Text owed for ids already handed on (held back by a partial stop-string match).
        let owed = pieces
            .checked_sub(self.text)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(RecoverError::Misaligned)?;
        let bytes = content.as_bytes();
        if bytes.len() < owed + tail.len() || !bytes.ends_with(&tail) {
            return Err(RecoverError::Misaligned);
        }
        let held = &bytes[owed..bytes.len() - tail.len()];
        let count = usize::try_from(missing).unwrap_or(usize::MAX);
        let mut ids = vocab
            .split_exact(held, count)
            .ok_or(RecoverError::Unspellable {
                missing,
                bytes: held.len(),
            })?;
        ids.extend_from_slice(tokens);
        self.pieces = Some(pieces + (held.len() + tail.len()) as u64);
        self.text += bytes.len() as u64;
        self.emitted = expected + missing;
        Ok(ids)
    }
}

fn spelled_len(vocab: &Vocab, tokens: &[u32]) -> Option<u64> {
    tokens
        .iter()
        .map(|&id| vocab.piece(id).map(|piece| piece.len() as u64))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::tests::sample;

    #[test]
    fn no_gap_passes_ids_through() {
        let v = sample();
        let mut r = Recovery::new(Some(&v));
        assert_eq!(r.accept(Some(&v), &[7], "a", Some(1)).unwrap(), [7]);
        assert_eq!(r.accept(Some(&v), &[7], "a", Some(2)).unwrap(), [7]);
        assert_eq!(r.emitted(), 2);
    }

    #[test]
    fn a_character_split_over_three_tokens_is_restored() {
        // 🌍 is F0 9F 8C 8D: sampled as [F0 9F] [8C] [8D]; only the last id arrives.
        let v = sample();
        let mut r = Recovery::new(Some(&v));
        r.accept(Some(&v), &[7], "a", Some(1)).unwrap();
        let ids = r.accept(Some(&v), &[3], "🌍", Some(4)).unwrap();
        assert_eq!(ids, [1, 2, 3]);
        assert_eq!(r.emitted(), 4);
        // And the stream carries on aligned.
        assert_eq!(r.accept(Some(&v), &[7], "a", Some(5)).unwrap(), [7]);
    }

    #[test]
    fn text_held_back_by_a_stop_string_is_skipped() {
        let v = sample();
        let mut r = Recovery::new(Some(&v));
        // "a" sent with no text (a partial stop-string match), then released with the emoji.
        r.accept(Some(&v), &[7], "", Some(1)).unwrap();
        let ids = r.accept(Some(&v), &[3], "a🌍", Some(4)).unwrap();
        assert_eq!(ids, [1, 2, 3]);
    }

    #[test]
    fn a_lost_tail_is_counted_not_restored() {
        let v = sample();
        let mut r = Recovery::new(Some(&v));
        r.accept(Some(&v), &[7], "a", Some(1)).unwrap();
        assert_eq!(
            r.accept(Some(&v), &[], "", Some(3)).unwrap(),
            Vec::<u32>::new()
        );
        assert_eq!(r.emitted(), 1);
    }

    #[test]
    fn failures_are_errors_not_guesses() {
        let v = sample();
        let mut r = Recovery::new(None);
        assert_eq!(
            r.accept(None, &[3], "🌍", Some(3)),
            Err(RecoverError::NoVocabulary { missing: 2 })
        );
        let mut r = Recovery::new(Some(&v));
        assert_eq!(
            r.accept(Some(&v), &[99], "x", Some(2)),
            Err(RecoverError::UnknownId(99))
        );
        let mut r = Recovery::new(Some(&v));
        assert_eq!(
            r.accept(Some(&v), &[7], "🌍", Some(2)),
            Err(RecoverError::Misaligned)
        );
        let mut r = Recovery::new(Some(&v));
        assert!(matches!(
            r.accept(Some(&v), &[7], "éa", Some(2)),
            Err(RecoverError::Unspellable {
                missing: 1,
                bytes: 2
            })
        ));
    }
}

//! The added-token split of Hugging Face's `AddedVocabulary`: tokens that are not
//! normalized are cut out of the raw text first, leftmost-longest; the normalized ones are
//! then cut out of what is left (with no normalizer, or on text the normalizer leaves
//! alone, that is the same text). Special tokens are cut out whether or not specials are
//! being added: `add_special` only governs the post-processor.

use crate::fxhash::FxMap;

/// One leftmost-longest matcher over a set of token strings: at each position whose byte
/// starts some token, the token lengths that start with it are tried longest first, each
/// with one hash lookup (a few dozen distinct lengths at most, and no per-token scan).
#[derive(Default)]
pub struct Matcher {
    tokens: FxMap<Box<[u8]>, u32>,
    /// For each first byte, the distinct lengths of the tokens starting with it, longest first.
    lengths: Vec<Vec<usize>>,
    /// The distinct first bytes, when there are at most three (usually just `<`): the
    /// scan for the next candidate is then one `memchr`.
    firsts: Vec<u8>,
}

impl Matcher {
    pub fn new(tokens: &[(String, u32)]) -> Matcher {
        let mut lengths: Vec<Vec<usize>> = vec![Vec::new(); 256];
        let mut map: FxMap<Box<[u8]>, u32> = FxMap::default();
        for (content, id) in tokens {
            let bytes = content.as_bytes();
            if let Some(list) = bytes.first().and_then(|b| lengths.get_mut(usize::from(*b))) {
                list.push(bytes.len());
                // The automaton reports the first of equal patterns.
                map.entry(bytes.into()).or_insert(*id);
            }
        }
        for list in &mut lengths {
            list.sort_unstable_by(|a, b| b.cmp(a));
            list.dedup();
        }
        let firsts = (0..=u8::MAX)
            .filter(|b| lengths.get(usize::from(*b)).is_some_and(|l| !l.is_empty()))
            .collect();
        Matcher {
            tokens: map,
            lengths,
            firsts,
        }
    }

    /// The next position at or after `from` whose byte starts some token.
    #[inline]
    fn candidate(&self, text: &[u8], from: usize) -> Option<usize> {
        let rest = text.get(from..)?;
        let found = match *self.firsts.as_slice() {
            [a] => memchr::memchr(a, rest),
            [a, b] => memchr::memchr2(a, b, rest),
            [a, b, c] => memchr::memchr3(a, b, c, rest),
            _ => rest.iter().position(|first| {
                self.lengths
                    .get(usize::from(*first))
                    .is_some_and(|l| !l.is_empty())
            }),
        };
        found.map(|offset| from + offset)
    }

    /// The first match at or after `from`: `(start, end, id)`.
    fn find(&self, text: &[u8], from: usize) -> Option<(usize, usize, u32)> {
        if self.tokens.is_empty() {
            return None;
        }
        let mut at = from;
        while let Some(start) = self.candidate(text, at) {
            let lengths = text
                .get(start)
                .and_then(|first| self.lengths.get(usize::from(*first)))
                .map_or(&[][..], Vec::as_slice);
            for len in lengths {
                if let Some(id) = text
                    .get(start..start + len)
                    .and_then(|t| self.tokens.get(t))
                {
                    return Some((start, start + len, *id));
                }
            }
            at = start + 1;
        }
        None
    }

    /// Splits `text` into runs of plain text and matched tokens, in order.
    pub fn split(&self, text: &[u8], emit: &mut dyn FnMut(Part<'_>)) {
        let mut at = 0;
        while let Some((start, end, id)) = self.find(text, at) {
            if start > at {
                emit(Part::Text(text.get(at..start).unwrap_or_default()));
            }
            emit(Part::Token(id));
            at = end;
        }
        if at < text.len() {
            emit(Part::Text(text.get(at..).unwrap_or_default()));
        }
    }
}

/// A run of text between added tokens, or one added token's id.
pub enum Part<'a> {
    Text(&'a [u8]),
    Token(u32),
}

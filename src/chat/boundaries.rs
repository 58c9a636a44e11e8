//! Where a prompt may be cut so that the ids of the part before the cut are exactly the
//! first ids of the whole prompt, and the ids of the rest can be made on their own.
//!
//! The tokenizers crate takes added tokens out of the text before anything else runs: it
//! finds them with a leftmost-longest search over their contents, and the normalizer,
//! pre-tokenizer and model then see each piece between two of them on its own. So if every
//! occurrence of a token's content in any text is sure to be taken out as that token, a
//! cut right after it splits the work in two independent halves:
//!
//! * the prefix: its pieces are the whole text's pieces before the cut, so its ids are the
//!   whole text's first ids;
//! * the tail: encoded as the token's content followed by the tail, whose first id is the
//!   token and whose other ids are the whole text's last ones. Starting with the token keeps
//!   what the tail's pieces see identical (their offset is not 0, which Metaspace's
//!   `prepend_scheme: first` looks at; the character before them is the token's).
//!
//! [`Boundaries::of`] keeps only the tokens for which that "every occurrence" holds, for
//! the tokenizer at hand: special and not normalized (taken out before normalization), not
//! `single_word` (taken out whatever follows), not inside a longer added token and not
//! overlapping one that could start before it (the search would take the other), never
//! overlapping itself, and not starting or ending with whitespace (a neighbour's
//! `lstrip`/`rstrip` could eat into it). Prefix reuse is off entirely for a tokenizer that
//! truncates or pads (ids then depend on the whole length) or that encodes special tokens
//! as text.
//!
//! Each occurrence then yields exactly one id of its token; the model may still make the
//! same id out of other text (many vocabularies hold the special tokens too, and a
//! normalizer can spell one out of look-alike characters), which is why the places of a
//! prompt are paired with its ids by count and order, and a prompt whose ids hold one more
//! is not cut at all.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use tokenizers::Tokenizer;

/// What the caches know of one tokenizer: an identity no other tokenizer of this process
/// ever has (a cache entry of a dropped tokenizer can never answer for a new one), and its
/// safe cut tokens.
#[derive(Debug)]
pub struct Boundaries {
    id: u64,
    tokens: Vec<Cut>,
    by_content: HashMap<Box<[u8]>, usize>,
    by_id: HashMap<u32, usize>,
    /// The smallest and largest cut token id: most ids of a prompt fall outside and are
    /// told apart without a map lookup.
    id_range: (u32, u32),
    /// Distinct content lengths, ascending.
    lengths: Vec<usize>,
    /// Bytes that start some token's content.
    first_bytes: [bool; 256],
}

/// A token after which a prompt may be cut.
#[derive(Debug)]
pub struct Cut {
    pub id: u32,
    pub content: Box<str>,
}

/// One place a text may be cut: right after token `token` (an index into the tokens),
/// whose content ends at byte `end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub end: usize,
    pub token: usize,
}

impl Boundaries {
    /// The safe cut tokens of `tokenizer` (none where prefix reuse would not be exact).
    pub fn of(tokenizer: &Tokenizer) -> Boundaries {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut out = Boundaries {
            id,
            tokens: Vec::new(),
            by_content: HashMap::new(),
            by_id: HashMap::new(),
            id_range: (u32::MAX, 0),
            lengths: Vec::new(),
            first_bytes: [false; 256],
        };
        let whole_length_matters =
            tokenizer.get_truncation().is_some() || tokenizer.get_padding().is_some();
        if whole_length_matters || tokenizer.get_encode_special_tokens() {
            return out;
        }
        let added = tokenizer.get_added_tokens_decoder();
        let mut candidates: Vec<(u32, &str)> = added
            .iter()
            .filter(|(_, t)| {
                t.special
                    && !t.normalized
                    && !t.single_word
                    && !t.content.is_empty()
                    && !t.content.starts_with(char::is_whitespace)
                    && !t.content.ends_with(char::is_whitespace)
            })
            .map(|(id, t)| (*id, t.content.as_str()))
            .collect();
        candidates.sort_unstable();
        let searched: Vec<&[u8]> = added
            .values()
            .filter(|t| !t.normalized && !t.content.is_empty())
            .map(|t| t.content.as_bytes())
            .collect();
        let overlapped = overlapped(&candidates, &searched);
        let safe = candidates
            .into_iter()
            .zip(overlapped)
            .filter_map(|(token, overlapped)| (!overlapped).then_some(token));
        for (index, (token_id, content)) in safe.enumerate() {
            let bytes = content.as_bytes();
            out.by_content.insert(Box::from(bytes), index);
            out.by_id.insert(token_id, index);
            out.id_range = (out.id_range.0.min(token_id), out.id_range.1.max(token_id));
            out.first_bytes[usize::from(bytes[0])] = true;
            if !out.lengths.contains(&bytes.len()) {
                out.lengths.push(bytes.len());
            }
            out.tokens.push(Cut {
                id: token_id,
                content: Box::from(content),
            });
        }
        out.lengths.sort_unstable();
        out
    }

    /// This tokenizer's identity in the caches.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether any prompt of this tokenizer can be cut at all.
    pub fn any(&self) -> bool {
        !self.tokens.is_empty()
    }

    pub fn token(&self, index: usize) -> Option<&Cut> {
        self.tokens.get(index)
    }

    /// The index of the cut token with this id.
    pub fn of_id(&self, id: u32) -> Option<usize> {
        if id < self.id_range.0 || id > self.id_range.1 {
            return None;
        }
        self.by_id.get(&id).copied()
    }

    /// Every place `text` may be cut, in order. Cut tokens never overlap one another, so
    /// a left-to-right scan finds exactly the tokenizer's own occurrences.
    pub fn places(&self, text: &str, out: &mut Vec<Place>) {
        out.clear();
        if self.tokens.is_empty() {
            return;
        }
        let bytes = text.as_bytes();
        let mut at = 0;
        'scan: while at < bytes.len() {
            if self.first_bytes[usize::from(bytes[at])] {
                for &len in &self.lengths {
                    let Some(candidate) = bytes.get(at..at + len) else {
                        break;
                    };
                    if let Some(&token) = self.by_content.get(candidate) {
                        at += len;
                        out.push(Place { end: at, token });
                        continue 'scan;
                    }
                }
            }
            at += 1;
        }
    }
}

/// For each candidate, whether some occurrence of it might not be taken out as itself by
/// the leftmost-longest search over `searched` (every content the first pass looks for,
/// the candidates among them): another content holds it, or some content (itself
/// included) has a proper suffix that is a proper prefix of it, so that a match starting
/// before an occurrence reaches into it. Hash lookups of substrings and suffixes, so a
/// tokenizer with thousands of added tokens costs milliseconds, once, at load.
fn overlapped(candidates: &[(u32, &str)], searched: &[&[u8]]) -> Vec<bool> {
    let index: HashMap<&[u8], usize> = candidates
        .iter()
        .enumerate()
        .map(|(i, (_, content))| (content.as_bytes(), i))
        .collect();
    let mut lengths: Vec<usize> = candidates.iter().map(|(_, c)| c.len()).collect();
    lengths.sort_unstable();
    lengths.dedup();
    let mut out = vec![false; candidates.len()];
    let mut suffixes: HashSet<&[u8]> = HashSet::new();
    for &other in searched {
        for &len in lengths.iter().take_while(|&&len| len < other.len()) {
            for window in other.windows(len) {
                if let Some(&i) = index.get(window) {
                    out[i] = true;
                }
            }
        }
        suffixes.extend((1..other.len()).map(|cut| &other[cut..]));
    }
    for ((_, content), overlapped) in candidates.iter().zip(&mut out) {
        let bytes = content.as_bytes();
        if (1..bytes.len()).any(|len| suffixes.contains(&bytes[..len])) {
            *overlapped = true;
        }
    }
    out
}

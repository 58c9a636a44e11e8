//! The model's byte-level BPE vocabulary as bytes: each id's piece, and the id of each
//! piece, for putting back token ids that llama-server leaves out of a stream
//! (`recover.rs`).
//!
//! Read from the `tokenizer.json` the gateway uses, with the same `tokenizers` crate, so a
//! file the gateway cannot load fails here too. Only byte-level vocabularies are accepted:
//! their token strings spell bytes with GPT-2's printable alphabet, which this module
//! inverts; any other kind of vocabulary is refused rather than misread.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

/// Pieces longer than this are never looked up (no BPE token is anywhere near it).
const MAX_PIECE: usize = 256;
/// `split_exact` gives up on inputs past these bounds (a withheld run is a few bytes).
const MAX_SPLIT_BYTES: usize = 1024;
const MAX_SPLIT_COUNT: usize = 256;

#[derive(Debug)]
pub enum VocabError {
    Load { path: PathBuf, message: String },
    NotByteLevel { token: String },
}

impl fmt::Display for VocabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VocabError::Load { path, message } => {
                write!(f, "cannot load {}: {message}", path.display())
            }
            VocabError::NotByteLevel { token } => write!(
                f,
                "token {token:?} is not byte-level BPE: only byte-level vocabularies are supported"
            ),
        }
    }
}

impl std::error::Error for VocabError {}

/// Pieces by id and ids by piece.
pub struct Vocab {
    /// Empty for special tokens: llama-server renders them as nothing in its text.
    pieces: Vec<Box<[u8]>>,
    ids: HashMap<Box<[u8]>, u32>,
    longest: usize,
}

impl Vocab {
    /// Loads `path`, a `tokenizer.json` or a directory holding one.
    pub fn load(path: &Path) -> Result<Vocab, VocabError> {
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_path_buf()
        };
        let tokenizer = Tokenizer::from_file(&file).map_err(|e| VocabError::Load {
            path: file.clone(),
            message: e.to_string(),
        })?;
        let added = tokenizer.get_added_tokens_decoder();
        let decoder = byte_decoder();
        let mut entries = Vec::new();
        for (token, id) in tokenizer.get_vocab(false) {
            if added.contains_key(&id) {
                continue;
            }
            let bytes = token
                .chars()
                .map(|c| decoder.get(&c).copied())
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(|| VocabError::NotByteLevel {
                    token: token.clone(),
                })?;
            entries.push((id, bytes, false));
        }
        for (id, token) in &added {
            entries.push((*id, token.content.as_bytes().to_vec(), token.special));
        }
        Ok(Vocab::from_entries(entries))
    }

    /// From `(id, piece, special)`; ids need not be dense.
    fn from_entries(mut entries: Vec<(u32, Vec<u8>, bool)>) -> Vocab {
        // Lowest id first, so a piece spelled twice maps to its first id.
        entries.sort_by_key(|(id, _, _)| *id);
        let size = entries.last().map_or(0, |(id, _, _)| *id as usize + 1);
        let mut pieces = vec![Box::<[u8]>::default(); size];
        let mut ids = HashMap::with_capacity(entries.len());
        let mut longest = 0;
        for (id, bytes, special) in entries {
            if special {
                continue;
            }
            if !bytes.is_empty() && bytes.len() <= MAX_PIECE {
                longest = longest.max(bytes.len());
                ids.entry(bytes.clone().into_boxed_slice()).or_insert(id);
            }
            pieces[id as usize] = bytes.into_boxed_slice();
        }
        Vocab {
            pieces,
            ids,
            longest,
        }
    }

    /// The bytes llama-server's text shows for `id` (empty for special tokens), or `None`
    /// for an id outside the vocabulary.
    pub fn piece(&self, id: u32) -> Option<&[u8]> {
        self.pieces.get(id as usize).map(|piece| &piece[..])
    }

    /// Exactly `count` ids whose pieces spell `bytes`, preferring longer pieces first;
    /// `None` if there is no such split (or the input is past the bounds).
    ///
    /// Several splits can spell the same bytes; the text is the same whichever is chosen,
    /// but the ids may differ from the ones the model sampled.
    pub fn split_exact(&self, bytes: &[u8], count: usize) -> Option<Vec<u32>> {
        if bytes.len() > MAX_SPLIT_BYTES || count > MAX_SPLIT_COUNT || bytes.len() < count {
            return None;
        }
        let mut out = Vec::with_capacity(count);
        // (position, pieces left) pairs known to have no split: each is tried once.
        let mut dead = vec![false; (bytes.len() + 1) * (count + 1)];
        self.split_from(bytes, 0, count, &mut out, &mut dead)
            .then_some(out)
    }

    fn split_from(
        &self,
        bytes: &[u8],
        at: usize,
        left: usize,
        out: &mut Vec<u32>,
        dead: &mut [bool],
    ) -> bool {
        let rest = bytes.len() - at;
        if left == 0 {
            return rest == 0;
        }
        // One row of `count + 1` flags per position.
        let stride = dead.len() / (bytes.len() + 1);
        let slot = at * stride + left;
        if rest < left || dead.get(slot).copied().unwrap_or(true) {
            return false;
        }
        for len in (1..=rest.min(self.longest)).rev() {
            if let Some(&id) = self.ids.get(&bytes[at..at + len]) {
                out.push(id);
                if self.split_from(bytes, at + len, left - 1, out, dead) {
                    return true;
                }
                out.pop();
            }
        }
        if let Some(flag) = dead.get_mut(slot) {
            *flag = true;
        }
        false
    }
}

/// GPT-2's byte-to-character table, inverted: printable Latin-1 bytes stand for
/// themselves, the other 68 bytes for the characters from U+0100 on, in byte order.
fn byte_decoder() -> HashMap<char, u8> {
    let mut table = HashMap::with_capacity(256);
    let mut shifted = 0u32;
    for byte in 0..=255u8 {
        let printable = matches!(byte, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from(byte)
        } else {
            shifted += 1;
            char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
        };
        table.insert(c, byte);
    }
    table
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A few byte pieces around 🌍 (F0 9F 8C 8D), one special token and "a".
    pub(crate) fn sample() -> Vocab {
        Vocab::from_entries(vec![
            (0, b"<|end|>".to_vec(), true),
            (1, vec![0xF0, 0x9F], false),
            (2, vec![0x8C], false),
            (3, vec![0x8D], false),
            (4, vec![0xF0, 0x9F, 0x8C], false),
            (5, vec![0xF0], false),
            (6, vec![0x9F], false),
            (7, b"a".to_vec(), false),
        ])
    }

    #[test]
    fn gpt2_alphabet() {
        let d = byte_decoder();
        assert_eq!(d.len(), 256);
        assert_eq!(d[&'Ġ'], b' ');
        assert_eq!(d[&'Ċ'], b'\n');
        assert_eq!(d[&'a'], b'a');
        assert_eq!(d[&'ð'], 0xF0);
        assert_eq!(d[&'Ł'], 0x9F);
    }

    #[test]
    fn pieces_by_id() {
        let v = sample();
        assert_eq!(v.piece(0), Some(&b""[..]));
        assert_eq!(v.piece(4), Some(&[0xF0, 0x9F, 0x8C][..]));
        assert_eq!(v.piece(99), None);
    }

    #[test]
    fn exact_count_splits_prefer_long_pieces() {
        let v = sample();
        let bytes = [0xF0, 0x9F, 0x8C];
        assert_eq!(v.split_exact(&bytes, 1), Some(vec![4]));
        assert_eq!(v.split_exact(&bytes, 2), Some(vec![1, 2]));
        assert_eq!(v.split_exact(&bytes, 3), Some(vec![5, 6, 2]));
        assert_eq!(v.split_exact(&bytes, 4), None);
        assert_eq!(v.split_exact(b"ab", 2), None);
        assert_eq!(v.split_exact(b"", 0), Some(vec![]));
        assert_eq!(v.split_exact(&[0u8; 2000], 2), None);
    }

    #[test]
    fn special_tokens_are_never_a_split() {
        let v = sample();
        assert_eq!(v.split_exact(b"<|end|>", 1), None);
    }
}

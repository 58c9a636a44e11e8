//! How a kit turns text into ids: the byte-level BPE fast path when it covers the
//! tokenizer (chosen once, at load), else Hugging Face's `encode_fast`. Either way the ids
//! are exactly Hugging Face's.

use std::sync::Arc;

use serde_json::Value;
use tokenizers::Tokenizer;

use super::bpe::FastBpe;

/// Something that gives `encode_fast(text, add_special)`'s ids: a plain Hugging Face
/// tokenizer or an [`Encoder`].
pub trait Ids {
    fn ids(&self, text: &str, add_special: bool) -> tokenizers::Result<Vec<u32>>;
}

impl Ids for Tokenizer {
    fn ids(&self, text: &str, add_special: bool) -> tokenizers::Result<Vec<u32>> {
        Ok(self.encode_fast(text, add_special)?.get_ids().to_vec())
    }
}

impl Ids for Encoder {
    fn ids(&self, text: &str, add_special: bool) -> tokenizers::Result<Vec<u32>> {
        self.encode(text, add_special)
    }
}

/// The tokenizer a kit encodes with, and the fast path when it took the tokenizer.
pub struct Encoder {
    tokenizer: Arc<Tokenizer>,
    choice: Choice,
}

enum Choice {
    Fast(Box<FastBpe>),
    /// Why the fast path does not cover this tokenizer.
    HuggingFace(String),
}

impl Encoder {
    /// The fast path for `tokenizer` if `json` (its `tokenizer.json`) is one it covers and
    /// its self-test agrees, else Hugging Face. Blocking: a fraction of a second.
    pub fn new(tokenizer: Arc<Tokenizer>, json: Option<&Value>) -> Encoder {
        let choice = match json.map(|json| FastBpe::from_json(json, &tokenizer)) {
            Some(Ok(fast)) => Choice::Fast(Box::new(fast)),
            Some(Err(why)) => Choice::HuggingFace(why.0),
            None => Choice::HuggingFace("no tokenizer.json to read".into()),
        };
        Encoder { tokenizer, choice }
    }

    /// `encode_fast(text, add_special)`'s ids.
    pub fn encode(&self, text: &str, add_special: bool) -> tokenizers::Result<Vec<u32>> {
        if let Choice::Fast(fast) = &self.choice {
            if let Some(ids) = fast.encode(text, add_special) {
                return Ok(ids);
            }
        }
        self.tokenizer.ids(text, add_special)
    }

    /// `"fast-bpe"` or `"huggingface"`, as the tokenizer registry reports it.
    pub fn kind(&self) -> &'static str {
        match self.choice {
            Choice::Fast(_) => "fast-bpe",
            Choice::HuggingFace(_) => "huggingface",
        }
    }

    /// What the fast path runs, or why Hugging Face was chosen.
    pub fn note(&self) -> String {
        match &self.choice {
            Choice::Fast(fast) => fast.describe(),
            Choice::HuggingFace(why) => why.clone(),
        }
    }
}

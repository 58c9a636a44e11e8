//! One model's language kit, loaded from its files once and shared by every request to
//! its workers: the tokenizer, the byte table the detokenizer reads, the chat template and
//! the special tokens the template and the stop rules need.
//!
//! Files are read from disk only (a model directory or a `tokenizer.json`); nothing is
//! fetched. Loading parses tens of megabytes of JSON, so callers run it off the data path.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tokenizers::Tokenizer;

use super::boundaries::Boundaries;
use super::detokenize::TokenBytes;
use super::encoder::Encoder;
use super::template::{self, ChatTemplate};

/// Largest `tokenizer_config.json` / `generation_config.json` read (a tokenizer config
/// with an inlined template is tens of kilobytes).
const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// Where a kit comes from: the tokenizer (a directory or its `tokenizer.json`) and an
/// optional chat template file that wins over the directory's own.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sources {
    pub tokenizer: PathBuf,
    pub chat_template: Option<PathBuf>,
}

/// Why a kit could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// The path names neither a directory with `tokenizer.json` nor such a file.
    NoTokenizer(PathBuf),
    /// A file could not be read or parsed.
    File { path: PathBuf, reason: String },
    /// The chat template does not compile.
    Template(template::TemplateError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NoTokenizer(path) => write!(
                f,
                "{} is neither a tokenizer.json nor a directory holding one",
                path.display()
            ),
            LoadError::File { path, reason } => write!(f, "{}: {reason}", path.display()),
            LoadError::Template(err) => write!(f, "chat template: {err}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// A model's tokenizer, chat template and special tokens.
pub struct Language {
    pub tokenizer: Arc<Tokenizer>,
    /// What encodes text: the byte-level BPE fast path or Hugging Face, chosen at load.
    pub encoder: Arc<Encoder>,
    /// Per-token bytes for the incremental detokenizer.
    pub bytes: Arc<TokenBytes>,
    /// `None`: the model ships no template; chat requests are refused, completions work.
    pub template: Option<ChatTemplate>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    /// Ids that end a generation besides the engine's own EOS handling: the
    /// `generation_config.json` `eos_token_id` (one or several), else the EOS token's id.
    pub eos_ids: Vec<u32>,
    /// Where the tokenizer was read from (reported, never used as a key for anything).
    pub source: PathBuf,
    /// The tokenizer's identity in the tokenizer caches and where its prompts may be cut.
    pub boundaries: Boundaries,
    /// One past the largest id the tokenizer knows (added tokens included): a prompt of ids
    /// at or above it is refused before it reaches an engine, where an id past the
    /// embedding table can take a GPU engine down for everyone.
    pub vocab_end: u32,
    /// The most prompt bytes one token can stand for, bounded from above: a prompt of
    /// `n` bytes is at least `n / bytes_per_token` tokens, which refuses a prompt far past
    /// the context window without tokenizing it.
    pub bytes_per_token: usize,
}

impl fmt::Debug for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Language")
            .field("source", &self.source)
            .field("vocab_size", &self.tokenizer.get_vocab_size(true))
            .field("template", &self.template.is_some())
            .finish()
    }
}

impl Language {
    /// Loads the kit `sources` name. Blocking: parses the tokenizer and reads files.
    pub fn load(sources: &Sources) -> Result<Language, LoadError> {
        let (dir, tokenizer_file) = locate(&sources.tokenizer)?;
        let tokenizer = Tokenizer::from_file(&tokenizer_file).map_err(|e| LoadError::File {
            path: tokenizer_file.clone(),
            reason: e.to_string(),
        })?;
        let tokenizer = Arc::new(tokenizer);
        // The file again, as JSON, for the fast path to read what the tokenizer is made of.
        let json: Option<Value> = std::fs::read(&tokenizer_file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let encoder = Arc::new(Encoder::new(tokenizer.clone(), json.as_ref()));
        tracing::info!(
            tokenizer = %tokenizer_file.display(),
            encoder = encoder.kind(),
            note = %encoder.note(),
            "tokenizer encoder chosen"
        );
        let config = read_json(&dir.join("tokenizer_config.json"))?;
        let generation = read_json(&dir.join("generation_config.json"))?;
        let bos_token = config.as_ref().and_then(|c| token_text(c.get("bos_token")));
        let eos_token = config.as_ref().and_then(|c| token_text(c.get("eos_token")));
        let template_source = template::find_template(&dir, sources.chat_template.as_deref())
            .map_err(LoadError::Template)?;
        let template = template_source
            .map(|source| ChatTemplate::new(&source))
            .transpose()
            .map_err(LoadError::Template)?;
        let eos_ids = eos_ids(&tokenizer, generation.as_ref(), eos_token.as_deref());
        let bytes = Arc::new(TokenBytes::new(&tokenizer));
        let boundaries = Boundaries::of(&tokenizer);
        let vocab_end = vocab_end(&tokenizer);
        let bytes_per_token = bytes_per_token(&tokenizer);
        Ok(Language {
            tokenizer,
            encoder,
            bytes,
            template,
            bos_token,
            eos_token,
            eos_ids,
            source: tokenizer_file,
            boundaries,
            vocab_end,
            bytes_per_token,
        })
    }

    /// `encode_fast(text, add_special)`'s ids, through the encoder chosen at load.
    pub fn encode(&self, text: &str, add_special: bool) -> tokenizers::Result<Vec<u32>> {
        self.encoder.encode(text, add_special)
    }

    /// The fewest tokens a prompt of `bytes` bytes can be.
    pub fn tokens_at_least(&self, bytes: usize) -> usize {
        bytes / self.bytes_per_token.max(1)
    }

    /// The first id of `ids` the tokenizer does not know, if any.
    pub fn unknown_id(&self, ids: &[u32]) -> Option<u32> {
        ids.iter().copied().find(|id| *id >= self.vocab_end)
    }
}

/// An upper bound of the prompt bytes one token of `tokenizer` stands for: its longest
/// vocabulary entry as spelled in the vocabulary (byte-level and metaspace spellings and
/// byte-fallback pieces are never shorter than the bytes they stand for), four times that
/// when a normalizer may shrink the text first (NFKC, stripped characters).
pub fn bytes_per_token(tokenizer: &Tokenizer) -> usize {
    let longest = tokenizer
        .get_vocab(true)
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(1)
        .max(1);
    if tokenizer.get_normalizer().is_some() {
        longest.saturating_mul(4)
    } else {
        longest
    }
}

/// One past the largest id of `tokenizer`'s vocabulary and added tokens.
pub fn vocab_end(tokenizer: &Tokenizer) -> u32 {
    tokenizer
        .get_vocab(true)
        .values()
        .max()
        .map_or(0, |max| max.saturating_add(1))
}

/// The directory of a tokenizer path and its `tokenizer.json`.
fn locate(path: &Path) -> Result<(PathBuf, PathBuf), LoadError> {
    if path.is_dir() {
        let file = path.join("tokenizer.json");
        if file.is_file() {
            return Ok((path.to_owned(), file));
        }
    } else if path.is_file() {
        let dir = path.parent().map_or_else(PathBuf::new, Path::to_owned);
        return Ok((dir, path.to_owned()));
    }
    Err(LoadError::NoTokenizer(path.to_owned()))
}

/// A JSON file that may be absent (`None`); a present one must parse.
fn read_json(path: &Path) -> Result<Option<Value>, LoadError> {
    let fail = |reason: String| LoadError::File {
        path: path.to_owned(),
        reason,
    };
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(fail(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    let text = std::fs::read(path).map_err(|e| fail(e.to_string()))?;
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| fail(e.to_string()))
}

/// A special token as `tokenizer_config.json` writes it: a string, or an added-token
/// object with `content`.
fn token_text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_owned),
        _ => None,
    }
}

/// The ids that end a generation: `generation_config.json`'s `eos_token_id` (a number or
/// a list), else the id of the EOS token.
fn eos_ids(tokenizer: &Tokenizer, generation: Option<&Value>, eos_token: Option<&str>) -> Vec<u32> {
    let configured = generation.and_then(|g| g.get("eos_token_id"));
    let mut ids: Vec<u32> = match configured {
        Some(Value::Number(n)) => n.as_u64().into_iter().filter_map(to_id).collect(),
        Some(Value::Array(list)) => list
            .iter()
            .filter_map(Value::as_u64)
            .filter_map(to_id)
            .collect(),
        _ => Vec::new(),
    };
    if ids.is_empty() {
        ids.extend(eos_token.and_then(|t| tokenizer.token_to_id(t)));
    }
    ids
}

fn to_id(n: u64) -> Option<u32> {
    u32::try_from(n).ok()
}

//! Incremental detokenization: generated token ids in, text out, one id at a time.
//!
//! The contract: the text appended by [`Detokenizer::push`] for each id of a generation,
//! plus what [`Detokenizer::finish`] flushes, equals `tokenizer.decode(all_ids,
//! skip_special_tokens)` of the `tokenizers` crate, whatever batches the engine sent the
//! ids in; and no character is ever split or sent early as U+FFFD: bytes of an unfinished
//! character wait for the rest of it. Ids the tokenizer does not know decode to nothing,
//! as in `decode`.
//!
//! Two ways to get there:
//!
//! * The table ([`TokenBytes`], built once per tokenizer and shared): each id's bytes after
//!   the decoder's per-token steps, so a push is a look-up and an append, with a little
//!   state for what spans tokens: an unfinished UTF-8 character (GPT-2 style byte-level
//!   vocabularies), an open run of `<0xNN>` byte-fallback tokens (SentencePiece
//!   vocabularies: a run decodes as UTF-8 or, if invalid, as one U+FFFD per byte, so it is
//!   held until it ends or is known invalid), the strip of the text's leading space, and
//!   the first token's own spelling (`Metaspace`). It covers decoder chains of the shape
//!   `Replace(string)* · [ByteLevel | ByteFallback | Metaspace] · Fuse* · [Strip(start
//!   only)]`, which is what GPT-2, Llama 3, Qwen, SmolLM, DeepSeek, Llama 2, Mistral,
//!   Gemma and T5-style tokenizers ship. [`TokenBytes::new`] checks the table against
//!   `decode` on every id and on random sequences, and gives it up for any disagreement.
//!   A few nanoseconds a token.
//! * The window, for every other tokenizer (WordPiece, BPE suffixes, regex replaces, no
//!   decoder…): decode the ids since the last emission with the ids before it as context,
//!   emit what the new text adds, and wait while it ends in U+FFFD. Exact when a token's
//!   text depends only on the tokens shortly before it, as with those decoders (not with
//!   a byte-fallback run that turns invalid and so rewrites its start: the table's job).
//!   Two decodes a token: a few hundred nanoseconds. Bounded by [`MAX_WINDOW_IDS`].
//!
//! One bound trades exactness for latency: a run of byte-fallback tokens that is valid
//! UTF-8 so far is held only up to [`MAX_HELD_RUN`] bytes; past that its complete
//! characters are sent, and should the same run later turn invalid, `decode` would have
//! replaced those characters too.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;
use tokenizers::{DecoderWrapper, Tokenizer};

/// Longest valid-so-far byte-fallback run held before its complete characters are sent.
pub const MAX_HELD_RUN: usize = 64;

/// Largest id space the table is built for (the largest vocabularies have 262,144 ids).
const MAX_TABLE_IDS: usize = 1 << 21;

/// Pushes the window waits on a text ending in U+FFFD before sending all but that last
/// U+FFFD (the only one more bytes can still turn into a character): a character is at
/// most 4 bytes, so a longer run of U+FFFD is mostly real.
const MAX_WINDOW_WAIT: usize = 16;

/// Most pushes the window waits for a text that does not end in U+FFFD: past that it
/// sends everything and starts afresh (the text may then differ from `decode` there), so
/// a stream of garbage bytes costs a bounded decode per push (of at most twice this many
/// ids, the previous window being the next one's context).
pub const MAX_WINDOW_IDS: usize = 128;

/// Random sequences decoded both ways when the table is checked.
const CHECK_SEQUENCES: usize = 512;

const REPLACEMENT: &str = "\u{FFFD}";

/// Which way a tokenizer is detokenized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableMode {
    /// The table, following a decoder chain of this family.
    Exact(Family),
    /// The window, and why the table could not be used.
    Windowed(Inexact),
}

/// The decoder chains the table follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// GPT-2 byte-to-unicode vocabularies (`ByteLevel`).
    ByteLevel,
    /// SentencePiece converted to `Replace("▁", " ") · ByteFallback · Fuse · Strip`.
    ByteFallback,
    /// `Metaspace`: `▁` is a space, and dropped from the first token.
    Metaspace,
    /// Only string replacements, fuses and strips.
    Plain,
}

/// Why a tokenizer is not decoded through its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inexact {
    /// A decoder step (or order of steps) the table does not model, by its `type`.
    Decoder(String),
    /// No decoder at all (`decode` joins the tokens with spaces).
    NoDecoder,
    /// An id space or vocabulary text larger than the table takes.
    TooLarge,
    /// The table disagreed with `decode` on these ids.
    Mismatch(Vec<u32>),
}

impl fmt::Display for TableMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableMode::Exact(family) => write!(f, "token table ({family:?} decoder)"),
            TableMode::Windowed(Inexact::Decoder(step)) => {
                write!(f, "windowed decode (decoder step {step} not tabulated)")
            }
            TableMode::Windowed(Inexact::NoDecoder) => write!(f, "windowed decode (no decoder)"),
            TableMode::Windowed(Inexact::TooLarge) => {
                write!(f, "windowed decode (vocabulary too large to tabulate)")
            }
            TableMode::Windowed(Inexact::Mismatch(ids)) => {
                write!(
                    f,
                    "windowed decode (table disagreed with decode on ids {ids:?})"
                )
            }
        }
    }
}

/// What one id contributes before the steps that span tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Not in the vocabulary: decodes to nothing, like an id `decode` cannot look up.
    Absent,
    /// Valid UTF-8 on its own, in `TokenBytes::text`.
    Text,
    /// Bytes that are not valid UTF-8 alone (part of a character), in `TokenBytes::raw`.
    Raw,
    /// A byte-fallback token `<0xNN>`.
    Byte(u8),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    start: u32,
    len: u32,
    kind: Kind,
    /// Dropped when special tokens are skipped.
    special: bool,
}

const ABSENT: Entry = Entry {
    start: 0,
    len: 0,
    kind: Kind::Absent,
    special: false,
};

/// What happens to the first characters of the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lead {
    /// Nothing (any more).
    Done,
    /// Up to `left` more leading `ch` are dropped (`Strip` after the tokens are fused).
    Strip { ch: char, left: usize },
    /// The first token is spelled differently (`Metaspace` drops its `▁`).
    FirstToken,
}

/// One tokenizer's ids as bytes, built once and shared by all its generations.
pub struct TokenBytes {
    /// The texts of the ids that are valid UTF-8 on their own, end to end.
    text: String,
    /// The bytes of the others, end to end.
    raw: Vec<u8>,
    /// By id; empty when the table is not used.
    entries: Vec<Entry>,
    /// `Metaspace`: the first token's text, for the ids where it differs.
    first: HashMap<u32, Box<str>>,
    lead: Lead,
    mode: TableMode,
}

impl fmt::Debug for TokenBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBytes")
            .field("mode", &self.mode)
            .field("ids", &self.entries.len())
            .field("bytes", &(self.text.len() + self.raw.len()))
            .finish()
    }
}

impl TokenBytes {
    /// Builds and checks the table for `tokenizer`, or settles for the window. Costs one
    /// `decode` per id and a few hundred on sequences: call it at load time, not per
    /// request.
    pub fn new(tokenizer: &Tokenizer) -> TokenBytes {
        let plan = match Plan::of(tokenizer.get_decoder()) {
            Ok(plan) => plan,
            Err(why) => return TokenBytes::windowed(why),
        };
        let table = match TokenBytes::build(tokenizer, &plan) {
            Ok(table) => table,
            Err(why) => return TokenBytes::windowed(why),
        };
        match table.check(tokenizer) {
            Ok(()) => table,
            Err(ids) => TokenBytes::windowed(Inexact::Mismatch(ids)),
        }
    }

    /// Whether generations decode through the table (else through the window).
    pub fn is_exact(&self) -> bool {
        matches!(self.mode, TableMode::Exact(_))
    }

    /// Which way, and why: worth a log line at load time.
    pub fn mode(&self) -> &TableMode {
        &self.mode
    }

    fn windowed(why: Inexact) -> TokenBytes {
        TokenBytes {
            text: String::new(),
            raw: Vec::new(),
            entries: Vec::new(),
            first: HashMap::new(),
            lead: Lead::Done,
            mode: TableMode::Windowed(why),
        }
    }

    fn build(tokenizer: &Tokenizer, plan: &Plan) -> Result<TokenBytes, Inexact> {
        let ids = tokenizer
            .get_vocab(true)
            .into_values()
            .max()
            .map_or(0, |max| max as usize + 1);
        if ids > MAX_TABLE_IDS {
            return Err(Inexact::TooLarge);
        }
        let added = tokenizer.get_added_vocabulary();
        let mut table = TokenBytes {
            text: String::new(),
            raw: Vec::new(),
            entries: Vec::with_capacity(ids),
            first: HashMap::new(),
            lead: plan.lead(),
            mode: TableMode::Exact(plan.family()),
        };
        for id in 0..ids as u32 {
            let Some(token) = tokenizer.id_to_token(id) else {
                table.entries.push(ABSENT);
                continue;
            };
            let special = added.is_special_token(&token);
            let (kind, start, len) = match plan.piece(&token, false) {
                Piece::Text(text) => {
                    let start = offset(table.text.len())?;
                    table.text.push_str(&text);
                    (Kind::Text, start, offset(text.len())?)
                }
                Piece::Raw(bytes) => {
                    let start = offset(table.raw.len())?;
                    table.raw.extend_from_slice(&bytes);
                    (Kind::Raw, start, offset(bytes.len())?)
                }
                Piece::Byte(byte) => (Kind::Byte(byte), 0, 1),
            };
            offset(table.text.len() + table.raw.len())?;
            let entry = Entry {
                start,
                len,
                kind,
                special,
            };
            if table.lead == Lead::FirstToken {
                if let Piece::Text(first) = plan.piece(&token, true) {
                    if table.text_of(&entry) != first {
                        table.first.insert(id, first.into());
                    }
                }
            }
            table.entries.push(entry);
        }
        Ok(table)
    }

    /// Decodes through the table, as a generation would.
    fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        let mut stream = Stream::new(self, skip_special_tokens);
        let mut out = String::new();
        for &id in ids {
            stream.push(self, id, &mut out);
        }
        stream.finish(&mut out);
        out
    }

    /// Compares the table with `decode` on every id alone (both ways for special ids) and
    /// on random sequences weighted towards the ids with cross-token rules; the ids of the
    /// first disagreement on failure.
    fn check(&self, tokenizer: &Tokenizer) -> Result<(), Vec<u32>> {
        let agrees = |ids: &[u32], skip: bool| match tokenizer.decode(ids, skip) {
            Ok(text) => text == self.decode(ids, skip),
            Err(_) => false,
        };
        let mut tricky = Vec::new();
        for (id, entry) in self.entries.iter().enumerate() {
            let id = id as u32;
            if entry.kind == Kind::Absent {
                continue;
            }
            if !agrees(&[id], false) || (entry.special && !agrees(&[id], true)) {
                return Err(vec![id]);
            }
            let plain = entry.kind == Kind::Text && !entry.special && !self.first.contains_key(&id);
            if !plain || self.starts_with_lead(entry) {
                tricky.push(id);
            }
        }
        if self.entries.is_empty() {
            return Ok(());
        }
        let mut rng = SplitMix(0x7011_6a7e);
        for round in 0..CHECK_SEQUENCES {
            let len = 1 + rng.below(24);
            let ids: Vec<u32> = (0..len)
                .map(|_| {
                    if !tricky.is_empty() && rng.below(2) == 0 {
                        tricky[rng.below(tricky.len())]
                    } else {
                        rng.below(self.entries.len() + 2) as u32
                    }
                })
                .collect();
            if !agrees(&ids, round % 2 == 0) {
                return Err(ids);
            }
        }
        Ok(())
    }

    fn starts_with_lead(&self, entry: &Entry) -> bool {
        match self.lead {
            Lead::Strip { ch, .. } => {
                entry.kind == Kind::Text && self.text_of(entry).starts_with(ch)
            }
            Lead::Done | Lead::FirstToken => false,
        }
    }

    fn text_of(&self, entry: &Entry) -> &str {
        let start = entry.start as usize;
        self.text
            .get(start..start + entry.len as usize)
            .unwrap_or_default()
    }

    fn raw_of(&self, entry: &Entry) -> &[u8] {
        let start = entry.start as usize;
        self.raw
            .get(start..start + entry.len as usize)
            .unwrap_or_default()
    }

    /// The bytes `id` stands for on its own, as a token anywhere but first in a text (what
    /// log probabilities report per token: a byte-level token may hold part of a
    /// character). `None` when the table is not used or the id is not in it.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let entry = self.entries.get(id as usize)?;
        match entry.kind {
            Kind::Absent => None,
            Kind::Text => Some(self.text_of(entry).as_bytes()),
            Kind::Raw => Some(self.raw_of(entry)),
            Kind::Byte(byte) => Some(std::slice::from_ref(&EVERY_BYTE[usize::from(byte)])),
        }
    }
}

/// Each byte value at its own index, for the one-byte slices of byte-fallback tokens.
static EVERY_BYTE: [u8; 256] = {
    let mut all = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        all[i] = i as u8;
        i += 1;
    }
    all
};

fn offset(n: usize) -> Result<u32, Inexact> {
    u32::try_from(n).map_err(|_| Inexact::TooLarge)
}

/// The decoder chain, in the shape the table models.
#[derive(Debug)]
struct Plan {
    /// `Replace` steps with string patterns, applied to each token in order.
    replaces: Vec<(String, String)>,
    join: Join,
    /// A `Strip` of the fused text's leading characters.
    strip: Option<(char, usize)>,
    /// [`gpt2_bytes`], for `Join::ByteLevel`.
    gpt2: [Option<u8>; 0x144],
}

/// The step that turns token strings into text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    /// Token strings are the text.
    Concat,
    /// Each character of a token stands for one byte (when all of them do).
    ByteLevel,
    /// `<0xNN>` tokens are bytes; a run of them decodes as UTF-8 or as U+FFFD per byte.
    ByteFallback,
    /// `replacement` is a space, dropped altogether from the first token when `first`.
    Metaspace { replacement: char, first: bool },
}

/// One token's contribution.
enum Piece {
    Text(String),
    Raw(Vec<u8>),
    Byte(u8),
}

impl Plan {
    fn of(decoder: Option<&DecoderWrapper>) -> Result<Plan, Inexact> {
        let decoder = decoder.ok_or(Inexact::NoDecoder)?;
        let value = serde_json::to_value(decoder)
            .map_err(|_| Inexact::Decoder("unserialisable".to_string()))?;
        let mut steps = Vec::new();
        flatten(&value, &mut steps);
        let mut plan = Plan {
            replaces: Vec::new(),
            join: Join::Concat,
            strip: None,
            gpt2: gpt2_bytes(),
        };
        // 0: replaces; 1: after the join; 2: fused; 3: stripped.
        let mut stage = 0;
        let mut fused = false;
        for step in steps {
            let kind = step.get("type").and_then(Value::as_str).unwrap_or("?");
            let unsupported = || Inexact::Decoder(kind.to_string());
            match kind {
                "Replace" if stage == 0 => {
                    let pattern = step
                        .pointer("/pattern/String")
                        .and_then(Value::as_str)
                        .filter(|p| !p.is_empty())
                        .ok_or_else(unsupported)?;
                    let content = step
                        .get("content")
                        .and_then(Value::as_str)
                        .ok_or_else(unsupported)?;
                    plan.replaces
                        .push((pattern.to_string(), content.to_string()));
                }
                "ByteLevel" if stage == 0 => {
                    plan.join = Join::ByteLevel;
                    fused = true;
                    stage = 1;
                }
                "ByteFallback" if stage == 0 => {
                    plan.join = Join::ByteFallback;
                    stage = 1;
                }
                "Metaspace" if stage == 0 => {
                    let replacement =
                        single_char(step.get("replacement")).ok_or_else(unsupported)?;
                    let scheme = step.get("prepend_scheme").and_then(Value::as_str);
                    plan.join = Join::Metaspace {
                        replacement,
                        first: scheme != Some("never"),
                    };
                    stage = 1;
                }
                "Fuse" => {
                    fused = true;
                    stage = stage.max(2);
                }
                "Strip" if stage <= 2 && fused && !matches!(plan.join, Join::Metaspace { .. }) => {
                    let ch = single_char(step.get("content")).ok_or_else(unsupported)?;
                    let start = step.get("start").and_then(Value::as_u64);
                    let stop = step.get("stop").and_then(Value::as_u64);
                    let (Some(start), Some(0)) = (start, stop) else {
                        return Err(unsupported());
                    };
                    let start = usize::try_from(start).map_err(|_| unsupported())?;
                    plan.strip = (start > 0).then_some((ch, start));
                    stage = 3;
                }
                _ => return Err(unsupported()),
            }
        }
        Ok(plan)
    }

    fn family(&self) -> Family {
        match self.join {
            Join::Concat => Family::Plain,
            Join::ByteLevel => Family::ByteLevel,
            Join::ByteFallback => Family::ByteFallback,
            Join::Metaspace { .. } => Family::Metaspace,
        }
    }

    fn lead(&self) -> Lead {
        match (self.join, self.strip) {
            (Join::Metaspace { first: true, .. }, _) => Lead::FirstToken,
            (_, Some((ch, left))) => Lead::Strip { ch, left },
            _ => Lead::Done,
        }
    }

    /// What `token` contributes (as the decoder's first token when `first`).
    fn piece(&self, token: &str, first: bool) -> Piece {
        let mut text = token.to_string();
        for (pattern, content) in &self.replaces {
            if text.contains(pattern.as_str()) {
                text = text.replace(pattern.as_str(), content);
            }
        }
        match self.join {
            Join::Concat => Piece::Text(text),
            Join::ByteLevel => match text
                .chars()
                .map(|c| self.gpt2.get(c as usize).copied().flatten())
                .collect::<Option<Vec<u8>>>()
            {
                Some(bytes) => match String::from_utf8(bytes) {
                    Ok(text) => Piece::Text(text),
                    Err(e) => Piece::Raw(e.into_bytes()),
                },
                // The decoder keeps a token with any unmapped character as it is.
                None => Piece::Text(text),
            },
            Join::ByteFallback => match fallback_byte(&text) {
                Some(byte) => Piece::Byte(byte),
                None => Piece::Text(text),
            },
            Join::Metaspace {
                replacement,
                first: strips,
            } => Piece::Text(
                text.chars()
                    .filter_map(|c| match c {
                        c if c != replacement => Some(c),
                        _ if first && strips => None,
                        _ => Some(' '),
                    })
                    .collect(),
            ),
        }
    }
}

/// The steps of `decoder`, nested sequences flattened.
fn flatten<'a>(decoder: &'a Value, steps: &mut Vec<&'a Value>) {
    match decoder.get("decoders").and_then(Value::as_array) {
        Some(inner) if decoder.get("type").and_then(Value::as_str) == Some("Sequence") => {
            for step in inner {
                flatten(step, steps);
            }
        }
        _ => steps.push(decoder),
    }
}

fn single_char(value: Option<&Value>) -> Option<char> {
    let mut chars = value?.as_str()?.chars();
    let ch = chars.next()?;
    chars.next().is_none().then_some(ch)
}

/// The byte of a byte-fallback token: exactly `<0x` two hex digits `>`, as the decoder
/// reads it.
fn fallback_byte(token: &str) -> Option<u8> {
    if token.len() != 6 || !token.starts_with("<0x") || !token.ends_with('>') {
        return None;
    }
    u8::from_str_radix(token.get(3..5)?, 16).ok()
}

/// GPT-2's byte-level alphabet, inverted: printable Latin-1 bytes stand for themselves,
/// the other 68 bytes are shifted, in order, to U+0100..=U+0143. Indexed by code point.
fn gpt2_bytes() -> [Option<u8>; 0x144] {
    let printable = |b: u8| matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut inverse = [None; 0x144];
    let mut shifted = 0x100;
    for byte in 0..=u8::MAX {
        if printable(byte) {
            inverse[usize::from(byte)] = Some(byte);
        } else {
            inverse[shifted] = Some(byte);
            shifted += 1;
        }
    }
    inverse
}

/// How GPT-2's byte-level vocabularies spell `bytes` (the direction [`gpt2_bytes`]
/// inverts): what a byte-level vocabulary is written in, for the code that builds one
/// (the integration tests, the bench and the fuzz target build small tokenizers this way).
pub fn byte_level_spelling(bytes: &[u8]) -> String {
    let mut forward = ['\0'; 256];
    for (code, byte) in gpt2_bytes().iter().enumerate() {
        if let (Some(byte), Some(c)) = (byte, u32::try_from(code).ok().and_then(char::from_u32)) {
            forward[usize::from(*byte)] = c;
        }
    }
    bytes.iter().map(|&b| forward[usize::from(b)]).collect()
}

/// A small deterministic generator for the table check (the same samples every load).
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z % n.max(1) as u64) as usize
    }
}

/// What the table path holds between pushes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Nothing,
    /// `bytes` is an unfinished UTF-8 character.
    Tail,
    /// `bytes` is an open byte-fallback run, valid UTF-8 so far (a run past
    /// [`MAX_HELD_RUN`] may have sent its start already, leaving `bytes` empty).
    Run,
    /// The open byte-fallback run is invalid: each of its bytes is one U+FFFD, already
    /// sent.
    Poisoned,
}

/// One generation on the table path.
#[derive(Debug)]
struct Stream {
    skip_special: bool,
    held: Held,
    bytes: Vec<u8>,
    lead: Lead,
}

impl Stream {
    fn new(table: &TokenBytes, skip_special: bool) -> Stream {
        Stream {
            skip_special,
            held: Held::Nothing,
            bytes: Vec::new(),
            lead: table.lead,
        }
    }

    #[inline]
    fn push(&mut self, table: &TokenBytes, id: u32, out: &mut String) {
        let Some(entry) = table.entries.get(id as usize) else {
            return;
        };
        if entry.special && self.skip_special {
            return;
        }
        match entry.kind {
            Kind::Text => {
                let text = table.text_of(entry);
                if self.held == Held::Nothing && self.lead == Lead::Done {
                    out.push_str(text);
                } else {
                    self.push_text(table, id, text, out);
                }
            }
            Kind::Raw => self.push_raw(table.raw_of(entry), out),
            Kind::Byte(byte) => self.push_byte(byte, out),
            Kind::Absent => {}
        }
    }

    fn push_text(&mut self, table: &TokenBytes, id: u32, text: &str, out: &mut String) {
        self.end_run(out);
        let text = if self.lead == Lead::FirstToken {
            self.lead = Lead::Done;
            table.first.get(&id).map_or(text, |first| first)
        } else {
            text
        };
        if self.held == Held::Tail {
            self.bytes.extend_from_slice(text.as_bytes());
            self.drain(out, false);
        } else {
            emit(&mut self.lead, text, out);
        }
    }

    fn push_raw(&mut self, bytes: &[u8], out: &mut String) {
        self.end_run(out);
        if self.lead == Lead::FirstToken {
            self.lead = Lead::Done;
        }
        self.bytes.extend_from_slice(bytes);
        self.drain(out, false);
    }

    fn push_byte(&mut self, byte: u8, out: &mut String) {
        if self.lead == Lead::FirstToken {
            self.lead = Lead::Done;
        }
        match self.held {
            Held::Poisoned => {
                emit(&mut self.lead, REPLACEMENT, out);
                return;
            }
            Held::Tail => self.drain(out, true),
            Held::Nothing | Held::Run => {}
        }
        self.held = Held::Run;
        self.bytes.push(byte);
        match std::str::from_utf8(&self.bytes) {
            Err(e) if e.error_len().is_some() => {
                for _ in 0..self.bytes.len() {
                    emit(&mut self.lead, REPLACEMENT, out);
                }
                self.bytes.clear();
                self.held = Held::Poisoned;
            }
            _ if self.bytes.len() >= MAX_HELD_RUN => {
                let complete = match std::str::from_utf8(&self.bytes) {
                    Ok(text) => text,
                    Err(e) => {
                        std::str::from_utf8(&self.bytes[..e.valid_up_to()]).unwrap_or_default()
                    }
                };
                emit(&mut self.lead, complete, out);
                let sent = complete.len();
                self.bytes.drain(..sent);
            }
            _ => {}
        }
    }

    /// Closes an open byte-fallback run: a non-byte token (or the end) follows it.
    fn end_run(&mut self, out: &mut String) {
        match self.held {
            Held::Run => {
                match std::str::from_utf8(&self.bytes) {
                    Ok(text) => emit(&mut self.lead, text, out),
                    Err(_) => {
                        for _ in 0..self.bytes.len() {
                            emit(&mut self.lead, REPLACEMENT, out);
                        }
                    }
                }
                self.bytes.clear();
                self.held = Held::Nothing;
            }
            Held::Poisoned => self.held = Held::Nothing,
            Held::Nothing | Held::Tail => {}
        }
    }

    /// Emits the complete characters of `bytes` (and U+FFFD for each invalid sequence, as
    /// a lossy conversion of the whole text would), keeping an unfinished character at the
    /// end unless this is the end of the stream.
    fn drain(&mut self, out: &mut String, end: bool) {
        let total = self.bytes.len();
        let mut used = 0;
        for chunk in self.bytes.utf8_chunks() {
            emit(&mut self.lead, chunk.valid(), out);
            used += chunk.valid().len();
            let invalid = chunk.invalid();
            if invalid.is_empty() {
                continue;
            }
            if !end && used + invalid.len() == total && unfinished(invalid) {
                break;
            }
            emit(&mut self.lead, REPLACEMENT, out);
            used += invalid.len();
        }
        self.bytes.drain(..used);
        self.held = if self.bytes.is_empty() {
            Held::Nothing
        } else {
            Held::Tail
        };
    }

    fn finish(&mut self, out: &mut String) {
        match self.held {
            Held::Run | Held::Poisoned => self.end_run(out),
            Held::Tail => self.drain(out, true),
            Held::Nothing => {}
        }
    }
}

/// Whether `bytes` (a maximal invalid sequence at the end) is the start of a character
/// that more bytes could finish.
fn unfinished(bytes: &[u8]) -> bool {
    matches!(std::str::from_utf8(bytes), Err(e) if e.error_len().is_none())
}

/// Appends `text`, dropping what the leading strip still takes.
#[inline]
fn emit(lead: &mut Lead, text: &str, out: &mut String) {
    let Lead::Strip { ch, left } = lead else {
        out.push_str(text);
        return;
    };
    let mut rest = text;
    while *left > 0 {
        match rest.strip_prefix(*ch) {
            Some(after) => {
                rest = after;
                *left -= 1;
            }
            None => {
                if !rest.is_empty() {
                    *left = 0;
                }
                break;
            }
        }
    }
    if *left == 0 {
        *lead = Lead::Done;
    }
    out.push_str(rest);
}

/// One generation on the window path.
struct Window {
    tokenizer: Arc<Tokenizer>,
    skip_special: bool,
    /// The ids since the start of the previous emission (the context) and after it.
    ids: Vec<u32>,
    /// `ids[..read]` are already accounted for in the emitted text.
    read: usize,
    /// Bytes of the text after `ids[..read]`'s already sent (a long U+FFFD run's start).
    sent: usize,
}

impl Window {
    fn push(&mut self, id: u32, out: &mut String) {
        // Ids `decode` drops are left out, so no decode sees an empty token list (some
        // decoders cannot take one).
        let Some(token) = self.tokenizer.id_to_token(id) else {
            return;
        };
        if self.skip_special
            && self
                .tokenizer
                .get_added_vocabulary()
                .is_special_token(&token)
        {
            return;
        }
        self.ids.push(id);
        let before = self.decode(&self.ids[..self.read]);
        let after = self.decode(&self.ids);
        let fresh = after.get(before.len() + self.sent..).unwrap_or_default();
        let pending = self.ids.len() - self.read;
        if pending > MAX_WINDOW_IDS || (!fresh.is_empty() && !after.ends_with(REPLACEMENT)) {
            out.push_str(fresh);
            self.ids.drain(..self.read);
            self.read = self.ids.len();
            self.sent = 0;
        } else if pending > MAX_WINDOW_WAIT {
            // `fresh` is empty or ends in U+FFFD: keep just that one.
            let settled = fresh.len().saturating_sub(REPLACEMENT.len());
            out.push_str(fresh.get(..settled).unwrap_or_default());
            self.sent += settled;
        }
    }

    fn finish(&mut self, out: &mut String) {
        let before = self.decode(&self.ids[..self.read]);
        let after = self.decode(&self.ids);
        out.push_str(after.get(before.len() + self.sent..).unwrap_or_default());
        self.ids.clear();
        self.read = 0;
        self.sent = 0;
    }

    /// `decode`, with a failure read as no text (the window then waits).
    fn decode(&self, ids: &[u32]) -> String {
        if ids.is_empty() {
            return String::new();
        }
        self.tokenizer
            .decode(ids, self.skip_special)
            .unwrap_or_default()
    }
}

enum Path {
    Table {
        table: Arc<TokenBytes>,
        stream: Stream,
    },
    Window(Window),
}

/// Turns one generation's token ids into text as they arrive.
pub struct Detokenizer {
    path: Path,
}

impl fmt::Debug for Detokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Path::Table { stream, .. } => {
                f.debug_tuple("Detokenizer::Table").field(stream).finish()
            }
            Path::Window(window) => f
                .debug_struct("Detokenizer::Window")
                .field("ids", &window.ids)
                .field("read", &window.read)
                .finish(),
        }
    }
}

impl Detokenizer {
    /// A detokenizer on `table` when it is exact, else on the window over `tokenizer`.
    pub fn new(
        table: Arc<TokenBytes>,
        tokenizer: Arc<Tokenizer>,
        skip_special_tokens: bool,
    ) -> Detokenizer {
        if !table.is_exact() {
            return Detokenizer::windowed(tokenizer, skip_special_tokens);
        }
        let stream = Stream::new(&table, skip_special_tokens);
        Detokenizer {
            path: Path::Table { table, stream },
        }
    }

    /// A detokenizer on the window whatever the tokenizer (the general path; for
    /// comparison and tests).
    pub fn windowed(tokenizer: Arc<Tokenizer>, skip_special_tokens: bool) -> Detokenizer {
        Detokenizer {
            path: Path::Window(Window {
                tokenizer,
                skip_special: skip_special_tokens,
                ids: Vec::new(),
                read: 0,
                sent: 0,
            }),
        }
    }

    /// Appends to `out` the text that `id` completes (possibly nothing). An id outside the
    /// vocabulary is nothing, as `decode` drops it.
    #[inline]
    pub fn push(&mut self, id: u32, out: &mut String) {
        match &mut self.path {
            Path::Table { table, stream } => stream.push(table, id, out),
            Path::Window(window) => window.push(id, out),
        }
    }

    /// End of the stream: appends what is still held, with U+FFFD for an unfinished
    /// character, as `decode` would. Pushing afterwards starts a new text (no character
    /// spans a `finish`).
    pub fn finish(&mut self, out: &mut String) {
        match &mut self.path {
            Path::Table { stream, .. } => stream.finish(out),
            Path::Window(window) => window.finish(out),
        }
    }
}

#[cfg(test)]
mod tests;

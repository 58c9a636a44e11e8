//! Reading a `tokenizer.json` into the fast path's parts, refusing (with a reason) anything
//! whose behaviour the fast path does not reproduce exactly.

use serde_json::Value;
use tokenizers::Tokenizer;

use super::merge::Model;
use super::split::{Pattern, Stage};
use super::Unsupported;
use crate::fxhash::FxMap;

/// What the normalizer does to the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalizer {
    None,
    /// NFC: the fast path takes only text NFC leaves as it is (see `nfc::unchanged`).
    Nfc,
}

fn refuse<T>(reason: impl Into<String>) -> Result<T, Unsupported> {
    Err(Unsupported(reason.into()))
}

pub fn normalizer(json: &Value) -> Result<Normalizer, Unsupported> {
    let Some(norm) = json.get("normalizer").filter(|v| !v.is_null()) else {
        return Ok(Normalizer::None);
    };
    match norm.get("type").and_then(Value::as_str) {
        Some("NFC") => Ok(Normalizer::Nfc),
        Some("Sequence")
            if norm
                .get("normalizers")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty) =>
        {
            Ok(Normalizer::None)
        }
        _ => refuse(format!("normalizer {}", kind(norm))),
    }
}

pub fn no_truncation_or_padding(json: &Value) -> Result<(), Unsupported> {
    for field in ["truncation", "padding"] {
        if json.get(field).is_some_and(|v| !v.is_null()) {
            return refuse(format!("{field} is set"));
        }
    }
    Ok(())
}

/// The pre-tokenizer as stages: a byte-level one, alone or last in a sequence of known splits.
pub fn stages(json: &Value) -> Result<Vec<Stage>, Unsupported> {
    let Some(pre) = json.get("pre_tokenizer").filter(|v| !v.is_null()) else {
        return refuse("no pre-tokenizer");
    };
    let items: Vec<&Value> = match pre.get("type").and_then(Value::as_str) {
        Some("Sequence") => pre
            .get("pretokenizers")
            .and_then(Value::as_array)
            .map(|items| items.iter().collect())
            .unwrap_or_default(),
        _ => vec![pre],
    };
    let Some((last, first)) = items.split_last() else {
        return refuse("empty pre-tokenizer sequence");
    };
    let mut stages = Vec::new();
    for item in first {
        stages.push(stage(item)?);
    }
    if last.get("type").and_then(Value::as_str) != Some("ByteLevel") {
        return refuse(format!("pre-tokenizer ends with {}", kind(last)));
    }
    if last.get("add_prefix_space").and_then(Value::as_bool) != Some(false) {
        return refuse("byte-level pre-tokenizer adds a prefix space");
    }
    if last
        .get("use_regex")
        .and_then(Value::as_bool)
        .unwrap_or(true)
    {
        stages.push(Stage::Split {
            pattern: Pattern::Gpt2,
            gaps: true,
        });
    }
    Ok(stages)
}

fn stage(item: &Value) -> Result<Stage, Unsupported> {
    match item.get("type").and_then(Value::as_str) {
        Some("Digits") => Ok(Stage::Digits {
            individual: item
                .get("individual_digits")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }),
        Some("Split") => {
            let Some(regex) = item.pointer("/pattern/Regex").and_then(Value::as_str) else {
                return refuse("split on a string or without a pattern");
            };
            let Some(pattern) = Pattern::known(regex) else {
                return refuse(format!("unknown split pattern {regex:?}"));
            };
            let behavior = item.get("behavior").and_then(Value::as_str);
            let invert = item.get("invert").and_then(Value::as_bool).unwrap_or(false);
            match (behavior, invert) {
                (Some("Isolated"), false) => Ok(Stage::Split {
                    pattern,
                    gaps: true,
                }),
                (Some("Removed"), true) if pattern.total() => Ok(Stage::Split {
                    pattern,
                    gaps: false,
                }),
                _ => refuse(format!("split behaviour {behavior:?} with invert {invert}")),
            }
        }
        _ => refuse(format!("pre-tokenizer {}", kind(item))),
    }
}

/// The BPE model, with its vocabulary and merges re-keyed by raw bytes.
pub fn model(json: &Value) -> Result<Model, Unsupported> {
    let Some(model) = json.get("model") else {
        return refuse("no model");
    };
    if model.get("type").and_then(Value::as_str) != Some("BPE") {
        return refuse(format!("model {}", kind(model)));
    }
    if model.get("dropout").is_some_and(|v| !v.is_null()) {
        return refuse("BPE dropout");
    }
    for affix in ["continuing_subword_prefix", "end_of_word_suffix"] {
        if model
            .get(affix)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        {
            return refuse(format!("BPE {affix}"));
        }
    }
    if model.get("byte_fallback").and_then(Value::as_bool) == Some(true) {
        return refuse("BPE byte fallback");
    }
    let ignore_merges = model
        .get("ignore_merges")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let Some(vocab_json) = model.get("vocab").and_then(Value::as_object) else {
        return refuse("BPE without a vocabulary");
    };
    let bytes_of = char_bytes();
    let mut vocab: FxMap<Box<[u8]>, u32> = FxMap::default();
    vocab.reserve(vocab_json.len());
    for (token, id) in vocab_json {
        let Some(id) = id.as_u64().and_then(|id| u32::try_from(id).ok()) else {
            return refuse(format!("vocabulary id of {token:?}"));
        };
        // Entries with characters outside the byte-level alphabet can never be produced.
        if let Some(bytes) = to_bytes(token, &bytes_of) {
            vocab.insert(bytes.into(), id);
        }
    }
    // A byte outside the vocabulary is dropped from the piece (there is no unknown token
    // to stand for it), as Hugging Face's BPE does.
    let mut byte_ids = [None; 256];
    for (b, slot) in byte_ids.iter_mut().enumerate() {
        let key = [b as u8];
        *slot = vocab.get(&key[..]).copied();
    }
    if byte_ids.contains(&None) && model.get("unk_token").is_some_and(|v| !v.is_null()) {
        return refuse("bytes outside the vocabulary with an unknown token");
    }
    let id_of = |token: &str| {
        vocab_json
            .get(token)
            .and_then(Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
    };
    let merges_json = model
        .get("merges")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut merges = Vec::with_capacity(merges_json.len());
    for merge in merges_json {
        let (left, right) = match merge {
            Value::String(line) => match line.split(' ').collect::<Vec<_>>().as_slice() {
                [left, right] => (left.to_string(), right.to_string()),
                _ => return refuse(format!("merge {line:?}")),
            },
            Value::Array(parts) => match parts.as_slice() {
                [Value::String(left), Value::String(right)] => (left.clone(), right.clone()),
                _ => return refuse("merge that is not a pair of strings"),
            },
            _ => return refuse("merge that is neither a string nor a pair"),
        };
        let merged = format!("{left}{right}");
        match (id_of(&left), id_of(&right), id_of(&merged)) {
            (Some(l), Some(r), Some(m)) => merges.push((l, r, m)),
            _ => return refuse(format!("merge {left:?} {right:?} outside the vocabulary")),
        }
    }
    Ok(Model::new(vocab, &merges, byte_ids, ignore_merges))
}

/// The added tokens as `(content, id)`, split into those matched on the raw text and those
/// matched after normalization.
pub type AddedSets = (Vec<(String, u32)>, Vec<(String, u32)>);

pub fn added(tokenizer: &Tokenizer) -> Result<AddedSets, Unsupported> {
    if tokenizer.get_encode_special_tokens() {
        return refuse("special tokens are encoded as text");
    }
    let mut raw = Vec::new();
    let mut normalized = Vec::new();
    let mut tokens: Vec<_> = tokenizer.get_added_tokens_decoder().into_iter().collect();
    tokens.sort_by_key(|(id, _)| *id);
    for (_, token) in tokens {
        if token.lstrip || token.rstrip || token.single_word {
            return refuse(format!(
                "added token {:?} strips or is single-word",
                token.content
            ));
        }
        if token.content.is_empty() {
            return refuse("empty added token");
        }
        let Some(id) = tokenizer.token_to_id(&token.content) else {
            return refuse(format!("added token {:?} has no id", token.content));
        };
        if token.normalized {
            normalized.push((token.content, id));
        } else {
            raw.push((token.content, id));
        }
    }
    Ok((raw, normalized))
}

fn kind(value: &Value) -> String {
    value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("without a type")
        .to_string()
}

/// The inverse of GPT-2's byte-to-character table (printable Latin-1 bytes stand for
/// themselves, the others for U+0100 onwards in byte order): the byte each character below
/// U+0200 stands for.
fn char_bytes() -> [Option<u8>; 512] {
    let mut bytes = [None; 512];
    let mut next = 256usize;
    for b in 0..=255u8 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
        let code = if printable {
            usize::from(b)
        } else {
            next += 1;
            next - 1
        };
        if let Some(slot) = bytes.get_mut(code) {
            *slot = Some(b);
        }
    }
    bytes
}

/// The raw bytes a byte-level token spells, if every character is in the table.
fn to_bytes(token: &str, bytes_of: &[Option<u8>; 512]) -> Option<Vec<u8>> {
    token
        .chars()
        .map(|c| bytes_of.get(c as usize).copied().flatten())
        .collect()
}

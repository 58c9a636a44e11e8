//! A small tokenizer directory for tests that need a gRPC worker: a byte-level BPE
//! `tokenizer.json` with a few merges and two special tokens, and a
//! `tokenizer_config.json` with a ChatML template, all written here.

use std::path::Path;

use serde_json::{json, Value};
use tokenizers::Tokenizer;
use tollgate::chat::detokenize::byte_level_spelling;

/// Special tokens of the test tokenizer (ids after the 256 byte tokens and the merges).
pub const IM_START: &str = "<|im_start|>";
pub const IM_END: &str = "<|im_end|>";

/// The test's chat template: ChatML, written here.
pub const TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// A byte-level BPE tokenizer with a few merges and two special tokens, written as
/// `tokenizer.json` and `tokenizer_config.json` (with the template) into `dir`.
pub fn write_tokenizer(dir: &Path) -> Tokenizer {
    let mut vocab = serde_json::Map::new();
    for byte in 0..=u8::MAX {
        vocab.insert(byte_level_spelling(&[byte]), json!(byte));
    }
    let space = byte_level_spelling(b" ");
    let merges: Vec<(String, String)> = [
        ("h", "e"),
        ("l", "l"),
        ("he", "ll"),
        ("hell", "o"),
        (space.as_str(), "w"),
        ("o", "r"),
        (&format!("{space}w"), "or"),
        ("l", "d"),
        (&format!("{space}wor"), "ld"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    for (a, b) in &merges {
        let id = vocab.len();
        vocab.insert(format!("{a}{b}"), json!(id));
    }
    let first_special = vocab.len();
    let added: Vec<Value> = [IM_START, IM_END]
        .iter()
        .enumerate()
        .map(|(i, content)| {
            json!({"id": first_special + i, "content": content, "single_word": false,
                   "lstrip": false, "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tokenizer = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": vocab, "merges": merges.iter().map(|(a, b)| format!("{a} {b}")).collect::<Vec<_>>()}
    });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let config = json!({"bos_token": null, "eos_token": IM_END, "chat_template": TEMPLATE});
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string()).unwrap();
    Tokenizer::from_file(dir.join("tokenizer.json")).unwrap()
}

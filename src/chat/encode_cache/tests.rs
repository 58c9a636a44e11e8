//! The caches against the tokenizer itself: every answer equals `encode_fast`'s, whatever
//! the chat and wherever it grows; hits, misses, evictions and bounds as counted.

use std::cell::RefCell;

use serde_json::{json, Value};
use tokenizers::Tokenizer;

use super::store::{Cache, Counters, Counts, Limits};
use super::*;
use crate::chat::detokenize::byte_level_spelling;
use crate::rng::{below, seed_this_thread};

const START: &str = "<|im_start|>";
const END: &str = "<|im_end|>";
const BOS: &str = "<s>";

/// A cache of its own with counters of its own, for one test.
struct TestHome {
    cache: RefCell<Cache>,
    counters: &'static Counters,
    limits: Limits,
}

impl TestHome {
    fn new(limits: Limits) -> TestHome {
        let counters: &'static Counters = Box::leak(Box::new(Counters::new()));
        TestHome {
            cache: RefCell::new(Cache::new(limits, counters)),
            counters,
            limits,
        }
    }

    fn roomy() -> TestHome {
        TestHome::new(CacheSettings::default().share(1))
    }

    fn counts(&self) -> Counts {
        self.counters.counts()
    }

    fn sizes(&self) -> ((usize, usize), (usize, usize)) {
        self.cache.borrow().sizes()
    }
}

impl Home for TestHome {
    fn with<R>(&self, f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
        Some(f(&mut self.cache.borrow_mut()))
    }

    fn limits(&self) -> Limits {
        self.limits
    }
}

fn added(id: usize, content: &str, special: bool) -> Value {
    json!({"id": id, "content": content, "single_word": false, "lstrip": false,
           "rstrip": false, "normalized": false, "special": special})
}

/// A byte-level BPE tokenizer (GPT-2 spelling, a few merges) with ChatML's tokens, a BOS
/// that the post-processor adds for `add_special`, and `extra` added tokens.
fn byte_level(extra: &[Value], normalizer: Value) -> Tokenizer {
    let mut vocab = serde_json::Map::new();
    for byte in 0..=u8::MAX {
        vocab.insert(byte_level_spelling(&[byte]), json!(byte));
    }
    let space = byte_level_spelling(b" ");
    let pairs = [
        ("u", "s"),
        ("us", "e"),
        ("use", "r"),
        ("w", "o"),
        ("wo", "r"),
        ("wor", "l"),
        ("worl", "d"),
        (space.as_str(), "world"),
        ("e", "l"),
        ("l", "o"),
    ];
    let mut merges = Vec::new();
    for (a, b) in pairs {
        vocab.insert(format!("{a}{b}"), json!(vocab.len()));
        merges.push(format!("{a} {b}"));
    }
    let first = vocab.len();
    let mut tokens = vec![
        added(first, START, true),
        added(first + 1, END, true),
        added(first + 2, BOS, true),
    ];
    for (i, token) in extra.iter().enumerate() {
        let mut token = token.clone();
        token["id"] = json!(first + 3 + i);
        tokens.push(token);
    }
    build(json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": tokens,
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {BOS: {"id": BOS, "ids": [first + 2], "tokens": [BOS]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false,
                  "vocab": vocab, "merges": merges}
    }))
}

/// A SentencePiece-style tokenizer: Metaspace that marks only the first piece of a prompt
/// (what an encoding of the text after a cut must not add), over single characters.
fn metaspace() -> Tokenizer {
    let mut vocab = serde_json::Map::new();
    vocab.insert("<unk>".into(), json!(0));
    for c in (' '..='~').chain(['▁', '\n', 'é', '世']) {
        vocab.insert(c.to_string(), json!(vocab.len()));
    }
    vocab.insert("▁h".into(), json!(vocab.len()));
    let first = vocab.len();
    build(json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(first, START, true), added(first + 1, END, true)],
        "normalizer": null,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                  "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false,
                  "vocab": vocab, "merges": ["▁ h"]}
    }))
}

/// [`metaspace`] with an NFKC normalizer and ChatML's tokens in the model's vocabulary
/// too, under the same ids (alone and as a word after a space).
fn metaspace_with_vocab_specials() -> Tokenizer {
    let mut spec: Value = serde_json::from_str(&metaspace().to_string(false).unwrap()).unwrap();
    spec["normalizer"] = json!({"type": "NFKC"});
    for token in spec["added_tokens"].clone().as_array().unwrap() {
        let content = token["content"].as_str().unwrap();
        spec["model"]["vocab"][content] = token["id"].clone();
        spec["model"]["vocab"][format!("▁{content}")] = token["id"].clone();
    }
    // A word the vocabulary holds is one token, merges or not.
    spec["model"]["ignore_merges"] = json!(true);
    build(spec)
}

fn build(spec: Value) -> Tokenizer {
    Tokenizer::from_bytes(spec.to_string()).unwrap()
}

fn plain_ids(tok: &Tokenizer, text: &str, add_special: bool) -> Vec<u32> {
    tok.encode_fast(text, add_special)
        .unwrap()
        .get_ids()
        .to_vec()
}

fn cached(home: &TestHome, tok: &Tokenizer, cuts: &Boundaries, text: &str) -> Vec<u32> {
    encode_in(home, tok, cuts, text, false).unwrap()
}

/// A ChatML rendering of `turns` (role, content) with the generation prompt.
fn chatml(turns: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (role, content) in turns {
        out.push_str(&format!("{START}{role}\n{content}{END}\n"));
    }
    out.push_str(&format!("{START}assistant\n"));
    out
}

/// Content that makes the tokenizer work at the edges: spaces and newlines around special
/// tokens, special tokens inside content, partial special tokens, non-ASCII; drawn from
/// the thread's generator (seeded by the test).
fn content() -> String {
    const PIECES: [&str; 16] = [
        "hello", " world", "user", " ", "\n", "  ", "é", "世界", "<|im", "_end|>", "<", "|>",
        START, END, BOS, "🎉",
    ];
    (0..below(12))
        .map(|_| PIECES[below(PIECES.len())])
        .collect()
}

#[test]
fn only_tokens_every_occurrence_of_which_is_taken_out_are_cuts() {
    let token = |content: &str, special: bool| added(0, content, special);
    let mut single = token("<|single|>", true);
    single["single_word"] = json!(true);
    let mut normalized = token("<|norm|>", true);
    normalized["normalized"] = json!(true);
    let tok = byte_level(
        &[
            single,
            normalized,
            token("<|in|>", true),
            token("<|in|>more", true),
            token("<|over|>", true),
            token("x<|ov", false),
            token("<k<k", true),
            token(" <|space|>", true),
            token("<|plain|>", false),
        ],
        Value::Null,
    );
    let cuts = Boundaries::of(&tok);
    let names: Vec<&str> = (0..)
        .map_while(|i| cuts.token(i))
        .map(|t| &*t.content)
        .collect();
    // Out: single_word, normalized, inside a longer token, reachable from an earlier
    // start ("x<|ov"), overlapping itself, starting with whitespace, not special.
    assert_eq!(names, [START, END, BOS, "<|in|>more"]);
}

#[test]
fn a_cut_token_the_vocabulary_also_holds_stays_exact() {
    // "<|im_end|>" spelled out of NFKC look-alikes: the normalizer makes the special
    // token's text, which the model (whose vocabulary holds it too) turns into its id.
    let tok = metaspace_with_vocab_specials();
    let cuts = Boundaries::of(&tok);
    assert!(cuts.token(0).is_some());
    let home = TestHome::roomy();
    let look_alike = "x \u{ff1c}|im_end|\u{ff1e}";
    let first = chatml(&[("user", "hi".into())]);
    let second = chatml(&[("user", "hi".into()), ("assistant", look_alike.into())]);
    let third = chatml(&[
        ("user", "hi".into()),
        ("assistant", look_alike.into()),
        ("user", "ok".into()),
    ]);
    for text in [&first, &second, &third] {
        assert_eq!(
            cached(&home, &tok, &cuts, text),
            plain_ids(&tok, text, false)
        );
    }
    let end_id = tok.token_to_id(END).unwrap();
    let ends = plain_ids(&tok, &second, false)
        .into_iter()
        .filter(|&id| id == end_id)
        .count();
    assert_eq!(ends, second.matches(END).count() + 1);
    // That extra id left the second prompt unmarked: the second and the third both
    // reused the first one's prefix, not the second's longer one.
    let counts = home.counts();
    let first_prefix = (first.rfind(START).unwrap() + START.len()) as u64;
    assert_eq!(counts.hits[1], 2);
    assert_eq!(counts.reused_bytes[1], 2 * first_prefix);
}

#[test]
fn truncation_padding_or_special_tokens_as_text_turn_cuts_off() {
    let mut tok = byte_level(&[], Value::Null);
    assert!(Boundaries::of(&tok).any());
    tok.with_truncation(Some(tokenizers::TruncationParams::default()))
        .unwrap();
    assert!(!Boundaries::of(&tok).any());
    let mut tok = byte_level(&[], Value::Null);
    tok.set_encode_special_tokens(true);
    assert!(!Boundaries::of(&tok).any());
    // Every tokenizer gets an identity of its own.
    let tok = byte_level(&[], Value::Null);
    assert_ne!(Boundaries::of(&tok).id(), Boundaries::of(&tok).id());
}

#[test]
fn places_are_the_ends_of_cut_tokens_in_order() {
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let mut places = Vec::new();
    let text = format!("{START}user\nhi <|im{END}{END}");
    cuts.places(&text, &mut places);
    let ends: Vec<usize> = places.iter().map(|p| p.end).collect();
    let first = START.len();
    let second = first + "user\nhi <|im".len() + END.len();
    assert_eq!(ends, [first, second, second + END.len()]);
    cuts.places("no special tokens here", &mut places);
    assert!(places.is_empty());
}

#[test]
fn prefix_keys_do_not_depend_on_where_the_text_is_cut() {
    let seed = RandomState::new();
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let text = chatml(&[("user", "hello".into()), ("assistant", "world".into())]);
    let mut places = Vec::new();
    cuts.places(&text, &mut places);
    let keys = prefix_keys(&seed, 7, &text, &places);
    for (place, key) in places.iter().zip(&keys) {
        let mut h = seed.build_hasher();
        h.write_u64(7);
        h.write(&text.as_bytes()[..place.end]);
        assert_eq!(h.finish(), *key);
    }
}

#[test]
fn a_prompt_seen_before_is_an_l0_hit_with_its_bytes() {
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let home = TestHome::roomy();
    let text = chatml(&[("user", "hello world".into())]);
    for add_special in [false, true] {
        let expected = plain_ids(&tok, &text, add_special);
        assert_eq!(
            encode_in(&home, &tok, &cuts, &text, add_special).unwrap(),
            expected
        );
        assert_eq!(
            encode_in(&home, &tok, &cuts, &text, add_special).unwrap(),
            expected
        );
    }
    let counts = home.counts();
    // The BOS of add_special is in the key: each flag misses once, then hits.
    assert_eq!((counts.hits[0], counts.misses[0]), (2, 2));
    assert_eq!(counts.reused_bytes[0], 2 * text.len() as u64);
    // L1 is looked up for add_special = false only, and missed (empty cache).
    assert_eq!((counts.hits[1], counts.misses[1]), (0, 1));
    assert_eq!(counts.evictions, [0, 0]);
}

#[test]
fn a_chat_with_one_more_turn_reuses_the_earlier_turns() {
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let home = TestHome::roomy();
    let mut turns = vec![("system", "be brief".to_string()), ("user", "hello".into())];
    let first = chatml(&turns);
    assert_eq!(
        cached(&home, &tok, &cuts, &first),
        plain_ids(&tok, &first, false)
    );
    turns.push(("assistant", "hello world".into()));
    turns.push(("user", " hello  world\n".into()));
    let second = chatml(&turns);
    assert_eq!(
        cached(&home, &tok, &cuts, &second),
        plain_ids(&tok, &second, false)
    );
    let counts = home.counts();
    assert_eq!((counts.hits[1], counts.misses[1]), (1, 1));
    // Reused: the first prompt up to its last cut, right after the final <|im_start|>.
    let reused = first.rfind(START).unwrap() + START.len();
    assert_eq!(counts.reused_bytes[1], reused as u64);
    // The second turn's entry holds every place of the first: the first one is gone.
    assert_eq!(home.sizes().1 .0, 1);
}

#[test]
fn cached_ids_equal_the_tokenizers_for_random_chats_and_growths() {
    let nfc = json!({"type": "NFC"});
    for tok in [
        byte_level(&[], Value::Null),
        byte_level(&[], nfc),
        metaspace(),
    ] {
        let cuts = Boundaries::of(&tok);
        assert!(cuts.any());
        let home = TestHome::roomy();
        seed_this_thread(0x9e37_79b9_7f4a_7c15);
        for _ in 0..60 {
            let mut turns: Vec<(&str, String)> = Vec::new();
            for _ in 0..1 + below(6) {
                let role = ["system", "user", "assistant"][below(3)];
                turns.push((role, content()));
                let text = chatml(&turns);
                assert_eq!(
                    cached(&home, &tok, &cuts, &text),
                    plain_ids(&tok, &text, false)
                );
                // And the rendering without the generation prompt, cut anywhere.
                let cut = below(text.len() + 1);
                let cut = (0..=cut)
                    .rev()
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(0);
                let part = &text[..cut];
                assert_eq!(
                    cached(&home, &tok, &cuts, part),
                    plain_ids(&tok, part, false)
                );
                let add_special = encode_in(&home, &tok, &cuts, part, true).unwrap();
                assert_eq!(add_special, plain_ids(&tok, part, true));
            }
        }
        assert!(home.counts().hits[1] > 0, "{:?}", home.counts());
    }
}

#[test]
fn l0_evicts_past_its_entries_and_bytes() {
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let home = TestHome::new(Limits {
        l0_entries: 2,
        l0_bytes: 1 << 20,
        l1_bytes: 0,
    });
    for text in ["one", "two", "three", "one"] {
        assert_eq!(
            cached(&home, &tok, &cuts, text),
            plain_ids(&tok, text, false)
        );
    }
    let counts = home.counts();
    // "one" was evicted by "three" (CLOCK: nothing was touched), so it misses again.
    assert_eq!((counts.hits[0], counts.misses[0]), (0, 4));
    assert_eq!(counts.evictions[0], 2);
    assert_eq!(home.sizes().0 .0, 2);
    // No L1 with l1_bytes 0: nothing looked up there.
    assert_eq!(counts.hits[1] + counts.misses[1], 0);

    // A byte bound: entries of ~100 bytes each in a 250-byte layer; a bigger prompt than
    // the whole layer is not kept at all.
    let home = TestHome::new(Limits {
        l0_entries: 100,
        l0_bytes: 250,
        l1_bytes: 0,
    });
    for text in ["a", "b", "c", "d"] {
        cached(&home, &tok, &cuts, text);
        let (entries, bytes) = home.sizes().0;
        assert!(bytes <= 250 && entries <= 2, "{entries} {bytes}");
    }
    assert_eq!(home.counts().evictions[0], 2);
    let big = "x".repeat(300);
    assert_eq!(
        cached(&home, &tok, &cuts, &big),
        plain_ids(&tok, &big, false)
    );
    assert_eq!(
        cached(&home, &tok, &cuts, &big),
        plain_ids(&tok, &big, false)
    );
    assert_eq!(home.counts().hits[0], 0);
}

#[test]
fn l1_stays_within_its_bytes_and_counts_evictions() {
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let limits = Limits {
        l0_entries: 0,
        l0_bytes: 0,
        l1_bytes: 2000,
    };
    let home = TestHome::new(limits);
    for i in 0..20 {
        let text = chatml(&[("user", format!("conversation {i}"))]);
        assert_eq!(
            cached(&home, &tok, &cuts, &text),
            plain_ids(&tok, &text, false)
        );
        let (_, bytes) = home.sizes().1;
        assert!(bytes <= limits.l1_bytes, "{bytes}");
    }
    let counts = home.counts();
    assert!(counts.evictions[1] > 0, "{counts:?}");
    assert_eq!(counts.evictions[0], 0);
    // With L0 off, every prompt went to L1: the first cut (after <|im_start|>) is shared.
    assert_eq!(counts.hits[1] + counts.misses[1], 20);
    assert_eq!(counts.hits[0] + counts.misses[0], 0);
}

#[test]
fn marks_need_places_and_ids_to_agree() {
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let text = chatml(&[("user", "hi".into())]);
    let mut places = Vec::new();
    cuts.places(&text, &mut places);
    let keys: Vec<u64> = (0..places.len() as u64).collect();
    let ids = plain_ids(&tok, &text, false);
    let marks = marks(&cuts, &places, &keys, &ids);
    assert_eq!(marks.len(), 3);
    for m in &marks {
        assert_eq!(plain_ids(&tok, &text[..m.end], false), ids[..m.count]);
    }
    // An id of a cut token with no place (or a place with no id): no marks at all.
    let start_id = tok.token_to_id(START).unwrap();
    let extra: Vec<u32> = ids.iter().copied().chain([start_id]).collect();
    assert!(super::marks(&cuts, &places, &keys, &extra).is_empty());
    let last_start = ids.iter().rposition(|&id| id == start_id).unwrap();
    assert!(super::marks(&cuts, &places, &keys, &ids[..last_start]).is_empty());
}

#[test]
fn settings_are_shared_among_caches_and_zero_turns_a_layer_off() {
    let settings = CacheSettings {
        l0_max_entries: 10,
        l0_max_bytes: 3000,
        l1_max_bytes: 0,
    };
    let limits = settings.share(3);
    assert_eq!(
        limits,
        Limits {
            l0_entries: 3,
            l0_bytes: 1000,
            l1_bytes: 0,
        }
    );
    assert!(limits.l0() && !limits.l1());
    // Both off: the tokenizer is called as is.
    let tok = byte_level(&[], Value::Null);
    let cuts = Boundaries::of(&tok);
    let home = TestHome::new(Limits {
        l0_entries: 0,
        l0_bytes: 0,
        l1_bytes: 0,
    });
    let text = chatml(&[("user", "hi".into())]);
    cached(&home, &tok, &cuts, &text);
    assert_eq!(home.counts(), Counts::default());
}

#[test]
fn the_process_wide_entry_point_counts_in_the_process_counters() {
    let dir = std::env::temp_dir().join(format!("tollgate-encode-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    byte_level(&[], Value::Null)
        .save(dir.join("tokenizer.json"), false)
        .unwrap();
    let language = Language::load(&crate::chat::language::Sources {
        tokenizer: dir.clone(),
        chat_template: None,
    })
    .unwrap();
    let text = chatml(&[("user", "counted".into())]);
    let before = counts();
    let first = encode(&language, &text, false).unwrap();
    let second = on_pool(|| encode(&language, &text, false).unwrap());
    let third = encode(&language, &text, false).unwrap();
    assert_eq!(first, plain_ids(&language.tokenizer, &text, false));
    assert_eq!((&second, &third), (&first, &first));
    let after = counts();
    // Other tests may count meanwhile: at least this one's (the pool's cache and this
    // thread's are apart, so the pool's lookup missed; this thread's second one hit).
    assert!(after.hits[0] > before.hits[0]);
    assert!(after.misses[0] >= before.misses[0] + 2);
    assert!(after.reused_bytes[0] >= before.reused_bytes[0] + text.len() as u64);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same property with the real tokenizers `TOLLGATE_TOKENIZER_JSON_DIRS` names (a path
/// list of directories with a `tokenizer.json`; `tests/run.sh` passes SmolLM2's and
/// Qwen3's), on ChatML chats with thinking blocks.
#[test]
fn real_tokenizers_cached_ids_equal_the_tokenizers() {
    let Some(dirs) = std::env::var_os("TOLLGATE_TOKENIZER_JSON_DIRS") else {
        return;
    };
    for dir in std::env::split_paths(&dirs).filter(|d| !d.as_os_str().is_empty()) {
        let path = dir.join("tokenizer.json");
        let tok = Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cuts = Boundaries::of(&tok);
        let has_chatml = (0..)
            .map_while(|i| cuts.token(i))
            .any(|t| &*t.content == START);
        let home = TestHome::roomy();
        seed_this_thread(42);
        for _ in 0..40 {
            let mut turns: Vec<(&str, String)> = Vec::new();
            for _ in 0..1 + below(8) {
                let role = ["system", "user", "assistant", "tool"][below(4)];
                let mut said = content();
                if role == "assistant" && below(2) == 0 {
                    said = format!("<think>\n{said}\n</think>\n\n{}", content());
                }
                turns.push((role, said));
                let text = chatml(&turns);
                let ids = plain_ids(&tok, &text, false);
                assert_eq!(cached(&home, &tok, &cuts, &text), ids, "{}", path.display());
            }
        }
        if has_chatml {
            assert!(home.counts().hits[1] > 0, "{}", path.display());
        }
    }
}

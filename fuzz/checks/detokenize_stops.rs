//! Token ids through the incremental detokenizer and its text through the stop matcher,
//! over two small tokenizers built here (GPT-2 byte-level with characters split across
//! tokens; SentencePiece with byte fallback and a leading-space strip). Checks: the text
//! after every push is a prefix of `decode` of all the ids (nothing sent early, nothing to
//! retract) and the final text is that decode, on the table path (while byte-fallback
//! runs stay within `MAX_HELD_RUN`) and, for byte-level, on the window path (within
//! `MAX_WINDOW_IDS`); the stop matcher's output after every piece is exactly the text that
//! can no longer be part of a match, it stops exactly when the earliest match is settled,
//! and its final output and verdict are those of a whole-text search.
//!
//! Input layout: a flags byte (bit 0: SentencePiece tokenizer, bit 1: skip special
//! tokens, bit 2: visible stops, bits 3-4: how many stop strings), then each stop string
//! as a length byte (`% 6 + 1` characters) and one byte a character (an index into a small
//! alphabet of what the tokenizers produce), then the ids: a byte below 0xF0 is that id,
//! 0xF0 and up takes the next byte too (`0xF0 + next`, reaching past the vocabularies).

use std::sync::{Arc, OnceLock};

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::replace::Replace;
use tokenizers::{AddedToken, Tokenizer};
use tollgate::chat::detokenize::{
    byte_level_spelling, Detokenizer, TokenBytes, MAX_HELD_RUN, MAX_WINDOW_IDS,
};
use tollgate::chat::stops::{StopMatcher, Verdict};

const ALPHABET: [&str; 10] = ["a", "b", " ", "é", "中", "\u{FFFD}", "😀", "<", "s", "\n"];

struct Loaded {
    tokenizer: Arc<Tokenizer>,
    table: Arc<TokenBytes>,
}

fn load(tokenizer: Tokenizer) -> Loaded {
    let table = TokenBytes::new(&tokenizer);
    assert!(table.is_exact(), "{}", table.mode());
    Loaded {
        tokenizer: Arc::new(tokenizer),
        table: Arc::new(table),
    }
}

fn vocab(tokens: impl IntoIterator<Item = String>) -> Vocab {
    let mut vocab = Vocab::new();
    for token in tokens {
        let next = vocab.len() as u32;
        vocab.entry(token).or_insert(next);
    }
    vocab
}

fn byte_level() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let emoji = "😀".as_bytes();
        let zhong = "中".as_bytes();
        let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for word in [" a", "ab", " b", "é", "中", " 中", "\n\n", "<s"] {
            words.push(word.as_bytes().to_vec());
        }
        words.extend([
            emoji[..2].to_vec(),
            emoji[2..].to_vec(),
            zhong[..2].to_vec(),
            vec![0xA9, zhong[0]],
        ]);
        let model = BPE::builder()
            .vocab_and_merges(vocab(words.iter().map(|w| byte_level_spelling(w))), vec![])
            .build()
            .expect("byte-level model");
        let mut tokenizer = Tokenizer::new(model);
        tokenizer.with_decoder(Some(ByteLevel::default()));
        tokenizer.add_special_tokens(&[AddedToken::from("<|end|>", true)]);
        tokenizer.add_tokens(&[AddedToken::from("<a b>", false)]);
        load(tokenizer)
    })
}

fn sentencepiece() -> &'static Loaded {
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    LOADED.get_or_init(|| {
        let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
        tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
        tokens.extend(["▁", "▁a", "ab", "▁b", "é", "中", "▁▁", "a▁"].map(String::from));
        let model = BPE::builder()
            .vocab_and_merges(vocab(tokens), vec![])
            .unk_token("<unk>".to_string())
            .byte_fallback(true)
            .build()
            .expect("sentencepiece model");
        let mut tokenizer = Tokenizer::new(model);
        let replace = Replace::new("▁", " ").expect("replace");
        tokenizer.with_decoder(Some(Sequence::new(vec![
            replace.into(),
            ByteFallback::new().into(),
            Fuse::new().into(),
            Strip::new(' ', 1, 0).into(),
        ])));
        tokenizer.add_special_tokens(&[
            AddedToken::from("<s>", true),
            AddedToken::from("</s>", true),
        ]);
        load(tokenizer)
    })
}

/// The earliest match: smallest start, then shortest, then lowest index (empty stop
/// strings are ignored).
fn earliest(stops: &[String], text: &str) -> Option<(usize, usize, usize)> {
    stops
        .iter()
        .enumerate()
        .filter(|(_, stop)| !stop.is_empty())
        .filter_map(|(index, stop)| Some((text.find(stop.as_str())?, stop.len(), index)))
        .min()
}

/// Where the earliest complete or still open match starts.
fn earliest_possible(stops: &[String], text: &str) -> usize {
    (0..=text.len())
        .find(|&p| {
            let tail = &text.as_bytes()[p..];
            stops.iter().filter(|s| !s.is_empty()).any(|s| {
                let s = s.as_bytes();
                tail.starts_with(s) || (!tail.is_empty() && s.starts_with(tail))
            })
        })
        .unwrap_or(text.len())
}

/// The most byte-fallback tokens in a row among the ids `decode` keeps.
fn longest_byte_run(tokenizer: &Tokenizer, ids: &[u32], skip: bool) -> usize {
    let (mut run, mut longest) = (0, 0);
    for &id in ids {
        let Some(token) = tokenizer.id_to_token(id) else {
            continue;
        };
        if skip && tokenizer.get_added_vocabulary().is_special_token(&token) {
            continue;
        }
        if token.len() == 6 && token.starts_with("<0x") && token.ends_with('>') {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let loaded = if flags & 1 == 0 {
        byte_level()
    } else {
        sentencepiece()
    };
    let skip = flags & 2 != 0;
    let visible = flags & 4 != 0;
    let mut stops = Vec::new();
    for _ in 0..(flags >> 3) & 3 {
        let Some((&len, tail)) = rest.split_first() else {
            return;
        };
        let take = (usize::from(len) % 6 + 1).min(tail.len());
        let (chars, tail) = tail.split_at(take);
        stops.push(
            chars
                .iter()
                .map(|&c| ALPHABET[usize::from(c) % ALPHABET.len()])
                .collect::<String>(),
        );
        rest = tail;
    }
    let mut ids = Vec::new();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b < 0xF0 {
            ids.push(u32::from(b));
        } else if let Some((&next, tail)) = rest.split_first() {
            rest = tail;
            ids.push(0xF0 + u32::from(next));
        }
    }

    let all = loaded
        .tokenizer
        .decode(&ids, skip)
        .expect("decode of the built-in tokenizers");
    // Exact unless a byte-fallback run outgrows the bound on what is held.
    let exact = longest_byte_run(&loaded.tokenizer, &ids, skip) < MAX_HELD_RUN;
    let mut detokenizer = Detokenizer::new(loaded.table.clone(), loaded.tokenizer.clone(), skip);
    let mut text = String::new();
    let mut pieces = Vec::new();
    for &id in &ids {
        let before = text.len();
        detokenizer.push(id, &mut text);
        assert!(
            !exact || all.starts_with(&text),
            "{ids:?}: sent {text:?} of {all:?}"
        );
        pieces.push(text[before..].to_string());
    }
    let before = text.len();
    detokenizer.finish(&mut text);
    pieces.push(text[before..].to_string());
    assert!(!exact || text == all, "{ids:?}: {text:?} is not {all:?}");

    // The window is exact on byte-level vocabularies within its bound.
    if flags & 1 == 0 && ids.len() <= MAX_WINDOW_IDS {
        let mut windowed = Detokenizer::windowed(loaded.tokenizer.clone(), skip);
        let mut out = String::new();
        for &id in &ids {
            windowed.push(id, &mut out);
            assert!(
                all.starts_with(&out),
                "window {ids:?}: sent {out:?} of {all:?}"
            );
        }
        windowed.finish(&mut out);
        assert_eq!(out, all, "window {ids:?}");
    }

    let mut matcher = StopMatcher::new(&stops, visible).expect("within the bounds");
    let mut out = String::new();
    let mut seen = String::new();
    let last = pieces.len() - 1;
    let mut outcome = Verdict::Continue;
    for (i, piece) in pieces.iter().enumerate() {
        seen.push_str(piece);
        outcome = if i == last {
            let pushed = matcher.push(piece, &mut out);
            match pushed {
                Verdict::Continue => matcher.finish(&mut out),
                stopped => stopped,
            }
        } else {
            matcher.push(piece, &mut out)
        };
        if outcome != Verdict::Continue {
            break;
        }
        if i != last {
            let settled = earliest(&stops, &seen)
                .filter(|&(start, _, _)| earliest_possible(&stops, &seen) >= start);
            assert_eq!(settled, None, "{stops:?} {pieces:?}: settled at piece {i}");
            let safe = earliest_possible(&stops, &seen);
            assert_eq!(out, seen[..safe], "{stops:?} {pieces:?}: piece {i}");
        }
    }
    let (want, verdict) = match earliest(&stops, &text) {
        Some((start, len, stop_index)) => {
            let end = if visible { start + len } else { start };
            (&text[..end], Verdict::Stopped { stop_index })
        }
        None => (text.as_str(), Verdict::Continue),
    };
    assert_eq!(
        (out.as_str(), outcome),
        (want, verdict),
        "{stops:?} {pieces:?}"
    );
}

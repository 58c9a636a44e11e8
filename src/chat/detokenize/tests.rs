use std::path::PathBuf;
use std::time::Instant;

use tokenizers::decoders::bpe::BPEDecoder;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::metaspace::{Metaspace, PrependScheme};
use tokenizers::decoders::sequence::Sequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::models::unigram::Unigram;
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::replace::{Replace, ReplacePattern};
use tokenizers::AddedToken;

use super::*;

/// A small deterministic generator, so failures replay.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// GPT-2's byte-to-character map, written independently of the one under test.
fn gpt2_chars(bytes: &[u8]) -> String {
    let mut map = [' '; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        map[usize::from(b)] = if printable {
            char::from(b)
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap()
        };
    }
    bytes.iter().map(|&b| map[usize::from(b)]).collect()
}

fn vocab<S: AsRef<str>>(tokens: impl IntoIterator<Item = S>) -> Vocab {
    let mut seen = Vocab::new();
    for token in tokens {
        let next = seen.len() as u32;
        seen.entry(token.as_ref().to_string()).or_insert(next);
    }
    seen
}

/// A GPT-2 style tokenizer: the 256 byte tokens, words with a leading `Ġ`, and tokens that
/// end or start in the middle of a character (é, 中, 😀 split across tokens), plus special
/// and non-special added tokens.
fn byte_level() -> Tokenizer {
    let emoji = "😀".as_bytes();
    let zhong = "中".as_bytes();
    let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for word in [
        " the", " hello", "Hello", " world", ",", "\n\n", "é", "中", " 中", "ü",
    ] {
        words.push(word.as_bytes().to_vec());
    }
    words.extend([
        emoji[..2].to_vec(),
        emoji[2..].to_vec(),
        emoji[..3].to_vec(),
        zhong[..2].to_vec(),
        vec![b' ', zhong[0]],
        vec![0xA9, zhong[0]],
        vec![zhong[2], b'!'],
    ]);
    let vocab = vocab(words.iter().map(|w| gpt2_chars(w)));
    let model = BPE::builder()
        .vocab_and_merges(vocab, vec![])
        .build()
        .unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_pre_tokenizer(Some(ByteLevel::default()));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer.add_special_tokens(&[
        AddedToken::from("<|endoftext|>", true),
        AddedToken::from("<|im_start|>", true),
    ]);
    tokenizer.add_tokens(&[
        AddedToken::from("<extra tok>", false),
        AddedToken::from("<tool>", false),
    ]);
    tokenizer
}

/// The SentencePiece vocabulary of [`llama`] and [`gemma`]: specials, the 256 byte
/// tokens, pieces with `▁`, and names that only look like byte tokens.
fn sentencepiece_vocab() -> Vocab {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    tokens.extend(
        [
            "▁",
            "▁the",
            "▁hello",
            "▁world",
            "he",
            "llo",
            ",",
            "▁▁",
            "é",
            "中",
            "▁世界",
            "<0x4>",
            "<0xZZ>",
            "<0x+F>",
            "<0x0a>",
            " literal",
            "a▁b",
            "▁\n",
        ]
        .map(String::from),
    );
    vocab(tokens)
}

fn sentencepiece(steps: Vec<DecoderWrapper>) -> Tokenizer {
    let model = BPE::builder()
        .vocab_and_merges(sentencepiece_vocab(), vec![])
        .unk_token("<unk>".to_string())
        .byte_fallback(true)
        .build()
        .unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_decoder(Some(Sequence::new(steps)));
    tokenizer.add_special_tokens(&[
        AddedToken::from("<unk>", true),
        AddedToken::from("<s>", true),
        AddedToken::from("</s>", true),
    ]);
    tokenizer.add_tokens(&[AddedToken::from("<|tool|>", false)]);
    tokenizer
}

/// Llama 2 / Mistral: `Replace("▁", " ") · ByteFallback · Fuse · Strip(" ", 1, 0)`.
fn llama() -> Tokenizer {
    sentencepiece(vec![
        Replace::new("▁", " ").unwrap().into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
        Strip::new(' ', 1, 0).into(),
    ])
}

/// Gemma: the same without the strip.
fn gemma() -> Tokenizer {
    sentencepiece(vec![
        Replace::new("▁", " ").unwrap().into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])
}

/// A unigram model with a `Metaspace` decoder (T5 style).
fn metaspace(scheme: PrependScheme) -> Tokenizer {
    let pieces = [
        "<unk>", "<s>", "▁the", "▁", "a▁b", "▁▁x", "hello", "<0x41>", "▁中", "é", "x",
    ];
    let model = Unigram::from(
        pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.to_string(), -(i as f64)))
            .collect(),
        Some(0),
        false,
    )
    .unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_decoder(Some(Metaspace::new('▁', scheme, true)));
    tokenizer.add_special_tokens(&[AddedToken::from("<s>", true)]);
    tokenizer
}

/// BERT style: a decoder the table does not model.
fn wordpiece() -> Tokenizer {
    let tokens = [
        "[UNK]", "[CLS]", "[SEP]", "hello", "##ing", "do", "not", ".", "'", "s", "n't", "world",
        "##s", "play", ",", "?",
    ];
    let model = WordPiece::builder().vocab(vocab(tokens)).build().unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_decoder(Some(WordPieceDecoder::new("##".to_string(), true)));
    tokenizer.add_special_tokens(&[
        AddedToken::from("[CLS]", true),
        AddedToken::from("[SEP]", true),
    ]);
    tokenizer
}

/// Original BPE with end-of-word suffixes.
fn bpe_suffix() -> Tokenizer {
    let tokens = ["<unk>", "hel", "lo</w>", "world</w>", "a</w>", "b", "c</w>"];
    let model = BPE::builder()
        .vocab_and_merges(vocab(tokens), vec![])
        .build()
        .unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_decoder(Some(BPEDecoder::new("</w>".to_string())));
    tokenizer
}

/// No decoder: `decode` joins the tokens with spaces.
fn no_decoder() -> Tokenizer {
    let mut tokenizer = byte_level();
    tokenizer.with_decoder(None::<ByteLevel>);
    tokenizer
}

/// A regex `Replace`, which the table does not model.
fn regex_replace() -> Tokenizer {
    sentencepiece(vec![
        Replace::new(ReplacePattern::Regex("▁+".to_string()), " ")
            .unwrap()
            .into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])
}

fn id(tokenizer: &Tokenizer, token: &str) -> u32 {
    tokenizer
        .token_to_id(token)
        .unwrap_or_else(|| panic!("{token:?} in the vocabulary"))
}

fn byte_level_id(tokenizer: &Tokenizer, bytes: &[u8]) -> u32 {
    id(tokenizer, &gpt2_chars(bytes))
}

fn table_detokenizer(tokenizer: &Arc<Tokenizer>, skip: bool) -> Detokenizer {
    let table = Arc::new(TokenBytes::new(tokenizer));
    assert!(table.is_exact(), "{}", table.mode());
    Detokenizer::new(table, tokenizer.clone(), skip)
}

/// What a push-by-push run produced: the text after each push, and the final text.
fn run(detokenizer: &mut Detokenizer, ids: &[u32]) -> (Vec<String>, String) {
    let mut out = String::new();
    let mut steps = Vec::new();
    for &id in ids {
        detokenizer.push(id, &mut out);
        steps.push(out.clone());
    }
    detokenizer.finish(&mut out);
    (steps, out)
}

/// How eager a path must be, beyond never running ahead of `decode`.
#[derive(Clone, Copy, PartialEq)]
enum Eager {
    /// Only an unfinished character may be held (`decode` shows it as one U+FFFD).
    ByteLevel,
    /// Only an open byte-fallback run may be held.
    ByteFallback,
    /// Not checked (the window lags by design when the text ends in U+FFFD).
    Window,
}

/// Streams `ids`, checking that every intermediate text is a prefix of both the decode
/// of the ids so far and the decode of them all, that it holds no more than `eager`
/// allows, and that the final text is the decode of them all.
fn check_stream(
    tokenizer: &Tokenizer,
    detokenizer: &mut Detokenizer,
    ids: &[u32],
    skip: bool,
    eager: Eager,
) {
    let all = decode(tokenizer, ids, skip);
    let (steps, text) = run(detokenizer, ids);
    for (k, emitted) in steps.iter().enumerate() {
        let so_far = decode(tokenizer, &ids[..=k], skip);
        // The window only promises a prefix of the final text: a byte-fallback run's
        // decode can show U+FFFD for characters a later byte completes.
        let prefix_so_far = eager == Eager::Window || so_far.starts_with(emitted.as_str());
        assert!(
            prefix_so_far && all.starts_with(emitted.as_str()),
            "ids {ids:?} (skip {skip}): after {} pushes emitted {emitted:?}, decode {so_far:?}, all {all:?}",
            k + 1
        );
        let held = so_far.get(emitted.len()..).unwrap_or_default();
        let fine = match eager {
            Eager::ByteLevel => held.is_empty() || held == REPLACEMENT,
            Eager::ByteFallback => held.is_empty() || ends_in_byte_run(tokenizer, &ids[..=k], skip),
            Eager::Window => true,
        };
        assert!(fine, "ids {ids:?}: after {} pushes holds {held:?}", k + 1);
    }
    assert_eq!(text, all, "ids {ids:?} (skip {skip})");
}

/// `decode`, which some decoders cannot run on an empty token list.
fn decode(tokenizer: &Tokenizer, ids: &[u32], skip: bool) -> String {
    if visible(tokenizer, ids, skip).next().is_none() {
        return String::new();
    }
    tokenizer.decode(ids, skip).unwrap()
}

/// The tokens of `ids` that `decode` keeps.
fn visible<'a>(
    tokenizer: &'a Tokenizer,
    ids: &'a [u32],
    skip: bool,
) -> impl Iterator<Item = String> + 'a {
    ids.iter().filter_map(move |&id| {
        let token = tokenizer.id_to_token(id)?;
        let special = tokenizer.get_added_vocabulary().is_special_token(&token);
        (!(skip && special)).then_some(token)
    })
}

/// Whether the last id `decode` keeps is a byte-fallback token.
fn ends_in_byte_run(tokenizer: &Tokenizer, ids: &[u32], skip: bool) -> bool {
    visible(tokenizer, ids, skip)
        .last()
        .is_some_and(|token| fallback_byte(&token).is_some())
}

/// Random id sequences over the whole id space (and a few ids past it), half of the
/// picks from `favoured`.
fn random_ids(rng: &mut Rng, ids: usize, favoured: &[u32], max_len: usize) -> Vec<u32> {
    (0..rng.below(max_len) + 1)
        .map(|_| {
            if !favoured.is_empty() && rng.below(2) == 0 {
                favoured[rng.below(favoured.len())]
            } else {
                rng.below(ids + 3) as u32
            }
        })
        .collect()
}

/// The ids whose entries need more than an append (or that are special).
fn favoured(table: &TokenBytes) -> Vec<u32> {
    (0..table.entries.len() as u32)
        .filter(|&id| {
            let entry = &table.entries[id as usize];
            entry.kind != Kind::Text || entry.special || table.starts_with_lead(entry)
        })
        .collect()
}

fn id_space(tokenizer: &Tokenizer) -> usize {
    tokenizer.get_vocab(true).into_values().max().unwrap() as usize + 1
}

fn property(tokenizer: Tokenizer, eager: Eager, rounds: usize, seed: u64) {
    let tokenizer = Arc::new(tokenizer);
    let table = Arc::new(TokenBytes::new(&tokenizer));
    assert!(table.is_exact(), "{}", table.mode());
    let favoured = favoured(&table);
    let ids = id_space(&tokenizer);
    let mut rng = Rng(seed);
    for round in 0..rounds {
        let sequence = random_ids(&mut rng, ids, &favoured, 40);
        let skip = round % 2 == 1;
        let mut detokenizer = Detokenizer::new(table.clone(), tokenizer.clone(), skip);
        check_stream(&tokenizer, &mut detokenizer, &sequence, skip, eager);
    }
}

#[test]
fn families_are_recognised() {
    let exact = |t: Tokenizer| TokenBytes::new(&t).mode().clone();
    assert_eq!(exact(byte_level()), TableMode::Exact(Family::ByteLevel));
    assert_eq!(exact(llama()), TableMode::Exact(Family::ByteFallback));
    assert_eq!(exact(gemma()), TableMode::Exact(Family::ByteFallback));
    for scheme in [
        PrependScheme::First,
        PrependScheme::Always,
        PrependScheme::Never,
    ] {
        assert_eq!(
            exact(metaspace(scheme)),
            TableMode::Exact(Family::Metaspace)
        );
    }
    assert_eq!(
        exact(wordpiece()),
        TableMode::Windowed(Inexact::Decoder("WordPiece".to_string()))
    );
    assert_eq!(
        exact(bpe_suffix()),
        TableMode::Windowed(Inexact::Decoder("BPEDecoder".to_string()))
    );
    assert_eq!(
        exact(regex_replace()),
        TableMode::Windowed(Inexact::Decoder("Replace".to_string()))
    );
    assert_eq!(exact(no_decoder()), TableMode::Windowed(Inexact::NoDecoder));
}

#[test]
fn a_table_that_disagrees_is_not_used() {
    let tokenizer = byte_level();
    let mut table = TokenBytes::new(&tokenizer);
    let the = id(&tokenizer, "Ġthe") as usize;
    table.entries[the] = table.entries[id(&tokenizer, "Ġhello") as usize];
    assert_eq!(table.check(&tokenizer), Err(vec![the as u32]));
}

#[test]
fn a_split_character_waits_for_its_last_byte() {
    let tokenizer = Arc::new(byte_level());
    let emoji = "😀".as_bytes();
    let mut detokenizer = table_detokenizer(&tokenizer, false);
    let mut out = String::new();
    detokenizer.push(id(&tokenizer, "Hello"), &mut out);
    detokenizer.push(byte_level_id(&tokenizer, &emoji[..3]), &mut out);
    assert_eq!(out, "Hello");
    detokenizer.push(byte_level_id(&tokenizer, &emoji[3..]), &mut out);
    assert_eq!(out, "Hello😀");
    // Cut after two bytes this time, then an invalid continuation: one U+FFFD, as decode.
    detokenizer.push(byte_level_id(&tokenizer, &emoji[..2]), &mut out);
    assert_eq!(out, "Hello😀");
    detokenizer.push(id(&tokenizer, "Ġthe"), &mut out);
    assert_eq!(out, "Hello😀\u{FFFD} the");
    // An unfinished character at the end is flushed as decode shows it.
    detokenizer.push(
        byte_level_id(&tokenizer, &[b' ', "中".as_bytes()[0]]),
        &mut out,
    );
    assert_eq!(out, "Hello😀\u{FFFD} the ");
    detokenizer.finish(&mut out);
    assert_eq!(out, "Hello😀\u{FFFD} the \u{FFFD}");
}

#[test]
fn special_tokens_are_kept_or_skipped() {
    let tokenizer = Arc::new(byte_level());
    let ids = [
        id(&tokenizer, "<|im_start|>"),
        id(&tokenizer, "Hello"),
        id(&tokenizer, "<extra tok>"),
        id(&tokenizer, "<|endoftext|>"),
    ];
    let (_, kept) = run(&mut table_detokenizer(&tokenizer, false), &ids);
    assert_eq!(kept, "<|im_start|>Hello<extra tok><|endoftext|>");
    let (_, skipped) = run(&mut table_detokenizer(&tokenizer, true), &ids);
    assert_eq!(skipped, "Hello<extra tok>");
}

#[test]
fn unknown_ids_are_nothing() {
    let tokenizer = Arc::new(llama());
    let run_ids = [
        id(&tokenizer, "<0xE4>"),
        u32::MAX,
        id(&tokenizer, "<0xB8>"),
        9_999_999,
        id(&tokenizer, "<0xAD>"),
    ];
    let (_, text) = run(&mut table_detokenizer(&tokenizer, false), &run_ids);
    assert_eq!(text, "中");
    assert_eq!(text, tokenizer.decode(&run_ids, false).unwrap());
    let (_, text) = run(
        &mut Detokenizer::windowed(tokenizer.clone(), false),
        &run_ids,
    );
    assert_eq!(text, "中");
}

#[test]
fn byte_fallback_runs_wait_until_they_end_or_fail() {
    let tokenizer = Arc::new(llama());
    let byte = |b: u8| id(&tokenizer, &format!("<0x{b:02X}>"));
    let mut detokenizer = table_detokenizer(&tokenizer, true);
    let mut out = String::new();
    detokenizer.push(id(&tokenizer, "<s>"), &mut out);
    detokenizer.push(id(&tokenizer, "▁hello"), &mut out);
    assert_eq!(out, "hello", "the leading space is stripped");
    for b in "中".bytes() {
        detokenizer.push(byte(b), &mut out);
    }
    assert_eq!(out, "hello", "a valid run may still turn invalid");
    detokenizer.push(id(&tokenizer, "▁world"), &mut out);
    assert_eq!(out, "hello中 world");
    detokenizer.push(byte(0xE4), &mut out);
    detokenizer.push(byte(b'A'), &mut out);
    assert_eq!(
        out, "hello中 world\u{FFFD}\u{FFFD}",
        "an invalid run is final"
    );
    detokenizer.push(byte(b'B'), &mut out);
    assert_eq!(out, "hello中 world\u{FFFD}\u{FFFD}\u{FFFD}");
    detokenizer.finish(&mut out);
    assert_eq!(out, "hello中 world\u{FFFD}\u{FFFD}\u{FFFD}");
}

#[test]
fn long_valid_runs_are_sent_past_the_bound() {
    let tokenizer = Arc::new(llama());
    let a = id(&tokenizer, "<0x41>");
    let zhong: Vec<u32> = "中"
        .bytes()
        .map(|b| id(&tokenizer, &format!("<0x{b:02X}>")))
        .collect();
    let mut ids = vec![a; MAX_HELD_RUN - 1];
    ids.extend(&zhong);
    ids.extend(&zhong);
    let (steps, text) = run(&mut table_detokenizer(&tokenizer, false), &ids);
    assert_eq!(text, tokenizer.decode(&ids, false).unwrap());
    let a_run = "A".repeat(MAX_HELD_RUN - 1);
    assert_eq!(steps[MAX_HELD_RUN - 2], "", "held below the bound");
    assert_eq!(
        steps[MAX_HELD_RUN - 1],
        a_run,
        "complete characters sent at it"
    );
    assert_eq!(steps.last().unwrap(), &a_run, "the run goes on being held");
    assert_eq!(text, format!("{a_run}中中"));
}

#[test]
fn strip_takes_only_the_text_s_first_space() {
    let tokenizer = Arc::new(llama());
    for (tokens, skip) in [
        (vec!["<s>", "▁▁", "▁the"], true),
        (vec!["<s>", "▁▁", "▁the"], false),
        (vec![" literal", "▁the"], false),
        (vec!["<0x20>", "▁the"], false),
        (vec!["<0x20>", "<0x20>", "he"], false),
        (vec!["▁", "▁the"], false),
        (vec!["<|tool|>", "▁the"], false),
    ] {
        let ids: Vec<u32> = tokens.iter().map(|t| id(&tokenizer, t)).collect();
        let (_, text) = run(&mut table_detokenizer(&tokenizer, skip), &ids);
        assert_eq!(text, tokenizer.decode(&ids, skip).unwrap(), "{tokens:?}");
    }
}

#[test]
fn metaspace_drops_the_first_token_s_marks() {
    for scheme in [
        PrependScheme::First,
        PrependScheme::Always,
        PrependScheme::Never,
    ] {
        let tokenizer = Arc::new(metaspace(scheme));
        for (tokens, skip) in [
            (vec!["a▁b", "a▁b"], false),
            (vec!["<s>", "▁▁x", "▁the"], true),
            (vec!["<s>", "▁▁x", "▁the"], false),
            (vec!["▁", "▁中"], false),
        ] {
            let ids: Vec<u32> = tokens.iter().map(|t| id(&tokenizer, t)).collect();
            let (_, text) = run(&mut table_detokenizer(&tokenizer, skip), &ids);
            assert_eq!(
                text,
                tokenizer.decode(&ids, skip).unwrap(),
                "{scheme:?} {tokens:?}"
            );
        }
    }
}

#[test]
fn byte_level_streams_match_decode() {
    property(byte_level(), Eager::ByteLevel, 3000, 1);
}

#[test]
fn llama_streams_match_decode() {
    property(llama(), Eager::ByteFallback, 3000, 2);
}

#[test]
fn gemma_streams_match_decode() {
    property(gemma(), Eager::ByteFallback, 2000, 3);
}

#[test]
fn metaspace_streams_match_decode() {
    for (seed, scheme) in [
        PrependScheme::First,
        PrependScheme::Always,
        PrependScheme::Never,
    ]
    .into_iter()
    .enumerate()
    {
        property(
            metaspace(scheme),
            Eager::ByteFallback,
            1000,
            4 + seed as u64,
        );
    }
}

/// The window on tokenizers whose decoders only look at near context: exact on any ids.
#[test]
fn windowed_streams_match_decode() {
    for (seed, tokenizer) in [
        byte_level(),
        wordpiece(),
        bpe_suffix(),
        no_decoder(),
        llama(),
    ]
    .into_iter()
    .enumerate()
    {
        let tokenizer = Arc::new(tokenizer);
        let ids = id_space(&tokenizer);
        let mut rng = Rng(10 + seed as u64);
        for round in 0..600 {
            // Byte-fallback runs are kept valid: an invalid run rewrites its start, which
            // only the table follows.
            let sequence: Vec<u32> = random_ids(&mut rng, ids, &[], 30)
                .into_iter()
                .filter(|&id| {
                    tokenizer
                        .id_to_token(id)
                        .is_none_or(|t| fallback_byte(&t).is_none())
                })
                .collect();
            let skip = round % 2 == 0;
            let mut detokenizer = Detokenizer::windowed(tokenizer.clone(), skip);
            check_stream(&tokenizer, &mut detokenizer, &sequence, skip, Eager::Window);
        }
    }
}

#[test]
fn windowed_path_follows_unmodelled_decoders() {
    let tokenizer = Arc::new(wordpiece());
    let table = Arc::new(TokenBytes::new(&tokenizer));
    let encoding = tokenizer.encode("hello world, do not play.", true).unwrap();
    for skip in [false, true] {
        let mut detokenizer = Detokenizer::new(table.clone(), tokenizer.clone(), skip);
        check_stream(
            &tokenizer,
            &mut detokenizer,
            encoding.get_ids(),
            skip,
            Eager::Window,
        );
    }
    let tokenizer = Arc::new(regex_replace());
    let encoding = tokenizer.encode("▁the▁▁hello 中文 ü", false).unwrap();
    let mut detokenizer = Detokenizer::new(
        Arc::new(TokenBytes::new(&tokenizer)),
        tokenizer.clone(),
        false,
    );
    check_stream(
        &tokenizer,
        &mut detokenizer,
        encoding.get_ids(),
        false,
        Eager::Window,
    );
}

#[test]
fn the_window_does_not_wait_forever() {
    let tokenizer = Arc::new(byte_level());
    let bad = byte_level_id(&tokenizer, &[0xFF]);
    let mut detokenizer = Detokenizer::windowed(tokenizer.clone(), false);
    let mut out = String::new();
    for _ in 0..100 {
        detokenizer.push(bad, &mut out);
    }
    assert_eq!(out, REPLACEMENT.repeat(99), "all but the last U+FFFD");
    detokenizer.finish(&mut out);
    assert_eq!(out, REPLACEMENT.repeat(100));
    // Past the bound the window starts afresh: a long run ending in an unfinished
    // character then loses that character.
    let lead = byte_level_id(&tokenizer, &[0xC8]);
    let mut ids = vec![lead; MAX_WINDOW_IDS + 1];
    ids.push(byte_level_id(&tokenizer, &[0xB8]));
    let mut detokenizer = Detokenizer::windowed(tokenizer.clone(), false);
    let (steps, text) = run(&mut detokenizer, &ids);
    assert_eq!(
        steps[MAX_WINDOW_IDS],
        REPLACEMENT.repeat(MAX_WINDOW_IDS + 1)
    );
    assert_eq!(text, REPLACEMENT.repeat(MAX_WINDOW_IDS + 1));
    assert!(decode(&tokenizer, &ids, false).ends_with("\u{FFFD}ȸ"));
}

/// A long run of U+FFFD whose last one turns into a character (found by fuzzing).
#[test]
fn the_window_keeps_the_last_replacement_open() {
    let tokenizer = Arc::new(byte_level());
    let lead = byte_level_id(&tokenizer, &[0xC8]);
    let mut ids = vec![lead; MAX_WINDOW_IDS - 1];
    ids.extend([
        byte_level_id(&tokenizer, &[0xB8]),
        byte_level_id(&tokenizer, &[0xAD]),
    ]);
    let mut detokenizer = Detokenizer::windowed(tokenizer.clone(), false);
    check_stream(&tokenizer, &mut detokenizer, &ids, false, Eager::Window);
}

/// Text a model might write: words, punctuation, accents, CJK, emoji (some with
/// modifiers), code and blank lines.
const SAMPLE: &str = "Hello, world! Héllo wörld — naïve café.\n\n\
    中文文本，日本語のテキスト、한국어 텍스트.\n\
    Emoji: 😀🎉👍🏽👨‍👩‍👧 and symbols ∑∫√ ≠ ≤.\n\
    ```rust\nfn main() { println!(\"{}\", 42); }\n```\n\
    <|im_start|>assistant\nSure: 1. first 2. second\t\ttabs   spaces";

/// `tokenizer.json` files named by `TOLLGATE_TOKENIZER_JSON_DIRS` (a path list of
/// directories), so real vocabularies are checked where they are at hand.
fn real_tokenizers() -> Vec<(PathBuf, Tokenizer)> {
    let Some(dirs) = std::env::var_os("TOLLGATE_TOKENIZER_JSON_DIRS") else {
        return Vec::new();
    };
    std::env::split_paths(&dirs)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| {
            let path = dir.join("tokenizer.json");
            let tokenizer =
                Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, tokenizer)
        })
        .collect()
}

#[test]
fn real_tokenizers_stream_like_decode() {
    for (path, tokenizer) in real_tokenizers() {
        let tokenizer = Arc::new(tokenizer);
        let started = Instant::now();
        let table = Arc::new(TokenBytes::new(&tokenizer));
        eprintln!(
            "{}: {} ({:?} to build and check)",
            path.display(),
            table.mode(),
            started.elapsed()
        );
        let byte_level = matches!(tokenizer.get_decoder(), Some(DecoderWrapper::ByteLevel(_)));
        assert!(table.is_exact() || !byte_level, "{}", table.mode());
        let eager = match table.mode() {
            TableMode::Exact(Family::ByteLevel) => Eager::ByteLevel,
            TableMode::Exact(_) => Eager::ByteFallback,
            TableMode::Windowed(_) => Eager::Window,
        };
        let sample = tokenizer.encode(SAMPLE, false).unwrap();
        for skip in [false, true] {
            let mut detokenizer = Detokenizer::new(table.clone(), tokenizer.clone(), skip);
            check_stream(&tokenizer, &mut detokenizer, sample.get_ids(), skip, eager);
            let mut windowed = Detokenizer::windowed(tokenizer.clone(), skip);
            check_stream(
                &tokenizer,
                &mut windowed,
                sample.get_ids(),
                skip,
                Eager::Window,
            );
        }
        let favoured = if table.is_exact() {
            favoured(&table)
        } else {
            Vec::new()
        };
        let ids = id_space(&tokenizer);
        let mut rng = Rng(99);
        for round in 0..400 {
            let sequence = random_ids(&mut rng, ids, &favoured, 48);
            let skip = round % 2 == 0;
            let mut detokenizer = Detokenizer::new(table.clone(), tokenizer.clone(), skip);
            check_stream(&tokenizer, &mut detokenizer, &sequence, skip, eager);
        }
    }
}

#[test]
fn token_bytes_are_each_tokens_own_bytes() {
    let tokenizer = byte_level();
    let table = TokenBytes::new(&tokenizer);
    assert!(table.is_exact(), "{}", table.mode());
    // The first byte of "é" alone: part of a character, reported as it is.
    let e_lead = byte_level_id(&tokenizer, &[0xC3]);
    assert_eq!(table.token_bytes(e_lead), Some(&[0xC3u8][..]));
    let space = byte_level_id(&tokenizer, b" ");
    assert_eq!(table.token_bytes(space), Some(&b" "[..]));
    assert_eq!(table.token_bytes(u32::MAX), None);

    let llama = llama();
    let table = TokenBytes::new(&llama);
    assert!(table.is_exact(), "{}", table.mode());
    assert_eq!(table.token_bytes(id(&llama, "<0xE4>")), Some(&[0xE4u8][..]));

    let windowed = TokenBytes::new(&wordpiece());
    assert!(!windowed.is_exact());
    assert_eq!(windowed.token_bytes(0), None);
}

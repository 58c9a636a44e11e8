//! Per-token cost of incremental detokenization (`tollgate::chat::detokenize`), alone and
//! followed by stop-string matching (`tollgate::chat::stops`), against the windowed
//! fallback. The vocabulary is a synthetic GPT-2 style one of 50,000 tokens (words with a
//! leading space, capitals, digits, punctuation, CJK, and emoji split across two tokens);
//! each `tokenizer.json` in the directories of `TOLLGATE_TOKENIZER_JSON_DIRS` (a path
//! list) is measured too, on a multilingual sample text. One iteration is a whole
//! generation of 4,096 tokens (new detokenizer, pushes, finish); throughput is in tokens,
//! so ns/token = 10⁹ / (elements/s).
//!
//! The stop variants: four stop strings that rarely start in the text (the common case),
//! and three that start with a space, so almost every token opens a partial match.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::{AddedToken, Tokenizer};
use tollgate::chat::detokenize::{byte_level_spelling, Detokenizer, TokenBytes};
use tollgate::chat::stops::StopMatcher;

const TOKENS: usize = 4096;
const VOCAB: usize = 50_000;

const RARE_STOPS: [&str; 4] = ["\n\nUser:", "</answer>", "###", "<|stop|>"];
const OPEN_STOPS: [&str; 3] = [" zzz", " q!", " the end."];

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The synthetic tokenizer and a 4,096-token generation over it.
fn synthetic() -> (Tokenizer, Vec<u32>) {
    let mut rng = Rng(0x00de_7011);
    let mut words: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let emoji: Vec<String> = ('\u{1F600}'..='\u{1F63F}').map(String::from).collect();
    let mut pairs = Vec::new();
    for e in &emoji {
        let bytes = e.as_bytes();
        pairs.push((words.len(), words.len() + 1));
        words.push(bytes[..2].to_vec());
        words.push(bytes[2..].to_vec());
    }
    let full = words.len();
    let letters = b"etaoinshrdlcumwfgypbvkjxqz";
    let cjk: Vec<char> = ('\u{4E00}'..='\u{4FFF}').collect();
    let mut seen = std::collections::HashSet::new();
    while words.len() < VOCAB {
        let word: String = match rng.below(20) {
            0..=13 => {
                let len = 2 + rng.below(8);
                let mut w = String::from(if rng.below(4) == 0 { "" } else { " " });
                w.extend((0..len).map(|_| char::from(letters[rng.below(letters.len())])));
                if rng.below(10) == 0 {
                    w = w.to_uppercase();
                }
                w
            }
            14 => format!(" {}", rng.below(100_000)),
            15 | 16 => [",", ".", "\n", "\n\n", ":", ");", " (", "\"", " -", "!"][rng.below(10)]
                .repeat(1 + rng.below(2)),
            _ => (0..1 + rng.below(2))
                .map(|_| cjk[rng.below(cjk.len())])
                .collect(),
        };
        if seen.insert(word.clone()) {
            words.push(word.into_bytes());
        }
    }
    let mut vocab = Vocab::new();
    for (id, word) in words.iter().enumerate() {
        vocab.insert(byte_level_spelling(word), id as u32);
    }
    let model = BPE::builder()
        .vocab_and_merges(vocab, vec![])
        .build()
        .unwrap();
    let mut tokenizer = Tokenizer::new(model);
    tokenizer.with_decoder(Some(ByteLevel::default()));
    tokenizer.add_special_tokens(&[AddedToken::from("<|endoftext|>", true)]);
    let mut ids = Vec::with_capacity(TOKENS);
    while ids.len() < TOKENS {
        if rng.below(25) == 0 {
            let (head, tail) = pairs[rng.below(pairs.len())];
            ids.extend([head as u32, tail as u32]);
        } else {
            ids.push((full + rng.below(VOCAB - full)) as u32);
        }
    }
    ids.truncate(TOKENS);
    (tokenizer, ids)
}

const SAMPLE: &str = "The gateway streams tokens as the engine produces them. \
    Héllo wörld — naïve café, 中文文本，日本語のテキスト、한국어 텍스트. \
    Emoji: 😀🎉👍🏽👨‍👩‍👧 and maths ∑∫√ ≠ ≤.\n\n```rust\nfn main() { println!(\"{}\", 42); }\n```\n";

/// Each `tokenizer.json` named by `TOLLGATE_TOKENIZER_JSON_DIRS`, with a generation made
/// of the sample text's ids.
fn real() -> Vec<(String, Tokenizer, Vec<u32>)> {
    let Some(dirs) = std::env::var_os("TOLLGATE_TOKENIZER_JSON_DIRS") else {
        return Vec::new();
    };
    std::env::split_paths(&dirs)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| {
            let tokenizer = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
            let sample = tokenizer.encode(SAMPLE, false).unwrap();
            let ids: Vec<u32> = sample
                .get_ids()
                .iter()
                .copied()
                .cycle()
                .take(TOKENS)
                .collect();
            // The directory and its parent (`…/Qwen3-0.6B/models` → `Qwen3-0.6B-models`).
            let mut parts: Vec<String> = dir
                .components()
                .rev()
                .take(2)
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect();
            parts.reverse();
            let name = parts.join("-");
            (name, tokenizer, ids)
        })
        .collect()
}

/// One generation; with `stops`, the detokenized pieces go through a stop matcher.
fn generate(
    make: &dyn Fn() -> Detokenizer,
    ids: &[u32],
    stops: Option<&[String]>,
    piece: &mut String,
    out: &mut String,
) -> usize {
    out.clear();
    let mut detokenizer = make();
    match stops {
        None => {
            for &id in ids {
                detokenizer.push(id, out);
            }
            detokenizer.finish(out);
        }
        Some(stops) => {
            let mut matcher = StopMatcher::new(stops, false).unwrap();
            for &id in ids {
                piece.clear();
                detokenizer.push(id, piece);
                matcher.push(piece, out);
            }
            piece.clear();
            detokenizer.finish(piece);
            matcher.push(piece, out);
            matcher.finish(out);
        }
    }
    out.len()
}

fn bench(c: &mut Criterion) {
    let mut cases = vec![{
        let (tokenizer, ids) = synthetic();
        ("synthetic_50k".to_string(), tokenizer, ids)
    }];
    cases.extend(real());
    let rare: Vec<String> = RARE_STOPS.map(String::from).to_vec();
    let open: Vec<String> = OPEN_STOPS.map(String::from).to_vec();

    let mut group = c.benchmark_group("detokenize");
    group.throughput(Throughput::Elements(TOKENS as u64));
    for (name, tokenizer, ids) in cases {
        let tokenizer = Arc::new(tokenizer);
        let table = Arc::new(TokenBytes::new(&tokenizer));
        assert!(table.is_exact(), "{name}: {}", table.mode());
        let exact = || Detokenizer::new(table.clone(), tokenizer.clone(), true);
        let windowed = || Detokenizer::windowed(tokenizer.clone(), true);
        let mut piece = String::new();
        let mut out = String::with_capacity(TOKENS * 8);
        for (variant, make, stops) in [
            ("table", &exact as &dyn Fn() -> Detokenizer, None),
            ("table+rare_stops", &exact, Some(rare.as_slice())),
            ("table+open_stops", &exact, Some(open.as_slice())),
            ("windowed", &windowed, None),
        ] {
            group.bench_function(format!("{name}/{variant}"), |b| {
                b.iter(|| generate(make, black_box(&ids), stops, &mut piece, &mut out))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

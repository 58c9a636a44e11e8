//! The ways of cutting a model's output that every parser's property tests run: a parser
//! fed any of them must give what it gives fed the whole text.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// `text` cut at the given byte offsets (each on a character boundary, ascending).
fn cut_at<'t>(text: &'t str, cuts: &[usize]) -> Vec<&'t str> {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for &at in cuts {
        if at > from && at < text.len() {
            pieces.push(&text[from..at]);
            from = at;
        }
    }
    pieces.push(&text[from..]);
    pieces
}

/// Every cutting the tests run: one character at a time, every two-way split, `random`
/// random cuttings (seeded by `seed`, pieces of 1 to 8 characters and bursts of up to 64,
/// as speculative decoding sends), and empty pieces between characters.
pub fn cuttings(text: &str, random: usize, seed: u64) -> Vec<Vec<&str>> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(at, _)| at)
        .filter(|&at| at > 0)
        .collect();
    let mut all = vec![cut_at(text, &bounds)];
    all.extend(bounds.iter().map(|&at| cut_at(text, &[at])));
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..random {
        let mut cuts = Vec::new();
        let mut i = 0;
        loop {
            let step = if rng.gen_bool(0.2) {
                rng.gen_range(8..=64)
            } else {
                rng.gen_range(1..=8)
            };
            i += step;
            match bounds.get(i) {
                Some(&at) => cuts.push(at),
                None => break,
            }
        }
        all.push(cut_at(text, &cuts));
    }
    let mut with_empty: Vec<&str> = Vec::new();
    for piece in cut_at(text, &bounds) {
        with_empty.push(piece);
        with_empty.push("");
    }
    all.push(with_empty);
    all
}

//! Per-code-point Unicode class bits (letters and their subcategories, marks, numbers,
//! punctuation, symbols, `\s`), taken from `regex-syntax`'s own tables: the Hugging Face
//! pre-tokenizers match with `fancy-regex`, which hands these classes to the `regex` crate,
//! so reading the same tables is what makes the hand-written scanners agree with them.

use std::sync::OnceLock;

use regex_syntax::hir::{Class, HirKind};

pub const L: u16 = 1 << 0;
pub const LU: u16 = 1 << 1;
pub const LT: u16 = 1 << 2;
pub const LM: u16 = 1 << 3;
pub const LO: u16 = 1 << 4;
pub const LL: u16 = 1 << 5;
pub const M: u16 = 1 << 6;
pub const N: u16 = 1 << 7;
pub const P: u16 = 1 << 8;
pub const S: u16 = 1 << 9;
/// `\s`: Unicode White_Space.
pub const WS: u16 = 1 << 10;

/// The classes the table holds, as `regex-syntax` spells them.
const CLASSES: [(&str, u16); 11] = [
    (r"\p{L}", L),
    (r"\p{Lu}", LU),
    (r"\p{Lt}", LT),
    (r"\p{Lm}", LM),
    (r"\p{Lo}", LO),
    (r"\p{Ll}", LL),
    (r"\p{M}", M),
    (r"\p{N}", N),
    (r"\p{P}", P),
    (r"\p{S}", S),
    (r"\s", WS),
];

const BMP: usize = 0x1_0000;
const END: usize = 0x11_0000;

/// The bits of every code point: a flat table for the Basic Multilingual Plane (where
/// nearly all text lives) and sorted runs above it.
pub struct Classes {
    bmp: Vec<u16>,
    /// `(first code point, bits)` of each run of equal bits from U+10000 on.
    astral: Vec<(u32, u16)>,
}

impl Classes {
    /// The class bits of code point `c` (0 for anything past U+10FFFF).
    #[inline]
    pub fn of(&self, c: u32) -> u16 {
        if let Some(bits) = self.bmp.get(c as usize) {
            return *bits;
        }
        let at = self.astral.partition_point(|(start, _)| *start <= c);
        match at.checked_sub(1).and_then(|i| self.astral.get(i)) {
            Some((_, bits)) if (c as usize) < END => *bits,
            _ => 0,
        }
    }
}

/// The process's table, built on first use (a few milliseconds).
pub fn classes() -> &'static Classes {
    static TABLE: OnceLock<Classes> = OnceLock::new();
    TABLE.get_or_init(build)
}

fn build() -> Classes {
    let mut all = vec![0u16; END];
    for (pattern, bit) in CLASSES {
        for (start, end) in ranges(pattern) {
            for slot in all.iter_mut().take(end + 1).skip(start) {
                *slot |= bit;
            }
        }
    }
    let mut astral: Vec<(u32, u16)> = Vec::new();
    for (c, bits) in all.iter().enumerate().skip(BMP) {
        if astral.last().is_none_or(|(_, last)| last != bits) {
            astral.push((c as u32, *bits));
        }
    }
    all.truncate(BMP);
    Classes { bmp: all, astral }
}

/// The inclusive code point ranges of a one-class pattern (empty if it does not parse as
/// one Unicode class, which the load-time self-test would then catch).
fn ranges(pattern: &str) -> Vec<(usize, usize)> {
    let Ok(hir) = regex_syntax::Parser::new().parse(pattern) else {
        return Vec::new();
    };
    match hir.kind() {
        HirKind::Class(Class::Unicode(class)) => class
            .ranges()
            .iter()
            .map(|r| (r.start() as usize, r.end() as usize))
            .collect(),
        _ => Vec::new(),
    }
}

//! Hand-written pre-tokenizers: one scanner per known split pattern, each reproducing the
//! regex's leftmost-first alternation with greedy quantifiers and backtracking, so that the
//! pieces are exactly those `fancy-regex` finds, in one forward pass without a regex engine.

use super::classes::{self, Classes, L, LL, LM, LO, LT, LU, M, N, P, S, WS};

/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`: the o200k and Tekken "upper" run class.
const UPPER: u16 = LU | LT | LM | LO | M;
/// `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`: the o200k and Tekken "lower" run class.
const LOWER: u16 = LL | LM | LO | M;

/// A split pattern the fast path knows, by the exact regex string it stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// GPT-2's, the `ByteLevel` pre-tokenizer's built-in one.
    Gpt2,
    /// cl100k's (Llama 3: numbers in groups of up to 3; Qwen 2/3: single digits).
    Cl100k { digits: usize },
    /// o200k's (GPT-OSS, GPT-4o: contractions, groups of 3) and Mistral Tekken's (neither).
    O200k { contractions: bool, digits: usize },
    /// DeepSeek V3's first split: `\p{N}{1,3}`.
    Numbers3,
    /// DeepSeek V3's second split: runs of CJK ideographs and kana.
    CjkRuns,
    /// DeepSeek V3's third split.
    DeepSeek,
}

/// The exact regex strings of the known patterns, as `tokenizer.json` files write them.
pub const GPT2: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
pub const CL100K_3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
pub const CL100K_1: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
pub const O200K: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
pub const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
pub const NUMBERS3: &str = r"\p{N}{1,3}";
pub const CJK_RUNS: &str = "[\u{4e00}-\u{9fa5}\u{3040}-\u{309f}\u{30a0}-\u{30ff}]+";
pub const DEEPSEEK: &str = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

impl Pattern {
    /// The pattern whose regex is exactly `regex`, if the fast path knows it.
    pub fn known(regex: &str) -> Option<Pattern> {
        Some(match regex {
            CL100K_3 => Pattern::Cl100k { digits: 3 },
            CL100K_1 => Pattern::Cl100k { digits: 1 },
            O200K => Pattern::O200k {
                contractions: true,
                digits: 3,
            },
            TEKKEN => Pattern::O200k {
                contractions: false,
                digits: 1,
            },
            NUMBERS3 => Pattern::Numbers3,
            CJK_RUNS => Pattern::CjkRuns,
            DEEPSEEK => Pattern::DeepSeek,
            GPT2 => Pattern::Gpt2,
            _ => return None,
        })
    }

    /// The pattern's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Gpt2 => "gpt2",
            Pattern::Cl100k { digits: 1 } => "qwen2",
            Pattern::Cl100k { .. } => "cl100k",
            Pattern::O200k {
                contractions: true, ..
            } => "o200k",
            Pattern::O200k { .. } => "tekken",
            Pattern::Numbers3 => "numbers",
            Pattern::CjkRuns => "cjk",
            Pattern::DeepSeek => "deepseek",
        }
    }

    /// Whether every character starts a match, so that no text falls between matches (a
    /// split that drops the gaps is then the same as one that keeps them).
    pub fn total(self) -> bool {
        matches!(
            self,
            Pattern::Gpt2 | Pattern::Cl100k { .. } | Pattern::O200k { .. }
        )
    }

    /// The bytes at which a match can start, for the patterns that match only a few ASCII
    /// characters: the split skips every other ASCII byte without decoding it (a byte from
    /// 0x80 up always stops the skip). DeepSeek's first two splits look at all of a prompt
    /// and match almost none of it.
    fn starts(self) -> Option<&'static [bool; 256]> {
        const fn table(digits: bool) -> [bool; 256] {
            let mut table = [false; 256];
            let mut b = 0;
            while b < 256 {
                table[b] = b >= 0x80 || (digits && b >= b'0' as usize && b <= b'9' as usize);
                b += 1;
            }
            table
        }
        static DIGITS: [bool; 256] = table(true);
        static NON_ASCII: [bool; 256] = table(false);
        match self {
            Pattern::Numbers3 => Some(&DIGITS),
            Pattern::CjkRuns => Some(&NON_ASCII),
            _ => None,
        }
    }
}

/// One step of the pre-tokenizer pipeline; each step splits every piece the previous one made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// A regex split keeping matches and, with `gaps`, the text between them as pieces.
    Split { pattern: Pattern, gaps: bool },
    /// `Digits`: numeric characters (`char::is_numeric`) isolated one by one, or in runs.
    Digits { individual: bool },
}

impl Stage {
    /// The stage's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Split { pattern, .. } => pattern.name(),
            Stage::Digits { individual: true } => "digits",
            Stage::Digits { individual: false } => "digit-runs",
        }
    }
}

/// Splits `text` through `stages` and hands each final non-empty piece to `emit`.
///
/// The last stage hands its pieces to `emit` itself (no stage emits an empty piece): one
/// more call of this recursion per piece was 7 % of the encoder's instructions.
pub fn split(stages: &[Stage], text: &[u8], emit: &mut dyn FnMut(&[u8])) {
    match stages {
        [] => {
            if !text.is_empty() {
                emit(text);
            }
        }
        [stage] => run(*stage, text, emit),
        [stage, rest @ ..] => run(*stage, text, &mut |piece| split(rest, piece, emit)),
    }
}

/// One stage over `text`, its pieces (never empty) to `emit`.
fn run(stage: Stage, text: &[u8], emit: &mut dyn FnMut(&[u8])) {
    match stage {
        Stage::Split { pattern, gaps } => split_pattern(pattern, gaps, text, emit),
        Stage::Digits { individual } => split_digits(individual, text, emit),
    }
}

fn split_pattern(pattern: Pattern, gaps: bool, text: &[u8], emit: &mut dyn FnMut(&[u8])) {
    let scan = Scan {
        b: text,
        t: classes::classes(),
    };
    let starts = pattern.starts();
    let mut gap_start = 0;
    let mut i = 0;
    while i < text.len() {
        match scan.match_at(pattern, i) {
            Some(end) if end > i => {
                if gaps && gap_start < i {
                    emit(slice(text, gap_start, i));
                }
                emit(slice(text, i, end));
                i = end;
                gap_start = end;
            }
            _ => {
                i += scan.at(i).2.max(1);
                // Only a pattern that leaves gaps gets here (the others match at every
                // character), so their loop pays nothing for the skip.
                if let Some(starts) = starts {
                    let rest = text.get(i..).unwrap_or_default();
                    i += rest
                        .iter()
                        .position(|&b| starts[usize::from(b)])
                        .unwrap_or(rest.len());
                }
            }
        }
    }
    if gaps && gap_start < text.len() {
        emit(slice(text, gap_start, text.len()));
    }
}

fn split_digits(individual: bool, text: &[u8], emit: &mut dyn FnMut(&[u8])) {
    let mut start = 0;
    let mut i = 0;
    while i < text.len() {
        let (c, len) = decode(text, i);
        let len = len.max(1);
        if char::from_u32(c).is_some_and(char::is_numeric) {
            let mut end = i + len;
            if !individual {
                while end < text.len() {
                    let (c, len) = decode(text, end);
                    if !char::from_u32(c).is_some_and(char::is_numeric) {
                        break;
                    }
                    end += len.max(1);
                }
            }
            if start < i {
                emit(slice(text, start, i));
            }
            emit(slice(text, i, end));
            start = end;
            i = end;
        } else {
            i += len;
        }
    }
    if start < text.len() {
        emit(slice(text, start, text.len()));
    }
}

#[inline]
fn slice(text: &[u8], start: usize, end: usize) -> &[u8] {
    text.get(start..end).unwrap_or_default()
}

/// The code point at byte `i` of UTF-8 `b` and its length (0 at the end).
#[inline]
pub fn decode(b: &[u8], i: usize) -> (u32, usize) {
    let Some(&b0) = b.get(i) else {
        return (0, 0);
    };
    if b0 < 0x80 {
        return (u32::from(b0), 1);
    }
    let cont = |k: usize| b.get(i + k).map_or(0, |x| u32::from(x & 0x3f));
    if b0 < 0xE0 {
        ((u32::from(b0 & 0x1f) << 6) | cont(1), 2)
    } else if b0 < 0xF0 {
        ((u32::from(b0 & 0x0f) << 12) | (cont(1) << 6) | cont(2), 3)
    } else {
        (
            (u32::from(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3),
            4,
        )
    }
}

struct Scan<'a> {
    b: &'a [u8],
    t: &'static Classes,
}

impl Scan<'_> {
    /// `(code point, class bits, byte length)` at `i`; length 0 at the end.
    #[inline]
    fn at(&self, i: usize) -> (u32, u16, usize) {
        let (c, len) = decode(self.b, i);
        if len == 0 {
            return (u32::MAX, 0, 0);
        }
        (c, self.t.of(c), len)
    }

    /// The end of the run of characters from `i` whose bits meet `mask`.
    #[inline]
    fn run(&self, mut i: usize, mask: u16) -> usize {
        loop {
            let (_, bits, len) = self.at(i);
            if len == 0 || bits & mask == 0 {
                return i;
            }
            i += len;
        }
    }

    /// The end of the run of characters from `i` that `keep` accepts.
    #[inline]
    fn run_by(&self, mut i: usize, keep: impl Fn(u32, u16) -> bool) -> usize {
        loop {
            let (c, bits, len) = self.at(i);
            if len == 0 || !keep(c, bits) {
                return i;
            }
            i += len;
        }
    }

    /// Up to `most` characters of `\p{N}` from `i`.
    fn numbers(&self, mut i: usize, most: usize) -> Option<usize> {
        let start = i;
        for _ in 0..most {
            let (_, bits, len) = self.at(i);
            if len == 0 || bits & N == 0 {
                break;
            }
            i += len;
        }
        (i > start).then_some(i)
    }

    /// `'s|'t|'re|'ve|'m|'ll|'d` at `i`, case-insensitively (Unicode simple case folding,
    /// which adds only `ſ` U+017F for `s`) when `fold`.
    fn contraction(&self, i: usize, fold: bool) -> Option<usize> {
        if self.b.get(i) != Some(&b'\'') {
            return None;
        }
        let (c, len) = decode(self.b, i + 1);
        let one = |want: u8| {
            let (c, len) = decode(self.b, i + 2);
            let c = if fold { ascii_lower(c) } else { c };
            (len == 1 && c == u32::from(want)).then_some(i + 3)
        };
        let c = if fold { ascii_lower(c) } else { c };
        match c {
            0x73 | 0x74 | 0x6d | 0x64 => Some(i + 2),
            0x17f if fold => Some(i + 1 + len),
            0x72 => one(b'e'),
            0x76 => one(b'e'),
            0x6c => one(b'l'),
            _ => None,
        }
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `i` (without the first alternative unless `crlf`).
    fn spaces(&self, i: usize, crlf: bool) -> Option<usize> {
        let (_, bits, _) = self.at(i);
        if bits & WS == 0 {
            return None;
        }
        // The whitespace run, its last character and its last line break.
        let mut end = i;
        let mut last = i;
        let mut last_break = None;
        loop {
            let (c, bits, len) = self.at(end);
            if len == 0 || bits & WS == 0 {
                break;
            }
            if c == 0x0d || c == 0x0a {
                last_break = Some(end + len);
            }
            last = end;
            end += len;
        }
        if crlf {
            if let Some(after) = last_break {
                return Some(after);
            }
        }
        if end == self.b.len() || last == i {
            // At the end of the text, or a single character before a non-space: `\s+`.
            return Some(end);
        }
        Some(last)
    }

    /// ` ?X+` where `X` is the class `keep` accepts.
    fn space_then(&self, i: usize, keep: impl Fn(u32, u16) -> bool + Copy) -> Option<usize> {
        let j = if self.b.get(i) == Some(&b' ') {
            i + 1
        } else {
            i
        };
        let (c, bits, len) = self.at(j);
        if len > 0 && keep(c, bits) {
            return Some(self.run_by(j, keep));
        }
        None
    }

    fn match_at(&self, pattern: Pattern, i: usize) -> Option<usize> {
        match pattern {
            Pattern::Gpt2 => self.gpt2(i),
            Pattern::Cl100k { digits } => self.cl100k(i, digits),
            Pattern::O200k {
                contractions,
                digits,
            } => self.o200k(i, contractions, digits),
            Pattern::Numbers3 => self.numbers(i, 3),
            Pattern::CjkRuns => {
                let end = self.run_by(i, |c, _| is_cjk(c));
                (end > i).then_some(end)
            }
            Pattern::DeepSeek => self.deepseek(i),
        }
    }

    fn gpt2(&self, i: usize) -> Option<usize> {
        self.contraction(i, false)
            .or_else(|| self.space_then(i, |_, b| b & L != 0))
            .or_else(|| self.space_then(i, |_, b| b & N != 0))
            .or_else(|| self.space_then(i, |_, b| b & (WS | L | N) == 0))
            .or_else(|| self.spaces(i, false))
    }

    fn cl100k(&self, i: usize, digits: usize) -> Option<usize> {
        if let Some(end) = self.contraction(i, true) {
            return Some(end);
        }
        let (c, bits, len) = self.at(i);
        if bits & L != 0 {
            return Some(self.run(i, L));
        }
        if !is_break(c) && bits & N == 0 {
            let (_, next, _) = self.at(i + len);
            if next & L != 0 {
                return Some(self.run(i + len, L));
            }
        }
        if bits & N != 0 {
            return self.numbers(i, digits);
        }
        self.punctuation(i, is_break)
            .or_else(|| self.spaces(i, true))
    }

    /// ` ?[^\s\p{L}\p{N}]+` followed by the characters `tail` accepts (`[\r\n]*` or `[\r\n/]*`).
    fn punctuation(&self, i: usize, tail: impl Fn(u32) -> bool) -> Option<usize> {
        let end = self.space_then(i, |_, b| b & (WS | L | N) == 0)?;
        Some(self.run_by(end, |c, _| tail(c)))
    }

    fn o200k(&self, i: usize, contractions: bool, digits: usize) -> Option<usize> {
        if let Some(end) = self.ascii_word(i) {
            return Some(if contractions {
                self.contraction(end, true).unwrap_or(end)
            } else {
                end
            });
        }
        let (c, bits, len) = self.at(i);
        let prefix = !is_break(c) && bits & (L | N) == 0;
        let starts: [Option<usize>; 2] = [prefix.then_some(i + len), Some(i)];
        let suffix = |end: usize| {
            if contractions {
                self.contraction(end, true).unwrap_or(end)
            } else {
                end
            }
        };
        // `P?U*W+C?`: the upper run, then back off to its last lower-class character.
        for start in starts.into_iter().flatten() {
            let upper_end = self.run(start, UPPER);
            let (_, after, after_len) = self.at(upper_end);
            if after_len > 0 && after & LOWER != 0 {
                return Some(suffix(self.run(upper_end, LOWER)));
            }
            if let Some(w) = self.last_lower(start, upper_end) {
                return Some(suffix(self.run(w, LOWER)));
            }
        }
        // `P?U+W*C?`.
        for start in starts.into_iter().flatten() {
            let (_, b, l) = self.at(start);
            if l > 0 && b & UPPER != 0 {
                let upper_end = self.run(start, UPPER);
                return Some(suffix(self.run(upper_end, LOWER)));
            }
        }
        if bits & N != 0 {
            return self.numbers(i, digits);
        }
        self.punctuation(i, |c| is_break(c) || c == u32::from(b'/'))
            .or_else(|| self.spaces(i, true))
    }

    /// The o200k letter alternatives on ASCII text: `[^\r\n\p{L}\p{N}]?[A-Z]*[a-z]*` at `i`,
    /// when it holds a letter and the byte after it is ASCII too (else `None`, and the
    /// general scan decides). There the first two alternatives match exactly this: an ASCII
    /// letter is in one of the "upper" and "lower" classes only, no other ASCII character is
    /// in either, so neither run can end elsewhere and there is nothing to back off to.
    fn ascii_word(&self, i: usize) -> Option<usize> {
        let b = self.b;
        let first = *b.get(i)?;
        let mut j = i;
        if first < 0x80 && !first.is_ascii_alphanumeric() && !is_break(u32::from(first)) {
            j += 1;
        }
        let letters = j;
        while b.get(j).is_some_and(u8::is_ascii_uppercase) {
            j += 1;
        }
        while b.get(j).is_some_and(u8::is_ascii_lowercase) {
            j += 1;
        }
        match b.get(j) {
            _ if j == letters => None,
            Some(&next) if next >= 0x80 => None,
            _ => Some(j),
        }
    }

    /// The start of the last character in `[start, end)` of the lower class.
    fn last_lower(&self, start: usize, end: usize) -> Option<usize> {
        let mut found = None;
        let mut i = start;
        while i < end {
            let (_, bits, len) = self.at(i);
            if len == 0 {
                break;
            }
            if bits & LOWER != 0 {
                found = Some(i);
            }
            i += len;
        }
        found
    }

    fn deepseek(&self, i: usize) -> Option<usize> {
        let (c, bits, len) = self.at(i);
        if len == 1 && c < 0x80 && (c as u8).is_ascii_punctuation() {
            let end = self.run_by(i + 1, |c, _| c < 0x80 && (c as u8).is_ascii_alphabetic());
            if end > i + 1 {
                return Some(end);
            }
        }
        if !is_break(c) && bits & (L | P | S) == 0 {
            let (_, next, next_len) = self.at(i + len);
            if next_len > 0 && next & (L | M) != 0 {
                return Some(self.run(i + len, L | M));
            }
        }
        if bits & (L | M) != 0 {
            return Some(self.run(i, L | M));
        }
        self.space_then(i, |_, b| b & (P | S) != 0)
            .map(|end| self.run_by(end, |c, _| is_break(c)))
            .or_else(|| self.spaces(i, true))
    }
}

#[inline]
fn is_break(c: u32) -> bool {
    c == 0x0d || c == 0x0a
}

#[inline]
fn ascii_lower(c: u32) -> u32 {
    if (0x41..=0x5a).contains(&c) {
        c + 0x20
    } else {
        c
    }
}

#[inline]
fn is_cjk(c: u32) -> bool {
    (0x4e00..=0x9fa5).contains(&c)
        || (0x3040..=0x309f).contains(&c)
        || (0x30a0..=0x30ff).contains(&c)
}

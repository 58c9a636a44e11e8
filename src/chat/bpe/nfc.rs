//! Text NFC provably leaves alone, so that an NFC-normalizing tokenizer (Qwen 2/3) can take
//! the fast path without a normalizer of our own: every character is from a block where
//! each code point is its own NFC form (NFC_Quick_Check=Yes), has canonical combining class
//! 0 and never composes with what precedes it. Anything else goes to Hugging Face.

/// Inclusive ranges of such characters.
const SAFE: [(u32, u32); 11] = [
    // Basic Latin through Spacing Modifier Letters (combining marks start at U+0300).
    (0x0000, 0x02ff),
    // General Punctuation from the hyphens (U+2000/U+2001 are singletons) to the
    // invisible operators, and the currency symbols.
    (0x2010, 0x2064),
    (0x20a0, 0x20c0),
    // CJK Symbols and Punctuation up to the tone marks at U+302A.
    (0x3000, 0x3029),
    // Hiragana and Katakana without the combining voicing marks U+3099/U+309A.
    (0x3041, 0x3096),
    (0x30a1, 0x30fa),
    // CJK Unified Ideographs.
    (0x4e00, 0x9fff),
    // Hangul syllables (they do not take a further jamo unless one follows, which is not
    // in this list).
    (0xac00, 0xd7a3),
    // Halfwidth and Fullwidth Forms up to the halfwidth katakana voicing marks.
    (0xff01, 0xff9d),
    // Emoji and pictographs.
    (0x1f300, 0x1f64f),
    (0x1f680, 0x1faff),
];

/// Whether NFC provably leaves `text` as it is.
pub fn unchanged(text: &str) -> bool {
    if text.is_ascii() {
        return true;
    }
    text.chars().all(|c| {
        let c = c as u32;
        SAFE.iter().any(|(start, end)| (*start..=*end).contains(&c))
    })
}

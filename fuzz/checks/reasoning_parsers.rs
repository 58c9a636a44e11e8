//! Every reasoning parser (`parsers::reasoning::registry::NAMES`) under each of the four
//! `Thinking` settings, on arbitrary model output: no panic; the streamed result (the deltas
//! of pushes at the input's cut points and `finish`, folded by `collect`) equals the
//! one-shot `split_whole`, for the input's cutting (a character at a time when it gives
//! no steps); reasoning and text together are never longer than the input (markers are
//! dropped, nothing is made up); `passthrough` gives the input back as text. [`bound::held_text_is_bounded`] (run
//! as a test by `tests/fuzz_regressions.rs`) checks that an unended block or header does
//! not hold the stream.
//!
//! Input layout: a selector byte (bit 0: thinking enabled, bit 1: opened by the prompt, the
//! rest `% NAMES.len()` picks the parser, in `NAMES`' order), then the cutting and the text
//! as `fuzz/checks/pieces.rs` reads them.

use tollgate::parsers::reasoning::registry::{by_name, Constructor, NAMES};
use tollgate::parsers::reasoning::{
    collect, split_whole, ReasoningDelta, Split, Thinking, MAX_HELD_BYTES,
};

use super::pieces::{cut, layout};

fn stream(make: Constructor, thinking: Thinking, pieces: &[&str]) -> Split {
    let mut parser = make(thinking);
    let mut out = Vec::new();
    for piece in pieces {
        parser.push(piece, &mut out);
    }
    parser.finish(&mut out);
    collect(&out)
}

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let thinking = Thinking {
        enabled: selector & 1 != 0,
        opened_by_prompt: selector & 2 != 0,
    };
    let name = NAMES[usize::from(selector >> 2) % NAMES.len()];
    let make = by_name(name).expect("every listed name has a parser");
    let (steps, text) = layout(rest);

    let whole = split_whole(make(thinking).as_mut(), &text);
    assert!(
        whole.reasoning.len() + whole.text.len() <= text.len(),
        "{name} {thinking:?}: {whole:?} is longer than {text:?}"
    );
    if name == "passthrough" {
        assert_eq!(
            whole,
            Split {
                reasoning: String::new(),
                text: text.clone()
            }
        );
    }
    let pieces = cut(&text, steps);
    assert_eq!(
        stream(make, thinking, &pieces),
        whole,
        "{name} {thinking:?}: {pieces:?}"
    );
}

/// The bound on what a parser holds after an unended reasoning block, newline run or
/// Harmony header: a test of its own (`tests/fuzz_regressions.rs` runs it), the fuzz
/// target's inputs being far shorter than `MAX_HELD_BYTES`.
#[allow(dead_code)] // not called by the fuzz target
pub mod bound {
    use super::*;

    /// Openers never closed: the parser, then what it is fed before the filler.
    const UNTERMINATED: &[(&str, &str)] = &[
        ("deepseek_r1", ""),
        ("deepseek_r1", "<think>"),
        ("qwen3", "<think>\n"),
        ("qwen3", ""),
        ("qwen3_thinking", ""),
        ("kimi", "◁think▷"),
        ("glm45", "<think>"),
        ("step3", ""),
        ("minimax", ""),
        ("gpt_oss", "<|channel|>analysis<|message|>"),
        ("gpt_oss", "<|channel|>final<|message|>"),
        (
            "gpt_oss",
            "<|channel|>commentary to=functions.f<|message|>{\"a\":\"",
        ),
        ("gpt_oss", ""),
        ("passthrough", ""),
    ];

    /// Each parser, thinking enabled, fed an opener and then a MiB of filler in 16-byte pieces
    /// (words, then newlines: a run a marker may still follow). What `finish` releases is what
    /// was held: at most `2 × MAX_HELD_BYTES`. Words are never dropped, so before `finish` all
    /// but that much has come out as reasoning or text; newlines may be (those leading the
    /// reasoning are), so for them only the release is bounded.
    pub fn held_text_is_bounded() {
        const FILLER_BYTES: usize = 1 << 20;
        let word = "lorem ipsum dolor sit amet 42 ";
        let words = word.repeat(FILLER_BYTES / word.len() + 1);
        let newlines = "\n".repeat(FILLER_BYTES);
        let thinking = Thinking {
            enabled: true,
            opened_by_prompt: false,
        };
        let bytes = |out: &mut Vec<ReasoningDelta>| {
            out.drain(..)
                .map(|d| match d {
                    ReasoningDelta::Reasoning(s) | ReasoningDelta::Text(s) => s.len(),
                })
                .sum::<usize>()
        };
        for (name, opener) in UNTERMINATED {
            for (filler, what) in [(&words, "words"), (&newlines, "newlines")] {
                let make = by_name(name).expect("every listed name has a parser");
                let mut parser = make(thinking);
                let mut out = Vec::new();
                let mut emitted = 0;
                let mut fed = opener.len();
                parser.push(opener, &mut out);
                for piece in filler.as_bytes().chunks(16) {
                    let piece = std::str::from_utf8(piece).expect("ASCII filler");
                    parser.push(piece, &mut out);
                    fed += piece.len();
                    emitted += bytes(&mut out);
                }
                parser.finish(&mut out);
                let released = bytes(&mut out);
                assert!(
                    released <= 2 * MAX_HELD_BYTES,
                    "{name} after {opener:?} and {what}: {released} bytes held until finish"
                );
                assert!(
                    what == "newlines" || emitted + 2 * MAX_HELD_BYTES >= fed,
                    "{name} after {opener:?} and {what}: {fed} bytes fed, only {emitted} out before finish"
                );
            }
        }
    }
}

//! StepFun Step-3: `reasoning</think>answer`, the output starting inside reasoning.
//!
//! Sources: vLLM's `step3` reasoning parser ("uses `</think>` to denote the end of
//! reasoning text; extracts all content before `</think>` as reasoning", with no
//! `</think>` all of it is reasoning) and SGLang's parser registry, which serves `step3`
//! (and `step3p5`) with its DeepSeek-R1 detector (forced reasoning, a leading `<think>`
//! dropped).
//!
//! Behaviour (see the `tags` module for the shared rules): the output always starts inside
//! reasoning (Step-3 always reasons, so `Thinking` is not consulted); an echoed `<think>` at
//! the start is dropped; the first `</think>` ends it; newlines around the markers are
//! dropped; later markers are answer text.

use super::tags::{splitter, Start, Tags};
use super::{ReasoningParser, Thinking};

static TAGS: Tags = Tags {
    open: &["<think>"],
    close: &["</think>"],
    implicit_end: &[],
};

/// The Step-3 parser.
pub fn new(_thinking: Thinking) -> Box<dyn ReasoningParser> {
    splitter(&TAGS, Start::Reasoning)
}

#[cfg(test)]
mod tests {
    use super::super::tags::testing::check;
    use super::*;

    fn make(enabled: bool, opened_by_prompt: bool) -> Box<dyn ReasoningParser> {
        new(Thinking {
            enabled,
            opened_by_prompt,
        })
    }

    fn default() -> Box<dyn ReasoningParser> {
        make(true, false)
    }

    #[test]
    fn reasoning_then_answer() {
        check(&default, "Compute 6*7.\n</think>\n42", "Compute 6*7.", "42");
        check(&|| make(true, true), "<think>a</think>b", "a", "b");
    }

    #[test]
    fn never_closed_and_empty() {
        check(&default, "still thinking</th", "still thinking</th", "");
        check(&default, "</think>\n\nno thoughts", "", "no thoughts");
    }

    #[test]
    fn later_markers_are_text_and_thinking_flag_is_ignored() {
        let off = || make(false, false);
        check(
            &off,
            "r</think>a <think>b</think>",
            "r",
            "a <think>b</think>",
        );
    }

    #[test]
    fn non_ascii() {
        check(&default, "Ünïcödé ✓</think>答", "Ünïcödé ✓", "答");
    }
}

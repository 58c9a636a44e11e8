//! Kimi: `◁think▷reasoning◁/think▷answer` (Kimi-VL-Thinking, k1.5) and Kimi K2 Thinking's
//! `<think>reasoning</think>answer`.
//!
//! Sources: SGLang's reasoning-parser docs (`kimi`: "uses special `◁think▷` and `◁/think▷`
//! tags"), its Kimi K2 detector and vLLM's `kimi_k2` parser (K2 uses `<think>…</think>`
//! "and may implicitly end reasoning by starting a tool call section using
//! `<|tool_calls_section_begin|>`"; "Kimi's thinking mode can be disabled via
//! `chat_template_kwargs`", which vLLM then passes through untouched). One parser serves
//! both spellings, since the registry maps `kimi` and `kimi_k2` here: either opening marker
//! opens, either closing marker closes.
//!
//! Behaviour (see the `tags` module for the shared rules):
//! - Thinking disabled: everything is text.
//! - Thinking enabled: an opening marker at the very start opens reasoning (or the prompt
//!   opened it; SGLang does not force reasoning for either detector); otherwise everything
//!   is text. The first closing marker ends reasoning, and so does
//!   `<|tool_calls_section_begin|>`, which stays in the answer for the tool-call parser; no
//!   end means all reasoning. Newlines around markers are dropped; later markers are answer
//!   text.

use super::tags::{splitter, Start, Tags};
use super::{ReasoningParser, Thinking};

static TAGS: Tags = Tags {
    open: &["◁think▷", "<think>"],
    close: &["◁/think▷", "</think>"],
    implicit_end: &["<|tool_calls_section_begin|>"],
};

/// The Kimi parser.
pub fn new(thinking: Thinking) -> Box<dyn ReasoningParser> {
    let start = match (thinking.enabled, thinking.opened_by_prompt) {
        (false, _) => Start::Answer,
        (true, true) => Start::Reasoning,
        (true, false) => Start::MayOpen,
    };
    splitter(&TAGS, start)
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

    fn on() -> Box<dyn ReasoningParser> {
        make(true, false)
    }

    #[test]
    fn reasoning_then_answer() {
        check(
            &on,
            "◁think▷The image shows a cat.◁/think▷A cat.",
            "The image shows a cat.",
            "A cat.",
        );
        check(
            &on,
            "<think>\nK2 thinks.\n</think>\n\nDone.",
            "K2 thinks.",
            "Done.",
        );
        check(&|| make(true, true), "opened◁/think▷ok", "opened", "ok");
    }

    #[test]
    fn no_reasoning_empty_and_unclosed() {
        check(&on, "A cat.", "", "A cat.");
        check(&on, "◁think▷◁/think▷A cat.", "", "A cat.");
        check(&on, "◁think▷still◁/thi", "still◁/thi", "");
    }

    #[test]
    fn tool_section_ends_reasoning() {
        let calls = "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\":\"Beijing\"}<|tool_call_end|><|tool_calls_section_end|>";
        check(
            &on,
            &format!("<think>need the weather{calls}"),
            "need the weather",
            calls,
        );
    }

    #[test]
    fn later_markers_and_disabled() {
        check(&on, "◁think▷a◁/think▷b ◁think▷c", "a", "b ◁think▷c");
        let text = "◁think▷a◁/think▷b";
        check(&|| make(false, false), text, "", text);
    }

    #[test]
    fn non_ascii() {
        check(
            &on,
            "◁think▷图中是一只猫🐱◁/think▷\n\n一只猫。",
            "图中是一只猫🐱",
            "一只猫。",
        );
    }
}

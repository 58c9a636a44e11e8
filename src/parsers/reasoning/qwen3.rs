//! Qwen3: an optional `<think>…</think>` block at the start of the output (`qwen3`), and the
//! Qwen3-*-Thinking-2507 models whose template opens the block in the prompt
//! (`qwen3_thinking`).
//!
//! Sources: SGLang's reasoning-parser docs ("Standard Qwen3: use `qwen3` parser, supports
//! `enable_thinking`"; "Qwen3-Thinking (e.g. Qwen3-235B-A22B-Thinking-2507): use `qwen3` or
//! `qwen3-thinking` parser, always thinks", the latter forcing reasoning from the first
//! token), its Qwen3 detector (`<tool_call>` inside reasoning ends it: "Qwen3.5 sometimes
//! opens `<tool_call>` without closing `</think>`"), and vLLM's reasoning-outputs docs
//! ("reasoning for the Qwen3 series is enabled by default; to disable it pass
//! `enable_thinking=False`", whose template then closes an empty block in the prompt).
//!
//! Behaviour (see the `tags` module for the shared rules):
//! - `qwen3`, thinking disabled: everything is text, markers included.
//! - `qwen3`, thinking enabled: a `<think>` at the very start (after newlines) opens
//!   reasoning, or the output starts inside it when the prompt opened it; otherwise
//!   everything is text (a stray `</think>` included).
//! - `qwen3_thinking`: always starts inside reasoning (`Thinking` is not consulted); an echoed
//!   `<think>` is dropped.
//! - Both: the first `</think>` ends reasoning; `<tool_call>` inside reasoning ends it too
//!   and is kept as the start of the answer for the tool-call parser; no end means all
//!   reasoning; newlines around markers are dropped; later markers are answer text.

use super::tags::{splitter, Start, Tags};
use super::{ReasoningParser, Thinking};

static TAGS: Tags = Tags {
    open: &["<think>"],
    close: &["</think>"],
    implicit_end: &["<tool_call>"],
};

/// The `qwen3` parser.
pub fn new(thinking: Thinking) -> Box<dyn ReasoningParser> {
    let start = match (thinking.enabled, thinking.opened_by_prompt) {
        (false, _) => Start::Answer,
        (true, true) => Start::Reasoning,
        (true, false) => Start::MayOpen,
    };
    splitter(&TAGS, start)
}

/// The `qwen3_thinking` parser: the output starts inside reasoning.
pub fn new_thinking(_thinking: Thinking) -> Box<dyn ReasoningParser> {
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

    fn on() -> Box<dyn ReasoningParser> {
        make(true, false)
    }

    fn thinking() -> Box<dyn ReasoningParser> {
        new_thinking(Thinking {
            enabled: true,
            opened_by_prompt: true,
        })
    }

    #[test]
    fn reasoning_then_answer() {
        let text = "<think>\nThe user greets me.\n</think>\n\nHello! How can I help?";
        check(&on, text, "The user greets me.", "Hello! How can I help?");
        check(
            &thinking,
            text,
            "The user greets me.",
            "Hello! How can I help?",
        );
    }

    #[test]
    fn opened_by_prompt() {
        let text = "The user greets me.\n</think>\n\nHello!";
        check(&|| make(true, true), text, "The user greets me.", "Hello!");
        check(&thinking, text, "The user greets me.", "Hello!");
        // Not opened: the model's own output has no block, so it is all text.
        check(&on, text, "", text);
    }

    #[test]
    fn no_reasoning() {
        check(&on, "Hello there.", "", "Hello there.");
        check(&on, "<b>bold</b>", "", "<b>bold</b>");
    }

    #[test]
    fn never_closed_is_reasoning() {
        check(&on, "<think>\nstill going", "still going", "");
        check(&thinking, "still going\n", "still going\n", "");
    }

    #[test]
    fn empty_reasoning() {
        check(&on, "<think>\n\n</think>\n\nAnswer.", "", "Answer.");
        check(&thinking, "\n</think>\n\nAnswer.", "", "Answer.");
    }

    #[test]
    fn markers_in_the_answer_stay() {
        check(
            &on,
            "<think>r</think>\n\nWrite <think> then </think>.",
            "r",
            "Write <think> then </think>.",
        );
        check(&on, "Say <think>.", "", "Say <think>.");
    }

    #[test]
    fn tool_call_ends_reasoning() {
        let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
        check(
            &on,
            &format!("<think>\nI should call the tool.\n{call}"),
            "I should call the tool.",
            call,
        );
        check(
            &on,
            &format!("<think>\nOK.\n</think>\n\n{call}"),
            "OK.",
            call,
        );
    }

    #[test]
    fn thinking_disabled_is_all_text() {
        let off = || make(false, true);
        let text = "<think>\nx\n</think>\n\ny";
        check(&off, text, "", text);
    }

    #[test]
    fn non_ascii() {
        check(
            &on,
            "<think>\n用户说你好。\n</think>\n\n你好！😀",
            "用户说你好。",
            "你好！😀",
        );
    }
}

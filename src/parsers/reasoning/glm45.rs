//! GLM-4.5 / 4.6 / 4.7: `<think>reasoning</think>answer`.
//!
//! Sources: vLLM's `glm45` reasoning parser ("uses `<think>…</think>` tokens to denote
//! reasoning text; the model provides a strict switch to disable reasoning output via
//! `enable_thinking=False`", the template then putting an empty block in the prompt) and
//! SGLang's GLM-4.5 detector ("uses `<tool_call>` as the tool start token to switch from
//! reasoning mode to normal mode"). A template that opens `<think>` in the prompt is
//! reported by the caller as `opened_by_prompt`.
//!
//! Behaviour (see the `tags` module for the shared rules):
//! - Thinking disabled: everything is text.
//! - Thinking enabled: a `<think>` at the very start opens reasoning (or the prompt opened
//!   it); otherwise everything is text. The first `</think>` ends reasoning, and so does
//!   `<tool_call>`, which stays in the answer for the tool-call parser; no end means all
//!   reasoning (vLLM's one-shot path would call it content, its streaming path reasoning;
//!   streaming and one-shot must agree here, so reasoning). Newlines around markers are
//!   dropped; later markers are answer text.

use super::tags::{splitter, Start, Tags};
use super::{ReasoningParser, Thinking};

static TAGS: Tags = Tags {
    open: &["<think>"],
    close: &["</think>"],
    implicit_end: &["<tool_call>"],
};

/// The GLM-4.5 parser.
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
            "<think>Let me see.</think>\nParis.",
            "Let me see.",
            "Paris.",
        );
        check(
            &|| make(true, true),
            "Let me see.</think>Paris.",
            "Let me see.",
            "Paris.",
        );
    }

    #[test]
    fn no_reasoning_and_empty_reasoning() {
        check(&on, "Paris.", "", "Paris.");
        check(&on, "<think></think>Paris.", "", "Paris.");
    }

    #[test]
    fn never_closed() {
        check(&on, "<think>hmm <thi", "hmm <thi", "");
    }

    #[test]
    fn tool_call_ends_reasoning() {
        let call = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>";
        check(
            &on,
            &format!("<think>need weather{call}"),
            "need weather",
            call,
        );
    }

    #[test]
    fn later_markers_and_disabled() {
        check(
            &on,
            "<think>a</think>b<think>c</think>",
            "a",
            "b<think>c</think>",
        );
        let text = "<think>a</think>b";
        check(&|| make(false, false), text, "", text);
    }

    #[test]
    fn non_ascii() {
        check(
            &on,
            "<think>法国的首都？</think>\n\n巴黎。",
            "法国的首都？",
            "巴黎。",
        );
    }
}

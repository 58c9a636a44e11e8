//! DeepSeek-R1 (and the R1 distills, QwQ, DeepSeek-V3.1/V3.2 in thinking mode):
//! `reasoning</think>answer`.
//!
//! Sources: SGLang's reasoning-parser docs (`deepseek-r1`: "DeepSeek-R1: No `<think>` start
//! tag, jumps directly to thinking content; DeepSeek-R1-0528: Generates both `<think>` start
//! and `</think>` end tags; both are handled by the same parser"; `deepseek-v3` is the same
//! parser when the request's `thinking` is on), vLLM's reasoning-outputs docs (`deepseek_r1`
//! for the R1 series and QwQ-32B; `deepseek_v3` falls back to no parsing when thinking is
//! off). R1-0528's template ends the prompt with `<think>\n`.
//!
//! Behaviour (see the `tags` module for the shared rules):
//! - Thinking enabled: the output starts inside reasoning whether or not the prompt opened
//!   the block (R1 always reasons); an echoed `<think>` at the start is dropped; everything
//!   up to the first `</think>` is reasoning, and with no `</think>` at all everything is
//!   reasoning (the output was cut off while thinking), as in both peers.
//! - Thinking disabled (the hybrid V3.1/V3.2 in non-thinking mode, whose template closes the
//!   block in the prompt): text, unless the output itself opens with `<think>`.
//! - Newlines after `<think>`, before `</think>` and right after it are dropped; only the
//!   first block counts, later markers are answer text.

use super::tags::{splitter, Start, Tags};
use super::{ReasoningParser, Thinking};

static TAGS: Tags = Tags {
    open: &["<think>"],
    close: &["</think>"],
    implicit_end: &[],
};

/// The DeepSeek-R1 parser.
pub fn new(thinking: Thinking) -> Box<dyn ReasoningParser> {
    let start = if thinking.enabled {
        Start::Reasoning
    } else {
        Start::MayOpen
    };
    splitter(&TAGS, start)
}

#[cfg(test)]
mod tests {
    use super::super::tags::testing::check;
    use super::*;

    fn on() -> Box<dyn ReasoningParser> {
        new(Thinking {
            enabled: true,
            opened_by_prompt: true,
        })
    }

    fn on_not_opened() -> Box<dyn ReasoningParser> {
        new(Thinking {
            enabled: true,
            opened_by_prompt: false,
        })
    }

    fn off() -> Box<dyn ReasoningParser> {
        new(Thinking {
            enabled: false,
            opened_by_prompt: false,
        })
    }

    #[test]
    fn reasoning_then_answer() {
        let text = "Let me think.\nStep 1.\n</think>\n\nThe answer is 42.";
        check(&on, text, "Let me think.\nStep 1.", "The answer is 42.");
        check(
            &on_not_opened,
            text,
            "Let me think.\nStep 1.",
            "The answer is 42.",
        );
    }

    #[test]
    fn echoed_opening_tag_is_dropped() {
        let text = "<think>\nHmm.\n</think>\n\n42";
        check(&on, text, "Hmm.", "42");
        check(&on_not_opened, text, "Hmm.", "42");
    }

    #[test]
    fn never_closed_is_all_reasoning() {
        check(
            &on,
            "thinking and thinking <",
            "thinking and thinking <",
            "",
        );
    }

    #[test]
    fn empty_reasoning() {
        check(&on, "<think>\n\n</think>\n\nHi", "", "Hi");
        check(&on, "</think>Hi", "", "Hi");
    }

    #[test]
    fn only_the_first_block_counts() {
        check(
            &on,
            "a</think>Use <think> and </think> tags.",
            "a",
            "Use <think> and </think> tags.",
        );
    }

    #[test]
    fn thinking_disabled_is_text_unless_the_model_opens_a_block() {
        check(
            &off,
            "Just the answer </think>.",
            "",
            "Just the answer </think>.",
        );
        check(&off, "<think>x</think>y", "x", "y");
    }

    #[test]
    fn non_ascii() {
        check(
            &on,
            "思考一下🤔\n</think>\n\n答案是四十二。",
            "思考一下🤔",
            "答案是四十二。",
        );
    }
}

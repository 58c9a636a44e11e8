//! MiniMax-M2 (M2, M2.1, M2.5): `<think>reasoning</think>answer`, the prompt having opened
//! the block.
//!
//! Sources: the MiniMax-M2 chat template ends the generation prompt with `<think>\n`
//! (llama.cpp's MiniMax-M2 handler keys on that ending; thinking cannot be turned off
//! there, only closed by the caller); SGLang's `minimax` parser is its Qwen3 detector with
//! reasoning forced from the first token; vLLM's `minimax_m2` splits on `<think>…</think>`,
//! while `minimax_m2_append_think` (SGLang `minimax-append-think`) instead keeps the
//! reasoning inline in the content with `<think>` prepended, because MiniMax's model card
//! asks clients to send the thinking back in later turns (interleaved thinking). The
//! gateway splits it here instead: reasoning goes to `reasoning_content` / thinking blocks,
//! which clients send back.
//!
//! Behaviour (see the `tags` module for the shared rules): the output always starts inside
//! reasoning (M2 always reasons, so `Thinking` is not consulted); an echoed `<think>` is
//! dropped; the first `</think>` ends it; no `</think>` means all reasoning; newlines around
//! markers are dropped; later markers are answer text.

use super::tags::{splitter, Start, Tags};
use super::{ReasoningParser, Thinking};

static TAGS: Tags = Tags {
    open: &["<think>"],
    close: &["</think>"],
    implicit_end: &[],
};

/// The MiniMax-M2 parser.
pub fn new(_thinking: Thinking) -> Box<dyn ReasoningParser> {
    splitter(&TAGS, Start::Reasoning)
}

#[cfg(test)]
mod tests {
    use super::super::tags::testing::check;
    use super::*;

    fn make() -> Box<dyn ReasoningParser> {
        new(Thinking {
            enabled: true,
            opened_by_prompt: true,
        })
    }

    #[test]
    fn reasoning_then_answer() {
        check(
            &make,
            "The user wants a poem.\n</think>\n\nRoses are red.",
            "The user wants a poem.",
            "Roses are red.",
        );
        check(&make, "<think>\nx\n</think>\n\ny", "x", "y");
    }

    #[test]
    fn tool_call_after_reasoning_is_text() {
        let call = "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n</invoke>\n</minimax:tool_call>";
        check(
            &make,
            &format!("Need weather.\n</think>\n\n{call}"),
            "Need weather.",
            call,
        );
    }

    #[test]
    fn unclosed_empty_and_later_markers() {
        check(&make, "thinking…", "thinking…", "");
        check(&make, "</think>\n\nHi", "", "Hi");
        check(&make, "a</think>b</think>", "a", "b</think>");
    }

    #[test]
    fn thinking_flag_is_ignored() {
        let off = || {
            new(Thinking {
                enabled: false,
                opened_by_prompt: false,
            })
        };
        check(&off, "r</think>a", "r", "a");
    }

    #[test]
    fn non_ascii() {
        check(
            &make,
            "用户想要一首诗。</think>玫瑰是红的🌹",
            "用户想要一首诗。",
            "玫瑰是红的🌹",
        );
    }
}

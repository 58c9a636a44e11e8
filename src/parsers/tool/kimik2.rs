//! Kimi-K2 tool calls:
//!
//! ```text
//! <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>
//! ```
//!
//! Source: Moonshot's Kimi-K2 `docs/tool_call_guidance.md` (manual parsing of
//! `<|tool_calls_section_begin|>` … `<|tool_calls_section_end|>`, call ids
//! `functions.{name}:{index}`), vLLM's `kimi_k2` parser (which also accepts the singular
//! `<|tool_call_section_begin|>` / `<|tool_call_section_end|>` spelling, as this one does)
//! and SGLang's `kimi_k2` detector.
//!
//! The name is the call id without its `functions.` prefix and `:N` suffix. A call commits at
//! the `{` of its arguments; they stream as the model's own object text. Markers and
//! whitespace between calls are dropped. A section that breaks before a call commits comes
//! back as text from the point of the last committed call. At the end of output an open
//! call is closed as far as it got.

use super::json_scan::{args_body, trimmed_name, Format, Machine, Op};
use super::{ToolParser, Tools};

const SECTION_END: &str = "<|tool_calls_section_end|>";
const SECTION_END_SINGULAR: &str = "<|tool_call_section_end|>";

const FORMAT: Format = Format {
    markers: &[
        "<|tool_calls_section_begin|>",
        "<|tool_call_section_begin|>",
    ],
    entries: &[0, 0],
    ops: &[
        Op::Ws,
        Op::Branch(&[
            ("<|tool_call_begin|>", 2),
            (SECTION_END, 8),
            (SECTION_END_SINGULAR, 8),
        ]),
        Op::Ws,
        Op::Until {
            end: &"<|tool_call_argument_begin|>",
            ok: not_angle,
            keep: true,
        },
        Op::Body(args_body),
        Op::Ws,
        Op::Lit("<|tool_call_end|>"),
        Op::Goto(0),
        Op::End,
    ],
    name,
};

fn not_angle(c: char) -> bool {
    c != '<'
}

/// `functions.get_weather:0` → `get_weather`.
fn name(id: &str) -> Option<String> {
    let id = id.trim();
    let id = match id.rsplit_once(':') {
        Some((head, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => id,
    };
    trimmed_name(id.strip_prefix("functions.").unwrap_or(id))
}

pub fn new(tools: &Tools) -> Box<dyn ToolParser> {
    Machine::boxed(&FORMAT, tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tool::json_scan::{call, one_push, run};

    const BEGIN: &str = "<|tool_calls_section_begin|>";

    fn one(id: &str, args: &str) -> String {
        format!("<|tool_call_begin|>{id}<|tool_call_argument_begin|>{args}<|tool_call_end|>")
    }

    #[test]
    fn single_call() {
        let text = format!(
            "{BEGIN}{}{SECTION_END}",
            one("functions.get_weather:0", r#"{"city": "Paris"}"#)
        );
        let got = run(new, &text, true);
        assert_eq!(got.text, "");
        assert_eq!(got.calls, vec![call("get_weather", r#"{"city": "Paris"}"#)]);
    }

    #[test]
    fn parallel_calls_after_text_in_one_push() {
        let text = format!(
            "I'll check both.{BEGIN}\n{}\n{}\n{SECTION_END}",
            one("functions.a:0", "{}"),
            one(" functions.b:1 ", r#"{"x": true}"#)
        );
        let expected = vec![call("a", "{}"), call("b", r#"{"x": true}"#)];
        assert_eq!(one_push(new, &text).calls, expected);
        let got = run(new, &text, true);
        assert_eq!(got.text, "I'll check both.");
        assert_eq!(got.calls, expected);
    }

    #[test]
    fn singular_section_marker() {
        let text = format!(
            "<|tool_call_section_begin|>{}{SECTION_END_SINGULAR}",
            one("functions.f:0", "{}")
        );
        assert_eq!(run(new, &text, true).calls, vec![call("f", "{}")]);
    }

    #[test]
    fn no_call_and_malformed_calls_are_text() {
        let broken = format!("{BEGIN}{}{SECTION_END}", one("functions.f:0", "oops"));
        for text in ["Plain <|answer|> text.", broken.as_str()] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let args = r#"{"s": "<|tool_call_end|> } \"x\"", "n": {"l": [1, {"m": "Ω"}]}}"#;
        let text = format!("{BEGIN}{}{SECTION_END}", one("functions.f:0", args));
        let got = run(new, &text, true);
        assert_eq!(got.calls, vec![call("f", args)]);
        assert_eq!(got.text, "");
    }

    #[test]
    fn unterminated_call_is_closed() {
        let text = format!(
            "{BEGIN}<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{{\"a\": \"x"
        );
        let got = run(new, &text, false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": "x"}"#)]);
    }
}

//! DeepSeek-V3.1 tool calls (full-width bars `｜` U+FF5C and `▁` U+2581 in the markers):
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//! ```
//!
//! Source: DeepSeek-V3.1's chat template ("ALWAYS adhere to this exact format for tool use:
//! `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>tool_call_name<｜tool▁sep｜>tool_call_arguments<｜tool▁call▁end｜>{{additional_tool_calls}}<｜tool▁calls▁end｜>`";
//! vLLM's `examples/tool_chat_template_deepseekv31.jinja`), vLLM's `deepseek_v31` and
//! SGLang's `deepseekv31` parsers.
//!
//! A call commits at the `{` of its arguments; they stream as the model's own object text.
//! Markers and whitespace between calls are dropped. A block that breaks before a call
//! commits comes back as text from the point of the last committed call. At the end of
//! output an open call is closed as far as it got.

use super::json_scan::{args_body, not_space, trimmed_name, Format, Machine, Op};
use super::{ToolParser, Tools};

const CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const CALLS_END: &str = "<｜tool▁calls▁end｜>";
const CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const CALL_END: &str = "<｜tool▁call▁end｜>";

const FORMAT: Format = Format {
    markers: &[CALLS_BEGIN],
    entries: &[0],
    ops: &[
        Op::Ws,
        Op::Branch(&[(CALL_BEGIN, 2), (CALLS_END, 7)]),
        Op::Until {
            end: &"<｜tool▁sep｜>",
            ok: not_space,
            keep: true,
        },
        Op::Body(args_body),
        Op::Ws,
        Op::Lit(CALL_END),
        Op::Goto(0),
        Op::End,
    ],
    name: trimmed_name,
};

pub fn new(tools: &Tools) -> Box<dyn ToolParser> {
    Machine::boxed(&FORMAT, tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tool::json_scan::{call, one_push, run};

    fn one(name: &str, args: &str) -> String {
        format!("{CALL_BEGIN}{name}<｜tool▁sep｜>{args}{CALL_END}")
    }

    #[test]
    fn single_call() {
        let text = format!(
            "{CALLS_BEGIN}{}{CALLS_END}",
            one("get_weather", r#"{"city": "Paris"}"#)
        );
        let got = run(new, &text, true);
        assert_eq!(got.text, "");
        assert_eq!(got.calls, vec![call("get_weather", r#"{"city": "Paris"}"#)]);
    }

    #[test]
    fn parallel_calls_after_text_in_one_push() {
        let text = format!(
            "Let me see.\n\n{CALLS_BEGIN}{}{}{CALLS_END}",
            one("a", "{}"),
            one("b", r#"{"x": {"y": null}}"#)
        );
        let expected = vec![call("a", "{}"), call("b", r#"{"x": {"y": null}}"#)];
        assert_eq!(one_push(new, &text).calls, expected);
        let got = run(new, &text, true);
        assert_eq!(got.text, "Let me see.\n\n");
        assert_eq!(got.calls, expected);
    }

    #[test]
    fn no_call_and_malformed_calls_are_text() {
        let broken = format!("{CALLS_BEGIN}{}{CALLS_END}", one("f", "[1, 2]"));
        let no_name = format!("{CALLS_BEGIN}{}{CALLS_END}", one("", "{}"));
        for text in [
            "Plain <｜answer｜> text.",
            broken.as_str(),
            no_name.as_str(),
        ] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let args = format!(r#"{{"s": "{CALL_END}{CALLS_END} }} \\\"", "n": [[{{"k": "ü"}}]]}}"#);
        let text = format!("{CALLS_BEGIN}{}{CALLS_END}", one("f", &args));
        let got = run(new, &text, true);
        assert_eq!(got.calls, vec![call("f", &args)]);
        assert_eq!(got.text, "");
    }

    #[test]
    fn unterminated_call_is_closed() {
        let text = format!("{CALLS_BEGIN}{CALL_BEGIN}f<｜tool▁sep｜>{{\"a\": {{\"b\": [");
        let got = run(new, &text, false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": {"b": []}}"#)]);
    }
}

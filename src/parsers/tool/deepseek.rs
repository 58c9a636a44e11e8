//! DeepSeek-V3 tool calls (full-width bars `｜` U+FF5C and `▁` U+2581 in the markers):
//!
//! ```text
//! <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//! ```json
//! {"city": "Paris"}
//! ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
//! ```
//!
//! Source: DeepSeek-V3's chat template (`tokenizer_config.json`; vLLM's
//! `examples/tool_chat_template_deepseekv3.jinja`), vLLM's `deepseek_v3` and SGLang's
//! `deepseekv3` parsers.
//!
//! The call type before `<｜tool▁sep｜>` is not checked. A call commits at the `{` of its
//! arguments (its name, the line after the separator, is then certain); the arguments
//! stream as the model's own object text. Markers and whitespace between calls are
//! dropped. A block that breaks before a call commits comes back as text from the point of
//! the last committed call. At the end of output an open call is closed as far as it got.

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
        Op::Branch(&[(CALL_BEGIN, 2), (CALLS_END, 11)]),
        Op::Until {
            end: &"<｜tool▁sep｜>",
            ok: not_space,
            keep: false,
        },
        Op::Until {
            end: &"\n",
            ok: not_space,
            keep: true,
        },
        Op::Lit("```json"),
        Op::Body(args_body),
        Op::Ws,
        Op::Lit("```"),
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
        format!("{CALL_BEGIN}function<｜tool▁sep｜>{name}\n```json\n{args}\n```{CALL_END}")
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
            "Checking.{CALLS_BEGIN}{}\n{}{CALLS_END} Then text.",
            one("a", "{}"),
            one("b", r#"{"x": [1, 2]}"#)
        );
        let expected = vec![call("a", "{}"), call("b", r#"{"x": [1, 2]}"#)];
        assert_eq!(one_push(new, &text).calls, expected);
        let got = run(new, &text, true);
        assert_eq!(got.text, "Checking. Then text.");
        assert_eq!(got.calls, expected);
    }

    #[test]
    fn no_call_and_malformed_calls_are_text() {
        let broken = format!("{CALLS_BEGIN}{CALL_BEGIN}function<｜tool▁sep｜>f\n```json\nnot json\n```{CALL_END}{CALLS_END}");
        for text in [
            "Plain answer with ```json\n{}\n``` fences.",
            broken.as_str(),
        ] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let args =
            format!(r#"{{"s": "```{CALL_END} }} \"q\"", "n": {{"a": [{{}}]}}, "u": "中文"}}"#);
        let text = format!("{CALLS_BEGIN}{}{CALLS_END}", one("f", &args));
        let got = run(new, &text, true);
        assert_eq!(got.calls, vec![call("f", &args)]);
        assert_eq!(got.text, "");
    }

    #[test]
    fn unterminated_call_is_closed() {
        let text =
            format!("{CALLS_BEGIN}{CALL_BEGIN}function<｜tool▁sep｜>f\n```json\n{{\"a\": \"b");
        let got = run(new, &text, false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": "b"}"#)]);
    }
}

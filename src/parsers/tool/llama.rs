//! Llama 3.1 / 3.2 / 3.3 JSON tool calls: `{"name": …, "parameters": {…}}` (`"arguments"`
//! also accepted), several separated by `;`, with or without a leading `<|python_tag|>`.
//!
//! Source: Meta's Llama 3.1/3.2 model cards and prompt-format docs ("respond with a JSON for
//! a function call with its proper arguments … in the format {"name": function name,
//! "parameters": dictionary of argument name and its value}"), vLLM's `llama3_json` and
//! SGLang's `llama3` parsers (`<|python_tag|>` prefix, `;` between calls).
//!
//! A call may start the output, follow `<|python_tag|>`, or follow text (any `{` is held
//! while it could still be a call object; see [`super::json`]). The `<|python_tag|>`,
//! whitespace and `;` between calls are dropped; `<|python_tag|>` not followed by a call
//! object (Llama's built-in python tools) is text. At the end of output an open call is
//! closed as far as it got.

use super::json_scan::{call_object, call_object_opened, trimmed_name, Format, Machine, Op};
use super::{ToolParser, Tools};

const FORMAT: Format = Format {
    markers: &["<|python_tag|>", "{"],
    entries: &[0, 4],
    ops: &[
        // 0: after `<|python_tag|>` or `;`.
        Op::Body(call_object),
        Op::Ws,
        Op::Lit(";"),
        Op::Goto(0),
        // 4: an object whose `{` was the marker.
        Op::Body(call_object_opened),
        Op::Goto(1),
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

    #[test]
    fn single_call() {
        let got = run(
            new,
            r#"{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}"#,
            true,
        );
        assert_eq!(got.text, "");
        assert_eq!(
            got.calls,
            vec![call("get_weather", r#"{"city": "Paris", "days": 3}"#)]
        );
    }

    #[test]
    fn python_tag_and_parallel_calls_in_one_push() {
        let text = r#"<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"x": [1, 2]}}"#;
        let expected = vec![call("a", "{}"), call("b", r#"{"x": [1, 2]}"#)];
        assert_eq!(one_push(new, text).calls, expected);
        let got = run(new, text, true);
        assert_eq!(got.text, "");
        assert_eq!(got.calls, expected);
    }

    #[test]
    fn call_after_text() {
        let got = run(
            new,
            "Let me look.<|python_tag|>{\"name\": \"f\", \"parameters\": {\"k\": \"v\"}}",
            true,
        );
        assert_eq!(got.text, "Let me look.");
        assert_eq!(got.calls, vec![call("f", r#"{"k": "v"}"#)]);
    }

    #[test]
    fn no_call_and_malformed_calls_are_text() {
        for text in [
            "Just an answer; with {braces} and ; semicolons.",
            "<|python_tag|>brave_search.call(query=\"x\")",
            "{\"name\": \"f\", \"parameters\": \"oops\"}",
            "{\"name\": \"f\"}",
        ] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let args = r#"{"q": "a;b {c} \"d\" <|python_tag|>", "n": [{"e": "日本"}]}"#;
        let got = run(
            new,
            &format!(r#"{{"name": "f", "parameters": {args}}}"#),
            true,
        );
        assert_eq!(got.calls, vec![call("f", args)]);
        assert_eq!(got.text, "");
    }

    #[test]
    fn unterminated_call_is_closed() {
        let got = run(new, r#"{"name": "f", "parameters": {"a": "x"#, false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": "x"}"#)]);
    }
}

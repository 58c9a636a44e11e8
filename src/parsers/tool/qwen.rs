//! Qwen2.5 / Qwen3 (Hermes-style) tool calls: each call is a JSON object in its own
//! `<tool_call>` block, several blocks in a row for parallel calls:
//!
//! ```text
//! <tool_call>
//! {"name": "get_weather", "arguments": {"city": "Paris"}}
//! </tool_call>
//! ```
//!
//! Source: the Qwen2.5/Qwen3 chat templates (`tokenizer_config.json`, "For each function
//! call, return a json object with function name and arguments within <tool_call></tool_call>
//! XML tags"), vLLM's `hermes` and SGLang's `qwen25` parsers.
//!
//! The call commits when its name and the `{` of its arguments are read, and the arguments
//! stream through as the model's own object text. A name without arguments is a call with
//! `{}`. Whitespace between blocks is dropped; a block that is not a call object comes back
//! as text. At the end of output an open call is closed as far as it got.

use super::json_scan::{call_object_lenient, trimmed_name, Format, Machine, Op};
use super::{ToolParser, Tools};

const FORMAT: Format = Format {
    markers: &["<tool_call>"],
    entries: &[0],
    ops: &[
        Op::Body(call_object_lenient),
        Op::Ws,
        Op::Lit("</tool_call>"),
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
    use crate::parsers::tool::json_scan::{call, one_push};
    use crate::parsers::tool::Parsed;

    fn run(text: &str, well_formed: bool) -> Parsed {
        crate::parsers::tool::json_scan::run(new, text, well_formed)
    }

    #[test]
    fn single_call() {
        let got = run(
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
            true,
        );
        assert_eq!(got.text, "");
        assert_eq!(got.calls, vec![call("get_weather", r#"{"city": "Paris"}"#)]);
    }

    #[test]
    fn parallel_calls_after_text() {
        let got = run(
            "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"y\": [2]}, \"name\": \"b\"}\n</tool_call>\nDone.",
            true,
        );
        assert_eq!(got.text, "Let me check.\n\nDone.");
        assert_eq!(
            got.calls,
            vec![call("a", r#"{"x": 1}"#), call("b", r#"{"y": [2]}"#)]
        );
    }

    #[test]
    fn several_calls_in_one_push() {
        let text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {\"k\": \"v\"}}</tool_call>";
        let got = one_push(new, text);
        assert_eq!(got.calls, vec![call("a", "{}"), call("b", r#"{"k": "v"}"#)]);
    }

    #[test]
    fn no_call() {
        let got = run("Plain answer with <b>tags</b> and {braces}.", true);
        assert_eq!(got.text, "Plain answer with <b>tags</b> and {braces}.");
        assert!(got.calls.is_empty());
    }

    #[test]
    fn malformed_call_is_text() {
        for text in [
            "<tool_call>not json</tool_call>",
            "<tool_call>{\"arguments\": {}}</tool_call>",
            "<tool_call>{\"name\": 3}</tool_call> after",
        ] {
            let got = run(text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let args = r#"{"code": "if a { b } </tool_call>", "q": "say \"hi\" \\", "n": {"deep": [1, {"x": "é中文"}]}}"#;
        let text =
            format!("<tool_call>\n{{\"name\": \"run\", \"arguments\": {args}}}\n</tool_call>");
        let got = run(&text, true);
        assert_eq!(got.calls, vec![call("run", args)]);
        assert_eq!(got.text, "");
    }

    #[test]
    fn name_only_is_a_call_with_empty_arguments() {
        let got = run("<tool_call>{\"name\": \"now\"}</tool_call>", true);
        assert_eq!(got.calls, vec![call("now", "{}")]);
    }

    #[test]
    fn unterminated_call_is_closed() {
        let got = run(
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [\"x",
            false,
        );
        assert_eq!(got.calls, vec![call("f", r#"{"a": ["x"]}"#)]);
        let got = run("text <tool_call>\n{\"name\": \"f\"", false);
        assert_eq!(got.text, "text <tool_call>\n{\"name\": \"f\"");
    }
}

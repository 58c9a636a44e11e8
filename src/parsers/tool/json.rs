//! Generic JSON tool calls: a `{"name": …, "arguments": {…}}` object (`"parameters"` is
//! accepted for the arguments), or a JSON array of them, anywhere in the output — the
//! whole output, or after some text.
//!
//! Source: the shape OpenAI-style function calling and the "JSON" tool-call modes of
//! vLLM/SGLang use when a model has no syntax of its own (`tool_choice: "required"` output is
//! an array of such objects).
//!
//! Any `{` or `[` may open a call, so it is held while it still could: an object is a call
//! once it has a string `name` and an object of arguments (in either order; arguments
//! read first are held until the name). Other keys are skipped. Anything else — prose in
//! braces, JSON without a name or arguments — comes back as text unchanged. Whitespace
//! between consecutive calls is dropped. An array element that is not a call ends the
//! array: it and what follows are text. At the end of output an open call is closed as far
//! as it got.

use super::json_scan::{call_object, call_object_opened, trimmed_name, Format, Machine, Op};
use super::{ToolParser, Tools};

const FORMAT: Format = Format {
    markers: &["{", "["],
    entries: &[0, 2],
    ops: &[
        // 0: an object, its `{` read as the marker.
        Op::Body(call_object_opened),
        Op::End,
        // 2: an array of objects.
        Op::Body(call_object),
        Op::Ws,
        Op::Branch(&[(",", 2), ("]", 5)]),
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

    #[test]
    fn single_call_object() {
        let got = run(
            new,
            r#"{"name": "get_weather", "arguments": {"city": "Paris"}}"#,
            true,
        );
        assert_eq!(got.text, "");
        assert_eq!(got.calls, vec![call("get_weather", r#"{"city": "Paris"}"#)]);
    }

    #[test]
    fn array_of_calls_in_one_push() {
        let text = r#"[{"name": "a", "parameters": {"x": 1}}, {"type": "function", "id": 7, "name": "b", "arguments": {}}]"#;
        let expected = vec![call("a", r#"{"x": 1}"#), call("b", "{}")];
        assert_eq!(one_push(new, text).calls, expected);
        let got = run(new, text, true);
        assert_eq!(got.text, "");
        assert_eq!(got.calls, expected);
    }

    #[test]
    fn call_after_text_and_consecutive_objects() {
        let got = run(
            new,
            "Calling now: {\"name\": \"a\", \"arguments\": {}}\n{\"arguments\": {\"q\": \"}{\"}, \"name\": \"b\"} ok",
            true,
        );
        assert_eq!(got.text, "Calling now:  ok");
        assert_eq!(
            got.calls,
            vec![call("a", "{}"), call("b", r#"{"q": "}{"}"#)]
        );
    }

    #[test]
    fn no_call() {
        for text in [
            "Plain text, fn main() { x } and [1, 2] and {\"a\": [1]}.",
            "{\"name\": \"Bob\", \"age\": 3}",
            "[]",
        ] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn malformed_call_is_text() {
        for text in [
            "{\"name\": \"f\", \"arguments\": [1]}",
            "{\"name\": \"f\" \"arguments\": {}}",
            "{name: f}",
        ] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let args =
            r#"{"s": "a \"quoted\" } ] string \\", "nested": {"l": [[], {}]}, "u": "naïve ✓"}"#;
        let got = run(
            new,
            &format!(r#"{{"name": "f", "arguments": {args}}}"#),
            true,
        );
        assert_eq!(got.calls, vec![call("f", args)]);
    }

    #[test]
    fn unterminated_call_is_closed() {
        let got = run(new, r#"{"name": "f", "arguments": {"a": {"b": 1"#, false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": {"b": 1}}"#)]);
    }

    #[test]
    fn held_text_is_bounded() {
        use crate::parsers::tool::{collect, parse_whole, MAX_HELD_BYTES};
        let text = format!("{{\"a\": \"{}", "x".repeat(MAX_HELD_BYTES + 10));
        let streamed = one_push(new, &text);
        assert!(
            streamed.text.len() >= MAX_HELD_BYTES,
            "released while streaming"
        );
        let prefix = format!("{text} ");
        let text = format!("{prefix}{{\"name\": \"f\", \"arguments\": {{}}}}");
        let tools = Tools::from(Vec::new());
        let whole = parse_whole(new(&tools).as_mut(), &text);
        assert_eq!(whole.text, prefix);
        assert_eq!(whole.calls, vec![call("f", "{}")]);
        let mut parser = new(&tools);
        let mut out = Vec::new();
        let mut buf = [0; 4];
        text.chars()
            .for_each(|c| parser.push(c.encode_utf8(&mut buf), &mut out));
        parser.finish(&mut out);
        assert_eq!(collect(&out), whole);
    }
}

//! Mistral tool calls, both forms:
//!
//! - `[TOOL_CALLS] [{"name": "f", "arguments": {…}}, …]` — a JSON array after the marker
//!   (Mistral 7B v0.3, Nemo, Small/Large before tokenizer v11; an `"id"` key is skipped);
//! - `[TOOL_CALLS]f[ARGS]{…}` — name then arguments, the marker repeated for each call
//!   (tokenizer v11+: Mistral Small 3.2, Magistral, Devstral; a `[CALL_ID]id` between the
//!   name and `[ARGS]` is dropped).
//!
//! Source: mistral-common's tokenizer docs and vLLM's `mistral` tool parser ("Mistral emits
//! tool calls in the `[TOOL_CALLS]name[ARGS]{...}` format"), SGLang's `mistral` detector
//! (array form). A single object right after the marker is accepted too.
//!
//! Calls commit once the name and the `{` of the arguments are read; arguments stream as
//! the model's own object text; a name without arguments in the array form is a call with
//! `{}`. The marker, whitespace and commas between calls are dropped. A marker not followed
//! by a call comes back as text. At the end of output an open call is closed as far as it
//! got.

use super::json_scan::{args_body, call_object_lenient, not_space, Format, Machine, Op};
use super::{ToolParser, Tools};

const FORMAT: Format = Format {
    markers: &["[TOOL_CALLS]"],
    entries: &[0],
    ops: &[
        Op::Ws,
        Op::IfChar('[', 6),
        Op::IfChar('{', 10),
        // 3: `name[ARGS]{…}`.
        Op::Until {
            end: &"[ARGS]",
            ok: not_space,
            keep: true,
        },
        Op::Body(args_body),
        Op::End,
        // 6: `[{…}, {…}]`.
        Op::Lit("["),
        Op::Body(call_object_lenient),
        Op::Ws,
        Op::Branch(&[(",", 7), ("]", 5)]),
        // 10: one object.
        Op::Body(call_object_lenient),
        Op::End,
    ],
    name,
};

/// The name before `[ARGS]`, without a `[CALL_ID]…` suffix.
fn name(captured: &str) -> Option<String> {
    let name = captured
        .split_once("[CALL_ID]")
        .map_or(captured, |(name, _)| name)
        .trim();
    (!name.is_empty()).then(|| name.to_owned())
}

pub fn new(tools: &Tools) -> Box<dyn ToolParser> {
    Machine::boxed(&FORMAT, tools)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tool::json_scan::{call, one_push, run};

    #[test]
    fn array_form() {
        let got = run(
            new,
            r#"[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]"#,
            true,
        );
        assert_eq!(got.text, "");
        assert_eq!(got.calls, vec![call("get_weather", r#"{"city": "Paris"}"#)]);
    }

    #[test]
    fn parallel_calls_in_one_push() {
        for (text, expected) in [
            (
                r#"[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]"#,
                vec![call("a", "{}"), call("b", r#"{"x": 1}"#)],
            ),
            (
                r#"[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[CALL_ID]k9Xz01abc[ARGS]{"x": 1}"#,
                vec![call("a", "{}"), call("b", r#"{"x": 1}"#)],
            ),
        ] {
            assert_eq!(one_push(new, text).calls, expected);
            let got = run(new, text, true);
            assert_eq!(got.text, "");
            assert_eq!(got.calls, expected);
        }
    }

    #[test]
    fn name_form_after_text() {
        let got = run(
            new,
            "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Zürich\"}",
            true,
        );
        assert_eq!(got.text, "Sure.");
        assert_eq!(
            got.calls,
            vec![call("get_weather", r#"{"city": "Zürich"}"#)]
        );
    }

    #[test]
    fn no_call_and_malformed_calls_are_text() {
        for text in [
            "An answer with [brackets] and [TOOL] words.",
            "[TOOL_CALLS] not a call",
            "[TOOL_CALLS][1, 2]",
            "[TOOL_CALLS]f[ARGS][1]",
        ] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let args = r#"{"s": "[ARGS] ]} \"x\" [TOOL_CALLS]", "n": {"m": [{}]}, "e": "ß"}"#;
        let got = run(new, &format!("[TOOL_CALLS]f[ARGS]{args}"), true);
        assert_eq!(got.calls, vec![call("f", args)]);
        let got = run(
            new,
            &format!(r#"[TOOL_CALLS][{{"name": "f", "arguments": {args}}}]"#),
            true,
        );
        assert_eq!(got.calls, vec![call("f", args)]);
    }

    #[test]
    fn unterminated_call_is_closed() {
        let got = run(new, r#"[TOOL_CALLS]f[ARGS]{"a": ["#, false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": []}"#)]);
    }
}

//! Qwen3-Coder's XML tool calls:
//!
//! ```text
//! <tool_call>
//! <function=get_weather>
//! <parameter=city>
//! Paris
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! Source: the model's chat template (`Qwen/Qwen3-Coder-480B-A35B-Instruct`,
//! `chat_template.jinja`: `'<tool_call>\n<function=' + name + '>\n'`, then per argument
//! `'<parameter=' + key + '>\n' + value + '\n</parameter>\n'`, then
//! `'</function>\n</tool_call>'`, one block per call) and vLLM's `qwen3coder_tool_parser.py`
//! (values lose one leading and one trailing newline; non-string values are typed with the
//! schema, Python's `True`/`False`/`None` accepted since the template renders values with
//! `| string`). Several `<function=…>` in one block are read too; a missing `</function>`
//! before `</tool_call>` is forgiven. A `</parameter>` inside a value ends it (the first one
//! wins). The machine is [`super::xml_params`].

use super::xml_params::{self, NameEnd, Syntax, Trim};
use super::{ToolParser, Tools};

static SYNTAX: Syntax = Syntax {
    block_open: "<tool_call>",
    block_close: "</tool_call>",
    call_open: Some("<function="),
    call_close: "</function>",
    name_end: NameEnd::Gt,
    param_open: "<parameter=",
    key_end: ">",
    value_open: None,
    param_close: "</parameter>",
    trim: Trim::OneNewline,
};

/// A Qwen3-Coder tool-call parser typing values with `tools`' schemas.
pub fn new(tools: &Tools) -> Box<dyn ToolParser> {
    xml_params::parser(&SYNTAX, tools)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::xml_params::testkit::{calls, check, soup, tools};
    use super::super::{Parsed, ToolParser};

    fn make() -> Box<dyn ToolParser> {
        super::new(&tools())
    }

    fn ok(text: &str) -> Parsed {
        check(&make, text, true)
    }

    #[test]
    fn random_tag_soup_is_cut_invariant() {
        let parts = [
            WEATHER,
            &WEATHER[..30],
            &WEATHER[30..70],
            &WEATHER[70..],
            "<tool_call>",
            "</tool_call>",
            "<function=get_weather>",
            "<function=typed>",
            "<function=",
            "</function>",
            "<parameter=city>",
            "<parameter=n>",
            "<parameter=obj>",
            "<parameter=",
            "</parameter>",
            "</param",
            "\n",
            " ",
            "Paris",
            "42",
            "{\"a\": [1]}",
            "<",
            ">",
            "=",
            "é😀",
            "\"",
            "True",
        ];
        for seed in 0..3 {
            soup(&make, &parts, seed, true);
        }
    }

    const WEATHER: &str = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

    #[test]
    fn single_call() {
        let p = ok(WEATHER);
        assert_eq!(p.text, "");
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].name, "get_weather");
        assert_eq!(p.calls[0].arguments, r#"{"city": "Paris", "days": 3}"#);
    }

    #[test]
    fn parallel_calls_and_text_around() {
        let text = format!("Let me check.\n{WEATHER}\n{WEATHER}\nDone.");
        let p = ok(&text);
        // Whitespace between calls is dropped; before text that follows them, it is kept.
        assert_eq!(p.text, "Let me check.\n\nDone.");
        assert_eq!(calls(&p).len(), 2);
        // Both calls in a single delta.
        let mut parser = make();
        let mut out = Vec::new();
        parser.push(&text, &mut out);
        parser.finish(&mut out);
        assert_eq!(super::super::collect(&out), p);
    }

    #[test]
    fn two_functions_in_one_block() {
        let text = "<tool_call>\n<function=a>\n</function>\n<function=b>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>";
        let p = ok(text);
        assert_eq!(
            calls(&p),
            vec![("a".into(), json!({})), ("b".into(), json!({"k": "v"}))]
        );
    }

    #[test]
    fn no_call_and_lookalikes() {
        for text in [
            "Just text, a < b and <b>bold</b>.",
            "<tool_call> is how I would call a tool",
            "<tool_call>\n<function=two words>\n</function>\n</tool_call>",
            "<tool_call>\n<tool_call>\n",
            "x <tool_cal",
        ] {
            let p = check(&make, text, true);
            assert_eq!(p.text, text);
            assert!(p.calls.is_empty());
        }
    }

    #[test]
    fn malformed_then_real_call() {
        let text = format!("<tool_call>\noops</tool_call>{WEATHER}");
        let p = ok(&text);
        assert_eq!(p.text, "<tool_call>\noops</tool_call>");
        assert_eq!(p.calls.len(), 1);
    }

    #[test]
    fn tricky_values() {
        let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\na < b \"q\" </param \\ \n two lines\n 東京 😀\n</parameter>\n</function>\n</tool_call>";
        let p = ok(text);
        assert_eq!(
            calls(&p)[0].1,
            json!({"city": "a < b \"q\" </param \\ \n two lines\n 東京 😀"})
        );
    }

    #[test]
    fn typed_values() {
        let text = "<tool_call>\n<function=typed>\n<parameter=n>\n42\n</parameter>\n<parameter=x>\n2.5\n</parameter>\n<parameter=flag>\nTrue\n</parameter>\n<parameter=obj>\n{\"a\": [1, {\"b\": null}]}\n</parameter>\n<parameter=arr>\n[1, \"two\"]\n</parameter>\n<parameter=code>\n007\n</parameter>\n<parameter=maybe>\nNone\n</parameter>\n<parameter=either>\nabc\n</parameter>\n<parameter=extra>\n{\"k\": 1}\n</parameter>\n<parameter=n2>\nParis\n</parameter>\n</function>\n</tool_call>";
        let p = ok(text);
        assert_eq!(
            calls(&p)[0].1,
            json!({"n": 42, "x": 2.5, "flag": true, "obj": {"a": [1, {"b": null}]},
                   "arr": [1, "two"], "code": "007", "maybe": null, "either": "abc",
                   "extra": {"k": 1}, "n2": "Paris"})
        );
        let bad = "<tool_call>\n<function=typed>\n<parameter=n>\nmany\n</parameter>\n</function>\n</tool_call>";
        assert_eq!(calls(&ok(bad))[0].1, json!({"n": "many"}));
    }

    #[test]
    fn unknown_tool_is_still_a_call() {
        let text = "<tool_call>\n<function=nope>\n<parameter=q>\n1\n</parameter>\n</function>\n</tool_call>";
        assert_eq!(calls(&ok(text)), vec![("nope".into(), json!({"q": 1}))]);
    }

    #[test]
    fn unterminated_call_closes_as_far_as_it_got() {
        let cut = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
        let p = check(&make, cut, true);
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"city": "Par"}))]
        );
        let header = "<tool_call>\n<function=get_weather>\n";
        let p = check(&make, header, true);
        assert_eq!(calls(&p), vec![("get_weather".into(), json!({}))]);
        let early = "Hi <tool_call>\n<function=get_wea";
        let p = check(&make, early, true);
        assert_eq!(p.text, early);
        assert!(p.calls.is_empty());
    }

    #[test]
    fn broken_body_closes_call_and_returns_text() {
        let text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\nsorry</tool_call>";
        let p = check(&make, text, true);
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"city": "Paris"}))]
        );
        assert_eq!(p.text, "\nsorry</tool_call>");
    }

    #[test]
    fn strings_stream_before_the_value_ends() {
        let mut parser = make();
        let mut out = Vec::new();
        parser.push(
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nPa",
            &mut out,
        );
        parser.push("ris", &mut out);
        let args: String = out
            .iter()
            .filter_map(|d| match d {
                super::super::ToolDelta::Arguments { fragment, .. } => Some(fragment.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(args, r#"{"city": "Paris"#);
    }

    #[test]
    fn long_values_are_not_held() {
        let big = "1".repeat(super::super::MAX_HELD_BYTES + 10);
        let text = format!("<tool_call>\n<function=typed>\n<parameter=n>\n{big}\n</parameter>\n</function>\n</tool_call>");
        let p = parse_whole_only(&text);
        assert_eq!(calls(&p)[0].1, json!({ "n": big }));
        let mut parser = make();
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(1000) {
            parser.push(std::str::from_utf8(chunk).unwrap_or(""), &mut out);
        }
        parser.finish(&mut out);
        assert_eq!(super::super::collect(&out), p);
    }

    fn parse_whole_only(text: &str) -> Parsed {
        super::super::parse_whole(make().as_mut(), text)
    }
}

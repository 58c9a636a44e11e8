//! GLM-4.5 / GLM-4.6's XML tool calls:
//!
//! ```text
//! <tool_call>get_weather
//! <arg_key>city</arg_key>
//! <arg_value>Paris</arg_value>
//! </tool_call>
//! ```
//!
//! Source: the model's chat template (`zai-org/GLM-4.5`, `chat_template.jinja`:
//! `'\n<tool_call>' + tc.name`, a newline, then per argument
//! `<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v | tojson if v is not string else v }}</arg_value>\n`,
//! then `</tool_call>`, one block per call) and vLLM's `glm4_moe_tool_parser.py` (string
//! values verbatim, others parsed after trimming, Python literals accepted). The name ends at
//! the newline, or at the first tag when the newline is missing, which also reads GLM-4.7's
//! compact layout (see [`super::glm47_moe`]). The machine is [`super::xml_params`].

use super::xml_params::{self, NameEnd, Syntax, Trim};
use super::{ToolParser, Tools};

/// GLM's spelling, shared with GLM-4.7 whose calls differ only in whitespace.
pub(super) static SYNTAX: Syntax = Syntax {
    block_open: "<tool_call>",
    block_close: "</tool_call>",
    call_open: None,
    call_close: "</tool_call>",
    name_end: NameEnd::LineOrTag,
    param_open: "<arg_key>",
    key_end: "</arg_key>",
    value_open: Some("<arg_value>"),
    param_close: "</arg_value>",
    trim: Trim::Verbatim,
};

/// A GLM-4.5 tool-call parser typing values with `tools`' schemas.
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
            &WEATHER[..20],
            &WEATHER[20..],
            "<tool_call>",
            "</tool_call>",
            "get_weather",
            "typed",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "city",
            "n",
            "arr",
            "\n",
            " ",
            "[1, 2]",
            "7",
            "<",
            "</arg",
            "北京",
            "\"x\"",
        ];
        for seed in 0..3 {
            soup(&make, &parts, seed, true);
        }
    }

    const WEATHER: &str = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>北京</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>";

    #[test]
    fn single_call() {
        let p = ok(WEATHER);
        assert_eq!(p.text, "");
        assert_eq!(p.calls[0].name, "get_weather");
        assert_eq!(p.calls[0].arguments, r#"{"city": "北京", "days": 2}"#);
    }

    #[test]
    fn parallel_calls_and_text_around() {
        let p = ok(&format!("I'll check.\n{WEATHER}\n{WEATHER}"));
        assert_eq!(p.text, "I'll check.\n");
        assert_eq!(calls(&p).len(), 2);
        let p = ok(&format!("{WEATHER}{WEATHER} and more"));
        assert_eq!(p.text, " and more");
        assert_eq!(calls(&p).len(), 2);
    }

    #[test]
    fn no_call_and_lookalikes() {
        for text in [
            "plain <b>text</b> a<b",
            "<tool_call>Let me think\nabout it</tool_call>",
            "<tool_call>get_weather\nsome prose",
            "<tool_call>\n<arg_key>a</arg_key>",
        ] {
            let p = check(&make, text, true);
            assert_eq!(p.text, text);
            assert!(p.calls.is_empty());
        }
    }

    #[test]
    fn tricky_and_typed_values() {
        let text = "<tool_call>typed\n<arg_key>n</arg_key>\n<arg_value> 7 </arg_value>\n<arg_key>flag</arg_key>\n<arg_value>false</arg_value>\n<arg_key>obj</arg_key>\n<arg_value>{\"a\": \"<b>\"}</arg_value>\n<arg_key>arr</arg_key>\n<arg_value>[1.5]</arg_value>\n<arg_key>x</arg_key>\n<arg_value>-0.25</arg_value>\n<arg_key>code</arg_key>\n<arg_value>\n12 \"x\" < y\n</arg_value>\n<arg_key>other</arg_key>\n<arg_value>null</arg_value>\n</tool_call>";
        let p = ok(text);
        assert_eq!(
            calls(&p)[0].1,
            json!({"n": 7, "flag": false, "obj": {"a": "<b>"}, "arr": [1.5], "x": -0.25,
                   "code": "\n12 \"x\" < y\n", "other": null})
        );
    }

    #[test]
    fn no_arguments() {
        let p = ok("<tool_call>get_time\n</tool_call>");
        assert_eq!(calls(&p), vec![("get_time".into(), json!({}))]);
    }

    #[test]
    fn unterminated_call() {
        let p = check(
            &make,
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Ber",
            true,
        );
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"city": "Ber"}))]
        );
        let p = check(&make, "<tool_call>get_weather\n<arg_key>ci", true);
        assert_eq!(calls(&p), vec![("get_weather".into(), json!({}))]);
    }

    #[test]
    fn broken_argument_closes_call() {
        let text = "<tool_call>get_weather\n<arg_key>city</arg_key>\nParis</tool_call>";
        let p = check(&make, text, true);
        assert_eq!(calls(&p), vec![("get_weather".into(), json!({}))]);
        assert_eq!(p.text, "<arg_key>city</arg_key>\nParis</tool_call>");
    }
}

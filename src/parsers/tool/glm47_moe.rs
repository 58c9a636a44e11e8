//! GLM-4.7 (and GLM-5)'s XML tool calls, GLM-4.5's tags written without whitespace:
//!
//! ```text
//! <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>
//! ```
//!
//! Source: the model's chat template (`zai-org/GLM-4.7`, `chat_template.jinja`:
//! `'<tool_call>' ~ tc.name`, then per argument `<arg_key>{{ k }}</arg_key><arg_value>{{ v |
//! tojson(ensure_ascii=False) if v is not string else v }}</arg_value>`, then `</tool_call>`)
//! and SGLang's `glm47_moe_detector.py`. The differences from GLM-4.5 are whitespace only: no
//! newline after the name, none between the tags, none between calls. GLM-4.5's machine
//! already ends a name at the first tag and skips whitespace between tags, so this parser is
//! that machine ([`super::glm45_moe::SYNTAX`]); the tests here pin the compact layout.

use super::xml_params;
use super::{ToolParser, Tools};

/// A GLM-4.7 tool-call parser typing values with `tools`' schemas.
pub fn new(tools: &Tools) -> Box<dyn ToolParser> {
    xml_params::parser(&super::glm45_moe::SYNTAX, tools)
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
            &WEATHER[..25],
            &WEATHER[25..],
            "<tool_call>get_weather",
            "<tool_call>typed",
            "<tool_call>",
            "</tool_call>",
            "<arg_key>city</arg_key>",
            "<arg_key>flag</arg_key>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "false",
            "x y",
            "<",
            "☃",
        ];
        for seed in 0..3 {
            soup(&make, &parts, seed, true);
        }
    }

    const WEATHER: &str = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>上海</arg_value><arg_key>days</arg_key><arg_value>5</arg_value></tool_call>";

    #[test]
    fn single_call() {
        let p = ok(WEATHER);
        assert_eq!(p.text, "");
        assert_eq!(p.calls[0].arguments, r#"{"city": "上海", "days": 5}"#);
    }

    #[test]
    fn parallel_calls_in_one_piece_after_text() {
        let text = format!("Checking both.{WEATHER}{WEATHER}");
        let p = ok(&text);
        assert_eq!(p.text, "Checking both.");
        assert_eq!(calls(&p).len(), 2);
    }

    #[test]
    fn no_call_and_malformed() {
        for text in [
            "nothing to call here <",
            "<tool_call>get weather<arg_key>city</arg_key></tool_call>",
            "<tool_call><arg_key>city</arg_key></tool_call>",
            "<tool_call>get_weather<arg_value>x</arg_value></tool_call>",
        ] {
            let p = check(&make, text, true);
            assert_eq!(p.text, text);
            assert!(p.calls.is_empty());
        }
    }

    #[test]
    fn values_and_types() {
        let text = "<tool_call>typed<arg_key>code</arg_key><arg_value>2.75</arg_value><arg_key>x</arg_key><arg_value>2.75</arg_value><arg_key>obj</arg_key><arg_value>{\"q\": \"a\\\"b\\n\"}</arg_value><arg_key>arr</arg_key><arg_value>not json</arg_value><arg_key>flag</arg_key><arg_value>True</arg_value></tool_call>";
        let p = ok(text);
        assert_eq!(
            calls(&p)[0].1,
            json!({"code": "2.75", "x": 2.75, "obj": {"q": "a\"b\n"}, "arr": "not json",
                   "flag": true})
        );
        let text = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>line1\n<i>x</i>\n\"quoted\" ☃</arg_value></tool_call>";
        assert_eq!(
            calls(&ok(text))[0].1,
            json!({"city": "line1\n<i>x</i>\n\"quoted\" ☃"})
        );
    }

    #[test]
    fn unterminated_and_empty() {
        let p = ok("<tool_call>get_time</tool_call>");
        assert_eq!(calls(&p), vec![("get_time".into(), json!({}))]);
        let p = check(
            &make,
            "<tool_call>get_weather<arg_key>days</arg_key><arg_value>4</arg_va",
            true,
        );
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"days": "4</arg_va"}))]
        );
    }
}

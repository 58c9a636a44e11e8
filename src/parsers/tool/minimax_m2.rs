//! MiniMax-M2's XML tool calls, several invokes to a block:
//!
//! ```text
//! <minimax:tool_call>
//! <invoke name="get_weather">
//! <parameter name="city">Paris</parameter>
//! </invoke>
//! <invoke name="get_weather">…</invoke>
//! </minimax:tool_call>
//! ```
//!
//! Source: MiniMax's tool calling guide (`MiniMax-AI/MiniMax-M2`,
//! `docs/tool_calling_guide.md`, "Model Output Format" and its reference `parse_tool_calls`:
//! names may be quoted, values are `strip()`ped, then typed with the schema) and vLLM's
//! `minimax_m2_tool_parser.py`. The machine is [`super::xml_params`].

use super::xml_params::{self, NameEnd, Syntax, Trim};
use super::{ToolParser, Tools};

static SYNTAX: Syntax = Syntax {
    block_open: "<minimax:tool_call>",
    block_close: "</minimax:tool_call>",
    call_open: Some("<invoke name="),
    call_close: "</invoke>",
    name_end: NameEnd::Gt,
    param_open: "<parameter name=",
    key_end: ">",
    value_open: None,
    param_close: "</parameter>",
    trim: Trim::Whitespace,
};

/// A MiniMax-M2 tool-call parser typing values with `tools`' schemas.
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
        let block = format!("<minimax:tool_call>\n{INVOKE}{INVOKE}\n</minimax:tool_call>");
        let parts = [
            block.as_str(),
            INVOKE,
            &INVOKE[..30],
            &INVOKE[30..],
            "<minimax:tool_call>\n",
            "<minimax:tool_call>",
            "</minimax:tool_call>",
            "<invoke name=\"get_weather\">",
            "<invoke name=",
            "</invoke>",
            "<parameter name=\"city\">",
            "<parameter name=\"days\">",
            "<parameter name=",
            "</parameter>",
            "\"",
            "\n",
            "  ",
            "Rome",
            "3",
            "<",
            ">",
            "ü",
        ];
        for seed in 0..3 {
            soup(&make, &parts, seed, true);
        }
    }

    const INVOKE: &str = "<invoke name=\"get_weather\">\n<parameter name=\"city\">San Francisco</parameter>\n<parameter name=\"days\">1</parameter>\n</invoke>";

    #[test]
    fn single_call() {
        let p = ok(&format!(
            "<minimax:tool_call>\n{INVOKE}\n</minimax:tool_call>"
        ));
        assert_eq!(p.text, "");
        assert_eq!(p.calls[0].name, "get_weather");
        assert_eq!(
            p.calls[0].arguments,
            r#"{"city": "San Francisco", "days": 1}"#
        );
    }

    #[test]
    fn parallel_invokes_in_one_block_after_text() {
        let text = format!(
            "Let me search.\n<minimax:tool_call>\n{INVOKE}\n{INVOKE}{INVOKE}\n</minimax:tool_call>"
        );
        let p = ok(&text);
        assert_eq!(p.text, "Let me search.\n");
        assert_eq!(calls(&p).len(), 3);
        let two_blocks = format!(
            "<minimax:tool_call>{INVOKE}</minimax:tool_call>\n<minimax:tool_call>{INVOKE}</minimax:tool_call> ok"
        );
        let p = ok(&two_blocks);
        assert_eq!(p.text, " ok");
        assert_eq!(calls(&p).len(), 2);
    }

    #[test]
    fn no_call_and_malformed() {
        for text in [
            "<minimax:tool_cal> <invoke>",
            "<minimax:tool_call>\n<invoke nam=\"x\">\n</invoke>\n</minimax:tool_call>",
            "<minimax:tool_call>\n<invoke name=\"\">\n</invoke>\n</minimax:tool_call>",
            "<minimax:tool_call></minimax:tool_call>",
        ] {
            let p = check(&make, text, true);
            assert_eq!(p.text, text);
            assert!(p.calls.is_empty());
        }
    }

    #[test]
    fn garbage_after_an_invoke_ends_the_block() {
        let text = format!("<minimax:tool_call>\n{INVOKE}\nhmm</minimax:tool_call>");
        let p = check(&make, &text, true);
        assert_eq!(calls(&p).len(), 1);
        assert_eq!(p.text, "\nhmm</minimax:tool_call>");
    }

    #[test]
    fn values_and_types() {
        let text = "<minimax:tool_call>\n<invoke name=\"typed\">\n<parameter name=\"arr\">[\"\\\"OpenAI\\\" latest\", \"é\"]</parameter>\n<parameter name=\"code\">\n  123  \n</parameter>\n<parameter name=\"n\">-5</parameter>\n<parameter name=\"flag\">true</parameter>\n<parameter name=\"obj\">{\"deep\": {\"x\": [true]}}</parameter>\n<parameter name=\"either\">12</parameter>\n<parameter name=\"new\">a <b> c</parameter>\n</invoke>\n</minimax:tool_call>";
        let p = ok(text);
        assert_eq!(
            calls(&p)[0].1,
            json!({"arr": ["\"OpenAI\" latest", "é"], "code": "123", "n": -5, "flag": true,
                   "obj": {"deep": {"x": [true]}}, "either": 12, "new": "a <b> c"})
        );
    }

    #[test]
    fn unterminated_block() {
        let text =
            "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo   ";
        let p = check(&make, text, true);
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"city": "Oslo"}))]
        );
        let text = format!("<minimax:tool_call>\n{INVOKE}\n<invoke name=\"get_");
        let p = check(&make, &text, true);
        assert_eq!(calls(&p).len(), 1);
        assert_eq!(p.text, "");
    }
}

//! Step-3 tool calls (full-width bars `｜` U+FF5C, ASCII underscores), parameters as
//! StepTML XML:
//!
//! ```text
//! <｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather"><steptml:parameter name="city">Paris</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>
//! ```
//!
//! Source: Step-3's chat template and vLLM's `step3` / SGLang's `step3` parsers (their
//! tests also show the `function<｜tool_sep｜>` part left out, which is accepted here too).
//!
//! Arguments stream as a JSON object built from the parameters as they arrive: `{` when
//! the invoke tag's name is read, then `"p": ` per parameter. A parameter the tool's schema
//! types as `string` streams as a JSON string, its text taken verbatim (only a possible
//! closing tag is held back); any other value (number, boolean, object, array, or no
//! schema) is held until its closing tag, then written as JSON if its trimmed text parses
//! as JSON, else as a string (a value held past `MAX_HELD_BYTES` streams as a string).
//! Unlike vLLM's parser this does not depend on how the text is cut into deltas. Markers and
//! whitespace between calls are dropped. At the end of output an open call is closed as far
//! as it got (an open value is written as above).

use super::json_scan::{
    escape_into, not_space, trimmed_name, Body, Ctx, Format, Machine, Markers, Op, Out, Step,
    NAME_MAX,
};
use super::{ToolParser, Tools, MAX_HELD_BYTES};
use serde_json::Value;

const CALLS_BEGIN: &str = "<｜tool_calls_begin｜>";
const CALLS_END: &str = "<｜tool_calls_end｜>";
const CALL_BEGIN: &str = "<｜tool_call_begin｜>";
const CALL_END: &str = "<｜tool_call_end｜>";
const PARAM: &str = "<steptml:parameter name=\"";
const PARAM_END: &[&str] = &["</steptml:parameter>"];
const INVOKE_END: &str = "</steptml:invoke>";
const ATTR_END: &[&str] = &["\">"];

const FORMAT: Format = Format {
    markers: &[CALLS_BEGIN],
    entries: &[0],
    ops: &[
        Op::Ws,
        Op::Branch(&[(CALL_BEGIN, 2), (CALLS_END, 12)]),
        Op::Ws,
        Op::IfChar('<', 5),
        Op::Until {
            end: &"<｜tool_sep｜>",
            ok: not_space,
            keep: false,
        },
        Op::Ws,
        Op::Lit("<steptml:invoke name=\""),
        Op::Until {
            end: &"\">",
            ok: attr_char,
            keep: true,
        },
        Op::Body(invoke),
        Op::Ws,
        Op::Lit(CALL_END),
        Op::Goto(0),
        Op::End,
    ],
    name: trimmed_name,
};

fn attr_char(c: char) -> bool {
    !matches!(c, '<' | '>' | '\n')
}

pub fn new(tools: &Tools) -> Box<dyn ToolParser> {
    Machine::boxed(&FORMAT, tools)
}

fn invoke(ctx: &Ctx) -> Box<dyn Body> {
    let name = ctx.name.clone().unwrap_or_default();
    let properties = ctx
        .tools
        .iter()
        .find(|tool| tool.name == name)
        .and_then(|tool| tool.parameters.get("properties"))
        .cloned()
        .unwrap_or(Value::Null);
    Box::new(Invoke {
        name,
        index: ctx.index,
        properties,
        committed: false,
        params: 0,
        state: State::Between,
        tag: String::new(),
        end: Markers::new(ATTR_END),
        param: String::new(),
        held: None,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between parameters: a parameter tag or the invoke's end tag.
    Between,
    /// Reading the parameter's name.
    Param,
    /// Reading its value.
    Value,
}

/// The parameters of one `<steptml:invoke>`, up to and including `</steptml:invoke>`.
struct Invoke {
    name: String,
    index: usize,
    /// The tool's `parameters.properties`, to type values.
    properties: Value,
    committed: bool,
    params: usize,
    state: State,
    /// The tag being matched between parameters.
    tag: String,
    /// Finds the end of the parameter name, then of the value.
    end: Markers,
    param: String,
    /// The value of a non-string parameter, held until its end (`None`: streaming).
    held: Option<String>,
}

impl Invoke {
    fn is_string(&self, param: &str) -> bool {
        match self
            .properties
            .get(param)
            .and_then(|schema| schema.get("type"))
        {
            Some(Value::String(kind)) => kind == "string",
            Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "string"),
            _ => false,
        }
    }

    /// The value ended (or the output did): write what is held, or close the string.
    fn end_value(&mut self, out: &mut Out) {
        let json = match self.held.take() {
            None => "\"".to_owned(),
            Some(held) => serde_json::from_str::<Value>(held.trim())
                .unwrap_or(Value::String(held))
                .to_string(),
        };
        out.args(self.index, &json);
    }
}

/// Appends value text: escaped if streaming, else held (streaming once too long).
fn value_text(held: &mut Option<String>, index: usize, text: &str, out: &mut Out) {
    if let Some(value) = held {
        if value.len() + text.len() <= MAX_HELD_BYTES {
            value.push_str(text);
            return;
        }
        let mut piece = String::from("\"");
        value.chars().for_each(|c| escape_into(c, &mut piece));
        out.args(index, &piece);
        *held = None;
    }
    let mut piece = String::new();
    text.chars().for_each(|c| escape_into(c, &mut piece));
    out.args(index, &piece);
}

impl Body for Invoke {
    fn feed(&mut self, c: char, out: &mut Out) -> Step {
        if !self.committed {
            if self.name.is_empty() {
                return Step::Fail;
            }
            out.start(self.index, &self.name);
            out.args(self.index, "{");
            self.committed = true;
        }
        match self.state {
            State::Between => {
                if self.tag.is_empty() && c.is_whitespace() {
                    return Step::More;
                }
                self.tag.push(c);
                if self.tag == PARAM {
                    self.tag.clear();
                    self.end = Markers::new(ATTR_END);
                    self.state = State::Param;
                } else if self.tag == INVOKE_END {
                    out.args(self.index, "}");
                    return Step::Done;
                } else if !PARAM.starts_with(&self.tag) && !INVOKE_END.starts_with(&self.tag) {
                    self.tag.pop();
                    self.close(out);
                    return Step::Fail;
                }
            }
            State::Param => {
                let Self { end, param, .. } = self;
                let found = end.feed(c, |text| param.push_str(text));
                if self.param.len() > NAME_MAX {
                    self.close(out);
                    return Step::Fail;
                }
                if found.is_some() {
                    let param = std::mem::take(&mut self.param);
                    let mut key = if self.params == 0 { "" } else { ", " }.to_owned();
                    key.push_str(&Value::String(param.clone()).to_string());
                    key.push_str(": ");
                    self.params += 1;
                    if self.is_string(&param) {
                        key.push('"');
                        self.held = None;
                    } else {
                        self.held = Some(String::new());
                    }
                    out.args(self.index, &key);
                    self.end = Markers::new(PARAM_END);
                    self.state = State::Value;
                }
            }
            State::Value => {
                let Self {
                    end, held, index, ..
                } = self;
                if end
                    .feed(c, |text| value_text(held, *index, text, out))
                    .is_some()
                {
                    self.end_value(out);
                    self.state = State::Between;
                }
            }
        }
        Step::More
    }

    fn committed(&self) -> bool {
        self.committed
    }

    fn close(&mut self, out: &mut Out) {
        if !self.committed {
            return;
        }
        if self.state == State::Value {
            let rest = self.end.take_held();
            value_text(&mut self.held, self.index, &rest, out);
            self.end_value(out);
        }
        self.state = State::Between;
        out.args(self.index, "}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tool::json_scan::{call, check, one_push, run};
    use crate::parsers::tool::ToolSpec;

    fn one(name: &str, params: &[(&str, &str)]) -> String {
        let params: String = params
            .iter()
            .map(|(k, v)| format!("<steptml:parameter name=\"{k}\">{v}</steptml:parameter>"))
            .collect();
        format!("{CALL_BEGIN}function<｜tool_sep｜><steptml:invoke name=\"{name}\">{params}</steptml:invoke>{CALL_END}")
    }

    fn tools() -> Tools {
        Tools::from(vec![ToolSpec {
            name: "search".into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "code": {"type": ["string", "null"]},
                    "limit": {"type": "integer"},
                    "opts": {"type": "object"},
                }
            }),
        }])
    }

    #[test]
    fn single_call_typed_by_schema() {
        let text = format!(
            "{CALLS_BEGIN}\n{}\n{CALLS_END}",
            one(
                "search",
                &[("query", "42"), ("limit", " 10 "), ("opts", "{\"a\": [1]}")]
            )
        );
        let got = check(new, &tools(), &text, true);
        assert_eq!(got.text, "");
        assert_eq!(
            got.calls,
            vec![call(
                "search",
                r#"{"query": "42", "limit": 10, "opts": {"a":[1]}}"#
            )]
        );
    }

    #[test]
    fn parallel_calls_after_text_in_one_push() {
        let text = format!(
            "Let me help.\n{CALLS_BEGIN}{}\n{}{CALLS_END}",
            one(
                "get_weather",
                &[("city", "Tokyo"), ("days", "3"), ("unit", "not json")]
            ),
            one("now", &[]),
        );
        let expected = vec![
            call(
                "get_weather",
                r#"{"city": "Tokyo", "days": 3, "unit": "not json"}"#,
            ),
            call("now", "{}"),
        ];
        assert_eq!(one_push(new, &text).calls, expected);
        let got = run(new, &text, true);
        assert_eq!(got.text, "Let me help.\n");
        assert_eq!(got.calls, expected);
    }

    #[test]
    fn without_the_call_type() {
        let text = format!("{CALLS_BEGIN}{CALL_BEGIN}<steptml:invoke name=\"f\"><steptml:parameter name=\"a\">true</steptml:parameter></steptml:invoke>{CALL_END}{CALLS_END}");
        assert_eq!(
            run(new, &text, true).calls,
            vec![call("f", r#"{"a": true}"#)]
        );
    }

    #[test]
    fn no_call_and_malformed_calls_are_text() {
        let broken = format!("{CALLS_BEGIN}{CALL_BEGIN}function<｜tool_sep｜><invoke name=\"f\"></invoke>{CALL_END}{CALLS_END}");
        for text in ["Plain <steptml:invoke> text.", broken.as_str()] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_values() {
        let code = "if a < b: print(\"</steptml:param>\")\n\t{ } 中文 \\";
        let text = format!(
            "{CALLS_BEGIN}{}{CALLS_END}",
            one("search", &[("code", code), ("query", "")])
        );
        let got = check(new, &tools(), &text, true);
        let args: Value = serde_json::from_str(&got.calls[0].arguments).unwrap_or_default();
        assert_eq!(args, serde_json::json!({"code": code, "query": ""}));
    }

    #[test]
    fn unterminated_call_is_closed() {
        let text = format!("{CALLS_BEGIN}{CALL_BEGIN}function<｜tool_sep｜><steptml:invoke name=\"search\"><steptml:parameter name=\"query\">rust</steptml:para");
        let got = check(new, &tools(), &text, false);
        assert_eq!(
            got.calls,
            vec![call("search", r#"{"query": "rust</steptml:para"}"#)]
        );
        let text = format!("{CALLS_BEGIN}{CALL_BEGIN}function<｜tool_sep｜><steptml:invoke name=\"f\"><steptml:parameter name=\"n\">12");
        assert_eq!(
            run(new, &text, false).calls,
            vec![call("f", r#"{"n": 12}"#)]
        );
    }
}

//! No tool calls: everything the model says is text. For models without a tool syntax and
//! for requests that must not be parsed.

use super::{ToolDelta, ToolParser, Tools};

struct Passthrough;

impl ToolParser for Passthrough {
    fn push(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        if !text.is_empty() {
            out.push(ToolDelta::Text(text.to_owned()));
        }
    }

    fn finish(&mut self, _out: &mut Vec<ToolDelta>) {}
}

pub fn new(_tools: &Tools) -> Box<dyn ToolParser> {
    Box::new(Passthrough)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tool::json_scan::check;

    #[test]
    fn everything_is_text() {
        let text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> [TOOL_CALLS]";
        let got = check(new, &Tools::from(Vec::new()), text, true);
        assert_eq!(got.text, text);
        assert!(got.calls.is_empty());
    }
}

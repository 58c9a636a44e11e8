//! The output of a request whose `tool_choice` names one function. The engine was held to
//! that function's arguments schema (constrained decoding), so the output is one call's
//! arguments object: everything from its first `{` on. What comes before it (whitespace
//! some engines emit) is dropped; an output with no `{` at all, from an engine that did
//! not follow the constraint, is returned as text.

use super::{ToolDelta, ToolParser, MAX_HELD_BYTES};

/// A parser that makes the whole output one call to `name`.
pub fn new(name: &str) -> Box<dyn ToolParser> {
    Box::new(Named {
        name: name.to_owned(),
        started: false,
        held: String::new(),
    })
}

struct Named {
    name: String,
    started: bool,
    /// Text before the first `{`, its first [`MAX_HELD_BYTES`] only (whatever the cutting,
    /// the same prefix), returned as text if no call ever starts.
    held: String,
}

impl ToolParser for Named {
    fn push(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        if self.started {
            if !text.is_empty() {
                out.push(ToolDelta::Arguments {
                    index: 0,
                    fragment: text.to_owned(),
                });
            }
            return;
        }
        match text.find('{') {
            Some(at) => {
                self.started = true;
                self.held.clear();
                out.push(ToolDelta::Start {
                    index: 0,
                    name: self.name.clone(),
                });
                out.push(ToolDelta::Arguments {
                    index: 0,
                    fragment: text[at..].to_owned(),
                });
            }
            None => {
                for c in text.chars() {
                    if self.held.len() + c.len_utf8() > MAX_HELD_BYTES {
                        break;
                    }
                    self.held.push(c);
                }
            }
        }
    }

    fn finish(&mut self, out: &mut Vec<ToolDelta>) {
        if !self.started && !self.held.is_empty() {
            out.push(ToolDelta::Text(std::mem::take(&mut self.held)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::cuttings::cuttings;
    use crate::parsers::tool::{collect, parse_whole};

    fn whole(text: &str) -> crate::parsers::tool::Parsed {
        parse_whole(new("f").as_mut(), text)
    }

    #[test]
    fn the_output_is_one_call_whatever_the_cutting() {
        let text = "\n {\"city\": \"Zürich\", \"n\": {\"a\": [1, 2]}}";
        let expected = whole(text);
        assert_eq!(expected.text, "");
        assert_eq!(expected.calls.len(), 1);
        assert_eq!(expected.calls[0].name, "f");
        let args: serde_json::Value = serde_json::from_str(&expected.calls[0].arguments).unwrap();
        assert_eq!(args["city"], "Zürich");
        for pieces in cuttings(text, 50, 7) {
            let mut parser = new("f");
            let mut out = Vec::new();
            for piece in pieces {
                parser.push(piece, &mut out);
            }
            parser.finish(&mut out);
            assert_eq!(collect(&out), expected);
        }
    }

    #[test]
    fn no_object_is_text() {
        let got = whole("I will not.");
        assert_eq!((got.text.as_str(), got.calls.len()), ("I will not.", 0));
        let long = "x".repeat(MAX_HELD_BYTES + 10);
        assert_eq!(whole(&long).text.len(), MAX_HELD_BYTES);
    }
}

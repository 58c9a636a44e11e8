//! What every tool-call parser shares: the streamed output it produces, the one-shot result
//! that output folds into, and the tools a request declared.
//!
//! A parser is one state machine fed the model's text in whatever pieces the engine's
//! tokens decode to. It never takes back what it emitted: text that could still turn out to
//! be the start of a call is held back until the parser knows, and a call is announced
//! (`Start`) only once its name is certain. The one-shot result is the same machine fed the
//! whole text at once ([`parse_whole`]), so streamed and one-shot answers agree by
//! construction and the property tests check that no cutting changes the result.

use std::sync::Arc;

/// Text held back while it might still be (the start of) a call, at most: past it the
/// held text is released as ordinary text and scanning goes on. Bounds the memory an
/// unterminated tag can take.
pub const MAX_HELD_BYTES: usize = 64 * 1024;

/// One piece of a parser's streamed output, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolDelta {
    /// Ordinary answer text.
    Text(String),
    /// Call `index` (0, 1, … in order of appearance) begins; its name is final.
    Start { index: usize, name: String },
    /// The next piece of call `index`'s arguments: the pieces of a call concatenate to a
    /// JSON object's text.
    Arguments { index: usize, fragment: String },
}

/// One tool call as OpenAI returns it: `arguments` is a JSON object's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// A whole answer: its text with the calls taken out, and the calls in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    pub text: String,
    pub calls: Vec<ToolCall>,
}

/// A function the request declared (`tools[].function`): parsers whose syntax carries
/// untyped values (XML parameters) read the schema to type them.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    /// The JSON schema of the arguments (`parameters`), `Null` when not given.
    pub parameters: serde_json::Value,
}

/// The request's tools, shared by the parsers of its choices.
pub type Tools = Arc<[ToolSpec]>;

/// A streaming tool-call parser. `Send`: a stream may move between tasks.
pub trait ToolParser: Send {
    /// Feeds the next piece of the model's output (a `&str`: the detokenizer never cuts
    /// a character), appending what can be said now to `out`.
    fn push(&mut self, text: &str, out: &mut Vec<ToolDelta>);

    /// The output ended: appends whatever was held back (a marker that never completed is
    /// text after all; a call still open is closed as far as it got).
    fn finish(&mut self, out: &mut Vec<ToolDelta>);
}

/// Folds streamed deltas into the whole answer: text concatenated, each call's name and
/// argument pieces joined.
pub fn collect(deltas: &[ToolDelta]) -> Parsed {
    let mut parsed = Parsed::default();
    for delta in deltas {
        match delta {
            ToolDelta::Text(text) => parsed.text.push_str(text),
            ToolDelta::Start { index, name } => {
                debug_assert_eq!(*index, parsed.calls.len(), "calls start in order");
                parsed.calls.push(ToolCall {
                    name: name.clone(),
                    arguments: String::new(),
                });
            }
            ToolDelta::Arguments { index, fragment } => {
                if let Some(call) = parsed.calls.get_mut(*index) {
                    call.arguments.push_str(fragment);
                }
            }
        }
    }
    parsed
}

/// The one-shot result: `parser` fed `text` whole, then finished.
pub fn parse_whole(parser: &mut dyn ToolParser, text: &str) -> Parsed {
    let mut out = Vec::new();
    parser.push(text, &mut out);
    parser.finish(&mut out);
    collect(&out)
}

//! What every reasoning parser shares: the streamed output it produces and the one-shot
//! result that output folds into. Like the tool-call parsers, a reasoning parser is one
//! state machine fed the model's text in any pieces; it holds back only what could still
//! be (part of) a marker, never takes back what it emitted, and its one-shot result is the
//! same machine fed the whole text ([`split_whole`]).

/// Text held back while it might still be a marker, at most (see the tool parsers').
pub const MAX_HELD_BYTES: usize = 64 * 1024;

/// One piece of a reasoning parser's output, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReasoningDelta {
    /// Thinking: `reasoning_content`, a thinking block.
    Reasoning(String),
    /// The answer proper (which the tool-call parser reads next).
    Text(String),
}

/// A whole answer split in two.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub reasoning: String,
    pub text: String,
}

/// How the request set up thinking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thinking {
    /// The request allows thinking (`enable_thinking` or the template's default; Messages'
    /// `thinking`). When false the parser passes everything through as text, unless the
    /// model opens a reasoning block by itself where its format says it may.
    pub enabled: bool,
    /// The prompt already opened the reasoning block (a template that ends the generation
    /// prompt with the opening tag, e.g. DeepSeek-R1's or Qwen3-thinking's): the output
    /// starts inside reasoning.
    pub opened_by_prompt: bool,
}

/// A streaming reasoning parser.
pub trait ReasoningParser: Send {
    /// Feeds the next piece of the model's output.
    fn push(&mut self, text: &str, out: &mut Vec<ReasoningDelta>);

    /// The output ended: appends whatever was held back.
    fn finish(&mut self, out: &mut Vec<ReasoningDelta>);
}

/// Folds streamed deltas into the whole answer.
pub fn collect(deltas: &[ReasoningDelta]) -> Split {
    let mut split = Split::default();
    for delta in deltas {
        match delta {
            ReasoningDelta::Reasoning(text) => split.reasoning.push_str(text),
            ReasoningDelta::Text(text) => split.text.push_str(text),
        }
    }
    split
}

/// The one-shot result: `parser` fed `text` whole, then finished.
pub fn split_whole(parser: &mut dyn ReasoningParser, text: &str) -> Split {
    let mut out = Vec::new();
    parser.push(text, &mut out);
    parser.finish(&mut out);
    collect(&out)
}

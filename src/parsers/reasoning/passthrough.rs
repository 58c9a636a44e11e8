//! Models that do not reason, or whose reasoning the gateway leaves in the answer:
//! everything is text, as it came.

use super::{ReasoningDelta, ReasoningParser, Thinking};

/// The passthrough parser.
pub fn new(_thinking: Thinking) -> Box<dyn ReasoningParser> {
    Box::new(Passthrough)
}

struct Passthrough;

impl ReasoningParser for Passthrough {
    fn push(&mut self, text: &str, out: &mut Vec<ReasoningDelta>) {
        if !text.is_empty() {
            out.push(ReasoningDelta::Text(text.to_owned()));
        }
    }

    fn finish(&mut self, _out: &mut Vec<ReasoningDelta>) {}
}

#[cfg(test)]
mod tests {
    use super::super::tags::testing::check;
    use super::*;

    #[test]
    fn everything_is_text() {
        let make = || {
            new(Thinking {
                enabled: true,
                opened_by_prompt: true,
            })
        };
        for text in ["plain", "<think>a</think>\n\nb", "", "ünï ✓ 答"] {
            check(&make, text, "", text);
        }
    }
}

//! Model output parsers for the gateway's own chat pipeline: reasoning split from the
//! answer ([`reasoning`]) and each model family's tool-call syntax turned into calls
//! ([`tool`]). Both are streaming state machines fed the text the detokenizer produces,
//! in whatever pieces it comes; their one-shot result is the same machine fed the whole
//! text, so a streamed and a non-streamed answer always agree.

#[cfg(test)]
pub mod cuttings;
pub mod reasoning;
pub mod tool;

use tool::registry::MakeParser;

/// The parsers one model's output goes through, chosen once when its worker registers:
/// the names its model card (or labels) give, else the gateway's flags, else the ones the
/// model's name suggests, else passthrough.
#[derive(Clone, Debug)]
pub struct Choice {
    pub tool_name: String,
    pub tool: MakeParser,
    pub reasoning_name: String,
    pub reasoning: reasoning::registry::Constructor,
    /// A Harmony parser is among them: the format's special tokens must stay in the text.
    pub harmony: bool,
}

impl Choice {
    /// The parsers for `model`, `tool` and `reasoning` naming them explicitly. An unknown
    /// name is an error (spec 1: it fails registration) naming the known ones.
    pub fn resolve(
        tool: Option<&str>,
        reasoning: Option<&str>,
        model: &str,
    ) -> Result<Choice, String> {
        let tool_name = tool.unwrap_or_else(|| tool::registry::for_model(model));
        let reasoning_name = reasoning.unwrap_or_else(|| reasoning::registry::for_model(model));
        let make_tool = tool::registry::by_name(tool_name).ok_or_else(|| {
            format!(
                "unknown tool_parser {tool_name:?} (known: {})",
                tool::registry::NAMES.join(", ")
            )
        })?;
        let make_reasoning = reasoning::registry::by_name(reasoning_name).ok_or_else(|| {
            format!(
                "unknown reasoning_parser {reasoning_name:?} (known: {})",
                reasoning::registry::NAMES.join(", ")
            )
        })?;
        Ok(Choice {
            harmony: tool::registry::is_harmony(tool_name)
                || reasoning::registry::is_harmony(reasoning_name),
            tool_name: tool_name.to_owned(),
            tool: make_tool,
            reasoning_name: reasoning_name.to_owned(),
            reasoning: make_reasoning,
        })
    }

    /// Whether the tool parser finds calls at all (passthrough does not).
    pub fn parses_tools(&self) -> bool {
        !self.tool_name.eq_ignore_ascii_case("passthrough")
    }

    /// Whether the reasoning parser splits anything (passthrough does not).
    pub fn parses_reasoning(&self) -> bool {
        !self.reasoning_name.eq_ignore_ascii_case("passthrough")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_names_win_then_the_model_name_then_passthrough() {
        let c = Choice::resolve(Some("hermes"), None, "Qwen3-8B").unwrap();
        assert_eq!(
            (c.tool_name.as_str(), c.reasoning_name.as_str()),
            ("hermes", "qwen3")
        );
        let c = Choice::resolve(None, None, "gpt-oss-20b").unwrap();
        assert!(c.harmony && c.parses_tools() && c.parses_reasoning());
        let c = Choice::resolve(None, None, "echo-model").unwrap();
        assert!(!c.parses_tools() && !c.parses_reasoning() && !c.harmony);
        let err = Choice::resolve(Some("nope"), None, "m").unwrap_err();
        assert!(err.contains("unknown tool_parser \"nope\""), "{err}");
        assert!(Choice::resolve(None, Some("nope"), "m").is_err());
    }
}

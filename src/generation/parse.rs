//! A chat choice's text after the stop strings, split by the worker's output parsers:
//! reasoning first (`reasoning_content`), then tool calls out of what remains, the rest
//! being the answer's content. Both parsers are streaming state machines, so what comes
//! out here is final, like the decoder's text: a streamed answer and a whole one agree.
//!
//! Calls get their OpenAI ids (`call_` and 24 random characters) when they start, and
//! keep them and their index across every delta.

use super::ask::{Ask, ToolChoice};
use super::delta::{CallDelta, Delta};
use crate::parsers::reasoning::{ReasoningDelta, ReasoningParser, Thinking};
use crate::parsers::tool::{self, ToolDelta, ToolParser};
use crate::parsers::Choice;

/// The parsers of one choice.
pub struct Parsing {
    reasoning: Option<Box<dyn ReasoningParser>>,
    tools: Option<Box<dyn ToolParser>>,
    /// The parsers' outputs, reused.
    thought: Vec<ReasoningDelta>,
    said: Vec<ToolDelta>,
    /// Calls started so far.
    calls: usize,
}

impl Parsing {
    /// The parsing `ask` needs on a worker with `choice`; `None` when nothing would be
    /// parsed (both parsers passthrough, or no tools and no reasoning parser).
    /// `opened_by_prompt`: the rendered prompt ends inside a reasoning block.
    pub fn for_request(choice: &Choice, ask: &Ask, opened_by_prompt: bool) -> Option<Parsing> {
        let tools = match &ask.tool_choice {
            _ if ask.tools.is_empty() => None,
            ToolChoice::None => None,
            ToolChoice::Auto => choice.parses_tools().then(|| (choice.tool)(&ask.tools)),
            // Constrained to `[{"name", "parameters"}, …]` (see `Ask::json_schema`),
            // whatever the model's own syntax.
            ToolChoice::Required => Some(tool::json::new(&ask.tools)),
            // Constrained to the function's arguments.
            ToolChoice::Named(name) => Some(tool::named::new(name)),
        };
        let reasoning = choice.parses_reasoning().then(|| {
            (choice.reasoning)(Thinking {
                enabled: ask.thinking,
                opened_by_prompt,
            })
        });
        (tools.is_some() || reasoning.is_some()).then(|| Parsing {
            reasoning,
            tools,
            thought: Vec::new(),
            said: Vec::new(),
            calls: 0,
        })
    }

    /// Whether the choice has made a call.
    pub fn called(&self) -> bool {
        self.calls > 0
    }

    /// Parses the text the decoder appended to `delta.text` from byte `from` on, leaving
    /// in `delta` the content, reasoning and call pieces it made final.
    pub fn push(&mut self, delta: &mut Delta, from: usize) {
        if from >= delta.text.len() {
            return;
        }
        let new = delta.text.split_off(from);
        self.feed(&new, false, delta);
    }

    /// The choice ended: whatever the parsers held back.
    pub fn finish(&mut self, delta: &mut Delta) {
        self.feed("", true, delta);
    }

    fn feed(&mut self, text: &str, end: bool, delta: &mut Delta) {
        self.thought.clear();
        match &mut self.reasoning {
            Some(parser) => {
                parser.push(text, &mut self.thought);
                if end {
                    parser.finish(&mut self.thought);
                }
            }
            None => self.thought.push(ReasoningDelta::Text(text.to_owned())),
        }
        self.said.clear();
        for piece in self.thought.drain(..) {
            match piece {
                ReasoningDelta::Reasoning(thought) => delta.reasoning.push_str(&thought),
                ReasoningDelta::Text(text) => match &mut self.tools {
                    Some(parser) => parser.push(&text, &mut self.said),
                    None => delta.text.push_str(&text),
                },
            }
        }
        if let (true, Some(parser)) = (end, &mut self.tools) {
            parser.finish(&mut self.said);
        }
        for piece in self.said.drain(..) {
            match piece {
                ToolDelta::Text(text) => delta.text.push_str(&text),
                ToolDelta::Start { index, name } => {
                    self.calls = self.calls.max(index + 1);
                    delta.calls.push(CallDelta::Start {
                        index,
                        id: call_id(),
                        name,
                    });
                }
                ToolDelta::Arguments { index, fragment } => match delta.calls.last_mut() {
                    // Pieces of one call within one event go out as one.
                    Some(CallDelta::Arguments {
                        index: last,
                        fragment: joined,
                    }) if *last == index => joined.push_str(&fragment),
                    _ => delta.calls.push(CallDelta::Arguments { index, fragment }),
                },
            }
        }
    }
}

/// `call_` and 24 random letters and digits, as OpenAI's ids look.
fn call_id() -> String {
    let raw = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{}", &raw[..24])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::Choice;

    fn ask(body: &str) -> Ask {
        Ask::parse(super::super::ask::Api::Chat, body.as_bytes()).unwrap()
    }

    const TOOLS: &str = r#""tools": [{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]"#;

    fn run(parsing: &mut Parsing, pieces: &[&str]) -> Delta {
        let mut whole = Delta::default();
        for piece in pieces {
            let mut delta = Delta::default();
            delta.text.push_str(piece);
            parsing.push(&mut delta, 0);
            whole.text.push_str(&delta.text);
            whole.reasoning.push_str(&delta.reasoning);
            whole.calls.extend(delta.calls);
        }
        let mut delta = Delta::default();
        parsing.finish(&mut delta);
        whole.text.push_str(&delta.text);
        whole.reasoning.push_str(&delta.reasoning);
        whole.calls.extend(delta.calls);
        whole
    }

    #[test]
    fn reasoning_then_a_call_then_nothing_lost() {
        let choice = Choice::resolve(Some("qwen"), Some("qwen3"), "m").unwrap();
        let a = ask(&format!(
            r#"{{"messages": [{{"role": "user", "content": "x"}}], {TOOLS}}}"#
        ));
        let output = "<think>hmm</think>Let me look.<tool_call>\n{\"name\": \"get_weather\", \
                      \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let mut whole = None;
        for step in [1, 3, 7, output.len()] {
            let pieces: Vec<&str> = output
                .as_bytes()
                .chunks(step)
                .map(|c| std::str::from_utf8(c).unwrap())
                .collect();
            let mut parsing = Parsing::for_request(&choice, &a, false).unwrap();
            let got = run(&mut parsing, &pieces);
            assert!(parsing.called());
            let calls: Vec<(String, serde_json::Value)> =
                crate::generation::delta::calls(&got.calls)
                    .into_iter()
                    .map(|c| {
                        assert!(c.id.starts_with("call_") && c.id.len() == 29, "{}", c.id);
                        (
                            c.name.to_owned(),
                            serde_json::from_str(&c.arguments).unwrap(),
                        )
                    })
                    .collect();
            let summary = (got.reasoning.clone(), got.text.clone(), calls);
            assert_eq!(summary.0, "hmm");
            assert_eq!(summary.1, "Let me look.");
            assert_eq!(
                summary.2,
                vec![(
                    "get_weather".to_owned(),
                    serde_json::json!({"city": "Paris"})
                )]
            );
            if let Some(first) = &whole {
                assert_eq!(first, &summary, "cut every {step} bytes");
            }
            whole = Some(summary);
        }
    }

    #[test]
    fn no_tools_or_tool_choice_none_leaves_calls_as_text() {
        let choice = Choice::resolve(Some("qwen"), Some("passthrough"), "m").unwrap();
        let plain = ask(r#"{"messages": [{"role": "user", "content": "x"}]}"#);
        assert!(Parsing::for_request(&choice, &plain, false).is_none());
        let none = ask(&format!(
            r#"{{"messages": [{{"role": "user", "content": "x"}}], {TOOLS}, "tool_choice": "none"}}"#
        ));
        assert!(Parsing::for_request(&choice, &none, false).is_none());
        assert_eq!(none.tool_choice, ToolChoice::None);
        assert_eq!(none.tools.len(), 1);
        assert_eq!(none.tools[0].name, "get_weather");
        assert_eq!(
            none.tools[0].parameters["properties"]["city"]["type"],
            "string"
        );
    }

    #[test]
    fn thinking_off_keeps_qwen3_output_as_text() {
        let choice = Choice::resolve(Some("passthrough"), Some("qwen3"), "m").unwrap();
        let off = ask(r#"{"messages": [{"role": "user", "content": "x"}],
                "chat_template_kwargs": {"enable_thinking": false}}"#);
        let mut parsing = Parsing::for_request(&choice, &off, false).unwrap();
        let got = run(&mut parsing, &["<think>a</think>b"]);
        assert_eq!(
            (got.reasoning.as_str(), got.text.as_str()),
            ("", "<think>a</think>b")
        );
    }
}

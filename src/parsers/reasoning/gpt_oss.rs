//! gpt-oss: OpenAI's Harmony format, where the output is a series of messages
//! `<|start|>{header}<|message|>{content}<|end|>` and the header names a channel.
//!
//! Sources: OpenAI's Harmony format guide (openai/harmony `docs/format.md`): the generation
//! starts right after the prompt's `<|start|>assistant`, so the first message has no
//! `<|start|>`; `analysis` is the chain of thought, `final` the answer, `commentary` carries
//! function calls (`to=functions.NAME`, "the recipient might be defined in the role or
//! channel section of the header", optionally `<|constrain|>json`, ended by `<|call|>`) and
//! preambles meant for the user; built-in tools (`browser.*`, `python`) are called on the
//! `analysis` channel; `<|return|>` and `<|call|>` end generation. SGLang's `gpt-oss`
//! parser likewise sends `analysis` to reasoning and hands tool-call messages on as their
//! raw text, markers included, for the tool-call parser.
//!
//! Behaviour:
//! - A message's header is held until `<|message|>` (headers are short: past
//!   [`MAX_HEADER_BYTES`] the output is taken not to be Harmony at all and the rest passes
//!   through as text). Then its content is routed by the header:
//!   - a recipient on any channel other than `analysis`, or a `functions.` recipient on any
//!     channel: a tool call, passed through whole as text: the header as it came (with its
//!     `<|start|>`, when the message had one), `<|message|>`, the content and the token that
//!     ends it, so the tool-call parser reads the message unchanged;
//!   - `analysis` (with no recipient, or a built-in tool's): reasoning;
//!   - anything else (`final`, a `commentary` preamble, no channel): text.
//! - Structural tokens are dropped from reasoning and answer; nothing else is (no whitespace
//!   trimming: channels are delimited by tokens, not by newlines). Several `analysis`
//!   messages concatenate into one reasoning.
//! - `<|end|>`, `<|return|>`, `<|call|>` end a message, and so does `<|start|>` (a message
//!   the model did not end). They are special tokens, so they always act as structure, even
//!   inside a final answer. Anything between messages counts as the next header (so it
//!   goes where that header goes: kept with a tool call, dropped otherwise). Content cut
//!   off before its end token keeps its route; a header cut off before `<|message|>` is
//!   emitted as text at the end.
//! - `Thinking` is not consulted: gpt-oss always reasons, and the channels say what is what.
//!   The engine must keep special tokens in the text it returns.

use super::tags::{find_first, split_held};
use super::{ReasoningDelta, ReasoningParser, Thinking};

const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
/// The tokens that end a message's content.
const ENDS: &[&str] = &["<|end|>", "<|return|>", "<|call|>", START];

/// The longest header held back: real ones are a role, a channel, a recipient and a
/// content type, well under this.
pub const MAX_HEADER_BYTES: usize = 1024;

/// The gpt-oss parser.
pub fn new(_thinking: Thinking) -> Box<dyn ReasoningParser> {
    Box::new(Harmony {
        state: State::Header,
        header: String::new(),
        partial: String::new(),
    })
}

/// Where a message's content goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Reasoning,
    Text,
    /// Text, with the header and the end token kept.
    ToolCall,
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Reading a header (what comes before `<|message|>`).
    Header,
    /// Reading a message's content.
    Body(Route),
    /// Not Harmony: everything is text.
    Raw,
}

struct Harmony {
    state: State,
    /// The header read so far, as it came.
    header: String,
    /// The end of what was fed that is a proper prefix of a token looked for.
    partial: String,
}

impl ReasoningParser for Harmony {
    fn push(&mut self, text: &str, out: &mut Vec<ReasoningDelta>) {
        if self.partial.is_empty() {
            self.feed(text, out);
        } else {
            let mut joined = std::mem::take(&mut self.partial);
            joined.push_str(text);
            self.feed(&joined, out);
        }
    }

    fn finish(&mut self, out: &mut Vec<ReasoningDelta>) {
        let mut held = std::mem::take(&mut self.header);
        held.push_str(&std::mem::take(&mut self.partial));
        let route = match self.state {
            State::Body(route) => route,
            State::Header | State::Raw => Route::Text,
        };
        emit(out, route, &held);
        self.state = State::Raw;
    }
}

impl Harmony {
    /// Runs `text` through the states; whatever may still be a token ends in `partial`.
    fn feed(&mut self, text: &str, out: &mut Vec<ReasoningDelta>) {
        let mut rest = Some(text);
        while let Some(text) = rest {
            rest = match self.state {
                State::Header => self.in_header(text, out),
                State::Body(route) => self.in_body(text, route, out),
                State::Raw => {
                    emit(out, Route::Text, text);
                    None
                }
            };
        }
    }

    /// Reads a header up to `<|message|>` and routes the content after it. Returns that
    /// content's start, if it came.
    fn in_header<'t>(&mut self, text: &'t str, out: &mut Vec<ReasoningDelta>) -> Option<&'t str> {
        let looked_for: [&[&str]; 1] = [&[MESSAGE]];
        let Some(found) = find_first(text, &looked_for) else {
            let (header, held) = split_held(text, &looked_for);
            self.header.push_str(header);
            held.clone_into(&mut self.partial);
            if self.header.len() > MAX_HEADER_BYTES {
                self.give_up(out);
            }
            return None;
        };
        self.header.push_str(text.get(..found.at).unwrap_or(""));
        if self.header.len() > MAX_HEADER_BYTES {
            self.give_up(out);
            return text.get(found.at..);
        }
        let route = route(&self.header);
        let mut header = std::mem::take(&mut self.header);
        if route == Route::ToolCall {
            header.push_str(MESSAGE);
            emit(out, Route::Text, &header);
        }
        self.state = State::Body(route);
        text.get(found.at + found.len..)
    }

    /// Emits a message's content up to the token that ends it, or up to what may still be
    /// one. Returns what follows the message, if it came.
    fn in_body<'t>(
        &mut self,
        text: &'t str,
        route: Route,
        out: &mut Vec<ReasoningDelta>,
    ) -> Option<&'t str> {
        let looked_for: [&[&str]; 1] = [ENDS];
        let Some(found) = find_first(text, &looked_for) else {
            let (content, held) = split_held(text, &looked_for);
            emit(out, route, content);
            held.clone_into(&mut self.partial);
            return None;
        };
        emit(out, route, text.get(..found.at).unwrap_or(""));
        let end = text.get(found.at..found.at + found.len).unwrap_or("");
        if end == START {
            self.header.push_str(START);
        } else if route == Route::ToolCall {
            emit(out, Route::Text, end);
        }
        self.state = State::Header;
        text.get(found.at + found.len..)
    }

    /// The header grew past any real one: this is not Harmony, pass everything through.
    fn give_up(&mut self, out: &mut Vec<ReasoningDelta>) {
        let mut held = std::mem::take(&mut self.header);
        held.push_str(&std::mem::take(&mut self.partial));
        emit(out, Route::Text, &held);
        self.state = State::Raw;
    }
}

/// Where the content of a message with `header` goes.
fn route(header: &str) -> Route {
    let analysis = word_after(header, CHANNEL) == Some("analysis");
    match word_after(header, "to=") {
        Some(recipient) if !analysis || recipient.starts_with("functions.") => Route::ToolCall,
        _ if analysis => Route::Reasoning,
        _ => Route::Text,
    }
}

/// The word right after the first `key` in `header` (up to whitespace or a token).
fn word_after<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let rest = header.get(header.find(key)? + key.len()..)?;
    let end = rest
        .find(|c: char| c.is_whitespace() || c == '<')
        .unwrap_or(rest.len());
    rest.get(..end)
}

fn emit(out: &mut Vec<ReasoningDelta>, route: Route, s: &str) {
    if s.is_empty() {
        return;
    }
    out.push(match route {
        Route::Reasoning => ReasoningDelta::Reasoning(s.to_owned()),
        Route::Text | Route::ToolCall => ReasoningDelta::Text(s.to_owned()),
    });
}

#[cfg(test)]
mod tests {
    use super::super::tags::testing::check;
    use super::*;

    fn make() -> Box<dyn ReasoningParser> {
        new(Thinking {
            enabled: true,
            opened_by_prompt: false,
        })
    }

    #[test]
    fn analysis_then_final() {
        check(
            &make,
            "<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>",
            "User asks: \"What is 2 + 2?\" Simple arithmetic.",
            "2 + 2 = 4.",
        );
    }

    #[test]
    fn function_call_passes_through_whole() {
        let call = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>";
        check(
            &make,
            &format!(
                "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>{call}"
            ),
            "Need to use function get_weather.",
            call,
        );
        // Recipient in the role part of the header.
        let call =
            "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>";
        check(
            &make,
            &format!("<|channel|>analysis<|message|>a<|end|>{call}"),
            "a",
            call,
        );
        // Whatever comes between messages stays with the call's header.
        let call = "\n<|start|>assistant<|channel|>commentary to=functions.f<|message|>{}<|call|>";
        check(
            &make,
            &format!("<|channel|>analysis<|message|>a<|end|>{call}"),
            "a",
            call,
        );
        // The first message is the call: no <|start|> of its own.
        let call =
            "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\":1}<|call|>";
        check(&make, call, "", call);
    }

    #[test]
    fn preamble_and_final_are_text() {
        check(
            &make,
            "<|channel|>analysis<|message|>plan<|end|><|start|>assistant<|channel|>commentary<|message|>**Action plan**: two steps.<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>",
            "plan",
            "**Action plan**: two steps.Done.",
        );
    }

    #[test]
    fn no_reasoning() {
        check(
            &make,
            "<|channel|>final<|message|>Hi there<|return|>",
            "",
            "Hi there",
        );
    }

    #[test]
    fn unclosed_and_empty_reasoning() {
        check(
            &make,
            "<|channel|>analysis<|message|>thinking <|",
            "thinking <|",
            "",
        );
        check(
            &make,
            "<|channel|>analysis<|message|><|end|><|start|>assistant<|channel|>final<|message|>x",
            "",
            "x",
        );
    }

    #[test]
    fn several_analysis_messages_and_built_in_tools() {
        check(
            &make,
            "<|channel|>analysis<|message|>one <|end|><|start|>assistant<|channel|>analysis to=python<|message|>print(1)<|call|>",
            "one print(1)",
            "",
        );
    }

    #[test]
    fn message_without_end_and_truncated_header() {
        check(
            &make,
            "<|channel|>analysis<|message|>r<|start|>assistant<|channel|>final<|message|>t",
            "r",
            "t",
        );
        check(
            &make,
            "<|channel|>final<|message|>t<|end|><|start|>assis",
            "",
            "t<|start|>assis",
        );
    }

    #[test]
    fn tokens_look_alikes_in_content_stay() {
        check(
            &make,
            "<|channel|>final<|message|>Use <|endoftext|> or <| |> literally.<|return|>",
            "",
            "Use <|endoftext|> or <| |> literally.",
        );
    }

    #[test]
    fn not_harmony_passes_through() {
        check(
            &make,
            "Plain text, no channels.",
            "",
            "Plain text, no channels.",
        );
        let long = format!("{}<|message|>tail", "x".repeat(MAX_HEADER_BYTES + 1));
        check(&make, &long, "", &long);
    }

    #[test]
    fn non_ascii() {
        check(
            &make,
            "<|channel|>analysis<|message|>用户问候。🙂<|end|><|start|>assistant<|channel|>final<|message|>你好！<|return|>",
            "用户问候。🙂",
            "你好！",
        );
    }
}

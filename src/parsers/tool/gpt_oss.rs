//! gpt-oss's Harmony messages: a call is a message addressed `to=functions.NAME`, its content
//! the JSON arguments, ended by `<|call|>`:
//!
//! ```text
//! <|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//! ```
//!
//! Source: OpenAI's Harmony format guide (`openai/harmony`, `docs/format.md`: special tokens
//! `<|start|>` `<|end|>` `<|message|>` `<|channel|>` `<|constrain|>` `<|return|>` `<|call|>`;
//! message `<|start|>{header}<|message|>{content}<|end|>`; the recipient `to=…` "might be
//! defined in the role or channel section of the header"; the output begins mid-header, after
//! the prompt's `<|start|>assistant`).
//!
//! What becomes what: content addressed to `functions.NAME` (any channel) is call NAME, its
//! content streamed as the arguments as it comes (`{}` when empty); `final` and
//! `commentary` without recipient (a preamble meant for the user) are text; `analysis`
//! (reasoning, another parser's business) and messages to other recipients (built-in tools
//! such as `browser.search`) are dropped. A header is held until `<|message|>`; one that breaks
//! (a newline or more than [`HEADER_LIMIT`] bytes before `<|message|>`, or an ending token in
//! it) was plain text if it holds no Harmony token (it is released), else it is dropped.
//! `finish` inside a call closes what it can of the JSON: an open string, then the open
//! arrays and objects (a cut right after `:` or `,` stays invalid).

use super::xml_params::emit_text;
use super::{ToolDelta, ToolParser, Tools, MAX_HELD_BYTES};

/// A header longer than this is not one.
const HEADER_LIMIT: usize = 512;

const START: &str = "<|start|>";
const END: &str = "<|end|>";
const MESSAGE: &str = "<|message|>";
const CHANNEL: &str = "<|channel|>";
const CONSTRAIN: &str = "<|constrain|>";
const RETURN: &str = "<|return|>";
const CALL: &str = "<|call|>";
const TOKENS: [&str; 7] = [START, END, MESSAGE, CHANNEL, CONSTRAIN, RETURN, CALL];

/// A Harmony tool-call parser. The arguments are the model's JSON, so `tools` is not needed.
pub fn new(_tools: &Tools) -> Box<dyn ToolParser> {
    Box::new(Harmony {
        state: State::Header,
        head: String::new(),
        lit: String::new(),
        next_index: 0,
        mark: 0,
    })
}

#[derive(Debug)]
enum State {
    /// Reading a header into `head`, up to `<|message|>`.
    Header,
    /// Content shown as text.
    Text,
    /// Content dropped.
    Drop,
    /// A call's arguments.
    Call(Args),
}

/// The arguments of the call being streamed, and enough of their JSON shape to close it.
#[derive(Debug)]
struct Args {
    index: usize,
    started: bool,
    in_string: bool,
    escaped: bool,
    closers: Vec<char>,
}

struct Harmony {
    state: State,
    head: String,
    /// The part of a special token matched so far.
    lit: String,
    next_index: usize,
    mark: usize,
}

impl ToolParser for Harmony {
    fn push(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        self.mark = out.len();
        for c in text.chars() {
            self.step(c, out);
        }
    }

    fn finish(&mut self, out: &mut Vec<ToolDelta>) {
        self.mark = out.len();
        let lit = std::mem::take(&mut self.lit);
        match std::mem::replace(&mut self.state, State::Header) {
            State::Header => self.release_head(out),
            State::Text => emit_text(out, self.mark, &lit),
            State::Drop => {}
            State::Call(args) => {
                let mut tail = String::new();
                if !args.started {
                    tail.push_str("{}");
                }
                if args.in_string {
                    tail.push('"');
                }
                tail.extend(args.closers.iter().rev());
                self.emit_args(out, args.index, &tail);
            }
        }
    }
}

impl Harmony {
    fn step(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        if !self.lit.is_empty() {
            self.lit.push(c);
            if let Some(token) = TOKENS.iter().find(|t| **t == self.lit) {
                self.lit.clear();
                self.token(token, out);
                return;
            }
            if TOKENS.iter().any(|t| t.starts_with(self.lit.as_str())) {
                return;
            }
            // Every token has a single `<`, first: the match can only restart at `c`.
            self.lit.pop();
            let partial = std::mem::take(&mut self.lit);
            partial.chars().for_each(|p| self.ordinary(p, out));
        }
        if c == '<' {
            self.lit.push(c);
        } else {
            self.ordinary(c, out);
        }
    }

    fn token(&mut self, token: &'static str, out: &mut Vec<ToolDelta>) {
        match (&self.state, token) {
            (State::Header, MESSAGE) => self.open_message(out),
            (State::Header, CHANNEL | CONSTRAIN) => self.head.push_str(token),
            (State::Header, _) => {
                // `<|start|>` begins a header afresh; an ending token breaks this one.
                self.release_head(out);
            }
            (_, MESSAGE | CONSTRAIN) => token.chars().for_each(|t| self.ordinary(t, out)),
            (_, _) => {
                self.close_message(out);
                if token == CHANNEL {
                    self.head.push_str(CHANNEL);
                }
            }
        }
    }

    fn ordinary(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        match &mut self.state {
            State::Header => {
                self.head.push(c);
                let broken =
                    (c == '\n' && !self.head.trim().is_empty()) || self.head.len() > HEADER_LIMIT;
                if broken {
                    self.release_head(out);
                    self.state = State::Text;
                }
            }
            State::Text => emit_text(out, self.mark, c.encode_utf8(&mut [0; 4])),
            State::Drop => {}
            State::Call(args) => {
                if !args.started && c.is_whitespace() {
                    return;
                }
                args.started = true;
                track_json(args, c);
                let index = args.index;
                self.emit_args(out, index, c.encode_utf8(&mut [0; 4]));
            }
        }
    }

    /// `<|message|>` ends the header: what the content is follows from it.
    fn open_message(&mut self, out: &mut Vec<ToolDelta>) {
        let head = std::mem::take(&mut self.head);
        let (_role, channel_part) = head.split_once(CHANNEL).unwrap_or((head.as_str(), ""));
        let channel = channel_part
            .split(|c: char| c.is_whitespace() || c == '<')
            .find(|w| !w.is_empty())
            .unwrap_or("");
        let recipient = head.split_once("to=").map(|(_, rest)| {
            rest.split(|c: char| c.is_whitespace() || c == '<')
                .next()
                .unwrap_or("")
        });
        self.state = match recipient {
            Some(to) => match to.strip_prefix("functions.") {
                Some(name) if !name.is_empty() => {
                    let index = self.next_index;
                    self.next_index += 1;
                    out.push(ToolDelta::Start {
                        index,
                        name: name.to_owned(),
                    });
                    State::Call(Args {
                        index,
                        started: false,
                        in_string: false,
                        escaped: false,
                        closers: Vec::new(),
                    })
                }
                Some(_) => State::Text,
                None => State::Drop,
            },
            None if channel == "analysis" => State::Drop,
            None => State::Text,
        };
    }

    /// The content ended (`<|end|>`, `<|call|>`, `<|return|>` or a new header).
    fn close_message(&mut self, out: &mut Vec<ToolDelta>) {
        if let State::Call(args) = &self.state {
            if !args.started {
                let index = args.index;
                self.emit_args(out, index, "{}");
            }
        }
        self.state = State::Header;
    }

    /// A header that came to nothing: plain text is released, Harmony structure dropped.
    fn release_head(&mut self, out: &mut Vec<ToolDelta>) {
        let head = std::mem::take(&mut self.head);
        if !head.trim().is_empty() && !head.contains("<|") {
            emit_text(out, self.mark, &head);
        }
    }

    fn emit_args(&self, out: &mut Vec<ToolDelta>, index: usize, piece: &str) {
        if piece.is_empty() {
            return;
        }
        if out.len() > self.mark {
            if let Some(ToolDelta::Arguments { index: i, fragment }) = out.last_mut() {
                if *i == index {
                    fragment.push_str(piece);
                    return;
                }
            }
        }
        out.push(ToolDelta::Arguments {
            index,
            fragment: piece.to_owned(),
        });
    }
}

/// Follows strings and nesting so `finish` can close what is open.
fn track_json(args: &mut Args, c: char) {
    if args.in_string {
        if args.escaped {
            args.escaped = false;
        } else if c == '\\' {
            args.escaped = true;
        } else if c == '"' {
            args.in_string = false;
        }
        return;
    }
    match c {
        '"' => args.in_string = true,
        '{' | '[' if args.closers.len() < MAX_HELD_BYTES => {
            args.closers.push(if c == '{' { '}' } else { ']' })
        }
        '}' | ']' => {
            args.closers.pop();
        }
        _ => {}
    }
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
        let parts = [
            CALL,
            &CALL[..40],
            &CALL[40..],
            "<|start|>",
            "assistant",
            "<|channel|>",
            "analysis",
            "commentary",
            "final",
            " to=functions.get_weather",
            " to=browser.search",
            " ",
            "<|constrain|>",
            "json",
            "<|message|>",
            "<|end|>",
            "<|call|>",
            "<|return|>",
            "{\"city\": \"Paris\"}",
            "{",
            "}",
            "\"",
            "\\",
            "[",
            "hello",
            "\n",
            "<|",
            "<",
            "😀",
        ];
        for seed in 0..3 {
            soup(&make, &parts, seed, false);
        }
    }

    const CALL: &str = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>";

    #[test]
    fn single_call_after_reasoning() {
        let text = format!("<|channel|>analysis<|message|>Need the <b>weather</b>.<|end|>{CALL}");
        let p = ok(&text);
        assert_eq!(p.text, "");
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"city": "Paris"}))]
        );
        assert_eq!(p.calls[0].arguments, r#"{"city":"Paris"}"#);
    }

    #[test]
    fn call_at_the_very_start_and_recipient_in_role() {
        let p = ok("<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{\"city\": \"Oslo\"}<|call|>");
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"city": "Oslo"}))]
        );
        let p = ok(" to=functions.lookup<|channel|>commentary json<|message|>{}<|call|>");
        assert_eq!(calls(&p), vec![("lookup".into(), json!({}))]);
    }

    #[test]
    fn parallel_calls_with_preamble() {
        let text = format!(
            "<|channel|>analysis<|message|>Two cities.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking both.<|end|>{}{}",
            CALL.replace("<|call|>", "<|end|>"),
            CALL.replace("Paris", "Lyon \\\"<|x|>\\\" 😀")
        );
        let p = ok(&text);
        assert_eq!(p.text, "Checking both.");
        assert_eq!(
            calls(&p),
            vec![
                ("get_weather".into(), json!({"city": "Paris"})),
                ("get_weather".into(), json!({"city": "Lyon \"<|x|>\" 😀"})),
            ]
        );
    }

    #[test]
    fn final_answer_is_text() {
        let p = ok("<|channel|>analysis<|message|>2+2.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.\nNew line <3<|return|>");
        assert_eq!(p.text, "2 + 2 = 4.\nNew line <3");
        assert!(p.calls.is_empty());
    }

    #[test]
    fn text_then_call() {
        let text = format!("<|channel|>final<|message|>Sure.<|end|>{CALL}");
        let p = ok(&text);
        assert_eq!(p.text, "Sure.");
        assert_eq!(p.calls.len(), 1);
    }

    #[test]
    fn built_in_tools_and_bad_headers() {
        let p = ok("<|channel|>analysis to=browser.search<|message|>{\"query\":\"x\"}<|call|>");
        assert_eq!(p, Parsed::default());
        let p = ok("plain text with no tokens\nat all");
        assert_eq!(p.text, "plain text with no tokens\nat all");
        let p = ok("Hello<|return|>");
        assert_eq!(p.text, "Hello");
        let p =
            ok("<|channel|>final<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>");
        assert_eq!(p.text, "ok");
    }

    #[test]
    fn nested_arguments_stream_raw() {
        let args = r#"{"obj": {"a": [1, 2.5, true, null]}, "s": "line\nbreak"}"#;
        let text = format!(
            "<|channel|>commentary to=functions.typed <|constrain|>json<|message|>{args}<|call|>"
        );
        let p = ok(&text);
        assert_eq!(p.calls[0].arguments, args);
    }

    #[test]
    fn unterminated_call_is_closed() {
        let p = check(
            &make,
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": [\"Par",
            true,
        );
        assert_eq!(
            calls(&p),
            vec![("get_weather".into(), json!({"city": ["Par"]}))]
        );
        let p = check(
            &make,
            "<|channel|>commentary to=functions.get_weather<|message|>",
            true,
        );
        assert_eq!(calls(&p), vec![("get_weather".into(), json!({}))]);
        let p = check(&make, "<|channel|>commentary to=functions.get_wea", true);
        assert_eq!(p, Parsed::default());
    }
}

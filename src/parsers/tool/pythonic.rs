//! Pythonic tool calls (Llama 4, Llama 3.2/3.3 with the pythonic prompt): a Python list of
//! calls with keyword arguments, optionally wrapped in `<|python_start|>` … `<|python_end|>`:
//!
//! ```text
//! [get_weather(city="Paris", days=3), get_time()]
//! ```
//!
//! Source: Meta's Llama 4 prompt-format docs / model card ("[func_name1(params_name1=
//! params_value1, …), func_name2(params)]"), vLLM's `pythonic` and `llama4_pythonic` and
//! SGLang's `pythonic` parsers.
//!
//! The arguments become a JSON object streamed as the keywords arrive, Python literals
//! converted: strings (either quote; `\n`, `\'`, `\xHH` and the JSON-compatible escapes),
//! numbers, `True`/`False`/`None`, lists and tuples (arrays), dicts (objects). Any other
//! bare word becomes a JSON string. A call commits once its name, `(` and the first
//! `keyword=` (or `)`) are read, so prose like `[see(page 3)]` stays text; positional
//! arguments are not a call. Any `[` may open a list, so it is held while it could still
//! be one. The brackets, commas, whitespace and `<|python_start|>`/`<|python_end|>` around
//! calls are dropped. At the end of output an open call is closed as far as it got.

use super::json_scan::{escape_into, utf8, Body, Ctx, Format, Machine, Op, Out, Step, NAME_MAX};
use super::{ToolParser, Tools};

const FORMAT: Format = Format {
    markers: &["[", "<|python_start|>", "<|python_end|>"],
    entries: &[0, 6, 5],
    ops: &[
        Op::Ws,
        Op::Until {
            end: &"(",
            ok: word_char,
            keep: true,
        },
        Op::Body(kwargs),
        Op::Ws,
        Op::Branch(&[(",", 0), ("]", 5)]),
        Op::End,
        // 6: after `<|python_start|>`.
        Op::Ws,
        Op::Lit("["),
        Op::Goto(0),
    ],
    name: identifier,
};

fn word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '.'
}

/// A (possibly dotted) Python identifier.
fn identifier(captured: &str) -> Option<String> {
    let first = captured.chars().next()?;
    (first.is_alphabetic() || first == '_').then(|| captured.to_owned())
}

pub fn new(tools: &Tools) -> Box<dyn ToolParser> {
    Machine::boxed(&FORMAT, tools)
}

fn kwargs(ctx: &Ctx) -> Box<dyn Body> {
    Box::new(Kwargs {
        name: ctx.name.clone().unwrap_or_default(),
        index: ctx.index,
        committed: false,
        state: State::Key,
        word: String::new(),
        closers: Vec::new(),
        comma: false,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Expecting a keyword (or `)`).
    Key,
    KeyChars,
    /// After the keyword, before `=`.
    Eq,
    /// Expecting a value.
    Value,
    Str {
        quote: char,
        escaped: bool,
    },
    /// `\x` escape: the code so far and the hex digits still to come.
    Hex {
        quote: char,
        code: u32,
        left: u8,
    },
    Number,
    Word,
    /// After a value.
    After,
}

/// The keyword arguments of one call, `(` already read, up to and including `)`.
struct Kwargs {
    name: String,
    index: usize,
    committed: bool,
    state: State,
    /// The keyword or bare word being read.
    word: String,
    /// Python closers of the open lists, tuples and dicts.
    closers: Vec<char>,
    /// A `,` read inside a container, written when a value follows (Python allows a
    /// trailing comma, JSON does not).
    comma: bool,
}

fn json_closer(python: char) -> &'static str {
    if python == '}' {
        "}"
    } else {
        "]"
    }
}

impl Kwargs {
    fn args(&self, out: &mut Out, text: &str) {
        out.args(self.index, text);
    }

    fn commit(&mut self, out: &mut Out) {
        if !self.committed {
            out.start(self.index, &self.name);
            self.args(out, "{");
            self.committed = true;
        } else {
            self.args(out, ", ");
        }
    }

    fn value_starts(&mut self, out: &mut Out) {
        if std::mem::take(&mut self.comma) {
            self.args(out, ", ");
        }
    }

    fn end_word(&mut self, out: &mut Out) {
        let word = std::mem::take(&mut self.word);
        let json = match word.as_str() {
            "True" => "true".to_owned(),
            "False" => "false".to_owned(),
            "None" => "null".to_owned(),
            _ => serde_json::Value::String(word).to_string(),
        };
        self.args(out, &json);
    }

    fn fail(&mut self, out: &mut Out) -> Step {
        self.close(out);
        Step::Fail
    }

    fn string_char(&mut self, c: char, quote: char, out: &mut Out) {
        let mut piece = String::new();
        match c {
            'n' => piece.push_str("\\n"),
            't' => piece.push_str("\\t"),
            'r' => piece.push_str("\\r"),
            'b' => piece.push_str("\\b"),
            'f' => piece.push_str("\\f"),
            'u' => piece.push_str("\\u"),
            '\\' => piece.push_str("\\\\"),
            '\'' | '"' => escape_into(c, &mut piece),
            'x' => {
                self.state = State::Hex {
                    quote,
                    code: 0,
                    left: 2,
                };
                return;
            }
            '\n' => {}
            c => {
                piece.push_str("\\\\");
                escape_into(c, &mut piece);
            }
        }
        self.args(out, &piece);
        self.state = State::Str {
            quote,
            escaped: false,
        };
    }
}

impl Body for Kwargs {
    fn feed(&mut self, c: char, out: &mut Out) -> Step {
        loop {
            match self.state {
                State::Key => match c {
                    ')' => {
                        if !self.committed {
                            self.commit(out);
                        }
                        self.args(out, "}");
                        return Step::Done;
                    }
                    c if c.is_whitespace() => {}
                    c if c.is_alphabetic() || c == '_' => {
                        self.word.push(c);
                        self.state = State::KeyChars;
                    }
                    _ => return self.fail(out),
                },
                State::KeyChars | State::Eq => match c {
                    '=' => {
                        self.commit(out);
                        let key = std::mem::take(&mut self.word);
                        self.args(out, &serde_json::Value::String(key).to_string());
                        self.args(out, ": ");
                        self.state = State::Value;
                    }
                    c if c.is_whitespace() => self.state = State::Eq,
                    c if self.state == State::KeyChars
                        && (c.is_alphanumeric() || c == '_')
                        && self.word.len() < NAME_MAX =>
                    {
                        self.word.push(c)
                    }
                    _ => return self.fail(out),
                },
                State::Value => match c {
                    c if c.is_whitespace() => {}
                    '"' | '\'' => {
                        self.value_starts(out);
                        self.args(out, "\"");
                        self.state = State::Str {
                            quote: c,
                            escaped: false,
                        };
                    }
                    '-' | '+' | '.' | '0'..='9' => {
                        self.value_starts(out);
                        self.state = State::Number;
                        continue;
                    }
                    c if c.is_alphabetic() || c == '_' => {
                        self.value_starts(out);
                        self.word.push(c);
                        self.state = State::Word;
                    }
                    '[' | '(' | '{' => {
                        self.value_starts(out);
                        self.args(out, if c == '{' { "{" } else { "[" });
                        self.closers.push(match c {
                            '[' => ']',
                            '(' => ')',
                            _ => '}',
                        });
                    }
                    c if self.closers.last() == Some(&c) => {
                        self.comma = false;
                        self.state = State::After;
                        continue;
                    }
                    _ => return self.fail(out),
                },
                State::Str { quote, escaped } => {
                    if escaped {
                        self.string_char(c, quote, out);
                    } else if c == '\\' {
                        self.state = State::Str {
                            quote,
                            escaped: true,
                        };
                    } else if c == quote {
                        self.args(out, "\"");
                        self.state = State::After;
                    } else {
                        let mut piece = String::new();
                        escape_into(c, &mut piece);
                        self.args(out, &piece);
                    }
                }
                State::Hex { quote, code, left } => {
                    let Some(digit) = c.to_digit(16) else {
                        return self.fail(out);
                    };
                    let code = code * 16 + digit;
                    if left > 1 {
                        self.state = State::Hex {
                            quote,
                            code,
                            left: left - 1,
                        };
                    } else {
                        let mut piece = String::new();
                        escape_into(char::from_u32(code).unwrap_or('\u{fffd}'), &mut piece);
                        self.args(out, &piece);
                        self.state = State::Str {
                            quote,
                            escaped: false,
                        };
                    }
                }
                State::Number => match c {
                    '0'..='9' | '.' | 'e' | 'E' | '-' => self.args(out, utf8(c, &mut [0; 4])),
                    '+' | '_' => {}
                    _ => {
                        self.state = State::After;
                        continue;
                    }
                },
                State::Word => {
                    if (c.is_alphanumeric() || c == '_') && self.word.len() < NAME_MAX {
                        self.word.push(c);
                    } else {
                        self.end_word(out);
                        self.state = State::After;
                        continue;
                    }
                }
                State::After => match (self.closers.last().copied(), c) {
                    (_, c) if c.is_whitespace() => {}
                    (None, ',') => self.state = State::Key,
                    (None, ')') => {
                        self.args(out, "}");
                        return Step::Done;
                    }
                    (Some(_), ',') => {
                        self.comma = true;
                        self.state = State::Value;
                    }
                    (Some('}'), ':') => {
                        self.args(out, ": ");
                        self.state = State::Value;
                    }
                    (Some(closer), c) if c == closer => {
                        self.comma = false;
                        self.closers.pop();
                        self.args(out, json_closer(closer));
                    }
                    _ => return self.fail(out),
                },
            }
            return Step::More;
        }
    }

    fn committed(&self) -> bool {
        self.committed
    }

    fn close(&mut self, out: &mut Out) {
        if !self.committed {
            return;
        }
        match self.state {
            State::Str { .. } | State::Hex { .. } => self.args(out, "\""),
            State::Word => self.end_word(out),
            _ => {}
        }
        self.state = State::After;
        while let Some(closer) = self.closers.pop() {
            self.args(out, json_closer(closer));
        }
        self.args(out, "}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tool::json_scan::{call, one_push, run};

    #[test]
    fn single_call() {
        let got = run(new, r#"[get_weather(city="Paris", days=3)]"#, true);
        assert_eq!(got.text, "");
        assert_eq!(
            got.calls,
            vec![call("get_weather", r#"{"city": "Paris", "days": 3}"#)]
        );
    }

    #[test]
    fn parallel_calls_in_one_push() {
        let text = "<|python_start|>[a(x=True, y=None), b(), c(l=[1, -2.5e3], t=(1,), d={'k': False},)]<|python_end|>";
        let expected = vec![
            call("a", r#"{"x": true, "y": null}"#),
            call("b", "{}"),
            call("c", r#"{"l": [1, -2.5e3], "t": [1], "d": {"k": false}}"#),
        ];
        assert_eq!(one_push(new, text).calls, expected);
        let got = run(new, text, true);
        assert_eq!(got.text, "");
        assert_eq!(got.calls, expected);
    }

    #[test]
    fn call_after_text() {
        let got = run(new, "Let me check. [f(q='x')] Done.", true);
        assert_eq!(got.text, "Let me check.  Done.");
        assert_eq!(got.calls, vec![call("f", r#"{"q": "x"}"#)]);
    }

    #[test]
    fn no_call_and_malformed_calls_are_text() {
        for text in [
            "See [1] and [note] and [see(page 3)] and [1, 2].",
            "[f(1, 2)]",
            "[3d(x=1)]",
        ] {
            let got = run(new, text, true);
            assert_eq!(got.text, text);
            assert!(got.calls.is_empty());
        }
    }

    #[test]
    fn tricky_arguments() {
        let got = run(
            new,
            r#"[f(s='it\'s "q" ) ] \\ \x41\n', u="中文 ✓", n={"a": [{"b": ()}]})]"#,
            true,
        );
        assert_eq!(
            got.calls,
            vec![call(
                "f",
                r#"{"s": "it's \"q\" ) ] \\ A\n", "u": "中文 ✓", "n": {"a": [{"b": []}]}}"#
            )]
        );
        assert_eq!(got.text, "");
    }

    #[test]
    fn unterminated_call_is_closed() {
        let got = run(new, "[f(a=[1, 'x", false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": [1, "x"]}"#)]);
        let got = run(new, "[f(a=Tru", false);
        assert_eq!(got.calls, vec![call("f", r#"{"a": "Tru"}"#)]);
    }
}

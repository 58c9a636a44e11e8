//! The machine shared by the XML-style formats (Qwen3-Coder, GLM-4.5/4.7, MiniMax-M2): each
//! is a [`Syntax`] (its tag spellings) run by one char-at-a-time [`XmlParser`].
//!
//! Why one char at a time: every decision then depends only on the characters seen so far,
//! never on where the engine cut them, so any cutting gives the same result by construction;
//! and no byte is scanned twice, except the few held bytes a malformed header gives back.
//!
//! The grammar, with each format's spellings in [`Syntax`]:
//! `BLOCK_OPEN (CALL_OPEN NAME NAME_END)? BODY* CALL_CLOSE (… more calls …) BLOCK_CLOSE`, where a
//! body item is `PARAM_OPEN KEY KEY_END (VALUE_OPEN)? VALUE PARAM_CLOSE` and whitespace may
//! sit between tags. GLM has no call level: the name follows `<tool_call>` and `</tool_call>`
//! closes the call.
//!
//! Commit points. A call is announced (`Start`, then `{`) once its name is followed by the
//! first body tag (a parameter or the call's close): only then is it certain this is a call.
//! Until then everything since the block's opening tag is held; if the header turns out
//! malformed, the opening tag is released as text and the rest is scanned again as text. After
//! a commit nothing is taken back: anything that breaks the grammar closes the call as it
//! stands (`}`) and is scanned again as text.
//!
//! Values. A parameter whose schema type is exactly `string` streams as it arrives (escaped
//! by serde_json, the format's trimming applied), so a long file body is never held. Other
//! values are held to their closing tag and typed with the schema ([`coerce`]); one longer
//! than [`MAX_HELD_BYTES`] stops being held and streams as a string instead.
//!
//! Whitespace between one call and the next `<tool_call>`, and after the last call, is
//! dropped (the templates put newlines there); text before the first call is kept verbatim.
//!
//! `finish`: text that could still have opened a call is text; a header that never completed
//! is text, but one whose name is complete is announced; an open call is closed as far as it
//! got (a value cut short ends where it was cut, its partial closing tag included); partial
//! tags between parameters are dropped.

use std::collections::VecDeque;

use serde_json::Value;

use super::{ToolDelta, ToolParser, Tools, MAX_HELD_BYTES};

/// A function or parameter name longer than this is not a name: the tag is malformed.
const NAME_LIMIT: usize = 256;

/// How a format trims a parameter value before typing it (its documented parse).
#[derive(Clone, Copy, Debug)]
pub(super) enum Trim {
    /// One leading and one trailing newline (Qwen3-Coder writes the value on its own lines).
    OneNewline,
    /// All surrounding whitespace (MiniMax-M2's reference parser calls `strip()`).
    Whitespace,
    /// Nothing (GLM writes the value flush against its tags).
    Verbatim,
}

/// Where a function name ends.
#[derive(Clone, Copy, Debug)]
pub(super) enum NameEnd {
    /// At `>` (`<function=NAME>`, `<invoke name="NAME">`).
    Gt,
    /// At a newline (consumed) or at the `<` of the first body tag (GLM).
    LineOrTag,
}

/// One format's spelling of the grammar in the module doc.
#[derive(Debug)]
pub(super) struct Syntax {
    pub block_open: &'static str,
    pub block_close: &'static str,
    /// `None`: the name follows `block_open` and `call_close` closes the block too (GLM).
    pub call_open: Option<&'static str>,
    pub call_close: &'static str,
    pub name_end: NameEnd,
    pub param_open: &'static str,
    pub key_end: &'static str,
    pub value_open: Option<&'static str>,
    pub param_close: &'static str,
    pub trim: Trim,
}

/// A parser for `syntax`, typing values with `tools`' schemas.
pub(super) fn parser(syntax: &'static Syntax, tools: &Tools) -> Box<dyn ToolParser> {
    Box::new(XmlParser {
        syntax,
        tools: tools.clone(),
        state: State::Text,
        held: String::new(),
        lit: String::new(),
        name: String::new(),
        after_call: false,
        gap: String::new(),
        block_committed: false,
        call: None,
        next_index: 0,
        value: ValueState::default(),
        replay: VecDeque::new(),
        mark: 0,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Ordinary text, watching for `block_open` (its matched part in `lit`).
    Text,
    /// Inside a block between calls: `call_open`, or `block_close` once a call was made.
    Block,
    /// Reading the function name.
    CallName,
    /// Between parameters: `param_open`, `call_close` (or, leniently, `block_close`).
    Body,
    /// Reading a parameter name up to `key_end`.
    Key,
    /// Between the key and `value_open` (GLM's `<arg_value>`).
    ValueOpen,
    /// Reading a value up to `param_close`.
    Value,
}

/// The call being read.
struct Call {
    index: usize,
    name: String,
    announced: bool,
    params: usize,
}

/// Schema type of the parameter being read.
#[derive(Debug, Default, PartialEq)]
enum Kind {
    /// Exactly `string`: streamed verbatim.
    Str,
    /// Declared types (without `string` only, or a union): parsed, checked against them.
    Typed(Vec<String>),
    /// Undeclared tool, parameter or type: JSON when it parses, else a string.
    #[default]
    Any,
}

#[derive(Debug, Default)]
struct ValueState {
    key: String,
    kind: Kind,
    /// The value is going out as a JSON string piece by piece.
    streaming: bool,
    /// The format's leading trim is done.
    started: bool,
    /// Held trailing whitespace that the trailing trim may still drop (streaming).
    tail: String,
    /// Streaming: characters not yet emitted; else the whole raw value so far.
    buf: String,
}

struct XmlParser {
    syntax: &'static Syntax,
    tools: Tools,
    state: State,
    /// Raw text since the last commit point: what a malformed tag gives back.
    held: String,
    /// The part of a tag matched so far.
    lit: String,
    /// Function or parameter name being read.
    name: String,
    /// Text state right after a call: whitespace goes to `gap`, dropped if a call follows.
    after_call: bool,
    gap: String,
    /// The current block announced a call (so its failures close, not give back).
    block_committed: bool,
    call: Option<Call>,
    next_index: usize,
    value: ValueState,
    /// Characters given back by a malformed tag, read before the rest of the input.
    replay: VecDeque<char>,
    /// `out.len()` when this push began: deltas past it may be merged.
    mark: usize,
}

/// What an expected tag made of the latest character.
enum Expect {
    Pending,
    Matched(usize),
    Fail,
}

impl ToolParser for XmlParser {
    fn push(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        self.mark = out.len();
        let mut chars = text.chars();
        loop {
            let next = match self.replay.pop_front() {
                Some(c) => Some(c),
                None => chars.next(),
            };
            match next {
                Some(c) => self.step(c, out),
                None => break,
            }
        }
        self.flush_value(out);
    }

    fn finish(&mut self, out: &mut Vec<ToolDelta>) {
        self.mark = out.len();
        match self.state {
            State::Text => {
                if !self.lit.is_empty() {
                    let gap = std::mem::take(&mut self.gap);
                    emit_text(out, self.mark, &gap);
                    let lit = std::mem::take(&mut self.lit);
                    emit_text(out, self.mark, &lit);
                }
            }
            State::Value => {
                let partial = std::mem::take(&mut self.lit);
                for c in partial.chars() {
                    self.value_char(c, out);
                }
                self.end_value(out);
                self.close_call(out);
            }
            State::Block | State::CallName => {
                if self.call.is_none() && !self.block_committed {
                    let held = std::mem::take(&mut self.held);
                    emit_text(out, self.mark, &held);
                }
            }
            State::Body | State::Key | State::ValueOpen => {
                self.announce(out);
                self.close_call(out);
            }
        }
        self.state = State::Text;
    }
}

impl XmlParser {
    fn step(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        match self.state {
            State::Text => self.text(c, out),
            State::Block => {
                let close = self.block_committed.then_some(self.syntax.block_close);
                let alts = [self.syntax.call_open, close];
                match self.expect_tag(c, &alts) {
                    Expect::Pending => {}
                    Expect::Matched(0) => self.state = State::CallName,
                    Expect::Matched(_) => self.end_block(),
                    Expect::Fail => self.fail(c, out),
                }
            }
            State::CallName => self.call_name(c, out),
            State::Body => {
                let block_close = self.syntax.call_open.map(|_| self.syntax.block_close);
                let alts = [
                    Some(self.syntax.param_open),
                    Some(self.syntax.call_close),
                    block_close,
                ];
                match self.expect_tag(c, &alts) {
                    Expect::Pending => {}
                    Expect::Matched(0) => {
                        self.announce(out);
                        // Committed: only this tag is given back if its key breaks.
                        self.held = self.syntax.param_open.to_owned();
                        self.state = State::Key;
                    }
                    Expect::Matched(which) => {
                        self.announce(out);
                        self.close_call(out);
                        if which == 1 && self.syntax.call_open.is_some() {
                            self.held.clear();
                            self.state = State::Block;
                        } else {
                            self.end_block();
                        }
                    }
                    Expect::Fail => self.fail(c, out),
                }
            }
            State::Key => self.key(c, out),
            State::ValueOpen => match self.expect_tag(c, &[self.syntax.value_open]) {
                Expect::Pending => {}
                Expect::Matched(_) => self.start_value(out),
                Expect::Fail => self.fail(c, out),
            },
            State::Value => self.value(c, out),
        }
    }

    /// Text, watching for the block's opening tag.
    fn text(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        let open = self.syntax.block_open;
        if !self.lit.is_empty() {
            self.lit.push(c);
            if self.lit == open {
                self.held = std::mem::take(&mut self.lit);
                self.gap.clear();
                self.after_call = false;
                self.block_committed = false;
                self.name.clear();
                self.state = if self.syntax.call_open.is_some() {
                    State::Block
                } else {
                    State::CallName
                };
                return;
            }
            if open.starts_with(self.lit.as_str()) {
                return;
            }
            // Tags here have a single `<`, first: the match can only restart at `c`.
            self.lit.pop();
            let gap = std::mem::take(&mut self.gap);
            emit_text(out, self.mark, &gap);
            let lit = std::mem::take(&mut self.lit);
            emit_text(out, self.mark, &lit);
            self.after_call = false;
        }
        if c == '<' {
            self.lit.push(c);
        } else if self.after_call && c.is_whitespace() && self.gap.len() < MAX_HELD_BYTES {
            self.gap.push(c);
        } else {
            let gap = std::mem::take(&mut self.gap);
            emit_text(out, self.mark, &gap);
            self.after_call = false;
            emit_text(out, self.mark, c.encode_utf8(&mut [0; 4]));
        }
    }

    /// Skips whitespace, then matches `c` against the tags in `alts` (`None`s never match).
    fn expect_tag(&mut self, c: char, alts: &[Option<&'static str>]) -> Expect {
        if self.held.len() >= MAX_HELD_BYTES {
            return Expect::Fail;
        }
        if self.lit.is_empty() && c.is_whitespace() {
            self.held.push(c);
            return Expect::Pending;
        }
        self.lit.push(c);
        let lit = self.lit.as_str();
        let result = if let Some(i) = alts.iter().position(|a| *a == Some(lit)) {
            Expect::Matched(i)
        } else if alts.iter().flatten().any(|a| a.starts_with(lit)) {
            Expect::Pending
        } else {
            self.lit.pop();
            return Expect::Fail;
        };
        self.held.push(c);
        if matches!(result, Expect::Matched(_)) {
            self.lit.clear();
        }
        result
    }

    fn call_name(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        let done = match self.syntax.name_end {
            NameEnd::Gt => c == '>',
            NameEnd::LineOrTag => c == '\n' || c == '<',
        };
        if !done {
            if self.name_grows(c) {
                self.held.push(c);
            } else {
                self.fail(c, out);
            }
            return;
        }
        let Some(name) = clean_name(&self.name) else {
            self.fail(c, out);
            return;
        };
        self.call = Some(Call {
            index: self.next_index,
            name,
            announced: false,
            params: 0,
        });
        self.name.clear();
        self.state = State::Body;
        if c == '<' {
            self.step(c, out);
        } else {
            self.held.push(c);
        }
    }

    /// Adds `c` to the name being read, or says the name cannot go on.
    fn name_grows(&mut self, c: char) -> bool {
        let bad = matches!(c, '<' | '>' | '\n') || self.name.len() >= NAME_LIMIT;
        // A space inside a name (not around it) means this is prose, not a tag.
        let inner_space = !c.is_whitespace()
            && self.name.trim_end().len() != self.name.len()
            && !self.name.trim_start().is_empty();
        if bad || inner_space || self.held.len() >= MAX_HELD_BYTES {
            return false;
        }
        self.name.push(c);
        true
    }

    fn key(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        let end = self.syntax.key_end;
        if !self.lit.is_empty() || end.starts_with(c) {
            self.lit.push(c);
            if self.lit == end {
                self.lit.clear();
                let Some(key) = clean_name(&self.name) else {
                    self.fail(c, out);
                    return;
                };
                self.held.push(c);
                self.name.clear();
                self.value.key = key;
                if self.syntax.value_open.is_some() {
                    self.state = State::ValueOpen;
                } else {
                    self.start_value(out);
                }
            } else if end.starts_with(self.lit.as_str()) {
                self.held.push(c);
            } else {
                self.lit.pop();
                self.fail(c, out);
            }
        } else if self.name_grows(c) {
            self.held.push(c);
        } else {
            self.fail(c, out);
        }
    }

    /// The value of `self.value.key` begins: a string one goes out from here on.
    fn start_value(&mut self, out: &mut Vec<ToolDelta>) {
        let key = std::mem::take(&mut self.value.key);
        let kind = match &self.call {
            Some(call) => kind_of(&self.tools, &call.name, &key),
            None => Kind::Any,
        };
        self.value = ValueState {
            key,
            kind,
            ..ValueState::default()
        };
        if self.value.kind == Kind::Str {
            self.open_string(out);
        }
        self.held.clear();
        self.state = State::Value;
    }

    fn value(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        let close = self.syntax.param_close;
        if !self.lit.is_empty() {
            self.lit.push(c);
            if self.lit == close {
                self.lit.clear();
                self.end_value(out);
                self.state = State::Body;
                return;
            }
            if close.starts_with(self.lit.as_str()) {
                return;
            }
            self.lit.pop();
            let partial = std::mem::take(&mut self.lit);
            for p in partial.chars() {
                self.value_char(p, out);
            }
        }
        if close.starts_with(c) {
            self.lit.push(c);
        } else {
            self.value_char(c, out);
        }
    }

    fn value_char(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        if self.value.streaming {
            self.stream_char(c);
            return;
        }
        self.value.buf.push(c);
        if self.value.buf.len() > MAX_HELD_BYTES {
            // Too long to hold for typing: it goes out as a string.
            let held = std::mem::take(&mut self.value.buf);
            self.open_string(out);
            for h in held.chars() {
                self.stream_char(h);
            }
        }
    }

    /// Emits `, "key": "` and turns the value to streaming.
    fn open_string(&mut self, out: &mut Vec<ToolDelta>) {
        let head = self.member_head();
        self.emit_args(out, &(head + "\""));
        self.value.streaming = true;
    }

    /// A streamed character, with the format's trimming: trailing trimmable characters wait
    /// in `tail` until something follows them.
    fn stream_char(&mut self, c: char) {
        let trim = self.syntax.trim;
        let v = &mut self.value;
        if !v.started {
            match trim {
                Trim::OneNewline => {
                    v.started = true;
                    if c == '\n' {
                        return;
                    }
                }
                Trim::Whitespace if c.is_whitespace() => return,
                _ => v.started = true,
            }
        }
        match trim {
            Trim::OneNewline if c == '\n' => {
                v.buf.push_str(&v.tail);
                v.tail = String::from('\n');
            }
            Trim::Whitespace if c.is_whitespace() && v.tail.len() < MAX_HELD_BYTES => {
                v.tail.push(c);
            }
            _ => {
                v.buf.push_str(&v.tail);
                v.tail.clear();
                v.buf.push(c);
            }
        }
    }

    /// Sends the streamed characters not sent yet.
    fn flush_value(&mut self, out: &mut Vec<ToolDelta>) {
        if self.state == State::Value && self.value.streaming && !self.value.buf.is_empty() {
            let raw = std::mem::take(&mut self.value.buf);
            let quoted = Value::String(raw).to_string();
            let inner = quoted
                .strip_prefix('"')
                .and_then(|q| q.strip_suffix('"'))
                .unwrap_or("");
            self.emit_args(out, inner);
        }
    }

    /// The closing tag came: the value goes out whole, or its string closes.
    fn end_value(&mut self, out: &mut Vec<ToolDelta>) {
        if self.value.streaming {
            self.flush_value(out);
            self.emit_args(out, "\"");
        } else {
            let raw = std::mem::take(&mut self.value.buf);
            let trimmed = match self.syntax.trim {
                Trim::OneNewline => {
                    let s = raw.strip_prefix('\n').unwrap_or(&raw);
                    s.strip_suffix('\n').unwrap_or(s)
                }
                Trim::Whitespace => raw.trim(),
                Trim::Verbatim => raw.as_str(),
            };
            let value = coerce(&self.value.kind, trimmed);
            let piece = self.member_head() + &value.to_string();
            self.emit_args(out, &piece);
        }
        self.value = ValueState::default();
        if let Some(call) = &mut self.call {
            call.params += 1;
        }
    }

    /// `"key": ` with a leading `, ` after the first member.
    fn member_head(&self) -> String {
        let sep = match &self.call {
            Some(call) if call.params > 0 => ", ",
            _ => "",
        };
        format!("{sep}{}: ", Value::String(self.value.key.clone()))
    }

    /// The call's name is certain: `Start` and the arguments' `{`.
    fn announce(&mut self, out: &mut Vec<ToolDelta>) {
        let Some(call) = &mut self.call else { return };
        if call.announced {
            return;
        }
        call.announced = true;
        let (index, name) = (call.index, call.name.clone());
        self.next_index += 1;
        self.block_committed = true;
        out.push(ToolDelta::Start { index, name });
        out.push(ToolDelta::Arguments {
            index,
            fragment: "{".to_owned(),
        });
    }

    fn close_call(&mut self, out: &mut Vec<ToolDelta>) {
        if let Some(call) = self.call.take() {
            if call.announced {
                self.emit_args_to(out, call.index, "}");
            }
        }
    }

    /// The block closed: back to text, dropping whitespace up to a next call.
    fn end_block(&mut self) {
        self.held.clear();
        self.lit.clear();
        self.block_committed = false;
        self.after_call = true;
        self.state = State::Text;
    }

    /// `c` breaks the grammar. Before any commit the block's opening tag is text and what
    /// followed it is read again; after one, the call closes as it stands and what was held
    /// since is read again as text.
    fn fail(&mut self, c: char, out: &mut Vec<ToolDelta>) {
        let held = std::mem::take(&mut self.held);
        let announced = self.call.as_ref().is_some_and(|call| call.announced);
        let again = if announced || self.block_committed {
            self.close_call(out);
            held.as_str()
        } else {
            let open = self.syntax.block_open;
            emit_text(out, self.mark, open);
            held.get(open.len()..).unwrap_or("")
        };
        self.replay.push_front(c);
        for h in again.chars().rev() {
            self.replay.push_front(h);
        }
        self.call = None;
        self.lit.clear();
        self.name.clear();
        self.block_committed = false;
        self.after_call = false;
        self.state = State::Text;
    }

    fn emit_args(&self, out: &mut Vec<ToolDelta>, piece: &str) {
        if let Some(call) = &self.call {
            self.emit_args_to(out, call.index, piece);
        }
    }

    fn emit_args_to(&self, out: &mut Vec<ToolDelta>, index: usize, piece: &str) {
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

/// Appends text, merged into the last delta when that is text from this same push.
pub(super) fn emit_text(out: &mut Vec<ToolDelta>, mark: usize, text: &str) {
    if text.is_empty() {
        return;
    }
    if out.len() > mark {
        if let Some(ToolDelta::Text(last)) = out.last_mut() {
            last.push_str(text);
            return;
        }
    }
    out.push(ToolDelta::Text(text.to_owned()));
}

/// A name as written, trimmed and unquoted (`"x"` or `'x'`); `None` if empty or spaced.
fn clean_name(raw: &str) -> Option<String> {
    let t = raw.trim();
    let t = ['"', '\'']
        .iter()
        .find_map(|q| t.strip_prefix(*q).and_then(|s| s.strip_suffix(*q)))
        .unwrap_or(t);
    let bad = t.is_empty()
        || t.chars()
            .any(|c| c.is_whitespace() || c == '"' || c == '\'');
    (!bad).then(|| t.to_owned())
}

/// The declared type(s) of `tool`'s parameter `param`: `type` (a name or a list) and the
/// `type`s of its `anyOf`/`oneOf` branches.
fn kind_of(tools: &Tools, tool: &str, param: &str) -> Kind {
    let schema = tools
        .iter()
        .find(|t| t.name == tool)
        .and_then(|t| t.parameters.get("properties"))
        .and_then(|p| p.get(param));
    let Some(schema) = schema else {
        return Kind::Any;
    };
    let mut types = Vec::new();
    let mut add = |node: &Value| match node.get("type") {
        Some(Value::String(t)) => types.push(t.clone()),
        Some(Value::Array(list)) => {
            types.extend(list.iter().filter_map(|t| t.as_str().map(str::to_owned)))
        }
        _ => {}
    };
    add(schema);
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(union) {
            branches.iter().for_each(&mut add);
        }
    }
    match types.as_slice() {
        [] => Kind::Any,
        [only] if only == "string" => Kind::Str,
        _ => Kind::Typed(types),
    }
}

/// A held value typed by its schema: JSON (or Python's `True`/`False`/`None`) when it parses
/// and fits the declared types, or when `string` is not among them; else the text itself.
fn coerce(kind: &Kind, text: &str) -> Value {
    let parsed = parse_loose(text);
    match (kind, parsed) {
        (Kind::Str, _) | (_, None) => Value::String(text.to_owned()),
        (Kind::Any, Some(v)) => v,
        (Kind::Typed(types), Some(v)) => {
            if fits(types, &v) || !types.iter().any(|t| t == "string") {
                v
            } else {
                Value::String(text.to_owned())
            }
        }
    }
}

fn parse_loose(text: &str) -> Option<Value> {
    let t = text.trim();
    match t {
        "True" => Some(Value::Bool(true)),
        "False" => Some(Value::Bool(false)),
        "None" => Some(Value::Null),
        _ => serde_json::from_str(t).ok(),
    }
}

fn fits(types: &[String], v: &Value) -> bool {
    let has = |name: &str| types.iter().any(|t| t == name);
    match v {
        Value::Null => has("null"),
        Value::Bool(_) => has("boolean"),
        Value::Number(n) => has("number") || (has("integer") && !n.is_f64()),
        Value::String(_) => has("string"),
        Value::Array(_) => has("array"),
        Value::Object(_) => has("object"),
    }
}

/// Shared test helpers: schema fixtures and the cutting property every parser must keep.
#[cfg(test)]
pub(super) mod testkit {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::super::{collect, parse_whole, Parsed, ToolDelta, ToolParser, ToolSpec, Tools};
    use crate::parsers::cuttings::cuttings;

    /// Tools used by every family's fixtures.
    pub fn tools() -> Tools {
        let spec = |name: &str, properties: Value| ToolSpec {
            name: name.to_owned(),
            parameters: json!({"type": "object", "properties": properties}),
        };
        Arc::from(vec![
            spec(
                "get_weather",
                json!({"city": {"type": "string"}, "days": {"type": "integer"}}),
            ),
            spec(
                "typed",
                json!({
                    "n": {"type": "integer"},
                    "x": {"type": "number"},
                    "flag": {"type": "boolean"},
                    "obj": {"type": "object"},
                    "arr": {"type": "array"},
                    "code": {"type": "string"},
                    "maybe": {"type": ["integer", "null"]},
                    "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]}
                }),
            ),
        ])
    }

    /// Feeds `pieces` then finishes, checking the stream's own rules on the way.
    pub fn run(parser: &mut dyn ToolParser, pieces: &[&str]) -> Vec<ToolDelta> {
        let mut out = Vec::new();
        for piece in pieces {
            parser.push(piece, &mut out);
        }
        parser.finish(&mut out);
        let mut started = 0;
        for delta in &out {
            match delta {
                ToolDelta::Start { index, .. } => {
                    assert_eq!(*index, started, "calls start once, in order: {out:?}");
                    started += 1;
                }
                ToolDelta::Arguments { index, .. } => {
                    assert!(*index < started, "arguments after their start: {out:?}")
                }
                ToolDelta::Text(_) => {}
            }
        }
        out
    }

    /// Every cutting of `text` gives the one-shot result, which is returned. With
    /// `well_formed`, each call's arguments must be a JSON object.
    pub fn check(make: &dyn Fn() -> Box<dyn ToolParser>, text: &str, well_formed: bool) -> Parsed {
        let whole = parse_whole(make().as_mut(), text);
        for (i, pieces) in cuttings(text, 200, 7).iter().enumerate() {
            let got = collect(&run(make().as_mut(), pieces));
            assert_eq!(got, whole, "cutting {i} {pieces:?}");
        }
        if well_formed {
            for call in &whole.calls {
                let args: Value = serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|e| panic!("{}: {e}", call.arguments));
                assert!(args.is_object(), "{}", call.arguments);
            }
        }
        whole
    }

    /// Random concatenations of `parts` (tags, their pieces, values): each must parse the
    /// same under every cutting, without a panic.
    /// With `json_always`, every call's arguments must be a JSON object whatever the input.
    pub fn soup(
        make: &dyn Fn() -> Box<dyn ToolParser>,
        parts: &[&str],
        seed: u64,
        json_always: bool,
    ) {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut made = 0;
        for _ in 0..60 {
            let len = rng.gen_range(1..14);
            let text: String = (0..len)
                .map(|_| parts[rng.gen_range(0..parts.len())])
                .collect();
            let whole = parse_whole(make().as_mut(), &text);
            for pieces in cuttings(&text, 8, rng.gen()) {
                assert_eq!(collect(&run(make().as_mut(), &pieces)), whole, "{text:?}");
            }
            made += whole.calls.len();
            for call in whole.calls.iter().filter(|_| json_always) {
                let args: Result<Value, _> = serde_json::from_str(&call.arguments);
                assert!(
                    args.is_ok_and(|a| a.is_object()),
                    "{text:?} gave {}",
                    call.arguments
                );
            }
        }
        assert!(made > 8, "the soup should make calls, made {made}");
    }

    /// The calls of `parsed` as (name, arguments as JSON).
    pub fn calls(parsed: &Parsed) -> Vec<(String, Value)> {
        parsed
            .calls
            .iter()
            .map(|c| {
                let args = serde_json::from_str(&c.arguments).unwrap_or(Value::Null);
                (c.name.clone(), args)
            })
            .collect()
    }
}

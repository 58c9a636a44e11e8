//! The incremental scanning the marker-and-JSON tool-call families share, one character at
//! a time so that no cutting of the model's output can change what comes out.
//!
//! Pieces, smallest first:
//! - [`Out`]: appends deltas for one `push`/`finish`, joining neighbouring text and
//!   argument pieces so a token-by-token stream does not become one delta per character.
//! - [`JsonScan`]: finds where a JSON object, array or string ends (strings, escapes and
//!   nesting tracked; numbers and literals are not validated) and can say how to close one
//!   cut short ([`JsonScan::closing`]).
//! - [`Markers`]: finds literal markers in a stream, holding back only what could still be
//!   the start of one.
//! - [`Body`]: the part of a call that carries its arguments. [`args_body`] streams a JSON
//!   object whose name came before it; [`call_object`] and friends read a whole
//!   `{"name": …, "arguments"|"parameters": {…}}` object. A body decides itself when the call
//!   is certain (`Start`), so no call is announced before its name and the start of its
//!   arguments are known.
//! - [`Machine`] run by a [`Format`]: text until one of the format's markers, then a small
//!   program of [`Op`]s (whitespace, literals, captured names, bodies). Everything read
//!   since the last committed call is held; if the program fails, the held text comes back
//!   as ordinary text and the failing character is read again as text. Between calls the
//!   held text (whitespace, separators, end markers) is dropped.
//!
//! Every step costs O(1) amortized per character (markers are a few dozen bytes), nothing
//! rescans the buffer, and held text never grows past [`MAX_HELD_BYTES`].

use super::{ToolDelta, ToolParser, Tools, MAX_HELD_BYTES};

/// Longest name (or other captured header) a format accepts; OpenAI names are at most 64.
pub const NAME_MAX: usize = 256;

/// The deltas of one `push` or `finish`: neighbouring pieces of the same kind are joined,
/// but never with deltas that were in the vector before (they are the caller's).
pub struct Out<'a> {
    deltas: &'a mut Vec<ToolDelta>,
    base: usize,
}

impl<'a> Out<'a> {
    pub fn new(deltas: &'a mut Vec<ToolDelta>) -> Self {
        let base = deltas.len();
        Self { deltas, base }
    }

    fn last(&mut self) -> Option<&mut ToolDelta> {
        if self.deltas.len() > self.base {
            self.deltas.last_mut()
        } else {
            None
        }
    }

    pub fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.last() {
            Some(ToolDelta::Text(last)) => last.push_str(text),
            _ => self.deltas.push(ToolDelta::Text(text.to_owned())),
        }
    }

    pub fn start(&mut self, index: usize, name: &str) {
        self.deltas.push(ToolDelta::Start {
            index,
            name: name.to_owned(),
        });
    }

    pub fn args(&mut self, index: usize, fragment: &str) {
        if fragment.is_empty() {
            return;
        }
        match self.last() {
            Some(ToolDelta::Arguments {
                index: at,
                fragment: last,
            }) if *at == index => last.push_str(fragment),
            _ => self.deltas.push(ToolDelta::Arguments {
                index,
                fragment: fragment.to_owned(),
            }),
        }
    }
}

/// `c` as UTF-8 without allocating.
pub fn utf8(c: char, buf: &mut [u8; 4]) -> &str {
    c.encode_utf8(buf)
}

/// Appends `c` to `into` as it must appear inside a JSON string.
pub fn escape_into(c: char, into: &mut String) {
    match c {
        '"' => into.push_str("\\\""),
        '\\' => into.push_str("\\\\"),
        '\n' => into.push_str("\\n"),
        '\r' => into.push_str("\\r"),
        '\t' => into.push_str("\\t"),
        c if u32::from(c) < 0x20 => into.push_str(&format!("\\u{:04x}", u32::from(c))),
        c => into.push(c),
    }
}

/// What [`JsonScan::feed`] learned from one character.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// Still inside the value.
    More,
    /// That character closed the value.
    Done,
    /// A closing bracket that does not match (the character is not taken).
    Bad,
}

/// Finds the end of a JSON object, array or string fed one character at a time, starting
/// with its opening `{`, `[` or `"`. Tracks nesting, strings and escapes only: what lies
/// between (numbers, `true`, commas) is not checked, which is what lets arguments stream
/// through unchanged.
#[derive(Clone, Debug, Default)]
pub struct JsonScan {
    closers: Vec<u8>,
    in_string: bool,
    escaped: bool,
}

impl JsonScan {
    pub fn feed(&mut self, c: char) -> Scan {
        if self.in_string {
            if self.escaped {
                self.escaped = false;
            } else if c == '\\' {
                self.escaped = true;
            } else if c == '"' {
                self.in_string = false;
                if self.closers.is_empty() {
                    return Scan::Done;
                }
            }
            return Scan::More;
        }
        match c {
            '"' => self.in_string = true,
            '{' => self.closers.push(b'}'),
            '[' => self.closers.push(b']'),
            '}' | ']' => {
                if self.closers.last().map(|&b| char::from(b)) != Some(c) {
                    return Scan::Bad;
                }
                self.closers.pop();
                if self.closers.is_empty() {
                    return Scan::Done;
                }
            }
            _ => {}
        }
        Scan::More
    }

    /// What closes the value as far as it got: the open string, then the open brackets.
    /// A value cut inside a number, literal or `\u` escape may still not parse.
    pub fn closing(&self) -> String {
        let mut close = String::new();
        if self.in_string {
            if self.escaped {
                close.push('\\');
            }
            close.push('"');
        }
        close.extend(self.closers.iter().rev().map(|&b| char::from(b)));
        close
    }
}

/// Finds any of a fixed set of literal markers in a character stream. Characters that
/// cannot start a marker are released at once; those that could are held (at most one
/// marker's length) until they match or fail, and on failure only the characters that can
/// no longer begin a marker are released.
#[derive(Debug)]
pub struct Markers {
    set: &'static [&'static str],
    held: String,
}

impl Markers {
    pub fn new(set: &'static [&'static str]) -> Self {
        Self {
            set,
            held: String::new(),
        }
    }

    /// Feeds `c`; `release` receives the text that is certainly not a marker, in order.
    /// Returns the index of the marker `c` completed.
    pub fn feed(&mut self, c: char, mut release: impl FnMut(&str)) -> Option<usize> {
        if self.held.is_empty() && !self.set.iter().any(|m| m.starts_with(c)) {
            release(utf8(c, &mut [0; 4]));
            return None;
        }
        self.held.push(c);
        loop {
            if let Some(found) = self.set.iter().position(|m| *m == self.held) {
                self.held.clear();
                return Some(found);
            }
            if self.held.is_empty() || self.set.iter().any(|m| m.starts_with(&self.held)) {
                return None;
            }
            let first = self.held.chars().next().map_or(0, char::len_utf8);
            let rest = self.held.split_off(first);
            release(&std::mem::replace(&mut self.held, rest));
        }
    }

    /// Takes what is held: the output ended (or the caller gives up) inside a marker.
    pub fn take_held(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// What a [`Body`] did with one character.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Taken; the call goes on.
    More,
    /// Taken; the call is complete (only once committed).
    Done,
    /// Not taken: this is not a call after all, or (once committed) the call broke off and
    /// the body has closed it as far as it got.
    Fail,
}

/// What a body is created with.
pub struct Ctx<'a> {
    pub tools: &'a Tools,
    /// The name the format's header captured, if it has one.
    pub name: Option<String>,
    /// The index the call gets if the body commits.
    pub index: usize,
}

/// The part of a call that carries its arguments. It emits `Start` itself once the call is
/// certain (then [`Body::committed`] turns true) and streams the arguments after it.
pub trait Body: Send {
    fn feed(&mut self, c: char, out: &mut Out) -> Step;
    fn committed(&self) -> bool;
    /// The output ended inside a committed call: close its arguments as far as they got.
    fn close(&mut self, out: &mut Out);
}

/// Makes the body of the call about to be read.
pub type MakeBody = fn(&Ctx) -> Box<dyn Body>;

/// A JSON object of arguments after a header that named the call: leading whitespace is
/// skipped, the call commits on `{` and the object streams through unchanged up to its
/// matching `}`. Anything but an object is not a call.
pub fn args_body(ctx: &Ctx) -> Box<dyn Body> {
    Box::new(ArgsBody {
        name: ctx.name.clone().unwrap_or_default(),
        index: ctx.index,
        scan: None,
    })
}

struct ArgsBody {
    name: String,
    index: usize,
    scan: Option<JsonScan>,
}

impl Body for ArgsBody {
    fn feed(&mut self, c: char, out: &mut Out) -> Step {
        let Some(scan) = &mut self.scan else {
            if c.is_whitespace() {
                return Step::More;
            }
            if c != '{' || self.name.is_empty() {
                return Step::Fail;
            }
            let mut scan = JsonScan::default();
            scan.feed(c);
            self.scan = Some(scan);
            out.start(self.index, &self.name);
            out.args(self.index, "{");
            return Step::More;
        };
        match scan.feed(c) {
            Scan::Bad => {
                self.close(out);
                Step::Fail
            }
            done => {
                out.args(self.index, utf8(c, &mut [0; 4]));
                if done == Scan::Done {
                    Step::Done
                } else {
                    Step::More
                }
            }
        }
    }

    fn committed(&self) -> bool {
        self.scan.is_some()
    }

    fn close(&mut self, out: &mut Out) {
        if let Some(scan) = &self.scan {
            out.args(self.index, &scan.closing());
        }
    }
}

/// A `{"name": …, "arguments": {…}}` object (`"parameters"` also names the arguments),
/// leading whitespace skipped. Other keys are skipped. It commits when both the name and
/// the opening `{` of the arguments are read, whichever comes last (arguments read before
/// the name are held until then). An object without arguments is not a call.
pub fn call_object(ctx: &Ctx) -> Box<dyn Body> {
    Box::new(CallObject::new(ctx.index, true, State::Open))
}

/// As [`call_object`], but the `{` was already read (it was the format's marker).
pub fn call_object_opened(ctx: &Ctx) -> Box<dyn Body> {
    Box::new(CallObject::new(
        ctx.index,
        true,
        State::Key0 { first: true },
    ))
}

/// As [`call_object`], but a name without arguments is a call with `{}`: for formats whose
/// markers already say that a call follows.
pub fn call_object_lenient(ctx: &Ctx) -> Box<dyn Body> {
    Box::new(CallObject::new(ctx.index, false, State::Open))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Key {
    Name,
    Args,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the object's `{`.
    Open,
    /// Expecting a key (or, first, `}`).
    Key0 {
        first: bool,
    },
    Key,
    Colon(Key),
    Value(Key),
    Name,
    /// Committed: arguments streaming.
    Args,
    /// Arguments read before the name.
    Held,
    /// Some other key's object, array or string.
    Skip,
    /// Some other key's number or literal.
    Scalar,
    /// After a value: `,` or `}`.
    After,
}

struct CallObject {
    index: usize,
    needs_args: bool,
    state: State,
    scan: JsonScan,
    /// The key or name string being read, quotes included.
    buf: String,
    name: Option<String>,
    named: bool,
    held: String,
    args_seen: bool,
    committed: bool,
}

impl CallObject {
    fn new(index: usize, needs_args: bool, state: State) -> Self {
        Self {
            index,
            needs_args,
            state,
            scan: JsonScan::default(),
            buf: String::new(),
            name: None,
            named: false,
            held: String::new(),
            args_seen: false,
            committed: false,
        }
    }

    fn commit(&mut self, name: &str, args: &str, out: &mut Out) {
        out.start(self.index, name);
        out.args(self.index, args);
        self.committed = true;
    }

    fn begin_string(&mut self, c: char) {
        self.scan = JsonScan::default();
        self.scan.feed(c);
        self.buf.clear();
        self.buf.push(c);
    }

    fn end_object(&mut self, out: &mut Out) -> Step {
        if self.committed {
            return Step::Done;
        }
        match self.name.take() {
            Some(name) if !self.needs_args && !self.args_seen => {
                self.commit(&name, "{}", out);
                Step::Done
            }
            _ => Step::Fail,
        }
    }
}

impl Body for CallObject {
    fn feed(&mut self, c: char, out: &mut Out) -> Step {
        loop {
            match self.state {
                State::Open => match c {
                    '{' => self.state = State::Key0 { first: true },
                    c if c.is_whitespace() => {}
                    _ => return Step::Fail,
                },
                State::Key0 { first } => match c {
                    '"' => {
                        self.begin_string(c);
                        self.state = State::Key;
                    }
                    '}' if first => return self.end_object(out),
                    c if c.is_whitespace() => {}
                    _ => return Step::Fail,
                },
                State::Key | State::Name => {
                    if self.buf.len() >= NAME_MAX {
                        return Step::Fail;
                    }
                    self.buf.push(c);
                    if self.scan.feed(c) != Scan::Done {
                        return Step::More;
                    }
                    let text = serde_json::from_str::<String>(&self.buf).unwrap_or_default();
                    if self.state == State::Key {
                        let key = match text.as_str() {
                            "name" if !self.named => Key::Name,
                            "arguments" | "parameters" if !self.args_seen => Key::Args,
                            _ => Key::Other,
                        };
                        self.state = State::Colon(key);
                        return Step::More;
                    }
                    if text.is_empty() {
                        return Step::Fail;
                    }
                    self.named = true;
                    if self.args_seen {
                        let held = std::mem::take(&mut self.held);
                        self.commit(&text, &held, out);
                    } else {
                        self.name = Some(text);
                    }
                    self.state = State::After;
                }
                State::Colon(key) => match c {
                    ':' => self.state = State::Value(key),
                    c if c.is_whitespace() => {}
                    _ => return Step::Fail,
                },
                State::Value(key) => match (key, c) {
                    (_, c) if c.is_whitespace() => {}
                    (Key::Name, '"') => {
                        self.begin_string(c);
                        self.state = State::Name;
                    }
                    (Key::Name, _) => return Step::Fail,
                    (Key::Args, '{') => {
                        self.args_seen = true;
                        self.scan = JsonScan::default();
                        self.scan.feed(c);
                        if let Some(name) = self.name.take() {
                            self.commit(&name, "{", out);
                            self.state = State::Args;
                        } else {
                            self.held.push(c);
                            self.state = State::Held;
                        }
                    }
                    (Key::Args, _) => return Step::Fail,
                    (Key::Other, '{' | '[' | '"') => {
                        self.scan = JsonScan::default();
                        self.scan.feed(c);
                        self.state = State::Skip;
                    }
                    (Key::Other, ',' | '}' | ']' | ':') => return Step::Fail,
                    (Key::Other, _) => self.state = State::Scalar,
                },
                State::Args => match self.scan.feed(c) {
                    Scan::Bad => {
                        self.close(out);
                        return Step::Fail;
                    }
                    scan => {
                        out.args(self.index, utf8(c, &mut [0; 4]));
                        if scan == Scan::Done {
                            self.state = State::After;
                        }
                    }
                },
                State::Held | State::Skip => match self.scan.feed(c) {
                    Scan::Bad => return Step::Fail,
                    scan => {
                        if self.state == State::Held {
                            self.held.push(c);
                        }
                        if scan == Scan::Done {
                            self.state = State::After;
                        }
                    }
                },
                State::Scalar => {
                    if c == ',' || c == '}' || c.is_whitespace() {
                        self.state = State::After;
                        continue;
                    }
                }
                State::After => match c {
                    ',' => self.state = State::Key0 { first: false },
                    '}' => return self.end_object(out),
                    c if c.is_whitespace() => {}
                    _ => {
                        if self.committed {
                            self.close(out);
                        }
                        return Step::Fail;
                    }
                },
            }
            return Step::More;
        }
    }

    fn committed(&self) -> bool {
        self.committed
    }

    fn close(&mut self, out: &mut Out) {
        if self.committed && self.state == State::Args {
            out.args(self.index, &self.scan.closing());
        }
    }
}

/// One instruction of a [`Format`]'s call program. Ops that read characters either take one
/// (it is held until a call commits) or pass it on to the next op; an op that cannot take
/// a character fails the program.
#[derive(Clone, Copy)]
pub enum Op {
    /// Skip whitespace.
    Ws,
    /// Exactly this text.
    Lit(&'static str),
    /// One of these texts, then go to its op.
    Branch(&'static [(&'static str, usize)]),
    /// Go to the op if the next character is this one (not taken either way).
    IfChar(char, usize),
    /// Characters allowed by `ok` up to the text `end`; `keep` makes them the call's name
    /// (through [`Format::name`]). At most [`NAME_MAX`] bytes.
    Until {
        end: &'static &'static str,
        ok: fn(char) -> bool,
        keep: bool,
    },
    /// The call's body.
    Body(MakeBody),
    Goto(usize),
    /// The calls are over: drop what is held (end markers, separators) and read text.
    End,
}

/// A tool-call syntax: the markers that open its calls in text, where each one enters the
/// program, and the program.
pub struct Format {
    pub markers: &'static [&'static str],
    pub entries: &'static [usize],
    pub ops: &'static [Op],
    /// Turns a captured header into the call's name (`None`: not a call).
    pub name: fn(&str) -> Option<String>,
}

/// The name as captured, trimmed; empty is no name.
pub fn trimmed_name(captured: &str) -> Option<String> {
    let name = captured.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// What a name header may contain in most formats: anything but whitespace.
pub fn not_space(c: char) -> bool {
    !c.is_whitespace()
}

enum Sub {
    None,
    Choice(String),
    Until(Markers, String),
    Body(Box<dyn Body>),
}

/// What an op did with a character.
enum Fed {
    Taken,
    /// Not taken: feed it again (to the next op, or as text).
    Again,
    Fail,
}

/// Runs a [`Format`]: the [`ToolParser`] of every marker-driven JSON family.
pub struct Machine {
    format: &'static Format,
    tools: Tools,
    markers: Markers,
    /// In the call program at this op, or reading text.
    pc: Option<usize>,
    sub: Sub,
    /// Read since the last committed call and not yet known to be text.
    pending: String,
    /// Whitespace after a call is held: dropped if another call follows.
    after_call: bool,
    name: Option<String>,
    calls: usize,
}

impl Machine {
    pub fn boxed(format: &'static Format, tools: &Tools) -> Box<dyn ToolParser> {
        Box::new(Self {
            format,
            tools: tools.clone(),
            markers: Markers::new(format.markers),
            pc: None,
            sub: Sub::None,
            pending: String::new(),
            after_call: false,
            name: None,
            calls: 0,
        })
    }

    fn open_call(&self) -> bool {
        matches!(&self.sub, Sub::Body(body) if body.committed())
    }

    /// Gives up on what is held: it is text after all.
    fn release(&mut self, out: &mut Out) {
        out.text(&self.pending);
        self.pending.clear();
        self.pc = None;
        self.sub = Sub::None;
        self.after_call = false;
    }

    /// Enters op `pc`, running the ops that take no character.
    fn goto(&mut self, mut pc: usize) {
        self.sub = Sub::None;
        for _ in 0..=self.format.ops.len() {
            match self.format.ops.get(pc) {
                Some(Op::Goto(to)) => pc = *to,
                Some(Op::End) | None => {
                    self.pending.clear();
                    self.pc = None;
                    self.after_call = true;
                    return;
                }
                Some(op) => {
                    self.sub = match op {
                        Op::Lit(_) | Op::Branch(_) => Sub::Choice(String::new()),
                        Op::Until { end, .. } => {
                            Sub::Until(Markers::new(std::slice::from_ref(*end)), String::new())
                        }
                        Op::Body(make) => Sub::Body(make(&Ctx {
                            tools: &self.tools,
                            name: self.name.take(),
                            index: self.calls,
                        })),
                        _ => Sub::None,
                    };
                    self.pc = Some(pc);
                    return;
                }
            }
        }
        // A program that only jumps: treat as the end of the calls.
        self.pc = None;
    }

    fn step(&mut self, c: char, out: &mut Out) {
        loop {
            let Some(pc) = self.pc else {
                return self.text(c, out);
            };
            let open = self.open_call();
            let calls = self.calls;
            if !open && self.pending.len() + c.len_utf8() > MAX_HELD_BYTES {
                self.release(out);
                continue;
            }
            match self.op(pc, c, out) {
                Fed::Taken => {
                    // Held unless it was part of a call (committed before or by it) or
                    // ended the calls.
                    if !open && self.calls == calls && self.pc.is_some() {
                        self.pending.push(c);
                    }
                    return;
                }
                Fed::Again => {}
                Fed::Fail => self.release(out),
            }
        }
    }

    fn text(&mut self, c: char, out: &mut Out) {
        if self.after_call && c.is_whitespace() && self.pending.len() < MAX_HELD_BYTES {
            self.pending.push(c);
            return;
        }
        let Self {
            markers,
            pending,
            after_call,
            ..
        } = self;
        let found = markers.feed(c, |text| {
            out.text(pending);
            pending.clear();
            *after_call = false;
            out.text(text);
        });
        if let Some(found) = found {
            self.after_call = false;
            self.pending
                .push_str(self.format.markers.get(found).copied().unwrap_or_default());
            let entry = self.format.entries.get(found).copied().unwrap_or_default();
            self.goto(entry);
        }
    }

    fn op(&mut self, pc: usize, c: char, out: &mut Out) -> Fed {
        let Some(op) = self.format.ops.get(pc) else {
            return Fed::Fail;
        };
        match (*op, &mut self.sub) {
            (Op::Ws, _) => {
                if c.is_whitespace() {
                    return Fed::Taken;
                }
                self.goto(pc + 1);
                Fed::Again
            }
            (Op::IfChar(want, to), _) => {
                self.goto(if c == want { to } else { pc + 1 });
                Fed::Again
            }
            (Op::Lit(lit), Sub::Choice(got)) => {
                got.push(c);
                if lit == got {
                    self.goto(pc + 1);
                } else if !lit.starts_with(got.as_str()) {
                    return Fed::Fail;
                }
                Fed::Taken
            }
            (Op::Branch(options), Sub::Choice(got)) => {
                got.push(c);
                if let Some((_, to)) = options.iter().find(|(lit, _)| lit == got) {
                    self.goto(*to);
                } else if !options.iter().any(|(lit, _)| lit.starts_with(got.as_str())) {
                    return Fed::Fail;
                }
                Fed::Taken
            }
            (Op::Until { ok, keep, .. }, Sub::Until(end, captured)) => {
                let mut bad = false;
                let found = end.feed(c, |text| {
                    bad |= !text.chars().all(ok);
                    captured.push_str(text);
                });
                if bad || captured.len() > NAME_MAX {
                    return Fed::Fail;
                }
                if found.is_some() {
                    if keep {
                        self.name = (self.format.name)(captured);
                        if self.name.is_none() {
                            return Fed::Fail;
                        }
                    }
                    self.goto(pc + 1);
                }
                Fed::Taken
            }
            (Op::Body(_), Sub::Body(body)) => {
                let was = body.committed();
                let step = body.feed(c, out);
                if body.committed() && !was {
                    self.pending.clear();
                    self.calls += 1;
                }
                match step {
                    Step::More => Fed::Taken,
                    Step::Done => {
                        self.goto(pc + 1);
                        Fed::Taken
                    }
                    Step::Fail if body.committed() => {
                        self.sub = Sub::None;
                        self.pc = None;
                        self.after_call = true;
                        Fed::Again
                    }
                    Step::Fail => Fed::Fail,
                }
            }
            _ => Fed::Fail,
        }
    }
}

impl ToolParser for Machine {
    fn push(&mut self, text: &str, out: &mut Vec<ToolDelta>) {
        let mut out = Out::new(out);
        for c in text.chars() {
            self.step(c, &mut out);
        }
    }

    fn finish(&mut self, out: &mut Vec<ToolDelta>) {
        let mut out = Out::new(out);
        if let Sub::Body(body) = &mut self.sub {
            if body.committed() {
                body.close(&mut out);
                self.pending.clear();
            }
        }
        out.text(&self.pending);
        out.text(&self.markers.take_held());
        self.pending.clear();
        self.pc = None;
        self.sub = Sub::None;
    }
}

/// The property every parser's tests check on a fixture: every cutting gives the whole
/// text's result, the stream is well formed (calls start once, in order, arguments only
/// after their start), and (for well-formed fixtures) each call's arguments are a JSON
/// object. Returns the whole-text result.
#[cfg(test)]
pub fn check(
    new: fn(&Tools) -> Box<dyn ToolParser>,
    tools: &Tools,
    text: &str,
    well_formed: bool,
) -> super::Parsed {
    let whole = super::parse_whole(new(tools).as_mut(), text);
    for (seed, pieces) in crate::parsers::cuttings::cuttings(text, 200, 7)
        .into_iter()
        .enumerate()
    {
        let mut parser = new(tools);
        let mut deltas = Vec::new();
        for piece in &pieces {
            parser.push(piece, &mut deltas);
        }
        parser.finish(&mut deltas);
        let mut started = 0;
        for delta in &deltas {
            match delta {
                ToolDelta::Start { index, .. } => {
                    assert_eq!(*index, started, "calls start once, in order: {text:?}");
                    started += 1;
                }
                ToolDelta::Arguments { index, .. } => {
                    assert!(*index < started, "arguments after their start: {text:?}")
                }
                ToolDelta::Text(_) => {}
            }
        }
        assert_eq!(
            super::collect(&deltas),
            whole,
            "cutting #{seed} {pieces:?} of {text:?}"
        );
    }
    if well_formed {
        for call in &whole.calls {
            let args: serde_json::Value = serde_json::from_str(&call.arguments)
                .unwrap_or_else(|e| panic!("{:?} is not JSON ({e}) in {text:?}", call.arguments));
            assert!(args.is_object(), "{:?} is an object", call.arguments);
        }
    }
    whole
}

/// A call as the tests expect it.
#[cfg(test)]
pub fn call(name: &str, arguments: &str) -> super::ToolCall {
    super::ToolCall {
        name: name.into(),
        arguments: arguments.into(),
    }
}

/// [`check`] with no declared tools.
#[cfg(test)]
pub fn run(new: fn(&Tools) -> Box<dyn ToolParser>, text: &str, well_formed: bool) -> super::Parsed {
    check(new, &Tools::from(Vec::new()), text, well_formed)
}

/// `text` pushed in one piece, without `finish`: what a stream has said by then.
#[cfg(test)]
pub fn one_push(new: fn(&Tools) -> Box<dyn ToolParser>, text: &str) -> super::Parsed {
    let mut out = Vec::new();
    new(&Tools::from(Vec::new())).push(text, &mut out);
    super::collect(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_finds_the_end_of_nested_values_with_strings() {
        let mut scan = JsonScan::default();
        let text = r#"{"a": "}\"{", "b": [1, {"c": "]"}]}"#;
        let ends: Vec<Scan> = text.chars().map(|c| scan.feed(c)).collect();
        assert_eq!(ends.last(), Some(&Scan::Done));
        assert_eq!(ends.iter().filter(|s| **s == Scan::Done).count(), 1);
    }

    #[test]
    fn scan_closes_what_is_open() {
        let mut scan = JsonScan::default();
        for c in r#"{"a": [{"b": "x\"#.chars() {
            scan.feed(c);
        }
        assert_eq!(scan.closing(), "\\\"}]}");
        let mut scan = JsonScan::default();
        assert_eq!(scan.feed('{'), Scan::More);
        assert_eq!(scan.feed(']'), Scan::Bad);
    }

    #[test]
    fn markers_hold_only_possible_starts() {
        let mut markers = Markers::new(&["<ab>", "<b"]);
        let mut text = String::new();
        let mut found = Vec::new();
        for c in "x<a<ab>y<<b".chars() {
            if let Some(i) = markers.feed(c, |t| text.push_str(t)) {
                found.push((text.len(), i));
            }
        }
        assert_eq!(text, "x<ay<");
        assert_eq!(found, vec![(3, 0), (5, 1)]);
    }

    #[test]
    fn out_joins_neighbours_but_not_the_callers_deltas() {
        let mut deltas = vec![ToolDelta::Text("old".into())];
        let mut out = Out::new(&mut deltas);
        out.text("a");
        out.text("b");
        out.start(0, "f");
        out.args(0, "{");
        out.args(0, "}");
        assert_eq!(
            deltas,
            vec![
                ToolDelta::Text("old".into()),
                ToolDelta::Text("ab".into()),
                ToolDelta::Start {
                    index: 0,
                    name: "f".into()
                },
                ToolDelta::Arguments {
                    index: 0,
                    fragment: "{}".into()
                },
            ]
        );
    }
}

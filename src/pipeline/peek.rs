//! The few fields routing needs from a JSON request body, read without a typed parse.
//!
//! Routing looks at `model` (which fleet), `stream`, SGLang's `rid` and a prompt prefix (for
//! cache-aware routing); the worker parses the whole body anyway, so the gateway reads only
//! these fields and skips everything else: skipped values are checked for JSON syntax but
//! never materialised, and a field's string is borrowed from the body unless it has to be
//! unescaped or joined.
//!
//! How (measured against `serde_json::Value`, simd-json and a full parse in
//! `benches/json_peek.rs`): serde_json walks the body's top-level object and hands over each
//! value as raw JSON text (`RawValue`, a slice of the body), checked by the same loop that
//! skips values (`IgnoredAny`). This module then reads the few raw values it wants: strings
//! with its own unescaper, arrays and objects by walking their (already checked) text again.
//! serde_json's own string and number parsing is never used, for it is stricter than the
//! skip: a lone surrogate escape (`"\ud83d"`, which JavaScript clients send when they cut an
//! emoji in half) or a number like `1e400` would fail a read but not a skip, and a field's
//! result would then depend on which other fields are wanted. When the text is wanted,
//! `messages` is walked as an array of objects in the same pass (the bulk of a chat body
//! would otherwise be scanned three times), falling back to the raw walk when that fails.
//! The skip keeps its stack of open brackets on the heap, so no nesting depth can exhaust
//! the thread's stack, and the walks go at most four levels deep (`messages`, a message, its
//! `content`, a part).
//!
//! Rules, chosen to match what the (Python) workers will see:
//! - **Invalid JSON yields nothing**: any syntax error anywhere in the body, including a
//!   truncated body or trailing bytes after the object, gives `Peeked::default()`, even for
//!   fields read before the error. Routing on a body the worker will refuse is pointless, and
//!   the worker answers the malformed request itself. JSON is UTF-8 (RFC 8259), so a body
//!   that is not UTF-8 anywhere, even inside a skipped string, is invalid too: the whole
//!   body is checked first (SIMD-fast, a tenth of the cost of skipping it).
//! - **Lone surrogate escapes are valid** (as in Python's `json`) and read as U+FFFD, since a
//!   `str` cannot hold them.
//! - **Duplicate keys: the last one wins**, at every level, as with Python's `json.loads`
//!   (SGLang, vLLM): the gateway and the worker then agree on which model was asked for.
//! - **Wrong types count as absent**: `"model": 7` gives `None`, `"stream": "true"` gives
//!   `false`; the rest of the body is still read.
//! - Keys are compared after unescaping (`"mod\u0065l"` is `model`), as the worker does.
//!
//! Whether a body is valid, and so every field's result, does not depend on `Wants`.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Most bytes of prompt text returned, cut on a char boundary.
///
/// Prefix routing compares the start of prompts (worker prefix caches hold a few thousand
/// tokens of shared system prompt and history); 256 KiB is far beyond any prefix worth
/// matching, and the cap bounds the copy made when parts are joined or unescaped, whatever
/// the body size.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;

/// Which fields the caller needs; everything else is skipped without allocation.
///
/// (Skipping builds nothing; serde_json's scratch buffer, one per walk of an object or
/// array, holds the brackets open inside a skipped value, and a key with escapes is
/// unescaped into a string of its own.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wants {
    pub model: bool,
    pub stream: bool,
    pub rid: bool,
    pub text: bool,
}

impl Wants {
    /// Every field.
    pub const ALL: Wants = Wants {
        model: true,
        stream: true,
        rid: true,
        text: true,
    };
}

/// What was found. Never fails: a body that is not a JSON object (or a field of the wrong
/// type) yields `None`/`false` for that field — the worker answers malformed requests itself.
#[derive(Debug, Default, PartialEq)]
pub struct Peeked<'a> {
    /// Top-level `"model"` string.
    pub model: Option<Cow<'a, str>>,
    /// Top-level `"stream": true`.
    pub stream: bool,
    /// Top-level `"rid"` string (SGLang's request id); `"user"` is not read.
    pub rid: Option<Cow<'a, str>>,
    /// The prompt text for prefix routing, from the first of these top-level fields that
    /// yields text:
    /// 1. `messages` (OpenAI chat, Anthropic messages), when it is an array: each message's
    ///    `content`, a string or an array of parts whose `text` strings count, preceded by
    ///    Anthropic's top-level `system` (a string or an array of blocks with `text`; not a
    ///    source on its own); nothing when no message part and no `system` has text;
    /// 2. `prompt` (completions), 3. `text` (SGLang `/generate`), 4. `input` (embeddings):
    ///    a string, or the first element of an array when that is a string.
    ///
    /// Parts are joined with one `\n`; at most [`MAX_TEXT_BYTES`]. Borrowed from the body
    /// when it is one string without escapes.
    pub text: Option<Cow<'a, str>>,
}

/// Reads the fields in `wants` from `body`; see the module doc for the rules.
/// Wanting nothing reads nothing (and so does not check the body's syntax either).
pub fn peek(body: &[u8], wants: Wants) -> Peeked<'_> {
    if wants == Wants::default() {
        return Peeked::default();
    }
    let Ok(body) = std::str::from_utf8(body) else {
        return Peeked::default();
    };
    let mut raw = Raw::default();
    let mut walked = walk_top(body, &mut raw, wants.text);
    if wants.text && walked.is_err() {
        // The walk that reads `messages` as an array of objects failed. A type error means
        // another shape (or a body that is not an object); but a number out of `f64` range
        // where an array or object was expected fails as a syntax error, since serde_json
        // parses the number to name it in the type error. So walk again, reading `messages`
        // raw: that walk alone decides whether the body is valid, whatever is wanted.
        raw = Raw::default();
        walked = walk_top(body, &mut raw, false);
    }
    match walked {
        Ok(()) => raw.read(wants),
        Err(_) => Peeked::default(),
    }
}

/// Walks the body's object into `raw`; with `stream_messages`, see [`Top`].
fn walk_top<'a>(body: &'a str, raw: &mut Raw<'a>, stream_messages: bool) -> serde_json::Result<()> {
    let mut de = serde_json::Deserializer::from_str(body);
    de.deserialize_map(Top {
        raw,
        stream_messages,
    })?;
    de.end()
}

/// The body's object. With `stream_messages`, `messages` is read as an array of objects
/// during the walk: one pass over the bulk of a chat body instead of three (skip, walk the
/// array, walk each message). Any other shape of it stops the walk with a type error.
struct Top<'r, 'a> {
    raw: &'r mut Raw<'a>,
    stream_messages: bool,
}

impl<'a> Visitor<'a> for Top<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<&RawValue>()? {
            let key = key_of(key);
            if self.stream_messages && key == "messages" {
                let mut text = Text::default();
                map.next_value_seed(Messages(&mut text))?;
                self.raw.streamed = Some(text);
                continue;
            }
            let value = map.next_value::<&RawValue>()?;
            let slot = match &*key {
                "model" => &mut self.raw.model,
                "stream" => &mut self.raw.stream,
                "rid" => &mut self.raw.rid,
                "messages" => &mut self.raw.messages,
                "system" => &mut self.raw.system,
                "prompt" => &mut self.raw.prompt,
                "text" => &mut self.raw.text,
                "input" => &mut self.raw.input,
                _ => continue,
            };
            *slot = Some(value);
        }
        Ok(())
    }
}

/// `messages` as an array of objects, each message's text pushed as it is walked.
struct Messages<'t, 'a>(&'t mut Text<'a>);

impl<'a> DeserializeSeed<'a> for Messages<'_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'a>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_seq(self)
    }
}

impl<'a> Visitor<'a> for Messages<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of messages")
    }

    fn visit_seq<A: SeqAccess<'a>>(self, mut seq: A) -> Result<(), A::Error> {
        while !self.0.full {
            if seq.next_element_seed(Message(&mut *self.0))?.is_none() {
                return Ok(());
            }
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// One message, as an object: its last `content` is pushed.
struct Message<'t, 'a>(&'t mut Text<'a>);

impl<'a> DeserializeSeed<'a> for Message<'_, 'a> {
    type Value = ();

    fn deserialize<D: Deserializer<'a>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_map(self)
    }
}

impl<'a> Visitor<'a> for Message<'_, 'a> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message object")
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<(), A::Error> {
        let mut content = None;
        while let Some(key) = map.next_key::<&RawValue>()? {
            if key_of(key) == "content" {
                content = Some(map.next_value::<&RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        if let Some(content) = content {
            push_parts(content, self.0);
        }
        Ok(())
    }
}

/// The raw values of the top-level fields read, the last of each name.
#[derive(Default)]
struct Raw<'a> {
    model: Option<&'a RawValue>,
    stream: Option<&'a RawValue>,
    rid: Option<&'a RawValue>,
    messages: Option<&'a RawValue>,
    system: Option<&'a RawValue>,
    prompt: Option<&'a RawValue>,
    text: Option<&'a RawValue>,
    input: Option<&'a RawValue>,
    /// The text of `messages`, when it was read during the walk (see [`Top`]).
    streamed: Option<Text<'a>>,
}

impl<'a> Raw<'a> {
    fn read(mut self, wants: Wants) -> Peeked<'a> {
        let whole = |raw: Option<&'a RawValue>, wanted: bool| {
            raw.filter(|_| wanted)
                .and_then(|raw| string(raw, usize::MAX))
        };
        Peeked {
            model: whole(self.model, wants.model),
            stream: wants.stream && self.stream.is_some_and(|raw| raw.get() == "true"),
            rid: whole(self.rid, wants.rid),
            text: if wants.text { self.text() } else { None },
        }
    }

    /// The prompt text: see [`Peeked::text`].
    fn text(&mut self) -> Option<Cow<'a, str>> {
        self.chat()
            .or_else(|| first_string(self.prompt?))
            .or_else(|| first_string(self.text?))
            .or_else(|| first_string(self.input?))
    }

    /// `system` and `messages` joined, when `messages` is an array.
    fn chat(&mut self) -> Option<Cow<'a, str>> {
        let mut text = Text::default();
        if let Some(system) = self.system {
            push_parts(system, &mut text);
        }
        if let Some(streamed) = self.streamed.take() {
            // Joining the two capped texts cuts where joining every part would.
            if let Some(messages) = streamed.joined {
                text.push(messages);
            }
            return text.joined;
        }
        let messages = self.messages.filter(|raw| raw.get().starts_with('['))?;
        let _ = walk_array(messages.get(), |message| {
            if let Some(content) = last_field(message, "content") {
                push_parts(content, &mut text);
            }
            !text.full
        });
        text.joined
    }
}

/// Pushes a `content` or `system` value: a string, or the `text` strings of an array's parts.
fn push_parts<'a>(raw: &'a RawValue, text: &mut Text<'a>) {
    if raw.get().starts_with('[') {
        let _ = walk_array(raw.get(), |part| {
            if let Some(s) = last_field(part, "text").and_then(|t| string(t, MAX_TEXT_BYTES)) {
                text.push(s);
            }
            !text.full
        });
    } else if let Some(s) = string(raw, MAX_TEXT_BYTES) {
        text.push(s);
    }
}

/// A string, or the first element of an array when that is a string; capped.
fn first_string(raw: &RawValue) -> Option<Cow<'_, str>> {
    let mut first = None;
    if raw.get().starts_with('[') {
        let _ = walk_array(raw.get(), |element| {
            first = Some(element);
            false
        });
        return string(first?, MAX_TEXT_BYTES).map(capped);
    }
    string(raw, MAX_TEXT_BYTES).map(capped)
}

/// The value of an object's last field named `name`; `None` when `raw` is not an object.
fn last_field<'a>(raw: &'a RawValue, name: &str) -> Option<&'a RawValue> {
    let mut found = None;
    if raw.get().starts_with('{') {
        let _ = walk_object(raw.get(), |key, value| {
            if key == name {
                found = Some(value);
            }
        });
    }
    found
}

/// Calls `each` with every key (unescaped) and raw value of the JSON object `json`, then
/// checks that nothing but whitespace follows it.
fn walk_object<'a>(
    json: &'a str,
    each: impl FnMut(Cow<'a, str>, &'a RawValue),
) -> serde_json::Result<()> {
    let mut de = serde_json::Deserializer::from_str(json);
    de.deserialize_map(Fields(each))?;
    de.end()
}

/// Calls `each` with every raw element of the JSON array `json`, while it returns `true`.
/// Only for text a walk already checked: an early stop leaves the rest unread.
fn walk_array<'a>(json: &'a str, each: impl FnMut(&'a RawValue) -> bool) -> serde_json::Result<()> {
    serde_json::Deserializer::from_str(json).deserialize_seq(Elements(each))
}

/// Visits an object's fields as raw values.
struct Fields<F>(F);

impl<'a, F: FnMut(Cow<'a, str>, &'a RawValue)> Visitor<'a> for Fields<F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'a>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<&RawValue>()? {
            let value = map.next_value::<&RawValue>()?;
            (self.0)(key_of(key), value);
        }
        Ok(())
    }
}

/// Visits an array's elements as raw values.
struct Elements<F>(F);

impl<'a, F: FnMut(&'a RawValue) -> bool> Visitor<'a> for Elements<F> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array")
    }

    fn visit_seq<A: SeqAccess<'a>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while let Some(element) = seq.next_element::<&RawValue>()? {
            if !(self.0)(element) {
                break;
            }
        }
        Ok(())
    }
}

/// An object key, unescaped.
fn key_of(raw: &RawValue) -> Cow<'_, str> {
    // A key is a string, so `string` always finds one.
    string(raw, usize::MAX).unwrap_or_default()
}

/// The value of a raw JSON string (`None` for other types), borrowed unless it has escapes;
/// unescaping stops soon after `limit` bytes.
fn string(raw: &RawValue, limit: usize) -> Option<Cow<'_, str>> {
    let inner = raw.get().strip_prefix('"')?.strip_suffix('"')?;
    // The memchr crate's search is SIMD; `str::find` searches a word at a time.
    let Some(first) = memchr::memchr(b'\\', inner.as_bytes()) else {
        return Some(Cow::Borrowed(inner));
    };
    let mut out = String::with_capacity(inner.len().min(limit));
    let mut rest = inner;
    let mut next = Some(first);
    while out.len() < limit {
        let Some(at) = next else {
            out.push_str(rest);
            break;
        };
        // A backslash is ASCII: `at` is a char boundary.
        out.push_str(rest.get(..at).unwrap_or_default());
        let (ch, len) = escape(rest.get(at + 1..).unwrap_or_default());
        out.push(ch);
        rest = rest.get(at + 1 + len..).unwrap_or_default();
        next = memchr::memchr(b'\\', rest.as_bytes());
    }
    Some(Cow::Owned(out))
}

/// The char an escape stands for, from the bytes after its backslash (whose syntax
/// serde_json checked), and how many of those bytes it takes.
fn escape(s: &str) -> (char, usize) {
    let ch = match s.as_bytes().first() {
        Some(b'n') => '\n',
        Some(b't') => '\t',
        Some(b'r') => '\r',
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'u') => return unicode_escape(s),
        Some(&other) => char::from(other), // `"`, `\`, `/`
        None => return (char::REPLACEMENT_CHARACTER, 0),
    };
    (ch, 1)
}

/// `uXXXX`, or a surrogate pair `uD83D\uDE00`; a lone surrogate is U+FFFD.
fn unicode_escape(s: &str) -> (char, usize) {
    let Some(unit) = hex4(s.get(1..)) else {
        return (char::REPLACEMENT_CHARACTER, 1);
    };
    if (0xD800..0xDC00).contains(&unit) {
        let low = hex4(s.get(5..).and_then(|rest| rest.strip_prefix("\\u")));
        if let Some(low @ 0xDC00..=0xDFFF) = low {
            let ch = char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00));
            return (ch.unwrap_or(char::REPLACEMENT_CHARACTER), 11);
        }
    }
    (
        char::from_u32(unit).unwrap_or(char::REPLACEMENT_CHARACTER),
        5,
    )
}

/// Four hex digits at the start of `s`.
fn hex4(s: Option<&str>) -> Option<u32> {
    let digits = s?.get(..4)?;
    digits
        .chars()
        .try_fold(0, |acc, c| Some(acc * 16 + c.to_digit(16)?))
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
fn floor_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    // A UTF-8 char is at most 4 bytes long, so at most 3 steps back.
    (max.saturating_sub(3)..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

/// Shortens `s` to `len` bytes (a char boundary), keeping it borrowed if it was.
fn truncate(s: &mut Cow<'_, str>, len: usize) {
    match s {
        Cow::Borrowed(b) => *b = &b[..len],
        Cow::Owned(o) => o.truncate(len),
    }
}

/// `s` cut to [`MAX_TEXT_BYTES`].
fn capped(mut s: Cow<'_, str>) -> Cow<'_, str> {
    let len = floor_boundary(&s, MAX_TEXT_BYTES);
    truncate(&mut s, len);
    s
}

/// Prompt text being joined from parts, capped at [`MAX_TEXT_BYTES`].
#[derive(Debug, Default)]
struct Text<'a> {
    joined: Option<Cow<'a, str>>,
    /// A part was cut: later parts are not read.
    full: bool,
}

impl<'a> Text<'a> {
    /// Appends `part` after a `\n` (none before the first part), up to the cap.
    fn push(&mut self, part: Cow<'a, str>) {
        if self.full {
            return;
        }
        match &mut self.joined {
            None => {
                self.full = part.len() > MAX_TEXT_BYTES;
                self.joined = Some(capped(part));
            }
            Some(joined) => {
                let room = MAX_TEXT_BYTES - joined.len();
                if room == 0 {
                    self.full = true;
                    return;
                }
                let take = floor_boundary(&part, room - 1);
                self.full = take < part.len();
                let joined = joined.to_mut();
                joined.push('\n');
                joined.push_str(&part[..take]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(body: &str) -> Peeked<'_> {
        peek(body.as_bytes(), Wants::ALL)
    }

    fn text(body: &str) -> Option<Cow<'_, str>> {
        all(body).text
    }

    fn is_borrowed(s: &Option<Cow<'_, str>>) -> bool {
        matches!(s, Some(Cow::Borrowed(_)))
    }

    #[test]
    fn openai_chat_with_string_content_is_borrowed() {
        let body = r#"{"model":"llama-3","stream":true,"temperature":0.2,
            "messages":[{"role":"user","content":"Hello there"}],
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}"#;
        let got = all(body);
        assert_eq!(got.model.as_deref(), Some("llama-3"));
        assert!(got.stream);
        assert_eq!(got.rid, None);
        assert_eq!(got.text.as_deref(), Some("Hello there"));
        assert!(is_borrowed(&got.model));
        assert!(is_borrowed(&got.text));
    }

    #[test]
    fn chat_messages_and_parts_are_joined() {
        let body = r#"{"messages":[
            {"role":"system","content":"Be brief."},
            {"role":"user","content":[{"type":"text","text":"Look:"},
                {"type":"image_url","image_url":{"url":"data:..."}},{"type":"text","text":"what?"}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"1"}]},
            {"role":"tool","content":"42"}]}"#;
        let got = text(body);
        assert_eq!(got.as_deref(), Some("Be brief.\nLook:\nwhat?\n42"));
        assert!(matches!(got, Some(Cow::Owned(_))));
    }

    #[test]
    fn anthropic_system_string_or_blocks_precede_messages() {
        let body = r#"{"model":"claude","max_tokens":5,"system":"You are terse.",
            "messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}"#;
        assert_eq!(text(body).as_deref(), Some("You are terse.\nHi"));
        // `system` after `messages`, as blocks: still first.
        let body = r#"{"messages":[{"role":"user","content":"Hi"}],
            "system":[{"type":"text","text":"A"},{"type":"text","text":"B","cache_control":{}}]}"#;
        assert_eq!(text(body).as_deref(), Some("A\nB\nHi"));
        // Messages without text still give the system prompt.
        let body = r#"{"system":"S","messages":[{"role":"user","content":[{"type":"image"}]}]}"#;
        assert_eq!(text(body).as_deref(), Some("S"));
        // `system` alone is not a prompt source.
        assert_eq!(text(r#"{"system":"S","prompt":"P"}"#).as_deref(), Some("P"));
        assert_eq!(text(r#"{"system":"S"}"#), None);
    }

    #[test]
    fn completions_prompt_string_or_first_of_array() {
        let got = text(r#"{"model":"m","prompt":"Once upon"}"#);
        assert_eq!(got.as_deref(), Some("Once upon"));
        assert!(is_borrowed(&got));
        let got = text(r#"{"prompt":["first",{"x":[1]},"second"]}"#);
        assert_eq!(got.as_deref(), Some("first"));
        assert!(is_borrowed(&got));
        // Token ids are not text.
        assert_eq!(text(r#"{"prompt":[1,2,3]}"#), None);
        assert_eq!(text(r#"{"prompt":[[1,2],[3]]}"#), None);
        assert_eq!(text(r#"{"prompt":[]}"#), None);
    }

    #[test]
    fn sglang_generate_text_and_rid() {
        let got = all(
            r#"{"text":"The capital of","rid":"req-7","sampling_params":{"max_new_tokens":8}}"#,
        );
        assert_eq!(got.text.as_deref(), Some("The capital of"));
        assert_eq!(got.rid.as_deref(), Some("req-7"));
        assert!(is_borrowed(&got.rid));
        assert!(!got.stream);
        assert_eq!(got.model, None);
        assert_eq!(text(r#"{"text":["a","b"]}"#).as_deref(), Some("a"));
    }

    #[test]
    fn embeddings_input_string_or_first_of_array() {
        assert_eq!(
            text(r#"{"model":"e5","input":"doc"}"#).as_deref(),
            Some("doc")
        );
        assert_eq!(text(r#"{"input":["d1","d2"]}"#).as_deref(), Some("d1"));
        assert_eq!(text(r#"{"input":[[101,102]]}"#), None);
    }

    #[test]
    fn sources_are_taken_in_order_whatever_their_position() {
        let body = r#"{"input":"I","text":"T","prompt":"P","messages":[{"content":"M"}]}"#;
        assert_eq!(text(body).as_deref(), Some("M"));
        assert_eq!(
            text(r#"{"input":"I","text":"T","prompt":"P"}"#).as_deref(),
            Some("P")
        );
        assert_eq!(text(r#"{"input":"I","text":"T"}"#).as_deref(), Some("T"));
        // A source of the wrong type or without text counts as absent.
        assert_eq!(
            text(r#"{"messages":"M","prompt":"P"}"#).as_deref(),
            Some("P")
        );
        assert_eq!(
            text(r#"{"messages":[],"prompt":"P"}"#).as_deref(),
            Some("P")
        );
        assert_eq!(
            text(r#"{"messages":[{"content":7}],"prompt":[1],"text":"T"}"#).as_deref(),
            Some("T")
        );
        // An empty string is text.
        assert_eq!(
            text(r#"{"messages":[{"content":""}],"prompt":"P"}"#).as_deref(),
            Some("")
        );
    }

    #[test]
    fn escapes_are_decoded_into_an_owned_string() {
        let got = all(r#"{"model":"a\"b","rid":"caf\u00e9","prompt":"smile \ud83d\ude00\n"}"#);
        assert_eq!(got.model.as_deref(), Some("a\"b"));
        assert_eq!(got.rid.as_deref(), Some("café"));
        assert_eq!(got.text.as_deref(), Some("smile 😀\n"));
        assert!(matches!(got.model, Some(Cow::Owned(_))));
        // Raw UTF-8 needs no unescaping: still borrowed.
        let got = all(r#"{"model":"café 😀"}"#);
        assert!(is_borrowed(&got.model));
        // Keys are compared unescaped.
        assert_eq!(all(r#"{"mod\u0065l":"m"}"#).model.as_deref(), Some("m"));
    }

    #[test]
    fn every_escape_is_decoded() {
        let got = text(r#"{"prompt":"\"\\\/\b\f\n\r\t\u0041\u00e9\u20ac\uD83D\uDE00."}"#);
        assert_eq!(got.as_deref(), Some("\"\\/\u{8}\u{c}\n\r\tAé€😀."));
    }

    /// Python's `json` (the workers) accepts lone surrogates and numbers out of `f64` range,
    /// and so does this module, wherever they stand and whatever is wanted (both found by
    /// the fuzzer, when serde_json read the values it did not skip).
    #[test]
    fn lone_surrogates_and_huge_numbers_are_valid() {
        let body = r#"{"model":"m\ud83d","rid":"\udc00\ud83dx\ud83d\u0041","stream":1e400,
            "messages":[{"content":"cut \ud83d"}],"n":-1e999}"#;
        let got = all(body);
        assert_eq!(got.model.as_deref(), Some("m\u{fffd}"));
        assert_eq!(got.rid.as_deref(), Some("\u{fffd}\u{fffd}x\u{fffd}A"));
        assert_eq!(got.text.as_deref(), Some("cut \u{fffd}"));
        let model_only = Wants {
            model: true,
            ..Wants::default()
        };
        assert_eq!(peek(body.as_bytes(), model_only).model, got.model);
    }

    /// A huge number where `messages` or a message should be: serde_json's type error parses
    /// the number and fails it as out of range, a syntax error, so the body read as invalid
    /// when the text was wanted and valid otherwise (found by the fuzzer; the input is
    /// `tests/fuzz_regressions/json_peek/crash-4fa36f0e…`).
    #[test]
    fn huge_numbers_in_place_of_messages_are_a_wrong_type() {
        for body in [
            r#"{"model":"m","messages":-446e4444444444444444444444444}"#,
            r#"{"model":"m","messages":[1e400,{"content":"x"}]}"#,
            r#"{"messages":1e999,"model":"m","stream":true}"#,
        ] {
            let got = all(body);
            assert_eq!(got.model.as_deref(), Some("m"), "{body}");
            let model_only = Wants {
                model: true,
                ..Wants::default()
            };
            assert_eq!(peek(body.as_bytes(), model_only).model, got.model, "{body}");
        }
        assert_eq!(
            text(r#"{"messages":-1e400,"prompt":"p"}"#).as_deref(),
            Some("p")
        );
    }

    #[test]
    fn non_object_bodies_yield_nothing() {
        for body in [
            "",
            " ",
            "null",
            "true",
            "1",
            "\"model\"",
            "[]",
            r#"[{"model":"m"}]"#,
            "{",
            "}",
            "nope",
        ] {
            assert_eq!(all(body), Peeked::default(), "{body:?}");
        }
        assert_eq!(all("{}"), Peeked::default());
        assert_eq!(all(" \n{ } \n").model, None);
    }

    #[test]
    fn wrong_types_are_absent_and_the_rest_is_read() {
        let got = all(
            r#"{"model":7,"stream":"true","rid":["r1"],"text":{"a":[1,{"b":null}]},"input":"I"}"#,
        );
        assert_eq!(
            got,
            Peeked {
                text: Some("I".into()),
                ..Peeked::default()
            }
        );
        let got = all(r#"{"model":null,"stream":1,"rid":false,"messages":{"content":"x"}}"#);
        assert_eq!(got, Peeked::default());
        assert!(!all(r#"{"stream":false}"#).stream);
        // Messages and parts of the wrong shape contribute nothing.
        let body =
            r#"{"messages":[7,"str",null,{"content":[1,"loose",{"text":5},{"text":"ok"}]}]}"#;
        assert_eq!(text(body).as_deref(), Some("ok"));
    }

    #[test]
    fn invalid_or_truncated_json_yields_nothing() {
        let whole = r#"{"model":"m","stream":true,"messages":[{"content":"hi"}]}"#;
        assert_eq!(all(whole).model.as_deref(), Some("m"));
        for cut in 1..whole.len() {
            assert_eq!(all(&whole[..cut]), Peeked::default(), "cut at {cut}");
        }
        for body in [
            r#"{"model":"m"} x"#,
            r#"{"model":"m",}"#,
            r#"{"model":"m" "stream":true}"#,
            r#"{"model":"m","x":[1,2}"#,
            r#"{"model":"m","x":tru}"#,
            "{\"model\":\"m\",\"x\":\"raw\ncontrol\"}",
            r#"{"model":"\x"}"#,
            r#"{"model":"\u12g4"}"#,
            r#"{"model":"m","x":01}"#,
        ] {
            assert_eq!(all(body), Peeked::default(), "{body:?}");
        }
        // Not UTF-8, in a string read or skipped: invalid, whatever is wanted (found by
        // the fuzzer: `model` used to be read when the bad `input` was skipped).
        let model_only = Wants {
            model: true,
            ..Wants::default()
        };
        let body = br#"{"model":"m","input":"x","tools":"y"}"#;
        for at in [b'x', b'y'] {
            let mut bad = body.to_vec();
            let i = bad.iter().position(|&b| b == at).unwrap_or_default();
            bad[i] = 0xff;
            assert_eq!(peek(&bad, Wants::ALL), Peeked::default());
            assert_eq!(peek(&bad, model_only), Peeked::default());
        }
        assert_eq!(peek(body, model_only).model.as_deref(), Some("m"));
    }

    #[test]
    fn duplicate_keys_last_wins() {
        let got =
            all(r#"{"model":"a","stream":true,"model":"b","stream":false,"rid":"1","rid":2}"#);
        assert_eq!(got.model.as_deref(), Some("b"));
        assert!(!got.stream);
        assert_eq!(got.rid, None);
        let body = r#"{"messages":[{"content":"old"}],"system":"S1","messages":[{"content":"new"}],"system":["S2"]}"#;
        // The last `system` is an array of strings, not blocks: no text from it.
        assert_eq!(text(body).as_deref(), Some("new"));
        let body =
            r#"{"messages":[{"content":"a"},{"content":"b","content":[{"text":"c","text":"d"}]}]}"#;
        assert_eq!(text(body).as_deref(), Some("a\nd"));
        let body = r#"{"messages":[{"content":"b","role":"user","content":null}],"prompt":"p"}"#;
        assert_eq!(text(body).as_deref(), Some("p"));
    }

    #[test]
    fn only_wanted_fields_are_read() {
        let body = r#"{"model":"m","stream":true,"rid":"r","prompt":"p"}"#;
        let got = peek(
            body.as_bytes(),
            Wants {
                model: true,
                stream: true,
                ..Wants::default()
            },
        );
        assert_eq!(
            got,
            Peeked {
                model: Some("m".into()),
                stream: true,
                ..Peeked::default()
            }
        );
        let got = peek(
            body.as_bytes(),
            Wants {
                text: true,
                ..Wants::default()
            },
        );
        assert_eq!(
            got,
            Peeked {
                text: Some("p".into()),
                ..Peeked::default()
            }
        );
        assert_eq!(peek(body.as_bytes(), Wants::default()), Peeked::default());
    }

    /// `len` bytes of two-byte chars, after one ASCII byte so a cut at an even length falls
    /// inside a char.
    fn wide(len: usize) -> String {
        let mut s = String::from("x");
        while s.len() < len {
            s.push('é');
        }
        s
    }

    fn assert_capped(got: &Option<Cow<'_, str>>, starts: &str) {
        let got = got.as_deref().unwrap_or_default();
        assert!(
            got.len() <= MAX_TEXT_BYTES && got.len() >= MAX_TEXT_BYTES - 3,
            "{}",
            got.len()
        );
        assert!(got.starts_with(starts));
    }

    #[test]
    fn a_huge_string_is_capped_on_a_char_boundary_and_stays_borrowed() {
        let big = wide(MAX_TEXT_BYTES * 2);
        let body = format!(r#"{{"messages":[{{"content":"{big}"}},{{"content":"after"}}]}}"#);
        let got = text(&body);
        assert_capped(&got, "xé");
        assert!(is_borrowed(&got));
        assert_eq!(got.as_deref().map(str::len), Some(MAX_TEXT_BYTES - 1));
        let body = format!(r#"{{"prompt":["{big}"]}}"#);
        assert!(is_borrowed(&text(&body)));
        assert_capped(&text(&body), "xé");
        // Exactly at the cap: whole.
        let exact = "a".repeat(MAX_TEXT_BYTES);
        let body = format!(r#"{{"text":"{exact}"}}"#);
        assert_eq!(text(&body).as_deref(), Some(exact.as_str()));
    }

    /// A message that is not an object makes `messages` read raw instead of streamed: the
    /// text must come out the same, cut included.
    #[test]
    fn streamed_and_raw_messages_give_the_same_text() {
        let half = wide(MAX_TEXT_BYTES / 2 + 1);
        for system in ["", r#""system":"S","#] {
            for messages in [
                r#"{"content":"a"},{"content":[{"text":"b"}]}"#.to_owned(),
                format!(r#"{{"content":"{half}"}},{{"content":"{half}"}}"#),
            ] {
                let streamed = format!(r#"{{{system}"messages":[{messages}]}}"#);
                let raw = format!(r#"{{{system}"messages":[{messages},7]}}"#);
                assert_eq!(text(&streamed), text(&raw));
                assert!(text(&raw).is_some());
            }
        }
    }

    #[test]
    fn joined_and_escaped_text_is_capped_too() {
        let half = wide(MAX_TEXT_BYTES / 2 + 1);
        let body = format!(
            r#"{{"system":"{half}","messages":[{{"content":"{half}"}},{{"content":"{half}"}}]}}"#
        );
        let got = text(&body);
        assert_capped(&got, &format!("{half}\n"));
        let escaped = "\\u00e9".repeat(MAX_TEXT_BYTES);
        let body = format!(r#"{{"model":"m","input":"{escaped}"}}"#);
        let got = all(&body);
        assert_eq!(got.model.as_deref(), Some("m"));
        assert_eq!(got.text.as_deref().map(str::len), Some(MAX_TEXT_BYTES));
    }

    #[test]
    fn deep_nesting_in_skipped_values_does_not_exhaust_the_stack() {
        let depth = 1_000_000;
        for (open, close) in [("[", "]"), (r#"{"a":"#, "}")] {
            let deep = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            for field in ["tools", "model", "stream", "prompt", "messages"] {
                let body = format!(r#"{{"rid":"r","{field}":{deep}}}"#);
                assert_eq!(all(&body).rid.as_deref(), Some("r"), "{field}");
            }
            let body = format!(r#"{{"rid":"r","messages":[{{"content":[{deep}]}}]}}"#);
            assert_eq!(all(&body).rid.as_deref(), Some("r"));
            // Unclosed: invalid.
            let body = format!(r#"{{"rid":"r","tools":{}"#, open.repeat(depth));
            assert_eq!(all(&body), Peeked::default());
        }
        let body = "[".repeat(depth);
        assert_eq!(all(&body), Peeked::default());
    }

    #[test]
    fn floor_boundary_never_splits_a_char() {
        let s = "a😀é";
        for max in 0..=s.len() + 2 {
            let at = floor_boundary(s, max);
            assert!(s.is_char_boundary(at) && at <= max.min(s.len()));
            assert!(max >= s.len() || !s.is_char_boundary(at + 1) || at + 1 > max);
        }
    }
}

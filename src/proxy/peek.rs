//! The few fields routing needs from a JSON request body, read without a typed parse.
//!
//! Routing looks at `model` (which fleet), `stream`, SGLang's `rid` and a prompt prefix (for
//! cache-aware routing); the worker parses the whole body anyway, so the gateway reads only
//! these fields and skips everything else: skipped values are checked for JSON syntax but
//! never materialised, and a field's string is borrowed from the body unless it has to be
//! unescaped or joined.
//!
//! The reading is done by serde_json's parser driven by visitors of our own (measured
//! against `serde_json::Value`, simd-json and a full parse in `benches/json_peek.rs`).
//! serde_json skips unwanted values with a loop and a heap stack of open brackets
//! (`IgnoredAny`), so no nesting depth in a skipped value can exhaust the thread's stack;
//! the values read here are at most five levels deep (body, `messages`, a message, its
//! `content` array, a part), within serde_json's recursion limit of 128.
//!
//! Rules, chosen to match what the (Python) workers will see:
//! - **Invalid JSON yields nothing**: any syntax error anywhere in the body, including a
//!   truncated body or trailing bytes after the object, gives `Peeked::default()`, even for
//!   fields read before the error. Routing on a body the worker will refuse is pointless, and
//!   the worker answers the malformed request itself. JSON is UTF-8 (RFC 8259), so a body
//!   that is not UTF-8 anywhere, even inside a skipped string, is invalid too: the whole
//!   body is checked first (SIMD-fast, a tenth of the cost of skipping it), which also makes
//!   each field's result independent of which other fields are wanted.
//! - **Duplicate keys: the last one wins**, at every level, as with Python's `json.loads`
//!   (SGLang, vLLM): the gateway and the worker then agree on which model was asked for.
//! - **Wrong types count as absent**: `"model": 7` gives `None`, `"stream": "true"` gives
//!   `false`; the rest of the body is still read.
//! - Keys are compared after unescaping (`"mod\u0065l"` is `model`), as the worker does.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Most bytes of prompt text returned, cut on a char boundary.
///
/// Prefix routing compares the start of prompts (worker prefix caches hold a few thousand
/// tokens of shared system prompt and history); 256 KiB is far beyond any prefix worth
/// matching, and the cap bounds the copy made when parts are joined or unescaped, whatever
/// the body size.
pub const MAX_TEXT_BYTES: usize = 256 * 1024;

/// Which fields the caller needs; everything else is skipped without allocation.
///
/// (Skipping builds nothing; serde_json's one scratch buffer, reused for the whole body,
/// holds the brackets open inside a skipped value and any key that has escapes.)
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
    // Reading from a `&str`, serde_json does not check the strings it reads again.
    let mut de = serde_json::Deserializer::from_str(body);
    match Top(wants).deserialize(&mut de) {
        Ok(found) if de.end().is_ok() => found.finish(),
        _ => Peeked::default(),
    }
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
    /// A part was cut: later parts are skipped unread.
    full: bool,
}

/// A [`Text`]'s state, to return to when a duplicate key replaces what was pushed since.
#[derive(Clone, Copy)]
struct Mark {
    len: Option<usize>,
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

    fn mark(&self) -> Mark {
        Mark {
            len: self.joined.as_ref().map(|j| j.len()),
            full: self.full,
        }
    }

    /// Forgets every part pushed since `mark`.
    fn reset(&mut self, mark: Mark) {
        self.full = mark.full;
        match (mark.len, &mut self.joined) {
            (Some(len), Some(joined)) => truncate(joined, len),
            _ => self.joined = None,
        }
    }
}

/// The top-level keys read; any other key's value is skipped.
enum Key {
    Model,
    Stream,
    Rid,
    Messages,
    System,
    Prompt,
    Text,
    Input,
    Other,
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Key, D::Error> {
        de.deserialize_identifier(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Key, E> {
        Ok(match key {
            "model" => Key::Model,
            "stream" => Key::Stream,
            "rid" => Key::Rid,
            "messages" => Key::Messages,
            "system" => Key::System,
            "prompt" => Key::Prompt,
            "text" => Key::Text,
            "input" => Key::Input,
            _ => Key::Other,
        })
    }
}

/// Whether an object key is the one name looked for inside a message or a part.
struct KeyIs(&'static str);

impl<'de> DeserializeSeed<'de> for KeyIs {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<bool, D::Error> {
        de.deserialize_identifier(self)
    }
}

impl Visitor<'_> for KeyIs {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, key: &str) -> Result<bool, E> {
        Ok(key == self.0)
    }
}

/// What a value is read as. Every JSON type is accepted (through [`Lenient`]): the types a
/// shape does not handle give `Out::default()`, their contents skipped.
trait Shape<'de>: Sized {
    type Out: Default;

    fn string(self, _s: Cow<'de, str>) -> Self::Out {
        Self::Out::default()
    }

    fn boolean(self, _b: bool) -> Self::Out {
        Self::Out::default()
    }

    fn seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Out, A::Error> {
        IgnoredAny.visit_seq(seq).map(|_| Self::Out::default())
    }

    fn map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error> {
        IgnoredAny.visit_map(map).map(|_| Self::Out::default())
    }
}

/// Reads a value of any type as the shape `S`.
struct Lenient<S>(S);

impl<'de, S: Shape<'de>> DeserializeSeed<'de> for Lenient<S> {
    type Value = S::Out;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Out, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de, S: Shape<'de>> Visitor<'de> for Lenient<S> {
    type Value = S::Out;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<S::Out, E> {
        Ok(self.0.boolean(b))
    }

    fn visit_i64<E>(self, _: i64) -> Result<S::Out, E> {
        Ok(S::Out::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<S::Out, E> {
        Ok(S::Out::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<S::Out, E> {
        Ok(S::Out::default())
    }

    fn visit_unit<E>(self) -> Result<S::Out, E> {
        Ok(S::Out::default())
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<S::Out, E> {
        Ok(self.0.string(Cow::Borrowed(s)))
    }

    /// A string with escapes, unescaped into the parser's scratch buffer: copied.
    fn visit_str<E>(self, s: &str) -> Result<S::Out, E> {
        Ok(self.0.string(Cow::Owned(s.to_owned())))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<S::Out, A::Error> {
        self.0.seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<S::Out, A::Error> {
        self.0.map(map)
    }
}

/// A string (`model`, `rid`).
struct Str;

impl<'de> Shape<'de> for Str {
    type Out = Option<Cow<'de, str>>;

    fn string(self, s: Cow<'de, str>) -> Self::Out {
        Some(s)
    }
}

/// `true` (`stream`).
struct Flag;

impl<'de> Shape<'de> for Flag {
    type Out = bool;

    fn boolean(self, b: bool) -> bool {
        b
    }
}

/// A string, or the first element of an array when that is a string (`prompt`, `text`,
/// `input`); the rest of the array is skipped.
struct FirstStr;

impl<'de> Shape<'de> for FirstStr {
    type Out = Option<Cow<'de, str>>;

    fn string(self, s: Cow<'de, str>) -> Self::Out {
        Some(capped(s))
    }

    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Out, A::Error> {
        let first = seq.next_element_seed(Lenient(Str))?.flatten();
        IgnoredAny.visit_seq(seq)?;
        Ok(first.map(capped))
    }
}

/// A message's `content` or Anthropic's `system`: a string, or an array of parts whose
/// `text` strings are pushed onto the text.
struct Parts<'t, 'de>(&'t mut Text<'de>);

impl<'de> Shape<'de> for Parts<'_, 'de> {
    type Out = ();

    fn string(self, s: Cow<'de, str>) {
        self.0.push(s);
    }

    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while !self.0.full {
            match seq.next_element_seed(Lenient(Field("text")))? {
                None => return Ok(()),
                Some(Some(text)) => self.0.push(text),
                Some(None) => {}
            }
        }
        IgnoredAny.visit_seq(seq).map(drop)
    }
}

/// An object's string field `.0` (a part's `text`), the last one if repeated.
struct Field(&'static str);

impl<'de> Shape<'de> for Field {
    type Out = Option<Cow<'de, str>>;

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        let mut found = None;
        while let Some(is_field) = map.next_key_seed(KeyIs(self.0))? {
            if is_field {
                found = map.next_value_seed(Lenient(Str))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The `messages` array; `Out` is whether it was an array.
struct Messages<'t, 'de>(&'t mut Text<'de>);

impl<'de> Shape<'de> for Messages<'_, 'de> {
    type Out = bool;

    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while !self.0.full {
            if seq
                .next_element_seed(Lenient(Message(&mut *self.0)))?
                .is_none()
            {
                return Ok(true);
            }
        }
        IgnoredAny.visit_seq(seq).map(|_| true)
    }
}

/// One message: its `content` (the last one if repeated) is pushed onto the text.
struct Message<'t, 'de>(&'t mut Text<'de>);

impl<'de> Shape<'de> for Message<'_, 'de> {
    type Out = ();

    fn map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let before = self.0.mark();
        while let Some(is_content) = map.next_key_seed(KeyIs("content"))? {
            if !is_content {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            self.0.reset(before);
            if self.0.full {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(Lenient(Parts(&mut *self.0)))?;
            }
        }
        Ok(())
    }
}

/// The body's object, read as [`Found`].
struct Top(Wants);

impl<'de> DeserializeSeed<'de> for Top {
    type Value = Found<'de>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Found<'de>, D::Error> {
        de.deserialize_map(self)
    }
}

/// Every candidate source, kept until the end because the last duplicate key wins and the
/// text's source depends on which fields are present.
#[derive(Default)]
struct Found<'a> {
    model: Option<Cow<'a, str>>,
    stream: bool,
    rid: Option<Cow<'a, str>>,
    system: Text<'a>,
    /// `Some` when `messages` is an array.
    messages: Option<Text<'a>>,
    prompt: Option<Cow<'a, str>>,
    text: Option<Cow<'a, str>>,
    input: Option<Cow<'a, str>>,
}

impl<'a> Found<'a> {
    fn finish(self) -> Peeked<'a> {
        let chat = self.messages.and_then(|messages| {
            let mut text = self.system;
            if let Some(joined) = messages.joined {
                text.push(joined);
            }
            text.joined
        });
        Peeked {
            model: self.model,
            stream: self.stream,
            rid: self.rid,
            text: chat.or(self.prompt).or(self.text).or(self.input),
        }
    }
}

impl<'de> Visitor<'de> for Top {
    type Value = Found<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found<'de>, A::Error> {
        let wants = self.0;
        let mut found = Found::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Model if wants.model => found.model = map.next_value_seed(Lenient(Str))?,
                Key::Stream if wants.stream => {
                    found.stream = map.next_value_seed(Lenient(Flag))?;
                }
                Key::Rid if wants.rid => found.rid = map.next_value_seed(Lenient(Str))?,
                Key::Messages if wants.text => {
                    let mut text = Text::default();
                    let is_array = map.next_value_seed(Lenient(Messages(&mut text)))?;
                    found.messages = is_array.then_some(text);
                }
                Key::System if wants.text => {
                    found.system = Text::default();
                    map.next_value_seed(Lenient(Parts(&mut found.system)))?;
                }
                Key::Prompt if wants.text => {
                    found.prompt = map.next_value_seed(Lenient(FirstStr))?;
                }
                Key::Text if wants.text => found.text = map.next_value_seed(Lenient(FirstStr))?,
                Key::Input if wants.text => found.input = map.next_value_seed(Lenient(FirstStr))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
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
            r#"{"model":"\ud800"}"#,
            r#"{"model":"\x"}"#,
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

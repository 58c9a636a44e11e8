//! The shape of a Messages request (spec 2, "Messages request"), as far as the gateway checks
//! it: types and required fields through serde, borrowing from the body.
//!
//! Only what a rule needs is kept: arrays of messages and blocks are visited and dropped as
//! they are read ([`Each`]), so a long conversation costs no allocation for its turns; the
//! tool names are kept for `tool_choice`. Fields the gateway does not model are skipped by
//! serde and stay in the body, which is forwarded as the client wrote it.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The top level of `/v1/messages` and `/v1/messages/count_tokens` bodies. Fields named
/// with `_` are checked for their type and not read further.
#[derive(Deserialize)]
pub struct Request<'a> {
    /// Kept raw: its place in the body is where an alias is replaced.
    #[serde(borrow)]
    pub model: &'a RawValue,
    pub messages: Each<Message>,
    /// Required on `/v1/messages`, absent from count_tokens: checked by the caller. Signed,
    /// so a negative value is a broken rule (400), not a type error.
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(rename = "system", default)]
    _system: Option<System>,
    #[serde(rename = "stream", default)]
    _stream: Option<bool>,
    #[serde(rename = "temperature", default)]
    _temperature: Option<f64>,
    #[serde(rename = "top_p", default)]
    _top_p: Option<f64>,
    #[serde(rename = "top_k", default)]
    _top_k: Option<i64>,
    #[serde(rename = "stop_sequences", default)]
    _stop_sequences: Option<Each<IgnoredString>>,
    #[serde(default, borrow)]
    pub tools: Option<Vec<Tool<'a>>>,
    #[serde(default, borrow)]
    pub tool_choice: Option<ToolChoice<'a>>,
    #[serde(default)]
    pub thinking: Option<Thinking>,
    #[serde(rename = "metadata", default)]
    _metadata: Option<Metadata>,
    #[serde(rename = "service_tier", default)]
    _service_tier: Option<ServiceTier>,
    #[serde(rename = "container", default, borrow)]
    _container: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub mcp_servers: Option<Vec<McpServer<'a>>>,
    #[serde(rename = "rid", default)]
    _rid: Option<IgnoredString>,
}

/// A turn of the conversation: only its types matter.
#[derive(Deserialize)]
pub struct Message {
    #[serde(rename = "role")]
    _role: Role,
    #[serde(rename = "content")]
    _content: Content,
}

/// The roles spec 2 accepts (a system turn inside `messages` included).
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
}

/// A turn's content: a string, or an array of blocks.
struct Content;

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of content blocks")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Content, E> {
                Ok(Content)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Content, A::Error> {
                Each::<Block>::visit(seq).map(|_| Content)
            }
        }
        d.deserialize_any(V)
    }
}

/// A content block: its type must be one spec 2 accepts, and the fields that type cannot
/// do without must be there with their types.
#[derive(Deserialize)]
pub struct Block {
    #[serde(rename = "type")]
    pub kind: BlockType,
    #[serde(default)]
    text: Option<IgnoredString>,
    #[serde(default)]
    id: Option<IgnoredString>,
    #[serde(default)]
    name: Option<IgnoredString>,
    #[serde(default)]
    input: Option<IgnoredAny>,
    #[serde(default)]
    tool_use_id: Option<IgnoredString>,
    #[serde(default)]
    source: Option<IgnoredAny>,
    #[serde(default)]
    thinking: Option<IgnoredString>,
}

/// The accepted content block types; any other, `mcp_tool_use` and `mcp_tool_result`
/// included, does not parse.
#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum BlockType {
    Text,
    Image,
    Document,
    ToolUse,
    ToolResult,
    Thinking,
    RedactedThinking,
    ServerToolUse,
    SearchResult,
    WebSearchToolResult,
    ToolSearchToolResult,
    ToolReference,
}

impl Block {
    /// The field this block's type requires and lacks, if any.
    fn missing(&self) -> Option<&'static str> {
        let need = |present: bool, field: &'static str| (!present).then_some(field);
        match self.kind {
            BlockType::Text => need(self.text.is_some(), "text"),
            BlockType::Image | BlockType::Document => need(self.source.is_some(), "source"),
            BlockType::ToolUse | BlockType::ServerToolUse => need(self.id.is_some(), "id")
                .or_else(|| need(self.name.is_some(), "name"))
                .or_else(|| need(self.input.is_some(), "input")),
            BlockType::ToolResult => need(self.tool_use_id.is_some(), "tool_use_id"),
            BlockType::Thinking => need(self.thinking.is_some(), "thinking"),
            _ => None,
        }
    }
}

/// A string whose value does not matter, only that it is one.
pub struct IgnoredString;

impl<'de> Deserialize<'de> for IgnoredString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IgnoredString;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<IgnoredString, E> {
                Ok(IgnoredString)
            }
        }
        d.deserialize_str(V)
    }
}

/// `system`: a string, or an array of text blocks.
pub struct System;

impl<'de> Deserialize<'de> for System {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = System;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of text blocks")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<System, E> {
                Ok(System)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<System, A::Error> {
                Each::<SystemBlock>::visit(seq).map(|_| System)
            }
        }
        d.deserialize_any(V)
    }
}

/// A block of `system`: text only.
#[derive(Deserialize)]
struct SystemBlock {
    #[serde(rename = "type")]
    _kind: SystemBlockType,
    #[serde(rename = "text")]
    _text: IgnoredString,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum SystemBlockType {
    Text,
}

/// An entry of `tools`: a custom tool (`name`, `input_schema`), or one of the provider's
/// typed tools (`mcp_toolset`, bash, text editor, web search, ...), which may have no name.
#[derive(Deserialize)]
pub struct Tool<'a> {
    #[serde(rename = "type", default, borrow)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub input_schema: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub mcp_server_name: Option<Cow<'a, str>>,
}

impl Tool<'_> {
    /// A custom tool: no type, or type `custom`.
    pub fn is_custom(&self) -> bool {
        self.kind.as_deref().is_none_or(|k| k == "custom")
    }

    pub fn is_mcp_toolset(&self) -> bool {
        self.kind.as_deref() == Some("mcp_toolset")
    }
}

#[derive(Deserialize)]
pub struct ToolChoice<'a> {
    #[serde(rename = "type")]
    pub kind: ToolChoiceType,
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(rename = "disable_parallel_tool_use", default)]
    _disable_parallel_tool_use: Option<bool>,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceType {
    Auto,
    Any,
    Tool,
    None,
}

#[derive(Deserialize)]
pub struct Thinking {
    #[serde(rename = "type")]
    pub kind: ThinkingType,
    #[serde(default)]
    pub budget_tokens: Option<i64>,
    #[serde(default)]
    pub display: Option<ThinkingDisplay>,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingType {
    Enabled,
    Adaptive,
    Disabled,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingDisplay {
    Summarized,
    Omitted,
}

#[derive(Deserialize)]
pub struct Metadata {
    #[serde(rename = "user_id", default)]
    _user_id: Option<IgnoredString>,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ServiceTier {
    Auto,
    StandardOnly,
}

/// An entry of `mcp_servers`.
#[derive(Deserialize)]
pub struct McpServer<'a> {
    #[serde(rename = "type")]
    _kind: McpServerType,
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(rename = "url")]
    _url: IgnoredString,
    #[serde(rename = "authorization_token", default)]
    _authorization_token: Option<IgnoredString>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum McpServerType {
    Url,
}

/// An array whose elements are checked as `T` one by one and dropped: only their number is
/// kept.
pub struct Each<T> {
    pub count: usize,
    _t: PhantomData<T>,
}

/// Elements that can say what they lack beyond their types.
pub trait Checked {
    /// A required field this element lacks, if any.
    fn missing(&self) -> Option<&'static str> {
        None
    }
}

impl Checked for Block {
    fn missing(&self) -> Option<&'static str> {
        Block::missing(self)
    }
}

impl Checked for Message {}
impl Checked for IgnoredString {}
impl Checked for SystemBlock {}

impl<'de, T: Deserialize<'de> + Checked> Each<T> {
    fn visit<A: SeqAccess<'de>>(mut seq: A) -> Result<Each<T>, A::Error> {
        let mut count = 0;
        while let Some(item) = seq.next_element::<T>()? {
            if let Some(field) = item.missing() {
                return Err(de::Error::missing_field(field));
            }
            count += 1;
        }
        Ok(Each {
            count,
            _t: PhantomData,
        })
    }
}

impl<'de, T: Deserialize<'de> + Checked> Deserialize<'de> for Each<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de> + Checked> Visitor<'de> for V<T> {
            type Value = Each<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Each<T>, A::Error> {
                Each::visit(seq)
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

//! The shape of a Responses request (spec 2, "Responses request"), as far as the gateway
//! checks it: types and required fields through serde, borrowing from the body.
//!
//! Only what a rule needs is kept. Input items are visited one by one and dropped (only the
//! number of items and of messages is kept), so a long conversation costs no allocation for
//! its turns. Fields the gateway does not model are skipped by serde and stay in the body,
//! which goes on as the client wrote it.
//!
//! Every nested object is read through [`Obj`]: serde's derived structs also accept a JSON
//! array (fields by position), which would let `"reasoning": ["high"]` through; `Obj` insists
//! on an object first. The price is a second, shallow pass over small objects.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::api::messages::check::IgnoredString;

/// The top level of a `/v1/responses` body. Fields named with `_` are checked for their
/// type and not read further.
#[derive(Deserialize)]
pub struct Request<'a> {
    /// Kept raw: its place in the body is where an alias is replaced.
    #[serde(borrow)]
    pub model: &'a RawValue,
    pub input: Input,
    #[serde(rename = "instructions", default)]
    _instructions: Option<IgnoredString>,
    /// Signed, so a negative value is a broken rule (400), not a type error.
    #[serde(default)]
    pub max_output_tokens: Option<i64>,
    #[serde(default)]
    pub max_tool_calls: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(rename = "stream_options", default)]
    _stream_options: Option<Obj<IgnoredAny>>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default, borrow)]
    pub tools: Option<Vec<Obj<Tool<'a>>>>,
    #[serde(default, borrow)]
    pub tool_choice: Option<ToolChoice<'a>>,
    #[serde(rename = "parallel_tool_calls", default)]
    _parallel_tool_calls: Option<bool>,
    #[serde(default, borrow)]
    pub previous_response_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub conversation: Option<Conversation<'a>>,
    #[serde(rename = "reasoning", default)]
    _reasoning: Option<Obj<Reasoning>>,
    #[serde(default, borrow)]
    pub text: Option<Obj<Text<'a>>>,
    #[serde(default, borrow)]
    pub include: Option<Vec<Cow<'a, str>>>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default)]
    pub metadata: Option<Metadata>,
    #[serde(rename = "user", default)]
    _user: Option<IgnoredString>,
    // Sampling extensions (spec 2): types only, the engines judge the values.
    #[serde(rename = "top_k", default)]
    _top_k: Option<i64>,
    #[serde(rename = "min_p", default)]
    _min_p: Option<f64>,
    #[serde(rename = "repetition_penalty", default)]
    _repetition_penalty: Option<f64>,
    #[serde(rename = "frequency_penalty", default)]
    _frequency_penalty: Option<f64>,
    #[serde(rename = "presence_penalty", default)]
    _presence_penalty: Option<f64>,
    #[serde(rename = "stop", default)]
    _stop: Option<Stop>,
}

/// A value that must be a JSON object, read as `T`.
pub struct Obj<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: &'de RawValue = Deserialize::deserialize(d)?;
        object(raw).map(Obj).map_err(de::Error::custom)
    }
}

/// `raw` read as `T`, provided it is a JSON object.
pub fn object<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Result<T, String> {
    if !raw.get().starts_with('{') {
        return Err(format!("expected an object, found {}", kind_of(raw)));
    }
    serde_json::from_str(raw.get()).map_err(|e| e.to_string())
}

/// What a JSON value is, for messages (never its content, which may be long).
fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// `input`: a string, or an array of items. What the rules need: whether the string is
/// empty, how many items and how many of them are messages.
pub enum Input {
    Text { empty: bool },
    Items { count: usize, messages: usize },
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Input;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of input items")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Input, E> {
                Ok(Input::Text {
                    empty: v.is_empty(),
                })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Input, A::Error> {
                let (mut count, mut messages) = (0, 0);
                while let Some(Obj(item)) = seq.next_element::<Obj<Item<'de>>>()? {
                    let is_message = item
                        .check()
                        .map_err(|why| de::Error::custom(format!("input[{count}]: {why}")))?;
                    count += 1;
                    messages += usize::from(is_message);
                }
                Ok(Input::Items { count, messages })
            }
        }
        d.deserialize_any(V)
    }
}

/// An input item: the fields some item type needs, raw; which ones must be there, and with
/// which types, depends on `type` ([`Item::check`]), which may come last in the object.
#[derive(Deserialize)]
pub struct Item<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    role: Option<&'a RawValue>,
    #[serde(default, borrow)]
    content: Option<&'a RawValue>,
    #[serde(default, borrow)]
    call_id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    name: Option<&'a RawValue>,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(default, borrow)]
    namespace: Option<&'a RawValue>,
    #[serde(default, borrow)]
    output: Option<&'a RawValue>,
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
}

/// Item types OpenAI's Responses API defines besides the three spec 2 describes: accepted
/// as they are (HTTP workers get them unchanged; the gRPC pipeline judges what it can use).
const OTHER_ITEM_TYPES: &[&str] = &[
    "reasoning",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "file_search_call",
    "web_search_call",
    "computer_call",
    "computer_call_output",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "compaction",
];

impl Item<'_> {
    /// The item's shape by its type: `Ok(true)` for a message.
    fn check(&self) -> Result<bool, String> {
        match self.kind.as_deref() {
            // An item without a type is a message (OpenAI's short form `{role, content}`).
            None | Some("message") => {
                let role = required(self.role, "role")?;
                serde_json::from_str::<Role>(role.get()).map_err(|e| format!("role: {e}"))?;
                let content = required(self.content, "content")?;
                parts_or_string(content).map_err(|e| format!("content: {e}"))?;
                Ok(true)
            }
            Some("function_call") => {
                string(self.call_id, "call_id")?;
                string(self.name, "name")?;
                string(self.arguments, "arguments")?;
                optional_string(self.namespace, "namespace")?;
                Ok(false)
            }
            Some("function_call_output") => {
                string(self.call_id, "call_id")?;
                let output = required(self.output, "output")?;
                parts_or_string(output).map_err(|e| format!("output: {e}"))?;
                Ok(false)
            }
            Some("item_reference") => string(self.id, "id").map(|()| false),
            Some(other) if OTHER_ITEM_TYPES.contains(&other) => Ok(false),
            Some(other) => Err(format!("unknown input item type `{other}`")),
        }
    }
}

/// The roles of a message item.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    User,
    Assistant,
    System,
    Developer,
}

/// `field`, which must be present (and not null).
fn required<'a>(field: Option<&'a RawValue>, name: &str) -> Result<&'a RawValue, String> {
    field.ok_or_else(|| format!("missing field `{name}`"))
}

/// `field`, which must be a string.
fn string(field: Option<&RawValue>, name: &str) -> Result<(), String> {
    let raw = required(field, name)?;
    if raw.get().starts_with('"') {
        Ok(())
    } else {
        Err(format!("`{name}` must be a string, found {}", kind_of(raw)))
    }
}

/// `field`, which may be absent or null, else must be a string.
fn optional_string(field: Option<&RawValue>, name: &str) -> Result<(), String> {
    field.map_or(Ok(()), |_| string(field, name))
}

/// A message's `content` or a call output's `output`: a string, or an array of content
/// parts (empty allowed: spec 2 says so of `function_call_output`).
fn parts_or_string(raw: &RawValue) -> Result<(), String> {
    match raw.get().as_bytes().first() {
        Some(b'"') => Ok(()),
        Some(b'[') => {
            let parts: Vec<Obj<Part<'_>>> =
                serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
            match parts.iter().find(|Obj(p)| !p.complete()) {
                Some(Obj(part)) => Err(format!("a part of type `{}` needs `text`", part.kind)),
                None => Ok(()),
            }
        }
        _ => Err(format!(
            "expected a string or an array of content parts, found {}",
            kind_of(raw)
        )),
    }
}

/// A content part: any type OpenAI defines (text, image, file, audio, refusal, ...); the
/// text types must carry their text.
#[derive(Deserialize)]
struct Part<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    text: Option<IgnoredString>,
}

impl Part<'_> {
    fn complete(&self) -> bool {
        let needs_text = matches!(&*self.kind, "input_text" | "output_text" | "text");
        !needs_text || self.text.is_some()
    }
}

/// `stop`: a string or an array of strings.
pub struct Stop;

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Stop;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Stop, E> {
                Ok(Stop)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Stop, A::Error> {
                while seq.next_element::<IgnoredString>()?.is_some() {}
                Ok(Stop)
            }
        }
        d.deserialize_any(V)
    }
}

/// An entry of `tools`. One flat shape for every type: the fields of the types the gateway
/// checks do not collide with each other's, and unmodelled fields (a built-in tool's
/// settings, `external_web_access` of `web_search` included) stay in the body.
#[derive(Deserialize)]
pub struct Tool<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(rename = "description", default)]
    _description: Option<IgnoredString>,
    #[serde(default, borrow)]
    pub parameters: Option<&'a RawValue>,
    #[serde(rename = "strict", default)]
    _strict: Option<bool>,
    /// A namespace's members.
    #[serde(default, borrow)]
    pub tools: Option<Vec<Obj<Member<'a>>>>,
    #[serde(default, borrow)]
    pub server_label: Option<Cow<'a, str>>,
    #[serde(default)]
    pub server_url: Option<IgnoredString>,
    #[serde(default)]
    pub connector_id: Option<IgnoredString>,
    #[serde(rename = "server_description", default)]
    _server_description: Option<IgnoredString>,
    #[serde(rename = "require_approval", default)]
    _require_approval: Option<Approval>,
    #[serde(rename = "allowed_tools", default)]
    _allowed_tools: Option<AllowedTools>,
}

/// Tool types that carry no field the gateway checks: OpenAI's built-in (hosted) tools.
pub const BUILT_IN_TOOLS: &[&str] = &[
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "web_search",
    "web_search_2025_08_26",
    "code_interpreter",
    "file_search",
    "image_generation",
    "computer_use_preview",
    "computer",
    "local_shell",
    "shell",
    "apply_patch",
];

/// A member of a `namespace` tool: a function or a custom tool, never another namespace.
#[derive(Deserialize)]
pub struct Member<'a> {
    #[serde(rename = "type")]
    pub kind: MemberType,
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(rename = "description", default)]
    _description: Option<IgnoredString>,
    #[serde(default, borrow)]
    pub parameters: Option<&'a RawValue>,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MemberType {
    Function,
    Custom,
}

/// An MCP tool's `require_approval`: `always`, `never`, or a filter object.
pub struct Approval;

impl<'de> Deserialize<'de> for Approval {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: &'de RawValue = Deserialize::deserialize(d)?;
        match raw.get() {
            r#""always""# | r#""never""# => Ok(Approval),
            other if other.starts_with('{') => Ok(Approval),
            _ => Err(de::Error::custom(
                "require_approval must be `always`, `never` or an object",
            )),
        }
    }
}

/// An MCP tool's `allowed_tools`: a list of names, or `{read_only, tool_names}`.
pub struct AllowedTools;

impl<'de> Deserialize<'de> for AllowedTools {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Filter {
            #[serde(rename = "read_only", default)]
            _read_only: Option<bool>,
            #[serde(rename = "tool_names", default)]
            _tool_names: Option<Vec<IgnoredString>>,
        }
        let raw: &'de RawValue = Deserialize::deserialize(d)?;
        let read = if raw.get().starts_with('[') {
            serde_json::from_str::<Vec<IgnoredString>>(raw.get())
                .map(|_| AllowedTools)
                .map_err(|e| e.to_string())
        } else {
            object::<Filter>(raw).map(|_| AllowedTools)
        };
        read.map_err(de::Error::custom)
    }
}

/// `tool_choice`: a mode, or an object naming what to call.
pub enum ToolChoice<'a> {
    Mode(Mode),
    Object(Choice<'a>),
}

impl<'de: 'a, 'a> Deserialize<'de> for ToolChoice<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: &'de RawValue = Deserialize::deserialize(d)?;
        let choice = if raw.get().starts_with('"') {
            serde_json::from_str(raw.get())
                .map(ToolChoice::Mode)
                .map_err(|e| e.to_string())
        } else {
            object(raw).map(ToolChoice::Object)
        };
        choice.map_err(de::Error::custom)
    }
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    None,
    Auto,
    Required,
}

/// An object `tool_choice`: `{type: function, name, namespace?}`, `{type: mcp,
/// server_label, name?}`, `{type: custom, name}`, `{type: allowed_tools, mode, tools}`, or
/// `{type: <built-in tool>}`.
#[derive(Deserialize)]
pub struct Choice<'a> {
    #[serde(rename = "type", borrow)]
    pub kind: Cow<'a, str>,
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub server_label: Option<Cow<'a, str>>,
    #[serde(default)]
    pub mode: Option<Mode>,
    #[serde(default, borrow)]
    pub tools: Option<Vec<Obj<Choice<'a>>>>,
}

/// `conversation`: an ID, or `{id}`.
pub struct Conversation<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Conversation<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct ById<'a> {
            #[serde(borrow)]
            id: Cow<'a, str>,
        }
        let raw: &'de RawValue = Deserialize::deserialize(d)?;
        let id = if raw.get().starts_with('"') {
            serde_json::from_str(raw.get()).map_err(|e| e.to_string())
        } else {
            object::<ById<'a>>(raw).map(|c| c.id)
        };
        id.map(Conversation).map_err(de::Error::custom)
    }
}

/// `reasoning`: both values are closed sets; anything else does not parse (spec 2).
#[derive(Deserialize)]
pub struct Reasoning {
    #[serde(rename = "effort", default)]
    _effort: Option<Effort>,
    #[serde(rename = "summary", default)]
    _summary: Option<Summary>,
}

/// Effort tiers, lowest to highest.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Effort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Summary {
    Auto,
    Concise,
    Detailed,
}

/// `text`: the output format, and OpenAI's `verbosity`.
#[derive(Deserialize)]
pub struct Text<'a> {
    #[serde(default, borrow)]
    pub format: Option<Obj<Format<'a>>>,
    #[serde(rename = "verbosity", default)]
    _verbosity: Option<Verbosity>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Verbosity {
    Low,
    Medium,
    High,
}

/// `text.format`. `name` and `schema` belong to `json_schema`; their presence is checked by
/// the caller, which knows the type.
#[derive(Deserialize)]
pub struct Format<'a> {
    #[serde(rename = "type")]
    pub kind: FormatType,
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub schema: Option<&'a RawValue>,
    #[serde(rename = "strict", default)]
    _strict: Option<bool>,
    #[serde(rename = "description", default)]
    _description: Option<IgnoredString>,
}

#[derive(Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FormatType {
    Text,
    JsonObject,
    JsonSchema,
}

/// `metadata`: an object of string values. What OpenAI's limits need is kept: the number of
/// entries and the longest key and value (in characters).
pub struct Metadata {
    pub entries: usize,
    pub longest_key: usize,
    pub longest_value: usize,
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Metadata;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of string values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Metadata, A::Error> {
                let mut seen = Metadata {
                    entries: 0,
                    longest_key: 0,
                    longest_value: 0,
                };
                while let Some((key, value)) = map.next_entry::<Cow<'de, str>, Cow<'de, str>>()? {
                    seen.entries += 1;
                    seen.longest_key = seen.longest_key.max(key.chars().count());
                    seen.longest_value = seen.longest_value.max(value.chars().count());
                }
                Ok(seen)
            }
        }
        d.deserialize_map(V)
    }
}

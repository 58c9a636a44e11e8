//! The MCP servers that back Responses' built-in tools (`--mcp-config-path`).
//!
//! Spec 2: `web_search_preview`, `code_interpreter`, `file_search` and `image_generation`
//! run through MCP servers configured to back them. The file is JSON:
//!
//! ```json
//! {"builtins": [
//!   {"type": "web_search_preview", "url": "http://127.0.0.1:8123/mcp", "tool": "search",
//!    "label": "search", "authorization": "<token>", "headers": {"X-Team": "a"}}
//! ]}
//! ```
//!
//! `type` is the built-in a server backs (one server a type), `url` its Streamable HTTP
//! endpoint, `tool` the server's tool the built-in calls; `label` (default: the type),
//! `authorization` (its bearer token) and `headers` are optional. The file is read once at
//! startup; what is wrong with it stops the gateway with the reason (never the token).

use std::path::Path;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use serde::Deserialize;

use crate::secret::Secret;

/// Most headers one server may be given.
const MAX_HEADERS: usize = 32;

/// A built-in tool type the gateway can run through an MCP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuiltinKind {
    WebSearchPreview,
    CodeInterpreter,
    FileSearch,
    ImageGeneration,
}

impl BuiltinKind {
    pub const ALL: [BuiltinKind; 4] = [
        BuiltinKind::WebSearchPreview,
        BuiltinKind::CodeInterpreter,
        BuiltinKind::FileSearch,
        BuiltinKind::ImageGeneration,
    ];

    /// The tool's `type` in a request (also the function name the model is offered).
    pub fn tool_type(self) -> &'static str {
        match self {
            BuiltinKind::WebSearchPreview => "web_search_preview",
            BuiltinKind::CodeInterpreter => "code_interpreter",
            BuiltinKind::FileSearch => "file_search",
            BuiltinKind::ImageGeneration => "image_generation",
        }
    }

    /// The output item's `type`.
    pub fn item_type(self) -> &'static str {
        match self {
            BuiltinKind::WebSearchPreview => "web_search_call",
            BuiltinKind::CodeInterpreter => "code_interpreter_call",
            BuiltinKind::FileSearch => "file_search_call",
            BuiltinKind::ImageGeneration => "image_generation_call",
        }
    }

    /// The streamed event between `in_progress` and `completed`
    /// (`response.<item type>.<this>`).
    pub fn working_event(self) -> &'static str {
        match self {
            BuiltinKind::WebSearchPreview | BuiltinKind::FileSearch => "searching",
            BuiltinKind::CodeInterpreter => "interpreting",
            BuiltinKind::ImageGeneration => "generating",
        }
    }

    pub fn of_item_type(item_type: &str) -> Option<BuiltinKind> {
        BuiltinKind::ALL
            .into_iter()
            .find(|kind| kind.item_type() == item_type)
    }

    pub fn of_tool_type(tool_type: &str) -> Option<BuiltinKind> {
        BuiltinKind::ALL
            .into_iter()
            .find(|kind| kind.tool_type() == tool_type)
    }
}

/// One configured server.
#[derive(Clone, Debug)]
pub struct BuiltinServer {
    pub kind: BuiltinKind,
    pub label: String,
    pub url: String,
    /// The server's tool the built-in calls.
    pub tool: String,
    pub bearer: Option<Secret>,
    /// Sensitive values: redacted in `Debug`.
    pub headers: HeaderMap,
}

/// The configured servers, at most one a built-in.
#[derive(Clone, Debug, Default)]
pub struct Builtins {
    servers: Vec<BuiltinServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    builtins: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(rename = "type")]
    kind: String,
    url: String,
    tool: String,
    label: Option<String>,
    authorization: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
}

impl Builtins {
    /// Reads `path` (`--mcp-config-path`); none configured without one.
    pub fn load(path: Option<&Path>) -> Result<Builtins, String> {
        let Some(path) = path else {
            return Ok(Builtins::default());
        };
        let shown = path.display();
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("--mcp-config-path {shown}: {e}"))?;
        let builtins =
            Builtins::parse(&text).map_err(|e| format!("--mcp-config-path {shown}: {e}"))?;
        for server in &builtins.servers {
            tracing::info!(builtin = server.kind.tool_type(), server = %server.label, "built-in tool backed by an MCP server");
        }
        Ok(builtins)
    }

    /// The configuration in `text`.
    pub fn parse(text: &str) -> Result<Builtins, String> {
        let file: File = serde_json::from_str(text).map_err(|e| format!("not valid: {e}"))?;
        let mut servers: Vec<BuiltinServer> = Vec::with_capacity(file.builtins.len());
        for entry in file.builtins {
            let kind = BuiltinKind::of_tool_type(&entry.kind).ok_or_else(|| {
                let known: Vec<&str> = BuiltinKind::ALL.iter().map(|k| k.tool_type()).collect();
                format!(
                    "unknown built-in {:?} (one of {})",
                    entry.kind,
                    known.join(", ")
                )
            })?;
            if servers.iter().any(|s| s.kind == kind) {
                return Err(format!("{} is backed twice", kind.tool_type()));
            }
            if !(entry.url.starts_with("http://") || entry.url.starts_with("https://")) {
                return Err(format!(
                    "{}: url must be http:// or https://",
                    kind.tool_type()
                ));
            }
            if entry.tool.is_empty() {
                return Err(format!(
                    "{}: tool must name the server's tool",
                    kind.tool_type()
                ));
            }
            if entry.headers.len() > MAX_HEADERS {
                return Err(format!(
                    "{}: at most {MAX_HEADERS} headers",
                    kind.tool_type()
                ));
            }
            let mut headers = HeaderMap::new();
            for (name, value) in &entry.headers {
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("{}: {name:?} is not a header name", kind.tool_type()))?;
                let mut value = HeaderValue::from_str(value).map_err(|_| {
                    format!("{}: header {name} has no valid value", kind.tool_type())
                })?;
                value.set_sensitive(true);
                headers.append(name, value);
            }
            servers.push(BuiltinServer {
                kind,
                label: entry.label.unwrap_or_else(|| kind.tool_type().to_owned()),
                url: entry.url,
                tool: entry.tool,
                bearer: entry.authorization.map(Secret::new),
                headers,
            });
        }
        Ok(Builtins { servers })
    }

    /// The server backing the built-in tool type `tool_type`, if one is configured.
    pub fn backing(&self, tool_type: &str) -> Option<&BuiltinServer> {
        self.servers
            .iter()
            .find(|server| server.kind.tool_type() == tool_type)
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_names_one_server_a_built_in() {
        let b = Builtins::parse(
            r#"{"builtins": [
                {"type": "web_search_preview", "url": "http://127.0.0.1:1/mcp", "tool": "search",
                 "authorization": "tok", "headers": {"X-Team": "a"}},
                {"type": "code_interpreter", "url": "https://x/mcp", "tool": "run", "label": "py"}]}"#,
        )
        .unwrap();
        let web = b.backing("web_search_preview").unwrap();
        assert_eq!(web.label, "web_search_preview");
        assert_eq!(web.tool, "search");
        assert_eq!(web.headers["x-team"], "a");
        assert!(
            !format!("{b:?}").contains("tok"),
            "the token is never shown"
        );
        assert_eq!(b.backing("code_interpreter").unwrap().label, "py");
        assert!(b.backing("file_search").is_none());
        assert!(Builtins::parse("{}").unwrap().is_empty());
    }

    #[test]
    fn mistakes_are_named() {
        for (text, said) in [
            (
                r#"{"builtins": [{"type": "web_search", "url": "http://x", "tool": "t"}]}"#,
                "unknown built-in",
            ),
            (
                r#"{"builtins": [{"type": "file_search", "url": "ftp://x", "tool": "t"}]}"#,
                "http://",
            ),
            (
                r#"{"builtins": [{"type": "file_search", "url": "http://x", "tool": ""}]}"#,
                "tool",
            ),
            (
                r#"{"builtins": [{"type": "file_search", "url": "http://x", "tool": "t"},
                              {"type": "file_search", "url": "http://y", "tool": "t"}]}"#,
                "twice",
            ),
            (
                r#"{"builtins": [{"type": "file_search", "url": "http://x", "tool": "t", "x": 1}]}"#,
                "unknown field",
            ),
            (
                r#"{"builtins": [{"type": "file_search", "url": "http://x", "tool": "t",
                               "headers": {"bad name": "v"}}]}"#,
                "header name",
            ),
            ("[", "not valid"),
        ] {
            let err = Builtins::parse(text).unwrap_err();
            assert!(err.contains(said), "{text}: {err}");
        }
    }
}

//! The `mcp` tools of a Responses request: their servers connected, their tools offered
//! to the model as functions, and the calls the model makes of them run by the gateway.
//!
//! Every declared server is connected (and its tools listed) before the first turn, all
//! at once; one that cannot be reached fails the request with 424
//! `connect_mcp_server_failed` (spec 2). `allowed_tools` (a list of names, or
//! `{tool_names}`) narrows what the model sees. A call that fails is no failure of the
//! response: it is recorded as an `mcp_call` item with status `failed` and a structured
//! `error`, and the model is told so as the tool's result.
//!
//! A server's `authorization` (or an `Authorization` among its `headers`) is its bearer
//! token; its other `headers` go with every request to it. Neither is ever logged.
//!
//! A built-in tool (`web_search_preview`, `code_interpreter`, `file_search`,
//! `image_generation`) whose type has a server in `--mcp-config-path` is connected the same
//! way: the model is offered one function named after the built-in (with the server's
//! tool's schema), and a call of it runs that tool and is recorded as the built-in's own
//! item (`web_search_call`, …), `completed` also when the tool failed (its text in the
//! item). A built-in without a server is left as it is.
//!
//! `require_approval` (default `never`: the gateway runs what the model calls) holds a call
//! back instead: the response ends with an `mcp_approval_request` item, and a follow-up
//! request (continuing the response or its conversation) that answers it with an
//! `mcp_approval_response` of `approve: true` has the call run before its first model turn;
//! a refused one is not run. `always` holds every tool back; a filter object holds those
//! named in `always.tool_names`, and with only a `never` list every tool not named in it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use serde_json::{json, Map, Value};

use crate::api::tool_call;
use crate::generation::ask::MAX_TOOLS;
use crate::history::MAX_CONTEXT_BYTES;
use crate::http::error::GatewayError;
use crate::mcp::builtins::{BuiltinKind, Builtins};
use crate::mcp::open;
use crate::mcp::{CallLimits, McpHttp, Session, SessionSettings, Tool};
use crate::metrics::Metrics;
use crate::secret::Secret;

use crate::history::new_item_id;

/// Most `mcp` tools (servers) one request may declare.
const MAX_SERVERS: usize = 16;
/// Most `headers` one `mcp` tool may send.
const MAX_HEADERS: usize = 32;
/// Headers the MCP client sets itself, which a tool's `headers` cannot replace.
const OWN_HEADERS: [&str; 8] = [
    "content-type",
    "content-length",
    "accept",
    "host",
    "connection",
    "transfer-encoding",
    "mcp-session-id",
    "mcp-protocol-version",
];

/// Where the request's servers are reached from, and what backs the built-ins.
pub struct Servers<'a> {
    pub http: &'a McpHttp,
    pub builtins: &'a Builtins,
    /// The request's bounds on its MCP calls, and whether its servers may be private.
    pub limits: CallLimits,
}

/// A declared `mcp` tool (or a backed built-in), read from the request.
struct Declared {
    label: String,
    settings: SessionSettings,
    /// `allowed_tools`: `None` allows every tool.
    allowed: Option<Vec<String>>,
    approval: Approval,
    /// The built-in this server backs, and the tool it calls.
    builtin: Option<(BuiltinKind, String)>,
}

/// Which of a server's calls wait for the client's approval (`require_approval`).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Approval {
    Never,
    Always,
    /// Tools named in `always`; with only a `never` list, every tool not in it.
    Filter {
        always: Vec<String>,
        never: Option<Vec<String>>,
    },
}

impl Approval {
    fn of(value: &Value) -> Approval {
        let names = |key: &str| match value.pointer(&format!("/{key}/tool_names")) {
            Some(Value::Array(names)) => Some(names_of(names)),
            _ => None,
        };
        match value {
            Value::String(s) if s == "always" => Approval::Always,
            Value::Object(_) => Approval::Filter {
                always: names("always").unwrap_or_default(),
                never: names("never"),
            },
            _ => Approval::Never,
        }
    }

    fn requires(&self, tool: &str) -> bool {
        match self {
            Approval::Never => false,
            Approval::Always => true,
            Approval::Filter { always, never } => {
                always.iter().any(|n| n == tool)
                    || (always.is_empty()
                        && never.as_ref().is_some_and(|n| !n.iter().any(|n| n == tool)))
            }
        }
    }
}

/// A connected server.
struct Server {
    label: String,
    session: Session,
    tools: Vec<Tool>,
    approval: Approval,
    builtin: Option<(BuiltinKind, String)>,
}

/// The connected servers of one request, and which offers each tool name.
pub struct McpTools {
    servers: Vec<Server>,
    /// Which server runs each function the model is offered (a built-in's function is
    /// named after the built-in).
    owners: HashMap<String, usize>,
    /// The built-in calls run so far, by item id: the call as the model made it and what
    /// it was shown, for a provider that needs the pair again next turn.
    builtin_calls: HashMap<String, (HeldCall, String)>,
    metrics: Arc<Metrics>,
    model: String,
}

/// One call the model made of an MCP tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldCall {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
}

/// The request's `mcp` tools, connected; `None` when it declares none.
pub async fn connect(
    servers: Servers<'_>,
    request: &Map<String, Value>,
    metrics: Arc<Metrics>,
) -> Result<Option<McpTools>, GatewayError> {
    let Servers {
        http,
        builtins,
        limits,
    } = servers;
    let call_timeout = limits.call_timeout;
    let mut declared = declared(request, limits)?;
    declared.extend(backed(request, builtins, limits));
    if declared.is_empty() {
        return Ok(None);
    }
    let deadline = Instant::now() + call_timeout * 2;
    let settings = declared.iter().map(|server| server.settings.clone());
    let opened = match open::open_every(http, settings, deadline).await {
        Ok(opened) => opened,
        Err((index, err)) => {
            let label = declared
                .get(index)
                .map(|server| server.label.clone())
                .unwrap_or_default();
            tracing::warn!(server = %label, error = %err, "MCP server did not connect");
            return Err(GatewayError::McpServerUnreachable {
                label,
                reason: err.to_string(),
            });
        }
    };
    let mut servers = Vec::with_capacity(declared.len());
    let mut owners = HashMap::new();
    let mut offered = 0;
    for (server, (session, mut tools)) in declared.into_iter().zip(opened) {
        if let Some(allowed) = &server.allowed {
            tools.retain(|tool| allowed.contains(&tool.name));
        }
        offered += tools.len();
        if offered > MAX_TOOLS {
            // The server's listing, not the client's request, is too large: said so, with
            // the way out (a 400 blaming the request's `tools` hid where they came from).
            return Err(GatewayError::McpServerUnreachable {
                label: server.label,
                reason: format!(
                    "the request's MCP servers offer more than {MAX_TOOLS} tools, the \
                     most one model turn takes; name the ones to use in allowed_tools"
                ),
            });
        }
        match &server.builtin {
            Some((kind, tool)) => {
                if !tools.iter().any(|t| &t.name == tool) {
                    tracing::warn!(server = %server.label, tool = %tool, "the MCP server backing a built-in does not offer its tool");
                    return Err(GatewayError::McpServerUnreachable {
                        label: server.label,
                        reason: format!("it does not offer the tool {tool:?}"),
                    });
                }
                owners.insert(kind.tool_type().to_owned(), servers.len());
            }
            None => {
                for tool in &tools {
                    owners.entry(tool.name.clone()).or_insert(servers.len());
                }
            }
        }
        servers.push(Server {
            label: server.label,
            session,
            tools,
            approval: server.approval,
            builtin: server.builtin,
        });
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    Ok(Some(McpTools {
        servers,
        owners,
        builtin_calls: HashMap::new(),
        metrics,
        model,
    }))
}

/// The request's `mcp` tools as the client declared them.
fn declared(
    request: &Map<String, Value>,
    limits: CallLimits,
) -> Result<Vec<Declared>, GatewayError> {
    let Some(Value::Array(tools)) = request.get("tools") else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for tool in tools.iter().filter(|t| t["type"] == "mcp") {
        let label = tool["server_label"].as_str().unwrap_or_default().to_owned();
        let Some(url) = tool["server_url"].as_str() else {
            return Err(GatewayError::InvalidRequest {
                message: format!(
                    "mcp tool {label:?}: connectors are not served by this gateway; give a \
                     server_url"
                ),
            });
        };
        if out.len() == MAX_SERVERS {
            return Err(GatewayError::InvalidRequest {
                message: format!("at most {MAX_SERVERS} mcp tools per request"),
            });
        }
        let bearer = tool["authorization"]
            .as_str()
            .or_else(|| {
                tool["headers"]
                    .as_object()
                    .and_then(|h| {
                        h.iter()
                            .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
                    })
                    .and_then(|(_, v)| v.as_str())
                    .map(|v| v.strip_prefix("Bearer ").unwrap_or(v))
            })
            .map(|token| Secret::new(token.to_owned()));
        let headers = headers_of(&label, &tool["headers"])?;
        let allowed = match &tool["allowed_tools"] {
            Value::Array(names) => Some(names_of(names)),
            Value::Object(filter) => match filter.get("tool_names") {
                Some(Value::Array(names)) => Some(names_of(names)),
                _ => None,
            },
            _ => None,
        };
        out.push(Declared {
            label,
            settings: SessionSettings {
                url: url.to_owned(),
                bearer,
                headers,
                limits,
            },
            allowed,
            approval: Approval::of(&tool["require_approval"]),
            builtin: None,
        });
    }
    Ok(out)
}

/// The request's built-in tools that a configured server backs.
fn backed(request: &Map<String, Value>, builtins: &Builtins, limits: CallLimits) -> Vec<Declared> {
    let Some(Value::Array(tools)) = request.get("tools") else {
        return Vec::new();
    };
    let mut out: Vec<Declared> = Vec::new();
    for tool in tools {
        let Some(server) = tool["type"].as_str().and_then(|t| builtins.backing(t)) else {
            continue;
        };
        if out
            .iter()
            .any(|d| d.builtin.as_ref().map(|b| b.0) == Some(server.kind))
        {
            continue;
        }
        out.push(Declared {
            label: server.label.clone(),
            settings: SessionSettings {
                url: server.url.clone(),
                bearer: server.bearer.clone(),
                headers: server.headers.clone(),
                // The operator's own servers may be anywhere.
                limits: CallLimits {
                    private_ok: true,
                    ..limits
                },
            },
            allowed: Some(vec![server.tool.clone()]),
            approval: Approval::Never,
            builtin: Some((server.kind, server.tool.clone())),
        });
    }
    out
}

/// The built-in call's item: the built-in's own shape, the tool's text in its content.
fn builtin_item(kind: BuiltinKind, arguments: &Value, output: &str) -> Value {
    let id = new_item_id(kind.item_type());
    let query = arguments
        .get("query")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| arguments.to_string());
    let mut item = json!({"id": id, "type": kind.item_type(), "status": "completed"});
    let fields = match kind {
        BuiltinKind::WebSearchPreview => json!({"action": {"type": "search", "query": query}}),
        BuiltinKind::FileSearch => json!({"queries": [query], "results": [{"text": output}]}),
        BuiltinKind::CodeInterpreter => json!({
            "code": arguments.get("code").and_then(Value::as_str).unwrap_or_default(),
            "container_id": null,
            "outputs": [{"type": "logs", "logs": output}]}),
        BuiltinKind::ImageGeneration => json!({"result": output}),
    };
    if let (Value::Object(item), Value::Object(fields)) = (&mut item, fields) {
        item.extend(fields);
    }
    item
}

/// A tool's `headers` but its `Authorization` (the bearer token), as sensitive values.
fn headers_of(label: &str, headers: &Value) -> Result<HeaderMap, GatewayError> {
    let mut out = HeaderMap::new();
    let Value::Object(headers) = headers else {
        return Ok(out);
    };
    let refuse = |why: String| GatewayError::InvalidRequest {
        message: format!("mcp tool {label:?}: {why}"),
    };
    if headers.len() > MAX_HEADERS {
        return Err(refuse(format!("at most {MAX_HEADERS} headers")));
    }
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("authorization") {
            continue;
        }
        let parsed = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| refuse(format!("{name:?} is not a header name")))?;
        if OWN_HEADERS.contains(&parsed.as_str()) {
            return Err(refuse(format!("the gateway sets {name:?} itself")));
        }
        let mut value = value
            .as_str()
            .and_then(|v| HeaderValue::from_str(v).ok())
            .ok_or_else(|| refuse(format!("header {name:?} needs a string value")))?;
        value.set_sensitive(true);
        out.append(parsed, value);
    }
    Ok(out)
}

fn names_of(names: &[Value]) -> Vec<String> {
    names
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

impl McpTools {
    /// The names of every tool offered.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.owners.keys().map(String::as_str)
    }

    /// Whether a call of `tool` waits for the client's approval.
    pub fn needs_approval(&self, tool: &str) -> bool {
        self.owners
            .get(tool)
            .and_then(|&i| self.servers.get(i))
            .is_some_and(|server| server.approval.requires(tool))
    }

    /// The `mcp_approval_request` item that holds `call` back.
    pub fn approval_request(&self, call: &HeldCall) -> Value {
        let label = self
            .owners
            .get(&call.name)
            .and_then(|&i| self.servers.get(i))
            .map_or("", |server| server.label.as_str());
        json!({"id": new_item_id("mcp_approval_request"), "type": "mcp_approval_request",
               "server_label": label, "name": call.name, "arguments": call.arguments})
    }

    /// Runs the calls the request's `mcp_approval_response` items approve (each answers an
    /// `mcp_approval_request` of the context): their `mcp_call` items, with the call and
    /// what the model is shown. A response to no request of the context is refused.
    pub async fn approved(
        &mut self,
        context: &[Value],
        input: &[Value],
    ) -> Result<Vec<(Value, HeldCall, String)>, GatewayError> {
        let mut out = Vec::new();
        for answer in input
            .iter()
            .filter(|i| i["type"] == "mcp_approval_response")
        {
            let id = answer["approval_request_id"].as_str().unwrap_or_default();
            let asked = context
                .iter()
                .find(|item| item["type"] == "mcp_approval_request" && item["id"] == id)
                .ok_or_else(|| GatewayError::InvalidRequest {
                    message: format!(
                        "mcp_approval_response answers {id:?}, which is no \
                         mcp_approval_request of this response's context"
                    ),
                })?;
            if answer["approve"] != Value::Bool(true) {
                continue;
            }
            let call = HeldCall {
                call_id: id.to_owned(),
                name: asked["name"].as_str().unwrap_or_default().to_owned(),
                arguments: asked["arguments"].as_str().unwrap_or_default().to_owned(),
            };
            let (item, shown) = self.call(&call).await;
            out.push((item, call, shown));
        }
        Ok(out)
    }

    /// The built-in tool types the configured servers run for this request (a provider
    /// is not asked to run them itself).
    pub fn backed_types(&self) -> Vec<&'static str> {
        self.servers
            .iter()
            .filter_map(|s| s.builtin.as_ref().map(|(kind, _)| kind.tool_type()))
            .collect()
    }

    /// A built-in call item this response ran, as the function call the model made and
    /// the output it was shown.
    pub fn pair_of(&self, item: &Value) -> Option<(&HeldCall, &str)> {
        let id = item.get("id")?.as_str()?;
        self.builtin_calls
            .get(id)
            .map(|(call, shown)| (call, shown.as_str()))
    }

    /// The tools as the chat's functions.
    pub fn functions(&self) -> Vec<Value> {
        let mut out = Vec::new();
        for (index, server) in self.servers.iter().enumerate() {
            if let Some((kind, name)) = &server.builtin {
                if let Some(tool) = server.tools.iter().find(|t| &t.name == name) {
                    out.push(json!({"type": "function", "function": {
                        "name": kind.tool_type(),
                        "description": tool.description.clone().unwrap_or_default(),
                        "parameters": tool.input_schema,
                    }}));
                }
                continue;
            }
            for tool in &server.tools {
                if self.owners.get(&tool.name) == Some(&index) {
                    out.push(json!({"type": "function", "function": {
                        "name": tool.name,
                        "description": tool.description.clone().unwrap_or_default(),
                        "parameters": tool.input_schema,
                    }}));
                }
            }
        }
        out
    }

    /// One `mcp_list_tools` item per server, in declaration order.
    pub fn listings(&self) -> Vec<Value> {
        self.servers
            .iter()
            .filter(|server| server.builtin.is_none())
            .map(|server| {
                let tools: Vec<Value> = server
                    .tools
                    .iter()
                    .map(|tool| {
                        json!({"name": tool.name, "description": tool.description,
                               "input_schema": tool.input_schema, "annotations": null})
                    })
                    .collect();
                json!({"id": new_item_id("mcp_list_tools"), "type": "mcp_list_tools",
                       "server_label": server.label, "tools": tools})
            })
            .collect()
    }

    /// Runs one call: the `mcp_call` item, and the output the model is shown.
    pub async fn call(&mut self, call: &HeldCall) -> (Value, String) {
        let index = self.owners.get(&call.name).copied();
        let arguments: Value = match serde_json::from_str(&call.arguments) {
            Ok(value @ Value::Object(_)) => value,
            _ if call.arguments.trim().is_empty() => json!({}),
            _ => Value::Null,
        };
        let builtin = index
            .and_then(|i| self.servers.get(i))
            .and_then(|server| server.builtin.clone());
        let tool = builtin.as_ref().map_or(call.name.as_str(), |(_, t)| t);
        let (label, session) = match index.and_then(|i| self.servers.get_mut(i)) {
            Some(server) if !arguments.is_null() => (server.label.clone(), Ok(&mut server.session)),
            Some(server) => (
                server.label.clone(),
                Err("the arguments are not a JSON object"),
            ),
            None => (String::new(), Err("no server offers this tool")),
        };
        let outcome = tool_call::call(
            &self.metrics,
            &self.model,
            &call.name,
            session,
            tool,
            &arguments,
        )
        .await;
        let (output, error) = match outcome {
            Ok(outcome) if !outcome.is_error => (text_of(&outcome.content), None),
            Ok(outcome) => {
                let text = text_of(&outcome.content);
                (
                    text.clone(),
                    Some(json!({"type": "mcp_tool_execution_error",
                                "content": outcome.content})),
                )
            }
            Err(message) => (
                message.clone(),
                Some(json!({"type": "mcp_tool_execution_error",
                            "content": [{"type": "text", "text": message}]})),
            ),
        };
        let failed = error.is_some();
        if let Some((kind, _)) = builtin {
            let item = builtin_item(kind, &arguments, &output);
            let shown = bounded(if failed {
                format!("error: {output}")
            } else {
                output
            });
            if let Some(id) = item["id"].as_str() {
                self.builtin_calls
                    .insert(id.to_owned(), (call.clone(), shown.clone()));
            }
            return (item, shown);
        }
        let item = json!({
            "id": new_item_id("mcp_call"),
            "type": "mcp_call",
            "status": if failed { "failed" } else { "completed" },
            "server_label": label,
            "name": call.name,
            "arguments": call.arguments,
            "output": if failed { Value::Null } else { Value::String(output.clone()) },
            "error": error.unwrap_or(Value::Null),
        });
        let shown = if failed {
            format!("error: {output}")
        } else {
            output
        };
        (item, bounded(shown))
    }
}

/// The text of a tool's content blocks, concatenated; other blocks as their JSON.
fn text_of(content: &Value) -> String {
    match content {
        Value::Array(blocks) => blocks
            .iter()
            .map(|block| match block.get("text").and_then(Value::as_str) {
                Some(text) => text.to_owned(),
                None => block.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A tool's output as shown to the model, cut to a size the context can keep.
fn bounded(mut text: String) -> String {
    let limit = MAX_CONTEXT_BYTES / 64;
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn declared_tools_read_labels_tokens_and_filters() {
        let request = json!({"tools": [
            {"type": "function", "name": "f"},
            {"type": "mcp", "server_label": "a", "server_url": "http://127.0.0.1:1/mcp",
             "authorization": "tok", "allowed_tools": ["x"]},
            {"type": "mcp", "server_label": "b", "server_url": "http://127.0.0.1:1/mcp",
             "headers": {"Authorization": "Bearer t2"},
             "allowed_tools": {"tool_names": ["y"], "read_only": true}}]});
        let limits =
            CallLimits::starting_now(Duration::from_secs(1), Duration::from_secs(9), false);
        let read = declared(request.as_object().unwrap(), limits).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].allowed.as_deref(), Some(&["x".to_owned()][..]));
        assert_eq!(
            read[1]
                .settings
                .bearer
                .as_ref()
                .map(|s| s.expose().to_owned()),
            Some("t2".to_owned())
        );
        let connector = json!({"tools": [{"type": "mcp", "server_label": "c",
                                          "connector_id": "connector_gmail"}]});
        assert!(declared(connector.as_object().unwrap(), limits).is_err());
    }

    #[test]
    fn approval_policies() {
        let never = Approval::of(&Value::Null);
        assert_eq!(never, Approval::Never);
        assert!(!never.requires("a"));
        assert!(Approval::of(&json!("always")).requires("a"));
        assert!(!Approval::of(&json!("never")).requires("a"));
        let named = Approval::of(&json!({"always": {"tool_names": ["a"]},
                                         "never": {"tool_names": ["b"]}}));
        assert!(named.requires("a") && !named.requires("b") && !named.requires("c"));
        let all_but = Approval::of(&json!({"never": {"tool_names": ["b"]}}));
        assert!(all_but.requires("a") && !all_but.requires("b"));
    }

    #[test]
    fn headers_are_sensitive_and_bounded_and_cannot_replace_the_clients_own() {
        let headers = headers_of(
            "s",
            &json!({"X-Tenant": "acme", "Authorization": "Bearer t", "x-multi": "1"}),
        )
        .unwrap();
        assert_eq!(headers.len(), 2);
        assert_eq!(headers["x-tenant"], "acme");
        assert!(headers["x-tenant"].is_sensitive());
        assert!(!format!("{headers:?}").contains("acme"));
        for bad in [
            json!({"content-type": "text/plain"}),
            json!({"Mcp-Session-Id": "x"}),
            json!({"bad name": "x"}),
            json!({"x-a": 5}),
            json!({"x-a": "line\nbreak"}),
        ] {
            assert!(headers_of("s", &bad).is_err(), "{bad}");
        }
        let many: Map<String, Value> = (0..=MAX_HEADERS)
            .map(|i| (format!("x-{i}"), json!("v")))
            .collect();
        assert!(headers_of("s", &Value::Object(many)).is_err());
        assert!(headers_of("s", &Value::Null).unwrap().is_empty());
    }

    #[test]
    fn outputs_are_text_and_bounded() {
        let content = json!([{"type": "text", "text": "a"}, {"type": "image", "data": "x"}]);
        assert_eq!(text_of(&content), "a\n{\"type\":\"image\",\"data\":\"x\"}");
        assert!(bounded("é".repeat(MAX_CONTEXT_BYTES)).len() <= MAX_CONTEXT_BYTES / 64);
    }
}

//! One session with one MCP server: connect, list its tools, call them.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::guard;
use super::rpc::{self, EventAnswer};
use super::{McpError, MAX_ANSWER_BYTES, MAX_PAGES, MAX_TOOLS};
use crate::http::client::{build, error_chain, ClientOptions};
use crate::http::tls::UpstreamTls;
use crate::secret::Secret;

/// The pool MCP calls go through (`http://` and `https://`, verified as workers are).
pub type McpHttp = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The protocol version the gateway asks for; the server may answer another it speaks.
const PROTOCOL_VERSION: &str = "2025-06-18";
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// Builds the pool for MCP calls, trusting what the gateway trusts for workers.
pub fn client(tls: &UpstreamTls) -> McpHttp {
    build(ClientOptions::control_calls(tls.clone(), false))
}

/// Where a server is and how long each call to it may take.
#[derive(Clone, Debug)]
pub struct SessionSettings {
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`; redacted in `Debug`, never logged.
    pub bearer: Option<Secret>,
    /// Further headers sent with every request (a Responses `mcp` tool's `headers`), their
    /// values marked sensitive: redacted in `Debug`, never logged.
    pub headers: HeaderMap,
    pub limits: CallLimits,
}

/// How long a request's calls to a server may take, and where the server may be.
#[derive(Clone, Copy, Debug)]
pub struct CallLimits {
    /// Deadline of each call (connect included): `--mcp-call-timeout-secs`.
    pub call_timeout: Duration,
    /// When the request's time for MCP calls, all together, ends
    /// (`--mcp-loop-timeout-secs` from the request's start): no call waits past it, and
    /// none starts after it.
    pub calls_until: Option<Instant>,
    /// Whether the server may be on a loopback, link-local or private address: true for
    /// the operator's own servers (`--mcp-config-path`) and under
    /// `--mcp-allow-private-addresses`; a server a client names is checked otherwise.
    pub private_ok: bool,
}

/// The operator's MCP limits (`--mcp-call-timeout-secs`, `--mcp-loop-timeout-secs`,
/// `--mcp-allow-private-addresses`), from which each request's [`CallLimits`] start.
#[derive(Clone, Copy, Debug)]
pub struct McpSettings {
    pub call_timeout: Duration,
    pub loop_timeout: Duration,
    pub private_ok: bool,
}

impl McpSettings {
    /// The limits of a request starting now.
    pub fn starting_now(&self) -> CallLimits {
        CallLimits::starting_now(self.call_timeout, self.loop_timeout, self.private_ok)
    }
}

impl CallLimits {
    /// The limits of a request starting now.
    pub fn starting_now(call_timeout: Duration, loop_timeout: Duration, private_ok: bool) -> Self {
        CallLimits {
            call_timeout,
            calls_until: Some(Instant::now() + loop_timeout),
            private_ok,
        }
    }
}

/// A tool a server offers.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// The tool's JSON Schema for its arguments (an object).
    pub input_schema: Value,
}

/// What a call returned: its content blocks, and whether the tool reports an error.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutcome {
    pub content: Value,
    pub is_error: bool,
}

/// An initialised session.
pub struct Session {
    http: McpHttp,
    uri: Uri,
    bearer: Option<HeaderValue>,
    headers: HeaderMap,
    call_timeout: Duration,
    calls_until: Option<Instant>,
    session_id: Option<HeaderValue>,
    version: HeaderValue,
    next_id: u64,
}

impl Session {
    /// Opens a session: `initialize`, then `notifications/initialized`.
    pub async fn connect(http: McpHttp, settings: &SessionSettings) -> Result<Session, McpError> {
        let uri = usable_uri(&settings.url)?;
        let limits = settings.limits;
        if !limits.private_ok {
            let until = Instant::now() + limits.call_timeout;
            let until = limits.calls_until.map_or(until, |end| end.min(until));
            tokio::time::timeout_at(until, guard::public_only(&uri))
                .await
                .map_err(|_| McpError::Timeout)??;
        }
        let bearer = match &settings.bearer {
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                    .map_err(|_| {
                        McpError::BadUrl("authorization token is not a header value".into())
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let mut session = Session {
            http,
            uri,
            bearer,
            headers: settings.headers.clone(),
            call_timeout: limits.call_timeout,
            calls_until: limits.calls_until,
            session_id: None,
            version: HeaderValue::from_static(PROTOCOL_VERSION),
            next_id: 0,
        };
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "tollgate", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = session.request("initialize", &params).await?;
        if let Some(version) = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .and_then(|v| HeaderValue::from_str(v).ok())
        {
            session.version = version;
        }
        session.notify("notifications/initialized").await?;
        Ok(session)
    }

    /// Every tool the server lists (following its cursors). A listing past the bounds is
    /// refused rather than cut: a tool the request allows could be among those not read.
    pub async fn list_tools(&mut self) -> Result<Vec<Tool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = self.request("tools/list", &params).await?;
            let listed = page
                .get("tools")
                .and_then(Value::as_array)
                .ok_or_else(|| McpError::Protocol("tools/list without tools".into()))?;
            for tool in listed {
                if tools.len() == MAX_TOOLS {
                    return Err(McpError::TooManyTools);
                }
                tools.push(tool_of(tool)?);
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if cursor.is_none() {
                return Ok(tools);
            }
        }
        Err(McpError::TooManyTools)
    }

    /// Calls tool `name` with `arguments` (a JSON object).
    pub async fn call_tool(
        &mut self,
        name: &str,
        arguments: &Value,
    ) -> Result<ToolOutcome, McpError> {
        let result = self
            .request("tools/call", &json!({"name": name, "arguments": arguments}))
            .await?;
        Ok(ToolOutcome {
            content: result
                .get("content")
                .cloned()
                .unwrap_or_else(|| Value::Array(Vec::new())),
            is_error: result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// The deadline of a call starting now: the call timeout, within what is left of the
    /// request's time for MCP calls.
    fn deadline(&self) -> Result<Instant, McpError> {
        let now = Instant::now();
        match self.calls_until {
            Some(end) if end <= now => Err(McpError::OutOfTime),
            Some(end) => Ok(end.min(now + self.call_timeout)),
            None => Ok(now + self.call_timeout),
        }
    }

    /// A request and its answer, within the call deadline.
    async fn request(&mut self, method: &str, params: &Value) -> Result<Value, McpError> {
        self.next_id += 1;
        let id = self.next_id;
        let deadline = self.deadline()?;
        let exchange = async {
            let resp = self.post(rpc::encode(Some(id), method, params)).await?;
            if resp.status() != StatusCode::OK {
                return Err(McpError::Status(resp.status().as_u16()));
            }
            if let Some(session) = resp.headers().get(SESSION_HEADER) {
                self.session_id.get_or_insert_with(|| session.clone());
            }
            if is_event_stream(&resp) {
                read_event_answer(resp.into_body(), id).await
            } else {
                let body = Limited::new(resp.into_body(), MAX_ANSWER_BYTES as usize)
                    .collect()
                    .await
                    .map_err(|err| {
                        if err.downcast_ref::<LengthLimitError>().is_some() {
                            McpError::TooLarge
                        } else {
                            McpError::Unreachable(err.to_string())
                        }
                    })?
                    .to_bytes();
                rpc::from_json(&body, id)
            }
        };
        tokio::time::timeout_at(deadline, exchange)
            .await
            .map_err(|_| McpError::Timeout)?
    }

    /// A notification: the server acknowledges it with 202 (or 200) and no answer.
    async fn notify(&mut self, method: &str) -> Result<(), McpError> {
        let deadline = self.deadline()?;
        let resp =
            tokio::time::timeout_at(deadline, self.post(rpc::encode(None, method, &json!({}))))
                .await
                .map_err(|_| McpError::Timeout)??;
        match resp.status() {
            StatusCode::ACCEPTED | StatusCode::OK | StatusCode::NO_CONTENT => Ok(()),
            other => Err(McpError::Status(other.as_u16())),
        }
    }

    async fn post(&self, body: Bytes) -> Result<http::Response<Incoming>, McpError> {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .header(VERSION_HEADER, self.version.clone());
        if let Some(headers) = req.headers_mut() {
            for (name, value) in &self.headers {
                headers.insert(name, value.clone());
            }
        }
        if let Some(bearer) = &self.bearer {
            req = req.header(AUTHORIZATION, bearer.clone());
        }
        if let Some(session) = &self.session_id {
            req = req.header(SESSION_HEADER, session.clone());
        }
        let req = req
            .body(Full::new(body))
            .map_err(|err| McpError::BadUrl(err.to_string()))?;
        self.http
            .request(req)
            .await
            .map_err(|err| McpError::Unreachable(error_chain(&err)))
    }
}

/// The server's URL as a URI, refused when it is not http(s) or names the legacy SSE
/// transport (spec 2: a URL containing `/sse` cannot connect).
fn usable_uri(url: &str) -> Result<Uri, McpError> {
    let uri: Uri = url
        .parse()
        .map_err(|_| McpError::BadUrl("not a URL".into()))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(McpError::BadUrl("only http:// and https:// servers".into()));
    }
    if uri.path().contains("/sse") {
        return Err(McpError::BadUrl(
            "the legacy SSE transport is not supported; use Streamable HTTP".into(),
        ));
    }
    Ok(uri)
}

fn is_event_stream(resp: &http::Response<Incoming>) -> bool {
    resp.headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"))
}

/// Reads an answer stream up to the answer to `id` (bounded in bytes).
async fn read_event_answer(mut body: Incoming, id: u64) -> Result<Value, McpError> {
    let mut answer = EventAnswer::new(id);
    let mut read: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| McpError::Unreachable(err.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        read += data.len() as u64;
        if read > MAX_ANSWER_BYTES {
            return Err(McpError::TooLarge);
        }
        if let Some(found) = answer.feed(&data) {
            return found;
        }
    }
    Err(McpError::Protocol(
        "the stream ended without an answer".into(),
    ))
}

/// A tool entry of `tools/list`.
fn tool_of(tool: &Value) -> Result<Tool, McpError> {
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| McpError::Protocol("a listed tool has no name".into()))?;
    Ok(Tool {
        name: name.to_owned(),
        description: tool
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned),
        input_schema: tool
            .get("inputSchema")
            .filter(|s| s.is_object())
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"})),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert!(usable_uri("http://127.0.0.1:9/mcp").is_ok());
        assert!(usable_uri("https://tools.example/mcp").is_ok());
        assert!(matches!(
            usable_uri("http://h/sse"),
            Err(McpError::BadUrl(_))
        ));
        assert!(matches!(
            usable_uri("ftp://h/mcp"),
            Err(McpError::BadUrl(_))
        ));
        assert!(matches!(usable_uri("/mcp"), Err(McpError::BadUrl(_))));
        assert!(matches!(usable_uri("not a url"), Err(McpError::BadUrl(_))));
    }

    #[test]
    fn listed_tools() {
        let tool = tool_of(&json!({"name": "add", "description": "adds", "inputSchema": {"type": "object", "properties": {}}})).unwrap();
        assert_eq!(tool.name, "add");
        assert_eq!(tool.input_schema["type"], "object");
        let bare = tool_of(&json!({"name": "x"})).unwrap();
        assert_eq!(bare.input_schema, json!({"type": "object"}));
        assert!(tool_of(&json!({"description": "no name"})).is_err());
    }
}

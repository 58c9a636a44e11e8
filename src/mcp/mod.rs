//! The gateway's MCP client: tools of a Model Context Protocol server over its Streamable
//! HTTP transport (spec 2: the Messages tool loop on the provider backend; the Responses
//! `mcp` tools use the same client).
//!
//! A [`Session`] is one conversation with one server: `initialize` (and the
//! `notifications/initialized` that must follow), `tools/list` (every page), `tools/call`.
//! Each call is a JSON-RPC request POSTed to the server's URL; the answer comes back as one
//! JSON body or as an event stream whose events carry JSON-RPC messages, of which the one
//! with the request's id is the answer. The session id the server hands out
//! (`Mcp-Session-Id`) and the protocol version agreed on ride on every later request.
//!
//! Everything is bounded: each call has a deadline, an answer at most [`MAX_ANSWER_BYTES`],
//! a listing at most [`MAX_TOOLS`] tools over at most [`MAX_PAGES`] pages. A slow or dead
//! server fails its own call and holds nothing else up.

pub mod builtins;
mod guard;
pub mod open;
mod rpc;
mod session;

pub use session::{
    client, CallLimits, McpHttp, McpSettings, Session, SessionSettings, Tool, ToolOutcome,
};

use std::fmt;

/// Largest answer read from a server, in bytes.
pub const MAX_ANSWER_BYTES: u64 = 8 * 1024 * 1024;
/// Most tools one server may list.
pub const MAX_TOOLS: usize = 512;
/// Most pages of `tools/list` followed.
pub const MAX_PAGES: usize = 16;

/// Why a call to an MCP server failed. Messages name the server's URL at most, never a
/// token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpError {
    /// The URL cannot be used (not http or https; the legacy SSE transport).
    BadUrl(String),
    /// No connection, or the exchange broke.
    Unreachable(String),
    /// No answer by the deadline.
    Timeout,
    /// The server answered an HTTP error status.
    Status(u16),
    /// The answer was not the JSON-RPC message expected.
    Protocol(String),
    /// The server answered the request with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// The server's answer passed [`MAX_ANSWER_BYTES`].
    TooLarge,
    /// The server is on an address the gateway does not call for clients (loopback,
    /// link-local, private; `--mcp-allow-private-addresses` allows them).
    Forbidden {
        host: String,
        address: std::net::IpAddr,
    },
    /// The request's time for MCP calls, all together, is spent (`--mcp-loop-timeout-secs`).
    OutOfTime,
    /// The server lists more tools than the gateway reads ([`MAX_TOOLS`] over at most
    /// [`MAX_PAGES`] pages): an allowed tool could be among those never read.
    TooManyTools,
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpError::BadUrl(why) => write!(f, "unusable MCP server URL: {why}"),
            McpError::Unreachable(why) => write!(f, "MCP server unreachable: {why}"),
            McpError::Timeout => f.write_str("MCP server did not answer in time"),
            McpError::Status(status) => write!(f, "MCP server answered HTTP {status}"),
            McpError::Protocol(why) => write!(f, "MCP server answered out of protocol: {why}"),
            McpError::Rpc { code, message } => write!(f, "MCP error {code}: {message}"),
            McpError::TooLarge => {
                write!(f, "MCP server answered more than {MAX_ANSWER_BYTES} bytes")
            }
            McpError::Forbidden { host, address } => write!(
                f,
                "MCP server {host} is at {address}, a loopback, link-local or private \
                 address, which the gateway does not call for a client \
                 (--mcp-allow-private-addresses)"
            ),
            McpError::OutOfTime => f.write_str(
                "this request's time for MCP tool calls is spent (--mcp-loop-timeout-secs)",
            ),
            McpError::TooManyTools => write!(
                f,
                "MCP server lists more than {MAX_TOOLS} tools (or more than {MAX_PAGES} pages \
                 of them), more than the gateway reads"
            ),
        }
    }
}

impl std::error::Error for McpError {}

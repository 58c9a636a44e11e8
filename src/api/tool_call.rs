//! One MCP tool call of either tool loop (Messages' on a provider backend, Responses'):
//! sent to the server that offers the tool, timed, and counted the same way by both.

use std::time::Instant;

use serde_json::Value;

use crate::mcp::{Session, ToolOutcome};
use crate::metrics::Metrics;

/// Calls `tool` with `arguments` on `session` (`None`: no server offers it, or it is not
/// connected, said by `missing`), counted in the MCP metrics as `name` of `model`. A
/// failure to call is an `Err` with its text; a tool that ran and failed is an outcome
/// with `is_error`. Both count as a failed call.
pub async fn call(
    metrics: &Metrics,
    model: &str,
    name: &str,
    session: Result<&mut Session, &str>,
    tool: &str,
    arguments: &Value,
) -> Result<ToolOutcome, String> {
    let started = Instant::now();
    let outcome = match session {
        Ok(session) => session
            .call_tool(tool, arguments)
            .await
            .map_err(|err| err.to_string()),
        Err(missing) => Err(missing.to_owned()),
    };
    let succeeded = outcome.as_ref().is_ok_and(|outcome| !outcome.is_error);
    metrics.mcp_tool_call(model, name, succeeded, started.elapsed().as_secs_f64());
    outcome
}

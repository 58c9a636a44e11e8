//! Messages requests on their way to a worker (spec 2, "Messages request", "Errors"):
//! checked before routing, and the model renamed when the client used a `--model-alias`.
//!
//! The body is parsed once into borrowed types ([`schema`]) that keep only what a rule
//! needs. What goes to the worker is the client's own bytes: every field the gateway does
//! not model stays as written, numbers keep the client's spelling, and only the model's
//! value is replaced when it names an alias. That is the re-serialisation spec 2 asks for,
//! without re-encoding the request.
//!
//! `/v1/messages` answers spec 2's JSON errors (`json_parse_error` for a body that does not
//! parse, code 400 for a broken rule); `/v1/messages/count_tokens` answers plain text
//! (400 not JSON, 415 not sent as JSON, 422 a field missing or mistyped).

mod schema;

/// Shared with the Responses check, which reads its strings the same way.
pub(crate) use schema::IgnoredString;

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::HeaderMap;

use crate::http::error::{BodyFault, GatewayError};
use schema::{Request, ToolChoiceType};

/// Which Messages route a body belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessagesRoute {
    /// `POST /v1/messages`.
    Create,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
}

impl MessagesRoute {
    /// The Messages route `route` is, if it is one.
    pub fn of(route: crate::http::route::Route) -> Option<MessagesRoute> {
        use crate::http::route::Route;
        match route {
            Route::Messages => Some(MessagesRoute::Create),
            Route::MessagesCountTokens => Some(MessagesRoute::CountTokens),
            _ => None,
        }
    }
}

/// A body that passed: the bytes to send (the client's, or with the model renamed).
#[derive(Debug, PartialEq, Eq)]
pub struct Checked {
    pub body: Bytes,
}

/// Whether `headers` declare a JSON body (`application/json`, any parameters).
pub fn declares_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
}

/// Checks `body` for `route` and renames an aliased model (`aliases`: alias, canonical).
pub fn check(
    route: MessagesRoute,
    body: Bytes,
    aliases: &[(String, String)],
) -> Result<Checked, GatewayError> {
    let request: Request<'_> = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(err) => return Err(malformed(route, &err)),
    };
    let model: Cow<'_, str> = serde_json::from_str(request.model.get())
        .map_err(|_| type_error(route, "model must be a string"))?;
    if route == MessagesRoute::Create {
        rules(&request, &model)?;
    }
    let renamed = aliases
        .iter()
        .find(|(alias, _)| *alias == *model)
        .map(|(_, canonical)| splice_model(&body, request.model.get(), canonical));
    Ok(Checked {
        body: renamed.unwrap_or(body),
    })
}

/// A body serde refused: on `/v1/messages` always `json_parse_error`; on count_tokens 400
/// when it is not JSON, else 422.
fn malformed(route: MessagesRoute, err: &serde_json::Error) -> GatewayError {
    let message = format!("invalid request body: {err}");
    match route {
        MessagesRoute::Create => GatewayError::MessagesMalformed { message },
        MessagesRoute::CountTokens => GatewayError::CountTokensBody {
            fault: if err.is_data() {
                BodyFault::Field
            } else {
                BodyFault::Syntax
            },
            message,
        },
    }
}

/// A field of the wrong type, found after serde.
fn type_error(route: MessagesRoute, message: &str) -> GatewayError {
    match route {
        MessagesRoute::Create => GatewayError::MessagesMalformed {
            message: message.to_owned(),
        },
        MessagesRoute::CountTokens => GatewayError::CountTokensBody {
            fault: BodyFault::Field,
            message: message.to_owned(),
        },
    }
}

/// Spec 2's rules for a `/v1/messages` body that parsed.
fn rules(request: &Request<'_>, model: &str) -> Result<(), GatewayError> {
    let broken = |message: &str| {
        Err(GatewayError::MessagesInvalid {
            message: message.to_owned(),
        })
    };
    let Some(max_tokens) = request.max_tokens else {
        return Err(GatewayError::MessagesMalformed {
            message: "missing field `max_tokens`".to_owned(),
        });
    };
    if model.is_empty() {
        return broken("model must not be empty");
    }
    if request.messages.count == 0 {
        return broken("messages must hold at least one message");
    }
    if max_tokens < 1 {
        return broken("max_tokens must be at least 1");
    }
    let tools = request.tools.as_deref().unwrap_or_default();
    for tool in tools.iter().filter(|t| t.is_custom()) {
        if tool.name.as_deref().is_none_or(str::is_empty) {
            return broken("a custom tool needs a name");
        }
        let schema_is_object = tool
            .input_schema
            .is_some_and(|s| s.get().trim_start().starts_with('{'));
        if !schema_is_object {
            return broken("a custom tool needs an input_schema object");
        }
    }
    if let Some(choice) = &request.tool_choice {
        if choice.kind != ToolChoiceType::None && tools.is_empty() {
            return broken("tool_choice requires tools");
        }
        if choice.kind == ToolChoiceType::Tool {
            let Some(name) = choice.name.as_deref() else {
                return broken("tool_choice of type tool must name a tool");
            };
            if !tools.iter().any(|t| t.name.as_deref() == Some(name)) {
                return broken("tool_choice names a tool that is not in tools");
            }
        }
    }
    if let Some(thinking) = &request.thinking {
        use schema::ThinkingType as T;
        match (thinking.kind, thinking.budget_tokens, thinking.display) {
            (T::Enabled, None, _) => {
                return broken("thinking of type enabled needs budget_tokens");
            }
            (T::Enabled, Some(budget), _) if budget < 1 => {
                return broken("thinking.budget_tokens must be at least 1");
            }
            (T::Disabled, _, Some(_)) => {
                return broken("thinking.display applies only when thinking is on");
            }
            _ => {}
        }
    }
    let servers = request.mcp_servers.as_deref().unwrap_or_default();
    for toolset in tools.iter().filter(|t| t.is_mcp_toolset()) {
        if servers.is_empty() {
            return broken("an mcp_toolset tool requires mcp_servers");
        }
        let named = toolset.mcp_server_name.as_deref();
        if !servers.iter().any(|s| Some(&*s.name) == named) {
            return broken("an mcp_toolset names a server that is not in mcp_servers");
        }
    }
    Ok(())
}

/// `body` with the model's value (the JSON string `raw`, a slice of `body`) replaced by
/// `canonical`; every other byte is the client's.
fn splice_model(body: &Bytes, raw: &str, canonical: &str) -> Bytes {
    // `raw` borrows from `body` (serde_json's RawValue over a slice): its offset is the
    // distance between the two addresses.
    let start = (raw.as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    let end = start + raw.len();
    let Some(before) = body.get(..start) else {
        return body.clone();
    };
    let after = body.get(end..).unwrap_or_default();
    let name = serde_json::to_string(canonical).unwrap_or_default();
    let mut out = BytesMut::with_capacity(before.len() + name.len() + after.len());
    out.extend_from_slice(before);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(after);
    out.freeze()
}

#[cfg(test)]
mod tests;

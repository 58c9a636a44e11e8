//! `--provider openai|anthropic`: the mock stands in for a hosted API instead of an engine.
//!
//! A provider has only its `/v1` surface (no `/health`, `/server_info`, `/version`: a
//! gateway must not probe it), reads its key where that provider does (`Authorization:
//! Bearer` or `x-api-key`), lists models in its own shape, and answers errors in its own
//! envelope, so tests see what the gateway does with a real provider's answers.

use std::str::FromStr;

use http::request::Parts;
use http::{Method, StatusCode};
use hyper::Response;
use serde_json::{json, Value};

use crate::body::MockBody;
use crate::respond;
use crate::state::AppState;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Anthropic,
}

impl FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "openai" => Ok(Provider::OpenAi),
            "anthropic" => Ok(Provider::Anthropic),
            other => Err(format!(
                "unknown provider '{other}' (expected openai or anthropic)"
            )),
        }
    }
}

/// What the provider does with a request: answer it here, or let the engine simulator
/// generate (an inference route, key and model accepted).
pub enum Outcome {
    Answer(Response<MockBody>),
    Generate,
}

/// Checks the key, serves `/v1/models`, refuses unknown routes and models.
pub fn handle(
    provider: Provider,
    state: &AppState,
    key: Option<&str>,
    parts: &Parts,
    body: &[u8],
) -> Outcome {
    if let Some(key) = key {
        if !has_key(provider, parts, key) {
            return Outcome::Answer(error(
                provider,
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid_api_key",
                "Incorrect API key provided.",
            ));
        }
    }
    if provider == Provider::Anthropic && !parts.headers.contains_key("anthropic-version") {
        return Outcome::Answer(error(
            provider,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_request_error",
            "anthropic-version: header is required",
        ));
    }
    let path = parts.uri.path();
    let inference = match (provider, &parts.method, path) {
        (_, &Method::GET, "/v1/models") => return Outcome::Answer(models(provider, state)),
        (
            Provider::OpenAi,
            &Method::POST,
            "/v1/chat/completions" | "/v1/completions" | "/v1/responses",
        ) => true,
        (Provider::Anthropic, &Method::POST, "/v1/messages") => true,
        _ => false,
    };
    if !inference {
        return Outcome::Answer(error(
            provider,
            StatusCode::NOT_FOUND,
            "not_found_error",
            "unknown_url",
            &format!("Unknown request URL: {} {path}", parts.method),
        ));
    }
    let asked = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned));
    let served = state.config.model();
    if asked.as_deref() != Some(served.as_str()) {
        return Outcome::Answer(error(
            provider,
            StatusCode::NOT_FOUND,
            "not_found_error",
            "model_not_found",
            &format!("The model `{}` does not exist.", asked.unwrap_or_default()),
        ));
    }
    Outcome::Generate
}

fn has_key(provider: Provider, parts: &Parts, key: &str) -> bool {
    let header = |name: &str| parts.headers.get(name).map(|v| v.as_bytes());
    match provider {
        Provider::OpenAi => header("authorization") == Some(format!("Bearer {key}").as_bytes()),
        Provider::Anthropic => header("x-api-key") == Some(key.as_bytes()),
    }
}

fn models(provider: Provider, state: &AppState) -> Response<MockBody> {
    let model = state.config.model();
    let body = match provider {
        Provider::OpenAi => json!({
            "object": "list",
            "data": [{"id": *model, "object": "model", "created": 1_700_000_000, "owned_by": "mock-provider"}],
        }),
        Provider::Anthropic => json!({
            "data": [{"type": "model", "id": *model, "display_name": *model, "created_at": "2025-01-01T00:00:00Z"}],
            "has_more": false,
            "first_id": *model,
            "last_id": *model,
        }),
    };
    respond::ok_json(&body)
}

/// An error in Anthropic's envelope (also for injected failures).
pub fn anthropic_error(status: StatusCode, kind: &str, message: &str) -> Response<MockBody> {
    error(Provider::Anthropic, status, kind, "", message)
}

/// An error in the provider's own envelope.
fn error(
    provider: Provider,
    status: StatusCode,
    kind: &str,
    code: &str,
    message: &str,
) -> Response<MockBody> {
    let body = match provider {
        Provider::OpenAi => json!({
            "error": {"message": message, "type": "invalid_request_error", "param": null, "code": code},
        }),
        Provider::Anthropic => json!({
            "type": "error",
            "error": {"type": kind, "message": message},
        }),
    };
    respond::json(status, &body)
}

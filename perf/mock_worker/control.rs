//! The `/mock/*` control routes used by tests. They are never logged and
//! never require the API key, so tests can inspect and steer the mock
//! regardless of how it was started.

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::MockBody;
use crate::config::ConfigPatch;
use crate::respond::{self, ok_json};
use crate::state::AppState;

pub const PREFIX: &str = "/mock/";

pub fn is_control(path: &str) -> bool {
    path.starts_with(PREFIX)
}

pub fn handle(state: &AppState, parts: &Parts, body: &Bytes) -> Response<MockBody> {
    let path = parts.uri.path();
    match (&parts.method, path) {
        (&Method::GET, "/mock/requests") => match &state.log {
            Some(log) => ok_json(&log.to_json()),
            None => ok_json(&json!([])),
        },
        (&Method::DELETE, "/mock/requests") => {
            if let Some(log) = &state.log {
                log.clear();
            }
            ok_json(&json!({"cleared": true}))
        }
        (&Method::GET, "/mock/config") => ok_json(&config_json(state)),
        (&Method::POST | &Method::PUT | &Method::PATCH, "/mock/config") => {
            patch_config(state, body)
        }
        (&Method::GET, "/mock/stats") => {
            let mut stats = state.stats.to_json();
            stats["cache_hit_rate"] = json!(state.load_snapshot().cache_hit_rate);
            ok_json(&stats)
        }
        (&Method::DELETE, "/mock/stats") => {
            state.stats.reset();
            ok_json(&state.stats.to_json())
        }
        _ => respond::not_found(path),
    }
}

fn patch_config(state: &AppState, body: &Bytes) -> Response<MockBody> {
    let value: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(e) => return respond::bad_request(&format!("invalid JSON body: {e}")),
        }
    };
    match ConfigPatch::parse(&value) {
        Ok(patch) => {
            state.config.apply(&patch);
            ok_json(&config_json(state))
        }
        Err(message) => respond::error(StatusCode::BAD_REQUEST, "invalid_request_error", &message),
    }
}

/// The live settings plus the fixed identity chosen at start-up.
fn config_json(state: &AppState) -> Value {
    let mut config = state.config.to_json();
    config["runtime"] = json!(state.runtime.as_str());
    config["metrics_style"] = json!(state.metrics_style.as_str());
    config
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Flags;
    use http_body_util::BodyExt;

    fn call(state: &AppState, method: &str, path: &str, body: &str) -> (StatusCode, Value) {
        let parts = http::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
            .into_parts()
            .0;
        let response = handle(state, &parts, &Bytes::from(body.to_string()));
        let status = response.status();
        let bytes = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn config_round_trip() {
        let state = AppState::new(&Flags::default(), 1);
        let (status, v) = call(&state, "POST", "/mock/config", r#"{"itl_ms": 9}"#);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(v["itl_ms"], 9);
        assert_eq!(v["runtime"], "sglang");
        let (_, v) = call(&state, "GET", "/mock/config", "");
        assert_eq!(v["itl_ms"], 9);
    }

    #[test]
    fn bad_config_is_400() {
        let state = AppState::new(&Flags::default(), 1);
        let (status, v) = call(&state, "POST", "/mock/config", "{nope");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let (status, _) = call(&state, "POST", "/mock/config", r#"{"fail_rate": 3}"#);
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn requests_and_stats() {
        let state = AppState::new(&Flags::default(), 1);
        let (status, v) = call(&state, "GET", "/mock/requests", "");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(v, json!([]));
        let (_, v) = call(&state, "GET", "/mock/stats", "");
        assert_eq!(v["requests_total"], 0);
        assert_eq!(v["inflight"], 0);
        assert_eq!(v["cancelled"], 0);
        let (status, _) = call(&state, "GET", "/mock/nothing", "");
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}

//! Request dispatch: body collection, request log, auth, then routing by
//! method and path to the engine, inference or control handlers.
//!
//! Which detection probes exist depends on the imitated runtime, so that
//! the gateway's engine-type detection sees what a real SGLang, vLLM or
//! llama.cpp server would answer.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;

use crate::body::Aborted;
use crate::cli::Runtime;
use crate::control;
use crate::engine::{self, SGLANG_VERSION, VLLM_VERSION};
use crate::inference::{self, Endpoint};
use crate::prompt::Api;
use crate::provider::{self, Outcome};
use crate::reqlog::Entry;
use crate::respond::{self, HttpResult};
use crate::state::AppState;
use crate::utility::Task;

/// Request bodies beyond this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Health,
    Models,
    ServerInfo,
    ModelInfo,
    Version(&'static str),
    Props,
    Loads,
    Metrics,
    FlushCache,
    Profile,
    Inference(Endpoint),
    NotFound,
}

pub fn resolve(runtime: Runtime, method: &Method, path: &str) -> Route {
    let sglang = runtime == Runtime::Sglang;
    if method == Method::GET {
        match path {
            "/health" | "/health_generate" => Route::Health,
            "/v1/models" => Route::Models,
            "/metrics" => Route::Metrics,
            "/server_info" | "/get_server_info" if sglang => Route::ServerInfo,
            "/model_info" | "/get_model_info" if sglang => Route::ModelInfo,
            "/v1/loads" if sglang => Route::Loads,
            "/version" => match runtime {
                Runtime::Sglang => Route::Version(SGLANG_VERSION),
                Runtime::Vllm => Route::Version(VLLM_VERSION),
                Runtime::Generic => Route::NotFound,
            },
            "/props" if runtime == Runtime::Generic => Route::Props,
            _ => Route::NotFound,
        }
    } else if method == Method::POST {
        match path {
            "/flush_cache" => Route::FlushCache,
            "/start_profile" | "/stop_profile" => Route::Profile,
            _ => inference_endpoint(path).map_or(Route::NotFound, Route::Inference),
        }
    } else {
        Route::NotFound
    }
}

fn inference_endpoint(path: &str) -> Option<Endpoint> {
    let endpoint = match path {
        "/v1/chat/completions" => Endpoint::Generate(Api::Chat),
        "/v1/completions" => Endpoint::Generate(Api::Completions),
        "/generate" => Endpoint::Generate(Api::Generate),
        "/v1/messages" => Endpoint::Generate(Api::Messages),
        "/v1/responses" => Endpoint::Generate(Api::Responses),
        "/v1/messages/count_tokens" => Endpoint::Utility(Task::CountTokens),
        "/v1/embeddings" => Endpoint::Utility(Task::Embeddings),
        "/rerank" | "/v1/rerank" => Endpoint::Utility(Task::Rerank),
        "/v1/classify" => Endpoint::Utility(Task::Classify),
        "/v1/tokenize" | "/tokenize" => Endpoint::Utility(Task::Tokenize),
        "/v1/detokenize" | "/detokenize" => Endpoint::Utility(Task::Detokenize),
        "/v1/audio/transcriptions" => Endpoint::Utility(Task::Transcription),
        _ => return None,
    };
    Some(endpoint)
}

/// The hyper service function.
pub async fn handle(state: Arc<AppState>, request: Request<Incoming>) -> HttpResult {
    let (parts, body) = request.into_parts();
    let body = match read_body(body).await {
        Ok(body) => body,
        Err(ReadError::TooLarge) => {
            return Ok(respond::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request body too large",
            ))
        }
        // The client broke off mid-body; nobody is left to answer.
        Err(ReadError::Io) => return Err(Aborted),
    };
    let path = parts.uri.path();

    if control::is_control(path) {
        return Ok(control::handle(&state, &parts, &body));
    }
    if state.verbose {
        eprintln!("{} {} ({} bytes)", parts.method, parts.uri, body.len());
    }
    if let Some(log) = &state.log {
        log.record(Entry::new(&parts, &body));
    }
    if let Some(provider) = state.provider {
        return match provider::handle(provider, &state, state.api_key.as_deref(), &parts, &body) {
            Outcome::Answer(response) => Ok(response),
            Outcome::Generate => match inference_endpoint(path) {
                Some(endpoint) => inference::handle(&state, endpoint, &body).await,
                None => Ok(respond::not_found(path)),
            },
        };
    }
    if !state.authorized(&parts.headers) {
        return Ok(respond::error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing or invalid API key",
        ));
    }

    Ok(match resolve(state.runtime, &parts.method, path) {
        Route::Health => engine::health(&state),
        Route::Models => engine::models(&state),
        Route::ServerInfo => engine::server_info(&state),
        Route::ModelInfo => engine::model_info(&state),
        Route::Version(version) => engine::version(version),
        Route::Props => engine::props(),
        Route::Loads => engine::loads(&state),
        Route::Metrics => engine::metrics(&state),
        Route::FlushCache => {
            state.flush_cache();
            respond::text(StatusCode::OK, "text/plain", "Cache flushed.\n".to_string())
        }
        Route::Profile => respond::empty(StatusCode::OK),
        Route::Inference(endpoint) => return inference::handle(&state, endpoint, &body).await,
        Route::NotFound => respond::not_found(path),
    })
}

enum ReadError {
    TooLarge,
    Io,
}

async fn read_body(body: Incoming) -> Result<Bytes, ReadError> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ReadError::TooLarge),
        Err(_) => Err(ReadError::Io),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(runtime: Runtime, path: &str) -> Route {
        resolve(runtime, &Method::GET, path)
    }

    #[test]
    fn detection_probes_per_runtime() {
        use Runtime::*;
        for path in ["/server_info", "/get_server_info"] {
            assert_eq!(get(Sglang, path), Route::ServerInfo);
            assert_eq!(get(Vllm, path), Route::NotFound);
            assert_eq!(get(Generic, path), Route::NotFound);
        }
        for path in ["/model_info", "/get_model_info"] {
            assert_eq!(get(Sglang, path), Route::ModelInfo);
            assert_eq!(get(Vllm, path), Route::NotFound);
            assert_eq!(get(Generic, path), Route::NotFound);
        }
        assert_eq!(get(Sglang, "/version"), Route::Version(SGLANG_VERSION));
        assert_eq!(get(Vllm, "/version"), Route::Version(VLLM_VERSION));
        assert_eq!(get(Generic, "/version"), Route::NotFound);
        assert_eq!(get(Generic, "/props"), Route::Props);
        assert_eq!(get(Sglang, "/props"), Route::NotFound);
        assert_eq!(get(Sglang, "/v1/loads"), Route::Loads);
        assert_eq!(get(Vllm, "/v1/loads"), Route::NotFound);
        for runtime in [Sglang, Vllm, Generic] {
            assert_eq!(get(runtime, "/v1/models"), Route::Models);
            assert_eq!(get(runtime, "/health"), Route::Health);
            assert_eq!(get(runtime, "/health_generate"), Route::Health);
            assert_eq!(get(runtime, "/metrics"), Route::Metrics);
        }
    }

    #[test]
    fn inference_routes_are_post_only() {
        let post = |p| resolve(Runtime::Sglang, &Method::POST, p);
        assert_eq!(
            post("/v1/chat/completions"),
            Route::Inference(Endpoint::Generate(Api::Chat))
        );
        assert_eq!(
            post("/v1/messages/count_tokens"),
            Route::Inference(Endpoint::Utility(Task::CountTokens))
        );
        assert_eq!(
            post("/tokenize"),
            Route::Inference(Endpoint::Utility(Task::Tokenize))
        );
        assert_eq!(post("/flush_cache"), Route::FlushCache);
        assert_eq!(post("/nope"), Route::NotFound);
        assert_eq!(
            get(Runtime::Sglang, "/v1/chat/completions"),
            Route::NotFound
        );
        assert_eq!(
            resolve(Runtime::Sglang, &Method::DELETE, "/health"),
            Route::NotFound
        );
    }
}

//! Public information routes: `GET /v1/models` from the registry, and `GET /get_model_info`,
//! `GET /get_server_info`, `GET /health_generate` forwarded to one healthy worker.

use std::collections::HashSet;
use std::time::Duration;

use http::header::{HeaderName, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, Method, Response, StatusCode};
use serde::Serialize;

use super::json_response;
use super::Admin;
use crate::control::calls::{call, get_with_headers, CallClient, CallError, CallReply};
use crate::fleet::provider::KeyStyle;
use crate::fleet::{ConnectionMode, RuntimeType, Worker, WorkerType};
use crate::http::body::RespBody;
use crate::http::error::{
    respond::admin_error, respond::error_response, respond::AdminErrorBody, GatewayError,
};

/// Timeout of one forwarded information call (never longer than `--request-timeout-secs`).
/// `/health_generate` runs a short generation on the engine, so this leaves room for a
/// busy one.
pub const INFO_TIMEOUT: Duration = Duration::from_secs(60);

/// One entry of the `/v1/models` list.
#[derive(Serialize)]
struct ModelCard<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
}

/// The `/v1/models` body.
#[derive(Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelCard<'a>>,
}

/// A provider key a caller sent to `GET /v1/models`: `x-api-key` (Anthropic-style), or
/// `Authorization` when the data plane is open (with gateway auth on, that header holds
/// the gateway's key, which must never be sent to a provider).
pub struct CallerKey {
    style: KeyStyle,
    headers: HeaderMap,
}

impl CallerKey {
    pub fn from_request(headers: &HeaderMap, data_plane_open: bool) -> Option<CallerKey> {
        let (style, name) = if let Some(key) = headers.get(X_API_KEY) {
            (KeyStyle::XApiKey, (X_API_KEY, key))
        } else if let (true, Some(key)) = (data_plane_open, headers.get(AUTHORIZATION)) {
            (KeyStyle::Bearer, (AUTHORIZATION, key))
        } else {
            return None;
        };
        let mut out = HeaderMap::new();
        out.insert(name.0, name.1.clone());
        for passed in [ANTHROPIC_VERSION_HEADER, ANTHROPIC_BETA_HEADER] {
            if let Some(value) = headers.get(&passed) {
                out.insert(passed, value.clone());
            }
        }
        Some(CallerKey {
            style,
            headers: out,
        })
    }
}

const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const ANTHROPIC_VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");
const ANTHROPIC_BETA_HEADER: HeaderName = HeaderName::from_static("anthropic-beta");

/// `GET /v1/models`. A caller that sends its own provider key ([`CallerKey`]) while an
/// external provider of that key's style is registered gets that provider's own list,
/// status and body unchanged (spec 1). Otherwise: the models of the self-hosted workers in
/// the registry (each worker's model ID, in registration order, without repeats), whatever
/// their status. External provider workers are not self-hosted and are left out;
/// `--model-alias` names and model card aliases are routing names, not models, and are not
/// listed. With no model: 503 plain text `No models available`.
pub async fn models(
    admin: &Admin,
    client: &CallClient,
    caller: Option<CallerKey>,
) -> Response<RespBody> {
    if let Some(caller) = caller {
        let provider = admin
            .registry
            .snapshot()
            .all()
            .iter()
            .find(|w| w.provider.as_ref().is_some_and(|p| p.style == caller.style))
            .cloned();
        if let Some(provider) = provider {
            return provider_models(admin, client, &provider, caller).await;
        }
    }
    self_hosted_models(admin)
}

/// The provider's own `/v1/models`, asked with the caller's key.
async fn provider_models(
    admin: &Admin,
    client: &CallClient,
    provider: &Worker,
    caller: CallerKey,
) -> Response<RespBody> {
    let timeout = INFO_TIMEOUT.min(admin.call_timeout);
    let pool = client.pool(provider.http2);
    match get_with_headers(
        pool,
        &provider.spec.url,
        caller.headers,
        "/v1/models",
        timeout,
    )
    .await
    {
        Ok(reply) => relay(reply),
        Err(e) => {
            tracing::warn!(worker = %provider.url, error = %e, "provider model list failed");
            error_response(&call_error(&e))
        }
    }
}

/// A worker's reply as the client's answer: status, body and `Content-Type` unchanged.
fn relay(reply: CallReply) -> Response<RespBody> {
    let mut resp = Response::new(RespBody::full(reply.body));
    *resp.status_mut() = reply.status;
    if let Some(content_type) = reply.headers.get(CONTENT_TYPE) {
        resp.headers_mut()
            .insert(CONTENT_TYPE, content_type.clone());
    }
    resp
}

fn self_hosted_models(admin: &Admin) -> Response<RespBody> {
    let snapshot = admin.registry.snapshot();
    let mut seen = HashSet::new();
    let data: Vec<ModelCard<'_>> = snapshot
        .all()
        .iter()
        .filter(|w| w.runtime != RuntimeType::External)
        .filter_map(|w| w.model_id.as_deref())
        .filter(|id| seen.insert(*id))
        .map(|id| ModelCard {
            id,
            object: "model",
            created: 0,
            owned_by: "self_hosted",
        })
        .collect();
    if data.is_empty() {
        return admin_error(
            StatusCode::SERVICE_UNAVAILABLE,
            AdminErrorBody::text("No models available"),
        );
    }
    json_response(
        StatusCode::OK,
        &ModelList {
            object: "list",
            data,
        },
    )
}

/// The route template for the 501 envelope (the envelope wants a `'static` name).
fn route_name(path: &str) -> &'static str {
    match path {
        "/get_model_info" => "/get_model_info",
        "/get_server_info" => "/get_server_info",
        "/health_generate" => "/health_generate",
        _ => "this route",
    }
}

/// `GET path` (`/get_model_info`, `/get_server_info` or `/health_generate`) on the first
/// ready regular HTTP worker, in registration order; the worker's status and body come
/// back unchanged, with its `Content-Type`. With `--pd-disaggregation` the first ready
/// prefill worker answers instead, and an error status it returns comes back in the
/// gateway envelope.
///
/// No such worker: 501 `not_implemented` when the fleet has workers but none over HTTP (a
/// gRPC or ZMQ deployment), else 503 `no_available_workers`. A call that fails without a
/// reply answers 502 (`worker_connect_failed`, `worker_connection_error`) or 504
/// (`worker_timeout`) in the gateway envelope.
pub async fn forward_info(admin: &Admin, client: &CallClient, path: &str) -> Response<RespBody> {
    let pd = admin.pd_disaggregation;
    let serving = if pd {
        WorkerType::Prefill
    } else {
        WorkerType::Regular
    };
    let (target, has_workers, has_http) = {
        let snapshot = admin.registry.snapshot();
        let all = snapshot.all();
        let is_http = |mode: ConnectionMode| mode == ConnectionMode::Http;
        let target = all
            .iter()
            .find(|w| is_http(w.connection_mode()) && w.worker_type == serving && w.is_ready())
            .cloned();
        let has_http = all.iter().any(|w| is_http(w.connection_mode()));
        (target, !all.is_empty(), has_http)
    };
    let Some(worker) = target else {
        let err = if has_workers && !has_http {
            GatewayError::NotImplemented {
                route: route_name(path),
            }
        } else {
            GatewayError::NoAvailableWorkers
        };
        return error_response(&err);
    };
    let timeout = INFO_TIMEOUT.min(admin.call_timeout);
    match call(client, &worker, Method::GET, path, None, timeout).await {
        Ok(reply) if pd && !reply.status.is_success() => {
            error_response(&GatewayError::WorkerStatus {
                status: reply.status,
            })
        }
        Ok(reply) => relay(reply),
        Err(e) => {
            tracing::warn!(worker = %worker.url, path, error = %e, "information call failed");
            error_response(&call_error(&e))
        }
    }
}

/// The gateway error for a call that produced no reply.
fn call_error(err: &CallError) -> GatewayError {
    match err {
        CallError::Connect(_) => GatewayError::UpstreamConnect,
        CallError::Timeout => GatewayError::UpstreamTimeout,
        // `NotHttp` cannot happen (only HTTP workers are chosen) and `Status` is not
        // returned by `call`; both count as a broken exchange.
        CallError::NotHttp
        | CallError::Transport(_)
        | CallError::TooLarge
        | CallError::Status(_) => GatewayError::UpstreamBroken,
    }
}

//! Public information routes: `GET /v1/models` from the registry, and `GET /get_model_info`,
//! `GET /get_server_info`, `GET /health_generate` forwarded to one healthy worker.

use std::collections::HashSet;
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::{Method, Response, StatusCode};
use serde::Serialize;

use super::json_response;
use super::Admin;
use crate::control::calls::{call, CallClient, CallError};
use crate::fleet::{ConnectionMode, RuntimeType, WorkerType};
use crate::http::body::RespBody;
use crate::http::error::{admin_error, error_response, AdminErrorBody, GatewayError};

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

/// `GET /v1/models`: the models of the self-hosted workers in the registry (each worker's
/// model ID, in registration order, without repeats), whatever their status. External
/// provider workers are not self-hosted and are left out; `--model-alias` names and model
/// card aliases are routing names, not models, and are not listed. With no model: 503
/// plain text `No models available`.
pub fn models(admin: &Admin) -> Response<RespBody> {
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
        Ok(reply) => {
            let mut resp = Response::new(RespBody::full(reply.body));
            *resp.status_mut() = reply.status;
            if let Some(content_type) = reply.headers.get(CONTENT_TYPE) {
                resp.headers_mut()
                    .insert(CONTENT_TYPE, content_type.clone());
            }
            resp
        }
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

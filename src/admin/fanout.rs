//! `POST /flush_cache`, `POST /start_profile`, `POST /stop_profile`: the same call sent to
//! many workers at once, summarised per worker.
//!
//! The targets are every registered worker, whatever its status: flushing or profiling is
//! an operator's explicit request to the engines, and a worker that is not ready (still
//! starting, failing probes, draining) still holds a cache and a profiler. A worker that
//! cannot be reached is reported under `failed` with the reason.
//!
//! HTTP workers are called in parallel on the current runtime (at most
//! [`MAX_PARALLEL_CALLS`] at a time), each call bounded as a whole. gRPC workers are
//! reported as failed (their transport is not served by this build; runtimes without the
//! RPC are reported as UNIMPLEMENTED); ZMQ workers are skipped by a flush and reported as
//! failed by profiling, as the spec says.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::task::JoinSet;

use super::Admin;
use super::{json_response, Failure};
use crate::control::calls::{call, CallClient, CallReply};
use crate::fleet::{parse_worker_url, ConnectionMode, RuntimeType, Worker};
use crate::http::body::RespBody;
use crate::http::error::{admin_error, AdminErrorBody};

/// Per-worker timeout of a cache flush (spec 1, "Limits").
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(45);
/// Per-worker timeout of a profiler start or stop. Not given by the spec; stopping writes
/// the trace files, which takes a while on large models, so this is generous but bounded
/// (and never longer than `--request-timeout-secs`).
pub const PROFILE_TIMEOUT: Duration = Duration::from_secs(300);
/// Most calls of one fan-out in flight at once, so a large fleet does not open hundreds of
/// connections in the same instant.
pub const MAX_PARALLEL_CALLS: usize = 64;
/// Most characters of a worker's error body quoted in a failure message.
const ERROR_SNIPPET_CHARS: usize = 200;

/// What one worker contributes to a fan-out.
enum Plan {
    /// Called over HTTP.
    Call(Arc<Worker>),
    /// Not called; reported as failed with this reason.
    Fail(String),
    /// Not called and not reported (ZMQ workers of a flush).
    Skip,
}

/// The per-worker results of a fan-out, in registration order.
#[derive(Debug, Default)]
struct Summary {
    successful: Vec<String>,
    failed: Vec<Failure>,
}

/// Runs `plans` (one per worker, paired with its URL): HTTP calls in parallel, the others
/// reported as planned.
async fn execute(
    client: &CallClient,
    plans: Vec<(String, Plan)>,
    path: &'static str,
    body: Option<Bytes>,
    timeout: Duration,
) -> Summary {
    let calls: Vec<Arc<Worker>> = plans
        .iter()
        .filter_map(|(_, plan)| match plan {
            Plan::Call(worker) => Some(worker.clone()),
            _ => None,
        })
        .collect();
    let mut results = call_all(client, &calls, path, body, timeout)
        .await
        .into_iter();
    let mut summary = Summary::default();
    for (url, plan) in plans {
        let result = match plan {
            Plan::Call(_) => results
                .next()
                .unwrap_or_else(|| Err("the call did not complete".to_owned())),
            Plan::Fail(reason) => Err(reason),
            Plan::Skip => continue,
        };
        match result {
            Ok(()) => summary.successful.push(url),
            Err(error) => {
                tracing::warn!(worker = %url, path, %error, "worker call failed");
                summary.failed.push(Failure { worker: url, error });
            }
        }
    }
    summary
}

/// `POST path` on every worker of `workers`, at most [`MAX_PARALLEL_CALLS`] at once; the
/// results in the order of `workers`. Dropping the future (the client went away) aborts
/// the calls still running.
async fn call_all(
    client: &CallClient,
    workers: &[Arc<Worker>],
    path: &'static str,
    body: Option<Bytes>,
    timeout: Duration,
) -> Vec<Result<(), String>> {
    let mut results: Vec<Result<(), String>> =
        vec![Err("the call did not complete".to_owned()); workers.len()];
    let mut set = JoinSet::new();
    let mut next = 0;
    loop {
        while next < workers.len() && set.len() < MAX_PARALLEL_CALLS {
            let worker = workers[next].clone();
            let client = client.clone();
            let body = body.clone();
            let index = next;
            set.spawn(async move {
                let outcome = call(&client, &worker, Method::POST, path, body, timeout).await;
                (
                    index,
                    outcome.map_err(|e| e.to_string()).and_then(expect_2xx),
                )
            });
            next += 1;
        }
        match set.join_next().await {
            Some(Ok((index, result))) => {
                if let Some(slot) = results.get_mut(index) {
                    *slot = result;
                }
            }
            // A call task that panicked or was cancelled keeps its "did not complete".
            Some(Err(_)) => {}
            None => break,
        }
    }
    results
}

/// Success for a 2xx reply; any other status is a failure quoting the start of the body.
fn expect_2xx(reply: CallReply) -> Result<(), String> {
    if reply.status.is_success() {
        return Ok(());
    }
    let text: String = String::from_utf8_lossy(&reply.body)
        .chars()
        .take(ERROR_SNIPPET_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = text.trim();
    if text.is_empty() {
        Err(format!("worker answered {}", reply.status.as_u16()))
    } else {
        Err(format!("worker answered {}: {text}", reply.status.as_u16()))
    }
}

/// The body of a `/flush_cache` answer.
#[derive(Serialize)]
struct FlushBody {
    status: &'static str,
    message: String,
    workers_flushed: usize,
    total_http_workers: usize,
    total_grpc_workers: usize,
    total_zmq_workers_skipped: usize,
    total_workers: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    successful: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<Vec<Failure>>,
}

/// `POST /flush_cache`: asks every registered HTTP worker (external providers included) to
/// drop its KV prefix cache, in parallel, [`FLUSH_TIMEOUT`] each; gRPC workers are
/// reported as failed, ZMQ workers skipped. 200 when every called worker succeeded (or
/// none was called), else 206 with `successful` and `failed`.
pub async fn flush_cache(admin: &Admin, client: &CallClient) -> Response<RespBody> {
    let workers = engine_fronts(admin);
    let (mut http, mut grpc, mut zmq) = (0, 0, 0);
    let plans: Vec<(String, Plan)> = workers
        .into_iter()
        .map(|worker| {
            let plan = match worker.connection_mode() {
                ConnectionMode::Http => {
                    http += 1;
                    Plan::Call(worker.clone())
                }
                ConnectionMode::Grpc => {
                    grpc += 1;
                    Plan::Fail(grpc_flush_error(worker.runtime))
                }
                ConnectionMode::Zmq => {
                    zmq += 1;
                    Plan::Skip
                }
            };
            (worker.url.clone(), plan)
        })
        .collect();
    let summary = execute(client, plans, "/flush_cache", None, FLUSH_TIMEOUT).await;
    let called = http + grpc;
    let flushed = summary.successful.len();
    let ok = summary.failed.is_empty();
    let message = if ok && called == 0 {
        if zmq > 0 {
            format!("No workers to flush ({zmq} ZMQ workers skipped)")
        } else {
            "No workers to flush".to_owned()
        }
    } else if ok {
        format!("Cache flushed on all {called} workers")
    } else {
        format!(
            "Cache flush failed on {} of {called} workers",
            summary.failed.len()
        )
    };
    tracing::info!(
        flushed,
        failed = summary.failed.len(),
        zmq_skipped = zmq,
        "cache flush done"
    );
    let (status, word, successful, failed) = if ok {
        (StatusCode::OK, "success", None, None)
    } else {
        (
            StatusCode::PARTIAL_CONTENT,
            "partial_success",
            Some(summary.successful),
            Some(summary.failed),
        )
    };
    json_response(
        status,
        &FlushBody {
            status: word,
            message,
            workers_flushed: flushed,
            total_http_workers: http,
            total_grpc_workers: grpc,
            total_zmq_workers_skipped: zmq,
            total_workers: http + grpc + zmq,
            successful,
            failed,
        },
    )
}

/// Why a gRPC worker's cache was not flushed.
fn grpc_flush_error(runtime: RuntimeType) -> String {
    match runtime {
        RuntimeType::Trtllm | RuntimeType::Mlx => format!(
            "UNIMPLEMENTED: {} workers do not support FlushCache",
            runtime.as_str()
        ),
        _ => "FlushCache over gRPC is not served by this gateway yet".to_owned(),
    }
}

/// Why a gRPC worker's profiler was not started or stopped: only the SGLang and
/// TokenSpeed servicers have the RPCs, and the gRPC transport is not served by this build.
fn grpc_profile_error(runtime: RuntimeType, start: bool) -> String {
    let rpc = if start { "StartProfile" } else { "StopProfile" };
    match runtime {
        RuntimeType::Vllm | RuntimeType::Trtllm | RuntimeType::Mlx => format!(
            "UNIMPLEMENTED: {} workers do not support {rpc}",
            runtime.as_str()
        ),
        _ => format!("{rpc} over gRPC is not served by this gateway yet"),
    }
}

/// The body of a profiling answer.
#[derive(Serialize)]
struct ProfileBody {
    status: &'static str,
    message: String,
    successful: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed: Option<Vec<Failure>>,
}

/// What the client asked a profiling route for.
#[derive(Debug)]
struct ProfileRequest {
    /// Only the worker with this URL.
    url: Option<String>,
    /// The rest of the body, sent to each HTTP worker (`None`: no body).
    forward: Option<Bytes>,
}

/// Reads a profiling body: empty, or a JSON object whose optional `url` (a string) selects
/// one worker and whose other fields are the workers' own request body.
fn parse_profile_body(body: &[u8]) -> Result<ProfileRequest, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(ProfileRequest {
            url: None,
            forward: None,
        });
    }
    let mut fields: Map<String, Value> = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => return Err("the body must be a JSON object".to_owned()),
        Err(e) => return Err(format!("invalid JSON body: {e}")),
    };
    let url = match fields.remove("url") {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) => Some(url),
        Some(_) => return Err("`url` must be a string".to_owned()),
    };
    let forward = if fields.is_empty() {
        None
    } else {
        let bytes = serde_json::to_vec(&Value::Object(fields))
            .map_err(|e| format!("cannot re-encode the body: {e}"))?;
        Some(Bytes::from(bytes))
    };
    Ok(ProfileRequest { url, forward })
}

/// The registered workers, one per engine (see [`Worker::fronts_engine`]).
fn engine_fronts(admin: &Admin) -> Vec<Arc<Worker>> {
    let snapshot = admin.registry.snapshot();
    snapshot
        .all()
        .iter()
        .filter(|w| w.fronts_engine())
        .cloned()
        .collect()
}

/// The registered worker `url` names: exactly, else after the registry's normalisation
/// (trailing slash dropped).
fn find_worker(workers: &[Arc<Worker>], url: &str) -> Option<Arc<Worker>> {
    let normalized = parse_worker_url(url).ok().map(|u| u.normalized);
    workers
        .iter()
        .find(|w| w.url == url)
        .or_else(|| {
            let normalized = normalized.as_deref()?;
            workers.iter().find(|w| w.url == normalized)
        })
        .cloned()
}

/// `POST /start_profile` (`start`) or `POST /stop_profile`: every registered worker, or
/// only the one whose URL equals the body's `url`. HTTP workers get `POST /start_profile`
/// or `/stop_profile` with the body's other fields; gRPC and ZMQ workers are reported as
/// failed. 200 when all targeted workers succeed, 206 with `failed` when any fails, 404
/// `{error, code: WORKER_NOT_FOUND}` when no worker matches, 400 `{error, code:
/// BAD_REQUEST}` for a body that is not a JSON object or a `url` that is not a string.
pub async fn profile(
    admin: &Admin,
    client: &CallClient,
    start: bool,
    body: Bytes,
) -> Response<RespBody> {
    let request = match parse_profile_body(&body) {
        Ok(request) => request,
        Err(message) => {
            return admin_error(
                StatusCode::BAD_REQUEST,
                AdminErrorBody::Coded {
                    code: "BAD_REQUEST",
                    message: &message,
                },
            )
        }
    };
    let workers = engine_fronts(admin);
    let targets = match &request.url {
        Some(url) => match find_worker(&workers, url) {
            Some(worker) => vec![worker],
            None => {
                return admin_error(
                    StatusCode::NOT_FOUND,
                    AdminErrorBody::Coded {
                        code: "WORKER_NOT_FOUND",
                        message: &format!("No worker with URL {url}"),
                    },
                )
            }
        },
        None if workers.is_empty() => {
            return admin_error(
                StatusCode::NOT_FOUND,
                AdminErrorBody::Coded {
                    code: "WORKER_NOT_FOUND",
                    message: "No workers registered",
                },
            )
        }
        None => workers,
    };
    let (path, verb) = if start {
        ("/start_profile", "started")
    } else {
        ("/stop_profile", "stopped")
    };
    let total = targets.len();
    let plans = targets
        .into_iter()
        .map(|worker| {
            let plan = match worker.connection_mode() {
                ConnectionMode::Http => Plan::Call(worker.clone()),
                ConnectionMode::Grpc => Plan::Fail(grpc_profile_error(worker.runtime, start)),
                ConnectionMode::Zmq => {
                    Plan::Fail("profiling is not supported for ZMQ workers".to_owned())
                }
            };
            (worker.url.clone(), plan)
        })
        .collect();
    let timeout = PROFILE_TIMEOUT.min(admin.call_timeout);
    let summary = execute(client, plans, path, request.forward, timeout).await;
    let ok = summary.failed.is_empty();
    let (status, word, message, failed) = if ok {
        (
            StatusCode::OK,
            "success",
            format!("Profiler {verb} on all {total} workers"),
            None,
        )
    } else {
        (
            StatusCode::PARTIAL_CONTENT,
            "partial_success",
            format!(
                "Profiler {verb} on {} of {total} workers",
                summary.successful.len()
            ),
            Some(summary.failed),
        )
    };
    json_response(
        status,
        &ProfileBody {
            status: word,
            message,
            successful: summary.successful,
            failed,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn reply(status: u16, body: impl Into<Bytes>) -> CallReply {
        CallReply {
            status: StatusCode::from_u16(status).unwrap(),
            headers: HeaderMap::new(),
            body: body.into(),
        }
    }

    #[test]
    fn profile_body_splits_url_from_the_workers_fields() {
        let r = parse_profile_body(b"").unwrap();
        assert!(r.url.is_none() && r.forward.is_none());
        let r = parse_profile_body(b"  \n").unwrap();
        assert!(r.url.is_none() && r.forward.is_none());
        let r = parse_profile_body(br#"{"url": "http://w:1"}"#).unwrap();
        assert_eq!(r.url.as_deref(), Some("http://w:1"));
        assert!(r.forward.is_none(), "only url: the worker gets no body");
        let r =
            parse_profile_body(br#"{"url": null, "num_steps": 3, "with_stack": true}"#).unwrap();
        assert!(r.url.is_none());
        let sent: Value = serde_json::from_slice(&r.forward.unwrap()).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({"num_steps": 3, "with_stack": true})
        );
        let r = parse_profile_body(b"{}").unwrap();
        assert!(r.url.is_none() && r.forward.is_none());
    }

    #[test]
    fn profile_body_errors() {
        assert!(parse_profile_body(b"{nope")
            .unwrap_err()
            .contains("invalid JSON"));
        assert!(parse_profile_body(b"[1]").unwrap_err().contains("object"));
        assert!(parse_profile_body(br#"{"url": 1}"#)
            .unwrap_err()
            .contains("url"));
    }

    #[test]
    fn only_2xx_is_success_and_failures_quote_the_body() {
        assert_eq!(expect_2xx(reply(200, "Cache flushed.\n")), Ok(()));
        assert_eq!(expect_2xx(reply(204, "")), Ok(()));
        assert_eq!(
            expect_2xx(reply(500, "boom\nagain")),
            Err("worker answered 500: boom again".to_owned())
        );
        assert_eq!(
            expect_2xx(reply(404, "")),
            Err("worker answered 404".to_owned())
        );
        let err = expect_2xx(reply(503, "x".repeat(1000))).unwrap_err();
        assert!(err.len() < 250, "bounded: {}", err.len());
    }

    #[test]
    fn worker_lookup_accepts_a_trailing_slash() {
        let a = Arc::new(Worker::for_url("http://127.0.0.1:7001").unwrap());
        let b = Arc::new(Worker::for_url("http://127.0.0.1:7002").unwrap());
        let all = vec![a.clone(), b.clone()];
        assert_eq!(
            find_worker(&all, "http://127.0.0.1:7002").map(|w| w.id),
            Some(b.id)
        );
        assert_eq!(
            find_worker(&all, "http://127.0.0.1:7001/").map(|w| w.id),
            Some(a.id)
        );
        assert!(find_worker(&all, "http://127.0.0.1:7003").is_none());
        assert!(find_worker(&all, "not a url").is_none());
    }

    #[test]
    fn grpc_errors_name_unsupported_runtimes() {
        assert!(grpc_flush_error(RuntimeType::Trtllm).starts_with("UNIMPLEMENTED"));
        assert!(grpc_flush_error(RuntimeType::Mlx).contains("mlx"));
        assert!(!grpc_flush_error(RuntimeType::Sglang).starts_with("UNIMPLEMENTED"));
        assert!(grpc_profile_error(RuntimeType::Vllm, true).contains("StartProfile"));
        assert!(grpc_profile_error(RuntimeType::Vllm, false).starts_with("UNIMPLEMENTED"));
        assert!(!grpc_profile_error(RuntimeType::Tokenspeed, true).starts_with("UNIMPLEMENTED"));
    }
}

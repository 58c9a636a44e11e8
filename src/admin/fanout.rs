//! `POST /flush_cache`, `POST /start_profile`, `POST /stop_profile`: the same call sent to
//! many workers at once, summarised per worker.
//!
//! The targets are every registered worker, whatever its status: flushing or profiling is
//! an operator's explicit request to the engines, and a worker that is not ready (still
//! starting, failing probes, draining) still holds a cache and a profiler. A worker that
//! cannot be reached is reported under `failed` with the reason.
//!
//! Workers are called in parallel on the current runtime (at most [`MAX_PARALLEL_CALLS`] at
//! a time), each call bounded as a whole: HTTP workers on their routes, gRPC engines with
//! the matching RPC (`FlushCache`, `StartProfile`, `StopProfile`; a runtime without it is
//! reported as UNIMPLEMENTED, an engine's `success: false` as failed). ZMQ workers are
//! skipped by a flush and reported as failed by profiling, as the spec says.

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
use crate::engine::grpc::common::StartProfileRequest;
use crate::engine::grpc::service::AdminFailure;
use crate::engine::grpc::Engine;
use crate::fleet::{parse_worker_url, ConnectionMode, RuntimeType, Transport, Worker};
use crate::http::body::RespBody;
use crate::http::error::{respond::admin_error, respond::AdminErrorBody};

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
    /// Called: over HTTP, or with the operation's RPC for a gRPC engine.
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

/// The operation a fan-out performs, as each transport says it.
#[derive(Clone, Debug)]
enum Op {
    Flush,
    /// With the body's fields for the engines (HTTP body; the RPC's request).
    StartProfile(Option<Bytes>),
    StopProfile(Option<Bytes>),
}

impl Op {
    fn path(&self) -> &'static str {
        match self {
            Op::Flush => "/flush_cache",
            Op::StartProfile(_) => "/start_profile",
            Op::StopProfile(_) => "/stop_profile",
        }
    }

    fn rpc(&self) -> &'static str {
        match self {
            Op::Flush => "FlushCache",
            Op::StartProfile(_) => "StartProfile",
            Op::StopProfile(_) => "StopProfile",
        }
    }

    fn http_body(&self) -> Option<Bytes> {
        match self {
            Op::Flush => None,
            Op::StartProfile(body) | Op::StopProfile(body) => body.clone(),
        }
    }
}

/// Runs `plans` (one per worker, paired with its URL): the calls in parallel, the others
/// reported as planned.
async fn execute(
    client: &CallClient,
    plans: Vec<(String, Plan)>,
    op: Op,
    timeout: Duration,
) -> Summary {
    let calls: Vec<Arc<Worker>> = plans
        .iter()
        .filter_map(|(_, plan)| match plan {
            Plan::Call(worker) => Some(worker.clone()),
            _ => None,
        })
        .collect();
    let path = op.path();
    let mut results = call_all(client, &calls, op, timeout).await.into_iter();
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

/// `op` on every worker of `workers`, at most [`MAX_PARALLEL_CALLS`] at once; the results
/// in the order of `workers`. Dropping the future (the client went away) aborts the calls
/// still running.
async fn call_all(
    client: &CallClient,
    workers: &[Arc<Worker>],
    op: Op,
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
            let op = op.clone();
            let index = next;
            set.spawn(async move { (index, call_one(&client, &worker, &op, timeout).await) });
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

/// `POST /flush_cache`: asks every registered HTTP worker (external providers included) and
/// gRPC engine to drop its KV prefix cache, in parallel, [`FLUSH_TIMEOUT`] each (one
/// attempt); ZMQ workers are skipped. 200 when every called worker succeeded (or
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
                    Plan::Call(worker.clone())
                }
                ConnectionMode::Zmq => {
                    zmq += 1;
                    Plan::Skip
                }
            };
            (worker.url.clone(), plan)
        })
        .collect();
    let summary = execute(client, plans, Op::Flush, FLUSH_TIMEOUT).await;
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

/// One worker's call: its HTTP route, or the RPC of a gRPC engine.
async fn call_one(
    client: &CallClient,
    worker: &Worker,
    op: &Op,
    timeout: Duration,
) -> Result<(), String> {
    if worker.connection_mode() == ConnectionMode::Grpc {
        return rpc(client, worker, op, timeout).await;
    }
    call(
        client,
        worker,
        Method::POST,
        op.path(),
        op.http_body(),
        timeout,
    )
    .await
    .map_err(|e| e.to_string())
    .and_then(expect_2xx)
}

/// `op` as an RPC to a gRPC engine.
async fn rpc(
    client: &CallClient,
    worker: &Worker,
    op: &Op,
    timeout: Duration,
) -> Result<(), String> {
    let Some(service) = worker.runtime.grpc_service() else {
        return Err(grpc_unsupported(worker.runtime, op.rpc()));
    };
    let Transport::Grpc { tls, authority } = &worker.transport else {
        return Err("not a gRPC worker".to_owned());
    };
    let engine = Engine::new(service, client.grpc().clone(), authority, *tls);
    let done = match op {
        Op::Flush => engine.flush_cache(timeout).await,
        Op::StartProfile(body) => {
            let request = start_profile_request(body.as_deref());
            engine.start_profile(request, timeout).await
        }
        Op::StopProfile(_) => engine.stop_profile(timeout).await,
    };
    done.map_err(|AdminFailure(message)| message)
}

/// Why a gRPC worker of a runtime that has no gRPC service (generic, external) was not
/// called.
fn grpc_unsupported(runtime: RuntimeType, rpc: &str) -> String {
    format!(
        "UNIMPLEMENTED: {} workers do not support {rpc} from this gateway",
        runtime.as_str()
    )
}

/// `StartProfile`'s request from the profiling body's fields (SGLang's HTTP names); a
/// field of the wrong type is left unset, as an absent one is.
fn start_profile_request(body: Option<&[u8]>) -> StartProfileRequest {
    let fields: Map<String, Value> = body
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default();
    let int = |key: &str| {
        fields
            .get(key)
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
    };
    let flag = |key: &str| fields.get(key).and_then(Value::as_bool);
    StartProfileRequest {
        output_dir: fields
            .get("output_dir")
            .and_then(Value::as_str)
            .map(str::to_owned),
        start_step: int("start_step"),
        num_steps: int("num_steps"),
        activities: fields
            .get("activities")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        with_stack: flag("with_stack"),
        record_shapes: flag("record_shapes"),
        profile_by_stage: flag("profile_by_stage").unwrap_or(false),
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
/// or `/stop_profile` with the body's other fields, SGLang gRPC engines the RPC with those
/// fields; other gRPC runtimes and ZMQ workers are reported as failed. 200 when all targeted workers succeed, 206 with `failed` when any fails, 404
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
    let (op, verb) = if start {
        (Op::StartProfile(request.forward), "started")
    } else {
        (Op::StopProfile(request.forward), "stopped")
    };
    let total = targets.len();
    let plans = targets
        .into_iter()
        .map(|worker| {
            let plan = match worker.connection_mode() {
                ConnectionMode::Http | ConnectionMode::Grpc => Plan::Call(worker.clone()),
                ConnectionMode::Zmq => {
                    Plan::Fail("profiling is not supported for ZMQ workers".to_owned())
                }
            };
            (worker.url.clone(), plan)
        })
        .collect();
    let timeout = PROFILE_TIMEOUT.min(admin.call_timeout);
    let summary = execute(client, plans, op, timeout).await;
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
        let err = grpc_unsupported(RuntimeType::Generic, "FlushCache");
        assert!(
            err.starts_with("UNIMPLEMENTED") && err.contains("generic"),
            "{err}"
        );
        assert!(grpc_unsupported(RuntimeType::External, "StartProfile").contains("external"));
    }

    #[test]
    fn start_profile_request_reads_sglang_field_names() {
        let body = br#"{"output_dir": "/tmp/p", "num_steps": 5, "start_step": "x",
                        "activities": ["CPU", 3, "GPU"], "with_stack": true,
                        "profile_by_stage": true}"#;
        let r = start_profile_request(Some(body));
        assert_eq!(r.output_dir.as_deref(), Some("/tmp/p"));
        assert_eq!((r.num_steps, r.start_step), (Some(5), None));
        assert_eq!(r.activities, vec!["CPU".to_owned(), "GPU".to_owned()]);
        assert_eq!((r.with_stack, r.record_shapes), (Some(true), None));
        assert!(r.profile_by_stage);
        assert_eq!(start_profile_request(None), StartProfileRequest::default());
    }
}

//! `/workers` routes: validate, answer at once, and leave the work to the job executor
//! (spec 1, "Worker management"). Bodies: `{error, code}` for worker errors, plain text for
//! body validation (415/400/422).

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, LOCATION};
use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::Admin;
use crate::control::jobs::{Job, SubmitError};
use crate::control::spec_body::{parse_patch, parse_spec, SpecError};
use crate::fleet::spec::WorkerSpec;
use crate::fleet::{parse_worker_url, Status, Transport, Worker, WorkerType};
use crate::http::body::RespBody;
use crate::http::error::{respond::admin_error, respond::AdminErrorBody};
use crate::http::reply;

/// A worker-endpoint error: `{error: <message>, code: <CODE>}`.
fn worker_error(status: StatusCode, code: &str, message: impl AsRef<str>) -> Response<RespBody> {
    let message = message.as_ref();
    admin_error(status, AdminErrorBody::Coded { code, message })
}

fn spec_error(err: &SpecError) -> Response<RespBody> {
    match err.code() {
        Some(code) => worker_error(err.status(), code, err.to_string()),
        None => admin_error(err.status(), AdminErrorBody::text(err.to_string())),
    }
}

fn submit_error(err: SubmitError) -> Response<RespBody> {
    match err {
        SubmitError::InProgress(id) => worker_error(
            StatusCode::CONFLICT,
            "WORKER_CREATE_IN_PROGRESS",
            format!("Worker registration for this URL is in progress; poll /workers/{id}"),
        ),
        SubmitError::QueueFull => worker_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_SERVER_ERROR",
            "Worker job queue is full; retry later",
        ),
    }
}

fn accepted(id: Uuid, message: &str) -> Response<RespBody> {
    let body = json!({ "status": "accepted", "worker_id": id, "message": message });
    reply::json(StatusCode::ACCEPTED, Bytes::from(body.to_string()))
}

/// `{worker_id}` as a UUID.
fn worker_id(raw: Option<&str>) -> Option<Uuid> {
    raw.and_then(|s| Uuid::parse_str(s).ok())
}

fn bad_id() -> Response<RespBody> {
    worker_error(
        StatusCode::BAD_REQUEST,
        "BAD_REQUEST",
        "worker_id must be a UUID",
    )
}

fn not_found(id: &Uuid) -> Response<RespBody> {
    worker_error(
        StatusCode::NOT_FOUND,
        "WORKER_NOT_FOUND",
        format!("Worker {id} not found"),
    )
}

fn content_type(headers: &HeaderMap) -> Option<&[u8]> {
    headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes)
}

/// `POST /workers`.
pub fn create(admin: &Admin, headers: &HeaderMap, body: &[u8]) -> Response<RespBody> {
    let spec = match parse_spec(content_type(headers), body) {
        Ok(spec) => spec,
        Err(err) => return spec_error(&err),
    };
    let url = spec.url.normalized.clone();
    if let Some(existing) = admin.registry.snapshot().by_url(&url) {
        return worker_error(
            StatusCode::CONFLICT,
            "WORKER_ALREADY_EXISTS",
            format!(
                "Worker with this URL already exists with id {}",
                existing.id
            ),
        );
    }
    if spec.api_key.is_none() && admin.gateway_key_set {
        tracing::warn!(worker = %url, "worker added without api_key while --api-key is set; it gets no key");
    }
    let id = Uuid::new_v4();
    let job = Job::Add {
        id,
        spec: Box::new(spec),
    };
    if let Err(err) = admin.jobs.submit(&url, job) {
        return submit_error(err);
    }
    let location = format!("/workers/{id}");
    let body = json!({
        "status": "accepted",
        "worker_id": id,
        "url": url,
        "location": location,
        "message": "Worker registration queued",
    });
    let mut resp = reply::json(StatusCode::ACCEPTED, Bytes::from(body.to_string()));
    if let Ok(value) = HeaderValue::try_from(location) {
        resp.headers_mut().insert(LOCATION, value);
    }
    resp
}

/// `GET /workers[?model=]`.
pub fn list(admin: &Admin, query: Option<&str>) -> Response<RespBody> {
    let model = model_query(query);
    let snapshot = admin.registry.snapshot();
    let mut workers = Vec::new();
    let (mut prefill, mut decode, mut regular) = (0, 0, 0);
    for worker in snapshot.all() {
        if model.as_deref().is_some_and(|m| !worker.serves(m)) {
            continue;
        }
        match worker.worker_type {
            WorkerType::Prefill => prefill += 1,
            WorkerType::Decode => decode += 1,
            WorkerType::Regular => regular += 1,
            WorkerType::Encode => {}
        }
        workers.push(worker_object(admin, worker));
    }
    let body = json!({
        "total": workers.len(),
        "workers": workers,
        "stats": {"prefill_count": prefill, "decode_count": decode, "regular_count": regular},
    });
    reply::json(StatusCode::OK, Bytes::from(body.to_string()))
}

/// `GET /workers/{worker_id}`.
pub fn get(admin: &Admin, raw_id: Option<&str>) -> Response<RespBody> {
    let Some(id) = worker_id(raw_id) else {
        return bad_id();
    };
    // The job board is read before the registry: a registration publishes its worker
    // before it leaves the board, so a worker is always found in one or the other.
    let registering = admin.jobs.registering(&id);
    if let Some(worker) = admin.registry.snapshot().by_id(&id) {
        let body = worker_object(admin, worker);
        return reply::json(StatusCode::OK, Bytes::from(body.to_string()));
    }
    match registering {
        // Registration still runs: a placeholder with the id, URL, status and job; the
        // other fields hold the spec defaults.
        Some((url, job)) => {
            let mut object = match parse_worker_url(&url) {
                Ok(parsed) => WorkerSpec::new(parsed).echo_json(),
                Err(_) => Map::new(),
            };
            object.insert("id".into(), json!(id));
            object.insert("url".into(), json!(url));
            object.insert("labels".into(), json!({}));
            object.insert("connection_mode".into(), json!(connection_mode(&url)));
            object.insert("max_connection_attempts".into(), json!(1));
            object.insert("is_healthy".into(), json!(false));
            object.insert("status".into(), json!(Status::Pending.as_str()));
            object.insert("load".into(), json!(0));
            object.insert("http2".into(), json!(false));
            if let Some(job) = job {
                object.insert("job_status".into(), job.to_json());
            }
            reply::json(
                StatusCode::OK,
                Bytes::from(Value::Object(object).to_string()),
            )
        }
        None => not_found(&id),
    }
}

/// `PATCH /workers/{worker_id}`.
pub fn patch(
    admin: &Admin,
    raw_id: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response<RespBody> {
    let Some(id) = worker_id(raw_id) else {
        return bad_id();
    };
    let patch = match parse_patch(content_type(headers), body) {
        Ok(patch) => patch,
        Err(err) => return spec_error(&err),
    };
    let Some(worker) = admin.registry.snapshot().by_id(&id).cloned() else {
        return not_found(&id);
    };
    match admin.jobs.submit(&worker.url, Job::Patch { id, patch }) {
        Ok(()) => accepted(id, "Worker update queued"),
        Err(err) => submit_error(err),
    }
}

/// `PUT /workers/{worker_id}`.
pub fn replace(
    admin: &Admin,
    raw_id: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response<RespBody> {
    let Some(id) = worker_id(raw_id) else {
        return bad_id();
    };
    // Spec 1: a replacement reruns registration under one id, which cannot stand for the
    // several rank targets a data-parallel engine registers as.
    if admin.dp_aware {
        return worker_error(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            "PUT is not available on a gateway running with --dp-aware; use PATCH, or \
             DELETE and POST the worker again",
        );
    }
    let spec = match parse_spec(content_type(headers), body) {
        Ok(spec) => spec,
        Err(err) => return spec_error(&err),
    };
    let Some(worker) = admin.registry.snapshot().by_id(&id).cloned() else {
        return not_found(&id);
    };
    if spec.url.normalized != worker.url {
        return worker_error(
            StatusCode::BAD_REQUEST,
            "BAD_REQUEST",
            "PUT cannot change the worker URL; remove the worker and add the new URL",
        );
    }
    let job = Job::Replace {
        id,
        spec: Box::new(spec),
    };
    match admin.jobs.submit(&worker.url, job) {
        Ok(()) => accepted(id, "Worker replacement queued"),
        Err(err) => submit_error(err),
    }
}

/// `DELETE /workers/{worker_id}`.
pub fn delete(admin: &Admin, raw_id: Option<&str>) -> Response<RespBody> {
    let Some(id) = worker_id(raw_id) else {
        return bad_id();
    };
    let Some(worker) = admin.registry.snapshot().by_id(&id).cloned() else {
        return not_found(&id);
    };
    match admin.jobs.submit(&worker.url, Job::Remove { id }) {
        Ok(()) => accepted(id, "Worker removal queued"),
        Err(err) => submit_error(err),
    }
}

/// `connection_mode` of a URL that is not registered yet.
fn connection_mode(url: &str) -> &'static str {
    match parse_worker_url(url).map(|u| u.transport) {
        Ok(Transport::Grpc { .. }) => "grpc",
        Ok(Transport::Zmq { .. }) => "zmq",
        _ => "http",
    }
}

/// The worker object: the echoed spec plus what the gateway knows. Never the key.
fn worker_object(admin: &Admin, worker: &Worker) -> Value {
    let mut object: Map<String, Value> = worker.spec.echo_json();
    object.insert("id".into(), json!(worker.id));
    object.insert("url".into(), json!(worker.url));
    object.insert("runtime_type".into(), json!(worker.runtime.as_str()));
    object.insert("labels".into(), json!(worker.labels));
    if let Some(model) = &worker.model_id {
        object.insert("model_id".into(), json!(model));
    }
    object.insert(
        "connection_mode".into(),
        json!(worker.connection_mode().as_str()),
    );
    object.insert("max_connection_attempts".into(), json!(1));
    object.insert("is_healthy".into(), json!(worker.is_ready()));
    object.insert("status".into(), json!(worker.status().as_str()));
    object.insert("load".into(), json!(worker.load()));
    object.insert("http2".into(), json!(worker.http2));
    let breaker = &worker.breaker;
    object.insert(
        "circuit_breaker".into(),
        json!({
            "state": breaker.state().as_str(),
            "consecutive_failures": breaker.consecutive_failures(),
            "consecutive_successes": breaker.consecutive_successes(),
        }),
    );
    if let Some(pairing) = worker.pd_pairing() {
        object.insert("pd_pairing".into(), json!(pairing));
    }
    if let Some(report) = worker.engine_load() {
        object.insert("engine_load".into(), json!(*report));
    }
    if let Some(job) = admin.jobs.status(&worker.id) {
        object.insert("job_status".into(), job.to_json());
    }
    Value::Object(object)
}

/// The `model` parameter of a query string, decoded (`?model=` filters).
pub(crate) fn model_query(query: Option<&str>) -> Option<String> {
    query.and_then(|q| {
        q.split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == "model")
            .map(|(_, v)| percent_decode(v))
    })
}

/// Decodes `%XX` escapes and `+` of a query value; malformed escapes are kept as written.
fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn query_values_are_decoded() {
        assert_eq!(percent_decode("meta-llama%2FLlama-3"), "meta-llama/Llama-3");
        assert_eq!(percent_decode("a+b"), "a b");
        assert_eq!(percent_decode("bad%zz"), "bad%zz");
        assert_eq!(percent_decode("end%2"), "end%2");
        assert_eq!(percent_decode("%41"), "A");
    }
}

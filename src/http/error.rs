//! The one place where gateway-generated errors become HTTP responses.
//!
//! Data-plane errors use the gateway envelope `{error:{type,code,message,param:null}}`,
//! where `type` is the status's reason phrase, with the code repeated in `X-GW-Error-Code`.

use std::fmt;

use bytes::Bytes;
use http::header::{HeaderValue, CONNECTION, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};
use serde::Serialize;

use super::body::RespBody;

/// The gateway error code named `code` as a static string (for metric labels), or
/// `other` for a code this build does not produce.
pub fn known_code(code: &str) -> &'static str {
    const CODES: &[&str] = &[
        "no_available_workers",
        "model_not_found",
        "admission_queue_full",
        "admission_queue_timeout",
        "multimodal_payload_too_large",
        "multimodal_inflight_budget",
        "worker_overload_protection_shed",
        "not_implemented",
        "payload_too_large",
        "worker_connect_failed",
        "worker_connection_error",
        "worker_timeout",
        "worker_transport_unsupported",
        "invalid_request_body",
        "request_timeout",
        "upstream_error",
        "invalid_request_headers",
        "unsupported_transfer_coding",
        "request_buffer_budget_full",
        "",
    ];
    CODES
        .iter()
        .find(|c| **c == code)
        .copied()
        .unwrap_or("other")
}

/// Header carrying the gateway error code.
pub const ERROR_CODE_HEADER: &str = "x-gw-error-code";

/// Every error the gateway itself answers on the data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// No routable worker for the request.
    NoAvailableWorkers,
    /// Under `--enable-igw`: no registered worker serves the requested model (spec 2).
    ModelNotFound,
    /// A route of the contract that this build does not serve yet.
    NotImplemented { route: &'static str },
    /// The request body is larger than `--max-payload-size`.
    PayloadTooLarge { limit: u64 },
    /// The worker could not be reached (refused, unreachable, connect timeout).
    UpstreamConnect,
    /// The worker dropped the connection or sent an invalid response.
    UpstreamBroken,
    /// The worker did not answer within the request timeout.
    UpstreamTimeout,
    /// The worker's transport is registered but not served by this build (gRPC, ZMQ, TLS).
    UnsupportedTransport { transport: &'static str },
    /// The client's body broke off while the gateway read it (it had to look inside).
    ClientBodyBroken,
    /// The client did not finish sending its body in time: `--request-body-timeout-secs`
    /// for a body the gateway reads, `--request-body-idle-timeout-secs` of silence on any.
    ClientBodyTimeout,
    /// The request head breaks a rule of RFC 9110/9112 that hyper leaves to the
    /// application (two `Authorization` fields, a missing or repeated `Host`).
    InvalidHeaders { reason: &'static str },
    /// The request uses a transfer coding other than `chunked` (RFC 9112 §6.1: 501).
    UnsupportedTransferCoding,
    /// Routing must read this body whole, and the bytes held for all requests together
    /// would pass `--max-buffered-request-total-bytes`.
    BufferBudgetFull,
    /// Under `--dp-aware` a request chosen for a data-parallel rank must carry a JSON
    /// object, where the gateway sets `data_parallel_rank`.
    BodyNotJsonObject,
    /// A worker answered an error status that the gateway reports in its own envelope
    /// (information routes in prefill/decode mode).
    WorkerStatus { status: StatusCode },
    /// Every admission token is taken and the admission queue is full (or disabled).
    AdmissionQueueFull,
    /// The request waited `--queue-timeout-secs` in the admission queue.
    AdmissionQueueTimeout,
    /// One request's media is larger than `--multimodal-max-inflight-bytes`.
    MultimodalTooLarge { limit: u64 },
    /// The media budget stayed full for the whole wait.
    MultimodalBudgetFull,
    /// Every candidate worker is overloaded; the client should come back after
    /// `retry_after_secs` (the load-monitor interval, when reports refresh).
    OverloadShed { retry_after_secs: u64 },
}

impl GatewayError {
    pub fn status(&self) -> StatusCode {
        match self {
            GatewayError::NoAvailableWorkers => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::ModelNotFound => StatusCode::NOT_FOUND,
            GatewayError::NotImplemented { .. } => StatusCode::NOT_IMPLEMENTED,
            GatewayError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            GatewayError::UpstreamConnect
            | GatewayError::UpstreamBroken
            | GatewayError::UnsupportedTransport { .. } => StatusCode::BAD_GATEWAY,
            GatewayError::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            GatewayError::ClientBodyBroken | GatewayError::BodyNotJsonObject => {
                StatusCode::BAD_REQUEST
            }
            GatewayError::ClientBodyTimeout => StatusCode::REQUEST_TIMEOUT,
            GatewayError::InvalidHeaders { .. } => StatusCode::BAD_REQUEST,
            GatewayError::UnsupportedTransferCoding => StatusCode::NOT_IMPLEMENTED,
            GatewayError::BufferBudgetFull => StatusCode::SERVICE_UNAVAILABLE,
            GatewayError::WorkerStatus { status } => *status,
            GatewayError::AdmissionQueueFull | GatewayError::MultimodalBudgetFull => {
                StatusCode::TOO_MANY_REQUESTS
            }
            GatewayError::AdmissionQueueTimeout | GatewayError::OverloadShed { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            GatewayError::MultimodalTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        }
    }

    /// The machine-readable code (envelope `code`, `X-GW-Error-Code`, metrics `error_code`).
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::NoAvailableWorkers => "no_available_workers",
            GatewayError::ModelNotFound => "model_not_found",
            GatewayError::NotImplemented { .. } => "not_implemented",
            GatewayError::PayloadTooLarge { .. } => "payload_too_large",
            GatewayError::UpstreamConnect => "worker_connect_failed",
            GatewayError::UpstreamBroken => "worker_connection_error",
            GatewayError::UpstreamTimeout => "worker_timeout",
            GatewayError::UnsupportedTransport { .. } => "worker_transport_unsupported",
            GatewayError::ClientBodyBroken | GatewayError::BodyNotJsonObject => {
                "invalid_request_body"
            }
            GatewayError::ClientBodyTimeout => "request_timeout",
            GatewayError::InvalidHeaders { .. } => "invalid_request_headers",
            GatewayError::UnsupportedTransferCoding => "unsupported_transfer_coding",
            GatewayError::BufferBudgetFull => "request_buffer_budget_full",
            GatewayError::WorkerStatus { .. } => "upstream_error",
            GatewayError::AdmissionQueueFull => "admission_queue_full",
            GatewayError::AdmissionQueueTimeout => "admission_queue_timeout",
            GatewayError::MultimodalTooLarge { .. } => "multimodal_payload_too_large",
            GatewayError::MultimodalBudgetFull => "multimodal_inflight_budget",
            GatewayError::OverloadShed { .. } => "worker_overload_protection_shed",
        }
    }

    /// Whether the connection must close after this answer (the request body was not read,
    /// so the stream position is unknown).
    fn closes_connection(&self) -> bool {
        matches!(
            self,
            GatewayError::PayloadTooLarge { .. }
                | GatewayError::ClientBodyBroken
                | GatewayError::ClientBodyTimeout
                | GatewayError::InvalidHeaders { .. }
                | GatewayError::UnsupportedTransferCoding
                | GatewayError::BufferBudgetFull
        )
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatewayError::NoAvailableWorkers => f.write_str("no available workers"),
            // The model is not repeated: it is the client's string, of any length.
            GatewayError::ModelNotFound => f.write_str("no worker serves the requested model"),
            GatewayError::NotImplemented { route } => {
                write!(f, "{route} is not implemented by this gateway yet")
            }
            GatewayError::PayloadTooLarge { limit } => {
                write!(
                    f,
                    "request body exceeds the maximum payload size of {limit} bytes"
                )
            }
            GatewayError::UpstreamConnect => f.write_str("could not connect to the worker"),
            GatewayError::UpstreamBroken => {
                f.write_str("the worker closed the connection or sent an invalid response")
            }
            GatewayError::UpstreamTimeout => {
                f.write_str("the worker did not answer within the request timeout")
            }
            GatewayError::UnsupportedTransport { transport } => {
                write!(f, "{transport} workers are not served by this gateway yet")
            }
            GatewayError::ClientBodyBroken => f.write_str("the request body broke off"),
            GatewayError::BodyNotJsonObject => f.write_str(
                "the request body must be a JSON object: this gateway (--dp-aware) sets \
                 data_parallel_rank in it",
            ),
            GatewayError::ClientBodyTimeout => {
                f.write_str("the request body did not arrive in time")
            }
            GatewayError::InvalidHeaders { reason } => write!(f, "invalid request headers: {reason}"),
            GatewayError::UnsupportedTransferCoding => {
                f.write_str("only the chunked transfer coding is supported")
            }
            GatewayError::BufferBudgetFull => f.write_str(
                "the gateway holds too many request bodies right now; retry later",
            ),
            GatewayError::WorkerStatus { status } => {
                write!(f, "the worker answered {}", status.as_u16())
            }
            GatewayError::AdmissionQueueFull => f.write_str(
                "too many requests in flight and the admission queue is full; retry later",
            ),
            GatewayError::AdmissionQueueTimeout => {
                f.write_str("the request waited too long in the admission queue")
            }
            GatewayError::MultimodalTooLarge { limit } => write!(
                f,
                "the request's media exceeds the in-flight media budget of {limit} bytes"
            ),
            GatewayError::MultimodalBudgetFull => {
                f.write_str("the in-flight media budget is full; retry later")
            }
            GatewayError::OverloadShed { retry_after_secs } => write!(
                f,
                "every worker that could serve this request is overloaded; retry after {retry_after_secs} s"
            ),
        }
    }
}

impl std::error::Error for GatewayError {}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    code: &'a str,
    message: &'a str,
    param: Option<()>,
}

/// Builds the enveloped error response.
pub fn error_response(err: &GatewayError) -> Response<RespBody> {
    let status = err.status();
    let message = err.to_string();
    let body = serde_json::to_vec(&Envelope {
        error: Inner {
            kind: status.canonical_reason().unwrap_or("Error"),
            code: err.code(),
            message: &message,
            param: None,
        },
    })
    .unwrap_or_default();
    let mut resp = Response::new(RespBody::full(Bytes::from(body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(ERROR_CODE_HEADER, HeaderValue::from_static(err.code()));
    if err.closes_connection() {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    if let GatewayError::OverloadShed { retry_after_secs } = err {
        headers.insert(RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    resp
}

/// A response with no body, e.g. the bare 404 for unknown paths.
pub fn empty(status: StatusCode) -> Response<RespBody> {
    let mut resp = Response::new(RespBody::empty());
    *resp.status_mut() = status;
    resp
}

/// A plain-text response: a static text (no copy) or a message built at run time.
pub fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<RespBody> {
    let mut resp = Response::new(RespBody::full(text.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// A small JSON response from a static or pre-rendered body.
pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<RespBody> {
    let mut resp = Response::new(RespBody::full(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_has_every_field() {
        let resp = error_response(&GatewayError::NoAvailableWorkers);
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()[ERROR_CODE_HEADER], "no_available_workers");
        let body = resp.into_body().into_full().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "Service Unavailable");
        assert_eq!(v["error"]["code"], "no_available_workers");
        assert!(v["error"]["param"].is_null());
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no available"));
    }

    #[test]
    fn admission_and_overload_errors_have_their_codes() {
        for (err, status, code) in [
            (
                GatewayError::AdmissionQueueFull,
                429,
                "admission_queue_full",
            ),
            (
                GatewayError::AdmissionQueueTimeout,
                503,
                "admission_queue_timeout",
            ),
            (
                GatewayError::MultimodalTooLarge { limit: 5 },
                413,
                "multimodal_payload_too_large",
            ),
            (
                GatewayError::MultimodalBudgetFull,
                429,
                "multimodal_inflight_budget",
            ),
            (
                GatewayError::InvalidHeaders { reason: "x" },
                400,
                "invalid_request_headers",
            ),
            (
                GatewayError::UnsupportedTransferCoding,
                501,
                "unsupported_transfer_coding",
            ),
            (
                GatewayError::BufferBudgetFull,
                503,
                "request_buffer_budget_full",
            ),
        ] {
            let resp = error_response(&err);
            assert_eq!(resp.status(), status);
            assert_eq!(resp.headers()[ERROR_CODE_HEADER], code);
            assert_eq!(known_code(code), code);
            assert!(!resp.headers().contains_key(RETRY_AFTER));
        }
        let resp = error_response(&GatewayError::OverloadShed {
            retry_after_secs: 10,
        });
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()[RETRY_AFTER], "10");
        assert_eq!(
            resp.headers()[ERROR_CODE_HEADER],
            "worker_overload_protection_shed"
        );
    }

    #[test]
    fn payload_too_large_closes() {
        let resp = error_response(&GatewayError::PayloadTooLarge { limit: 10 });
        assert_eq!(resp.status(), 413);
        assert_eq!(resp.headers()[CONNECTION], "close");
    }
}

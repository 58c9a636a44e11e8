//! Response constructors shared by all routes.

use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{Aborted, MockBody};

/// `Err` makes hyper drop the connection without answering (used to
/// simulate a crashing engine).
pub type HttpResult = Result<Response<MockBody>, Aborted>;

pub fn empty(status: StatusCode) -> Response<MockBody> {
    let mut response = Response::new(MockBody::empty());
    *response.status_mut() = status;
    response
}

pub fn json(status: StatusCode, value: &Value) -> Response<MockBody> {
    // Serialising a `Value` into memory cannot fail.
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    with_type(status, "application/json", MockBody::full(bytes))
}

pub fn ok_json(value: &Value) -> Response<MockBody> {
    json(StatusCode::OK, value)
}

pub fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<MockBody> {
    with_type(status, content_type, MockBody::full(body))
}

/// An OpenAI-style error: `{"error": {"message", "type", "code"}}`.
pub fn error(status: StatusCode, kind: &str, message: &str) -> Response<MockBody> {
    json(
        status,
        &json!({"error": {"message": message, "type": kind, "code": status.as_u16()}}),
    )
}

pub fn bad_request(message: &str) -> Response<MockBody> {
    error(StatusCode::BAD_REQUEST, "invalid_request_error", message)
}

pub fn not_found(path: &str) -> Response<MockBody> {
    error(
        StatusCode::NOT_FOUND,
        "not_found_error",
        &format!("no route for {path}"),
    )
}

/// The head of a server-sent events stream.
pub fn event_stream(body: MockBody) -> Response<MockBody> {
    let mut response = with_type(StatusCode::OK, "text/event-stream", body);
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn with_type(status: StatusCode, content_type: &'static str, body: MockBody) -> Response<MockBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

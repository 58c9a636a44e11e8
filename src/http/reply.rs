//! Builders of the gateway's own successful answers (probes, readiness, administration
//! results). Errors have their own builders in [`super::error`], so a reader can tell an
//! answer's kind from the module that built it.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};

use super::body::RespBody;

/// A response with no body, e.g. `200` for `/health`.
pub fn empty(status: StatusCode) -> Response<RespBody> {
    let mut resp = Response::new(RespBody::empty());
    *resp.status_mut() = status;
    resp
}

/// A plain-text response: a static text (no copy) or a message built at run time.
pub fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<RespBody> {
    with_type(status, text.into(), "text/plain; charset=utf-8")
}

/// A small JSON response from a static or pre-rendered body.
pub fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<RespBody> {
    with_type(status, body.into(), "application/json")
}

fn with_type(status: StatusCode, body: Bytes, content_type: &'static str) -> Response<RespBody> {
    let mut resp = Response::new(RespBody::full(body));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

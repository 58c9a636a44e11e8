//! Errors as HTTP responses: the gateway's own error answers in the shape the error table
//! ([`GatewayError::spec`]) names, with `X-GW-Error-Code`, `Connection: close` and
//! `Retry-After` where the row says so; and the administration refusals in theirs.

use std::borrow::Cow;

use http::header::{HeaderValue, ALLOW, CONNECTION, RETRY_AFTER};
use http::{Response, StatusCode};
use serde::Serialize;

use super::{envelope_json, ErrorCode, GatewayError, Shape, ERROR_CODE_HEADER};
use crate::http::body::RespBody;
use crate::http::reply;

/// `{error:{message,type:"invalid_request_error",code}}`: spec 2's validation answers,
/// whose `code` is a string or a number.
#[derive(Serialize)]
struct Validation<'a, C: Serialize> {
    error: ValidationInner<'a, C>,
}

#[derive(Serialize)]
struct ValidationInner<'a, C: Serialize> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    code: C,
}

/// `{error: <message>}`: the Conversations API's errors.
#[derive(Serialize)]
struct BareMessage<'a> {
    error: &'a str,
}

/// `{error:{message,type,param,code}}`: the Conversations API's structured error.
#[derive(Serialize)]
struct Structured<'a> {
    error: StructuredInner<'a>,
}

#[derive(Serialize)]
struct StructuredInner<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: &'static str,
    code: &'static str,
}

/// The `type` of spec 2's validation answers.
const INVALID_REQUEST_ERROR: &str = "invalid_request_error";

/// Builds the error response in the error's shape (the gateway envelope for most).
pub fn error_response(err: &GatewayError) -> Response<RespBody> {
    let spec = err.spec();
    let validation = |code| {
        let message = err.to_string();
        let body = match code {
            Some(code) => serde_json::to_vec(&Validation {
                error: ValidationInner {
                    message: &message,
                    kind: INVALID_REQUEST_ERROR,
                    code,
                },
            }),
            None => serde_json::to_vec(&Validation {
                error: ValidationInner {
                    message: &message,
                    kind: INVALID_REQUEST_ERROR,
                    code: spec.status.as_u16(),
                },
            }),
        };
        reply::json(spec.status, body.unwrap_or_default())
    };
    let mut resp = match spec.shape {
        Shape::Envelope => reply::json(spec.status, envelope_json(err)),
        Shape::ParseError => validation(Some(spec.code)),
        Shape::RuleBroken => validation(None),
        Shape::PlainText => reply::plain(spec.status, err.to_string()),
        Shape::BareMessage => {
            let message = err.to_string();
            json_body(spec.status, &BareMessage { error: &message })
        }
        Shape::Structured { param } => {
            let message = err.to_string();
            let body = Structured {
                error: StructuredInner {
                    message: &message,
                    kind: INVALID_REQUEST_ERROR,
                    param,
                    code: spec.code,
                },
            };
            json_body(spec.status, &body)
        }
    };
    resp.extensions_mut().insert(ErrorCode(spec.code));
    let headers = resp.headers_mut();
    headers.insert(ERROR_CODE_HEADER, HeaderValue::from_static(spec.code));
    if spec.closes {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    if let GatewayError::OverloadShed { retry_after_secs } = err {
        headers.insert(RETRY_AFTER, HeaderValue::from(*retry_after_secs));
    }
    resp
}

/// The bare 404 of a path no route knows (no body, no code: spec 3 records none of them).
pub fn not_found() -> Response<RespBody> {
    reply::empty(StatusCode::NOT_FOUND)
}

/// The 405 of a known path asked with another method, with the `Allow` field listing the
/// methods the path accepts (RFC 9110 §15.5.6: a 405 must carry it).
pub fn method_not_allowed(allow: &str) -> Response<RespBody> {
    let mut resp = reply::empty(StatusCode::METHOD_NOT_ALLOWED);
    if let Ok(value) = HeaderValue::from_str(allow) {
        resp.headers_mut().insert(ALLOW, value);
    }
    resp
}

/// The body of an administration refusal. Spec 1 ("Errors") gives these endpoints no
/// common format; each shape it names is written here, in [`admin_error`], once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminErrorBody<'a> {
    /// No body: the data plane's 401, the `--api-key` fallback's 401, the WASM routes
    /// without `--enable-wasm`.
    Empty,
    /// Plain text: control-plane authentication, unparsable worker specs, the information
    /// routes' own refusals.
    Text(Cow<'static, str>),
    /// `{"error": <message>, "code": <CODE>}`: the worker and fan-out endpoints.
    Coded { code: &'a str, message: &'a str },
    /// `{"error": {"message", "type"}}`: tokenizer get and status (404).
    Typed { kind: &'a str, message: &'a str },
    /// `{"id", "status": "failed", "message"}`: a refused tokenizer registration (409,
    /// 503), in the shape of its 202 answer.
    FailedJob { id: &'a str, message: &'a str },
    /// `{"success": false, "message"}`: tokenizer removal (404).
    Unsuccessful { message: &'a str },
    /// `{"error": <message>, "success": false}`: the parser utilities (`/parse/*`), in the
    /// shape spec 1 gives them.
    Failed { message: &'a str },
}

impl AdminErrorBody<'_> {
    /// A plain-text body: a static text (not copied) or one built at run time.
    pub fn text(text: impl Into<Cow<'static, str>>) -> AdminErrorBody<'static> {
        AdminErrorBody::Text(text.into())
    }
}

#[derive(Serialize)]
struct CodedBody<'a> {
    error: &'a str,
    code: &'a str,
}

#[derive(Serialize)]
struct TypedBody<'a> {
    error: TypedError<'a>,
}

#[derive(Serialize)]
struct TypedError<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
}

#[derive(Serialize)]
struct FailedJobBody<'a> {
    id: &'a str,
    status: &'static str,
    message: &'a str,
}

#[derive(Serialize)]
struct UnsuccessfulBody<'a> {
    success: bool,
    message: &'a str,
}

#[derive(Serialize)]
struct FailedBody<'a> {
    error: &'a str,
    success: bool,
}

/// An administration endpoint's refusal with `status` and one of spec 1's body shapes.
pub fn admin_error(status: StatusCode, body: AdminErrorBody<'_>) -> Response<RespBody> {
    match body {
        AdminErrorBody::Empty => reply::empty(status),
        AdminErrorBody::Text(Cow::Borrowed(text)) => reply::plain(status, text),
        AdminErrorBody::Text(Cow::Owned(text)) => reply::plain(status, text),
        AdminErrorBody::Coded { code, message } => json_body(
            status,
            &CodedBody {
                error: message,
                code,
            },
        ),
        AdminErrorBody::Typed { kind, message } => json_body(
            status,
            &TypedBody {
                error: TypedError { message, kind },
            },
        ),
        AdminErrorBody::FailedJob { id, message } => json_body(
            status,
            &FailedJobBody {
                id,
                status: "failed",
                message,
            },
        ),
        AdminErrorBody::Unsuccessful { message } => json_body(
            status,
            &UnsuccessfulBody {
                success: false,
                message,
            },
        ),
        AdminErrorBody::Failed { message } => json_body(
            status,
            &FailedBody {
                error: message,
                success: false,
            },
        ),
    }
}

/// A JSON refusal. Serialising a few strings cannot fail; should it, the status still
/// goes out.
fn json_body(status: StatusCode, body: &impl Serialize) -> Response<RespBody> {
    match serde_json::to_vec(body) {
        Ok(json) => reply::json(status, json),
        Err(_) => reply::empty(status),
    }
}

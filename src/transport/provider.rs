//! The provider backend (`--backend anthropic`): each worker is Anthropic's Messages API
//! itself (or a stand-in), reached over the [`http`](super::http) transport.
//!
//! Three things differ from an engine (spec 2, "Provider backend"):
//!
//! - **route**: only `POST /v1/messages` is served ([`serves`]); the request keeps its
//!   path and query, so it reaches `<worker URL>/v1/messages` (the worker URL's own path,
//!   `/v1` or a trailing slash, is dropped at registration, as for every worker);
//! - **headers**: exactly the client's `Authorization`, `x-api-key`, `anthropic-version`
//!   and `anthropic-beta` (or their neutral `vendor-` spellings) go out, with the JSON
//!   `Content-Type`; the gateway adds no key of its own ([`to_provider`]);
//! - **answer**: a stream or an error status is relayed as it comes; a successful JSON body
//!   is read, checked against the Messages response schema and written anew
//!   ([`message::reserialize`]), or the client gets 502 `parse_error`.
//!
//! A request with `X-GW-MCP: enabled` and an `mcp_toolset` goes through the gateway's MCP
//! tool loop instead (`crate::api::messages::tools`), which comes here for its rounds.

pub mod message;

use std::borrow::Cow;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Uri};
use http_body_util::BodyExt;

use super::http::UpstreamClient;
use super::{Answer, Attempt, SendError};
use crate::fleet::Worker;
use crate::http::body::terminal::gateway_error;
use crate::http::body::RespBody;
use crate::http::error::GatewayError;
use crate::http::route::Route;
use crate::transport::headers::X_API_KEY;
use crate::transport::is_sse;

/// The one route of a provider backend.
pub const MESSAGES_PATH: &str = "/v1/messages";
/// How a refusal names this backend.
const BACKEND_NAME: &str = "Anthropic provider";

/// A Messages response larger than this is not one (they are a few KiB; the cap keeps a
/// misbehaving provider from filling the gateway's memory).
const MAX_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// The client headers a provider receives besides `x-api-key` (already filtered by the
/// worker allowlist of [`crate::transport::headers`]).
const FORWARDED: [HeaderName; 5] = [
    AUTHORIZATION,
    HeaderName::from_static("anthropic-version"),
    HeaderName::from_static("anthropic-beta"),
    HeaderName::from_static("vendor-version"),
    HeaderName::from_static("vendor-beta"),
];

/// Whether the provider backend serves the route at `path`: `/v1/messages` only. Every
/// other inference route, count_tokens included, is a plain-text 501 (spec 2).
pub fn serves(route: Route) -> Result<(), GatewayError> {
    if route == Route::Messages {
        return Ok(());
    }
    Err(GatewayError::NotServedByBackend {
        route: route.template(),
        backend: BACKEND_NAME,
    })
}

/// The headers the provider receives: from `allowed` (the worker allowlist's output) the
/// four spec 2 names and `Content-Type`, and the client's `x-api-key` kept in `client`.
pub fn to_provider(allowed: &HeaderMap, client: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(8);
    for name in FORWARDED.iter().chain([&CONTENT_TYPE]) {
        for value in allowed.get_all(name) {
            out.append(name.clone(), value.clone());
        }
    }
    if let Some(key) = client.get(X_API_KEY) {
        out.insert(X_API_KEY, key.clone());
    }
    out
}

/// Carries `attempt` to the provider `worker` over `http` and answers as the module says.
pub async fn send(
    http: &UpstreamClient,
    worker: &Worker,
    mut attempt: Attempt<'_>,
) -> Result<Answer, SendError> {
    attempt.headers = Cow::Owned(to_provider(&attempt.headers, &attempt.head.headers));
    let answer = http.relay(worker, attempt).await?;
    if !answer.status().is_success() || is_sse(&answer) {
        return Ok(answer);
    }
    let (mut head, body) = answer.into_parts();
    let bytes = read_whole(body).await?;
    // A provider that answered 2xx did the work (and billed it): a body that does not
    // parse is the client's 502, never a reason to ask again.
    let message = message::reserialize(&bytes)
        .map_err(|message| SendError::Refused(GatewayError::ProviderParse { message }))?;
    head.headers.remove(CONTENT_LENGTH);
    head.headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(Answer::from_parts(
        head,
        RespBody::full(Bytes::from(message)),
    ))
}

/// `<worker URL>/v1/messages`, where the loop sends each round.
pub fn messages_uri(worker: &Worker) -> Result<Uri, SendError> {
    format!("{}{MESSAGES_PATH}", worker.url.trim_end_matches('/'))
        .parse()
        .map_err(|_| SendError::Exchange(GatewayError::UpstreamConnect))
}

/// The whole body of a relayed answer, within the relay's own deadline and stall limits
/// and [`MAX_MESSAGE_BYTES`]. A body that breaks off is the worker's failure, before
/// anything reached the client: retried and counted like any failed exchange.
async fn read_whole(body: RespBody) -> Result<Bytes, SendError> {
    let mut body = std::pin::pin!(body);
    let mut whole = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| match gateway_error(&err) {
            GatewayError::UpstreamTimeout => SendError::Timeout,
            other => SendError::Exchange(other),
        })?;
        if let Ok(data) = frame.into_data() {
            if whole.len() + data.len() > MAX_MESSAGE_BYTES {
                return Err(SendError::Refused(GatewayError::ProviderParse {
                    message: format!("the body is larger than {MAX_MESSAGE_BYTES} bytes"),
                }));
            }
            whole.extend_from_slice(&data);
        }
    }
    Ok(whole.freeze())
}

/// A provider's whole answer body, up to `max` bytes: a body that breaks off is
/// `UpstreamBroken`, a larger one the client's 502 `parse_error`.
pub async fn read_incoming(
    mut body: hyper::body::Incoming,
    max: usize,
) -> Result<Bytes, GatewayError> {
    let mut whole = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| GatewayError::UpstreamBroken)?;
        if let Ok(data) = frame.into_data() {
            if whole.len() + data.len() > max {
                return Err(GatewayError::ProviderParse {
                    message: format!("the body is larger than {max} bytes"),
                });
            }
            whole.extend_from_slice(&data);
        }
    }
    Ok(whole.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn only_messages_is_served() {
        assert!(serves(Route::Messages).is_ok());
        for (route, path) in [
            (Route::MessagesCountTokens, "/v1/messages/count_tokens"),
            (Route::ChatCompletions, "/v1/chat/completions"),
            (Route::Generate, "/generate"),
            (Route::ResponsesCreate, "/v1/responses"),
        ] {
            assert_eq!(
                serves(route),
                Err(GatewayError::NotServedByBackend {
                    route: path,
                    backend: BACKEND_NAME
                })
            );
        }
    }

    #[test]
    fn exactly_the_four_headers_and_the_body_type() {
        // What the worker allowlist let through, and what stayed in the client's map.
        let allowed = map(&[
            ("authorization", "Bearer gw"),
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "a"),
            ("anthropic-beta", "b"),
            ("vendor-beta", "v"),
            ("x-request-id", "r"),
            ("traceparent", "t"),
            ("x-gw-routing-key", "k"),
            ("content-type", "application/json"),
        ]);
        let client = map(&[("x-api-key", "sk-client")]);
        let out = to_provider(&allowed, &client);
        let names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        assert_eq!(
            names,
            [
                "authorization",
                "anthropic-version",
                "anthropic-beta",
                "vendor-beta",
                "content-type",
                "x-api-key"
            ]
        );
        assert_eq!(out.get_all("anthropic-beta").iter().count(), 2);
        assert_eq!(out[X_API_KEY], "sk-client");
        assert_eq!(out[AUTHORIZATION], "Bearer gw");
        // No key of the gateway's own when the client sends none.
        let bare = to_provider(&map(&[]), &map(&[]));
        assert!(bare.is_empty());
    }
}

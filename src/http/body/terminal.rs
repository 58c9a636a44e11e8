//! The last event of a relayed SSE stream that broke off.
//!
//! A worker that stalls or dies in the middle of a stream, or a request deadline that
//! passes during one, would leave the client with a truncated body that most SDKs read as
//! a short answer. Instead the relay ends such a stream with one well-formed error event in
//! the route's dialect, then ends the body cleanly. The codes and messages are the gateway
//! envelope's ([`GatewayError`], `super::super::error`), so a client sees the same
//! `worker_timeout` or `worker_connection_error` in a stream as in an error response.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use super::{BoxError, DeadlineExceeded, Stalled};
use crate::http::error::{envelope_json, GatewayError};
use crate::sse::write;

/// How a route's streams speak, which decides the shape of their terminal error event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// Chat completions, completions, generate: `data: {"error": <envelope>}`.
    OpenAi,
    /// `/v1/messages`: `event: error` with `{"type":"error","error":{...}}`.
    Messages,
    /// `/v1/responses`: `event: response.failed`.
    Responses,
}

/// Counts a relayed stream that broke off (`streaming_error` of the router errors);
/// implemented above this layer, by what knows the request's route labels.
pub trait CountFailure: Send + Sync + 'static {
    fn count(&self);
}

/// What rides on a relayed SSE body so that a failure ends it with a terminal event: the
/// dialect, the counter to tell, and (Responses only) the sequence number the next event
/// would carry.
pub struct Terminal {
    dialect: Dialect,
    failures: Arc<dyn CountFailure>,
    /// One past the highest `sequence_number` seen in the stream so far.
    next_sequence: u64,
}

impl Terminal {
    pub fn new(dialect: Dialect, failures: Arc<dyn CountFailure>) -> Terminal {
        Terminal {
            dialect,
            failures,
            next_sequence: 0,
        }
    }

    /// Watches a frame the client is given. Only Responses events carry a sequence number
    /// the terminal event must continue; the other dialects pay one comparison.
    pub(super) fn saw(&mut self, data: &[u8]) {
        if self.dialect == Dialect::Responses {
            if let Some(n) = last_sequence_number(data) {
                self.next_sequence = n.saturating_add(1);
            }
        }
    }

    /// Counts the failure `err` of the relay and renders the event that ends the stream.
    pub(super) fn broke_off(&self, err: &BoxError) -> Bytes {
        self.failures.count();
        render(self.dialect, &gateway_error(err), self.next_sequence)
    }
}

/// What the client is told a relay failure was: a gateway error a producer failed with, as
/// it is; a stall or the deadline is the worker
/// being too slow (`worker_timeout`); anything else the worker's connection breaking.
pub fn gateway_error(err: &BoxError) -> GatewayError {
    if let Some(own) = err.downcast_ref::<GatewayError>() {
        own.clone()
    } else if let Some(stalled) = err.downcast_ref::<Stalled>() {
        GatewayError::UpstreamStalled {
            secs: stalled.after.as_secs(),
        }
    } else if err.downcast_ref::<DeadlineExceeded>().is_some() {
        GatewayError::UpstreamTimeout
    } else {
        GatewayError::UpstreamBroken
    }
}

/// The terminal event of `dialect` for `err`; `sequence` is the Responses event's
/// `sequence_number`.
pub fn render(dialect: Dialect, err: &GatewayError, sequence: u64) -> Bytes {
    let mut event = Vec::with_capacity(256);
    match dialect {
        Dialect::OpenAi => write::put_raw(&mut event, None, &envelope_json(err)),
        Dialect::Messages => {
            let message = err.to_string();
            let payload = MessagesError {
                kind: "error",
                error: MessagesDetail {
                    kind: "api_error",
                    code: err.code(),
                    message: &message,
                },
            };
            write::put(&mut event, Some("error"), &payload);
        }
        Dialect::Responses => {
            let message = err.to_string();
            let payload = ResponseFailed {
                kind: "response.failed",
                sequence_number: sequence,
                response: FailedResponse {
                    object: "response",
                    status: "failed",
                    error: FailedError {
                        code: err.code(),
                        message: &message,
                    },
                },
            };
            write::put(&mut event, Some("response.failed"), &payload);
        }
    }
    Bytes::from(event)
}

/// `{"type":"error","error":{"type":"api_error","code":...,"message":...}}` (spec 2,
/// Messages stream: `error` event; the gateway code rides along as `code`).
#[derive(Serialize)]
struct MessagesError<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: MessagesDetail<'a>,
}

#[derive(Serialize)]
struct MessagesDetail<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'static str,
    message: &'a str,
}

/// `{"type":"response.failed","sequence_number":N,"response":{"object":"response",
/// "status":"failed","error":{"code":...,"message":...}}}` (spec 2, terminal events).
#[derive(Serialize)]
struct ResponseFailed<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    sequence_number: u64,
    response: FailedResponse<'a>,
}

#[derive(Serialize)]
struct FailedResponse<'a> {
    object: &'static str,
    status: &'static str,
    error: FailedError<'a>,
}

#[derive(Serialize)]
struct FailedError<'a> {
    code: &'static str,
    message: &'a str,
}

const SEQUENCE_KEY: &[u8] = b"\"sequence_number\":";

/// The value of the last `"sequence_number":` in `data`, if its digits are in this frame.
/// A key split across two frames is missed, and the next event's number makes up for it.
fn last_sequence_number(data: &[u8]) -> Option<u64> {
    let at = memchr::memmem::rfind(data, SEQUENCE_KEY)?;
    let rest = &data[at + SEQUENCE_KEY.len()..];
    let digits = rest.trim_ascii_start();
    let end = digits
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn json_of(event: &[u8], prefix: &str) -> serde_json::Value {
        let text = std::str::from_utf8(event).expect("utf-8");
        let payload = text
            .strip_prefix(prefix)
            .and_then(|t| t.strip_suffix("\n\n"))
            .expect("the event's framing");
        assert!(!payload.contains('\n'), "one data line: {payload}");
        serde_json::from_str(payload).expect("JSON")
    }

    #[test]
    fn openai_event_is_the_gateway_envelope() {
        let event = render(Dialect::OpenAi, &GatewayError::UpstreamBroken, 0);
        let v = json_of(&event, "data: ");
        assert_eq!(v["error"]["type"], "Bad Gateway");
        assert_eq!(v["error"]["code"], "worker_connection_error");
        assert!(v["error"]["param"].is_null());
        assert_eq!(
            v["error"]["message"],
            GatewayError::UpstreamBroken.to_string()
        );
    }

    #[test]
    fn messages_event_is_an_error_event() {
        let event = render(Dialect::Messages, &GatewayError::UpstreamTimeout, 0);
        let v = json_of(&event, "event: error\ndata: ");
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "api_error");
        assert_eq!(v["error"]["code"], "worker_timeout");
        assert!(v["error"]["message"].as_str().is_some());
    }

    #[test]
    fn responses_event_is_a_failed_response_continuing_the_sequence() {
        let stalled = GatewayError::UpstreamStalled { secs: 3 };
        let event = render(Dialect::Responses, &stalled, 7);
        let v = json_of(&event, "event: response.failed\ndata: ");
        assert_eq!(v["type"], "response.failed");
        assert_eq!(v["sequence_number"], 7);
        assert_eq!(v["response"]["object"], "response");
        assert_eq!(v["response"]["status"], "failed");
        assert_eq!(v["response"]["error"]["code"], "worker_timeout");
        assert!(v["response"]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("3 s")));
    }

    #[test]
    fn relay_failures_map_to_their_gateway_errors() {
        let stalled: BoxError = Box::new(Stalled {
            after: Duration::from_secs(5),
        });
        assert_eq!(
            gateway_error(&stalled),
            GatewayError::UpstreamStalled { secs: 5 }
        );
        let late: BoxError = Box::new(DeadlineExceeded);
        assert_eq!(gateway_error(&late), GatewayError::UpstreamTimeout);
        let broken: BoxError = "connection reset".into();
        assert_eq!(gateway_error(&broken), GatewayError::UpstreamBroken);
        for err in [stalled, late] {
            assert_eq!(gateway_error(&err).code(), "worker_timeout");
        }
    }

    #[test]
    fn sequence_numbers_are_read_from_the_last_event_of_a_frame() {
        let frame = b"event: response.output_text.delta\ndata: {\"type\":\"x\",\"sequence_number\":4}\n\n\
                      event: response.output_text.delta\ndata: {\"sequence_number\": 12,\"delta\":\"a\"}\n\n";
        assert_eq!(last_sequence_number(frame), Some(12));
        assert_eq!(last_sequence_number(b"data: {\"sequence_number\":"), None);
        assert_eq!(last_sequence_number(b"data: [DONE]\n\n"), None);
    }

    struct Nobody;

    impl CountFailure for Nobody {
        fn count(&self) {}
    }

    #[test]
    fn only_responses_streams_track_the_sequence() {
        let frame = b"data: {\"sequence_number\":9}\n\n";
        let mut responses = Terminal::new(Dialect::Responses, Arc::new(Nobody));
        responses.saw(frame);
        assert_eq!(responses.next_sequence, 10);
        responses.saw(b"data: {\"delta\":\"no number here\"}\n\n");
        assert_eq!(responses.next_sequence, 10);
        let mut chat = Terminal::new(Dialect::OpenAi, Arc::new(Nobody));
        chat.saw(frame);
        assert_eq!(chat.next_sequence, 0);
    }
}

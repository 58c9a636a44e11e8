//! JSON-RPC 2.0 as MCP's Streamable HTTP carries it: a request body out, and the answer
//! picked from a JSON body or from the events of a stream.

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::McpError;
use crate::sse::SseParser;

/// Largest single event of an answer stream.
const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

#[derive(Serialize)]
struct Request<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    method: &'a str,
    params: &'a Value,
}

/// The body of a request (`id` set) or a notification (`id` none).
pub fn encode(id: Option<u64>, method: &str, params: &Value) -> Bytes {
    let request = Request {
        jsonrpc: "2.0",
        id,
        method,
        params,
    };
    Bytes::from(serde_json::to_vec(&request).unwrap_or_default())
}

/// Reads the answer to request `id` from streamed event bytes, fed as they arrive.
pub struct EventAnswer {
    parser: SseParser,
    id: u64,
    found: Option<Result<Value, McpError>>,
}

impl EventAnswer {
    pub fn new(id: u64) -> EventAnswer {
        EventAnswer {
            parser: SseParser::new(MAX_EVENT_BYTES),
            id,
            found: None,
        }
    }

    /// Feeds a chunk; `Some` once the answer has arrived (later events are not read).
    pub fn feed(&mut self, chunk: &[u8]) -> Option<Result<Value, McpError>> {
        let id = self.id;
        let found = &mut self.found;
        let fed = self.parser.feed(chunk, |frame| {
            if found.is_some() {
                return;
            }
            // Other messages (server notifications, progress) are not the answer.
            if let Ok(message) = serde_json::from_slice::<Value>(frame.data) {
                if answers(&message, id) {
                    *found = Some(outcome(message));
                }
            }
        });
        if let Err(err) = fed {
            return Some(Err(McpError::Protocol(err.to_string())));
        }
        self.found.take()
    }
}

/// The answer to request `id` in a whole JSON body: one message, or a batch holding it.
pub fn from_json(body: &[u8], id: u64) -> Result<Value, McpError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| McpError::Protocol(format!("answer is not JSON: {err}")))?;
    let message = match value {
        Value::Array(batch) => batch.into_iter().find(|m| answers(m, id)),
        single if answers(&single, id) => Some(single),
        _ => None,
    };
    message
        .map(outcome)
        .unwrap_or_else(|| Err(McpError::Protocol("no answer to the request".into())))
}

/// Whether `message` answers request `id`.
fn answers(message: &Value, id: u64) -> bool {
    message.get("id").and_then(Value::as_u64) == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// The result of an answer, or its error.
fn outcome(mut message: Value) -> Result<Value, McpError> {
    if let Some(error) = message.get("error") {
        return Err(McpError::Rpc {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .chars()
                .take(512)
                .collect(),
        });
    }
    Ok(message
        .get_mut("result")
        .map(Value::take)
        .unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_and_notifications() {
        let params = json!({"name": "x"});
        let body: Value = serde_json::from_slice(&encode(Some(3), "tools/call", &params)).unwrap();
        assert_eq!(
            body,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x"}})
        );
        let note: Value =
            serde_json::from_slice(&encode(None, "notifications/initialized", &json!({}))).unwrap();
        assert!(note.get("id").is_none());
    }

    #[test]
    fn json_answers() {
        let ok = br#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#;
        assert_eq!(from_json(ok, 2).unwrap(), json!({"tools": []}));
        assert!(matches!(from_json(ok, 3), Err(McpError::Protocol(_))));
        let err = br#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no such method"}}"#;
        assert_eq!(
            from_json(err, 2),
            Err(McpError::Rpc {
                code: -32601,
                message: "no such method".into()
            })
        );
        let batch = br#"[{"jsonrpc":"2.0","method":"notifications/progress"},{"jsonrpc":"2.0","id":2,"result":7}]"#;
        assert_eq!(from_json(batch, 2).unwrap(), json!(7));
        assert!(from_json(b"<html>", 2).is_err());
    }

    #[test]
    fn event_answers_split_anywhere() {
        let stream = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n\
                      event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"ok\":true}}\r\n\r\n\
                      data: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"late\":true}}\n\n";
        for cut in 0..stream.len() {
            let mut answer = EventAnswer::new(5);
            let (a, b) = stream.as_bytes().split_at(cut);
            let got = answer.feed(a).or_else(|| answer.feed(b));
            assert_eq!(got, Some(Ok(json!({"ok": true}))), "cut at {cut}");
        }
        let mut none = EventAnswer::new(9);
        assert_eq!(none.feed(stream.as_bytes()), None);
    }
}

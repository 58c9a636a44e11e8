//! Server-sent events framing. Each event becomes one body frame so the
//! client sees it as soon as its simulated delay has elapsed.

use bytes::Bytes;
use serde_json::Value;

/// `data: <json>\n\n` (OpenAI and SGLang style).
pub fn data(payload: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"data: ");
    write_json(&mut out, payload);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// `event: <name>\ndata: <json>\n\n` (Anthropic and Responses style).
pub fn named(name: &str, payload: &Value) -> Bytes {
    let mut out = Vec::with_capacity(128 + name.len());
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    write_json(&mut out, payload);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The OpenAI end-of-stream sentinel.
pub fn done() -> Bytes {
    Bytes::from_static(b"data: [DONE]\n\n")
}

fn write_json(out: &mut Vec<u8>, payload: &Value) {
    // Serialising a `Value` into a Vec cannot fail (all keys are strings,
    // writes to memory do not error); fall back to `null` regardless.
    if serde_json::to_writer(&mut *out, payload).is_err() {
        out.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn data_event() {
        assert_eq!(&data(&json!({"a": 1}))[..], b"data: {\"a\":1}\n\n");
    }

    #[test]
    fn named_event() {
        assert_eq!(
            &named("message_stop", &json!({"type": "message_stop"}))[..],
            b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
    }

    #[test]
    fn json_newlines_are_escaped_so_events_stay_single_line() {
        let event = data(&json!({"text": "a\nb"}));
        let text = std::str::from_utf8(&event).unwrap();
        assert_eq!(text.matches('\n').count(), 2);
        assert!(text.ends_with("\n\n"));
    }

    #[test]
    fn done_event() {
        assert_eq!(&done()[..], b"data: [DONE]\n\n");
    }
}

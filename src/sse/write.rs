//! Writing server-sent events: the one place the gateway frames an event it makes itself
//! (OpenAI's `data:`-only chunks, Messages' and Responses' named events, the terminal
//! error events), so every stream it writes ends its lines and events the same way.

use bytes::Bytes;
use serde::Serialize;

/// The terminator of every OpenAI stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Appends one event to `out`: an `event:` line when `name` is given, a `data:` line
/// holding `data` as JSON, and the blank line that ends the event.
pub fn put(out: &mut Vec<u8>, name: Option<&str>, data: &impl Serialize) {
    open(out, name);
    let start = out.len();
    // Serialising into memory fails only for values JSON cannot hold (a map with keys that
    // are not strings); the event then still ends well formed, with an empty object.
    if serde_json::to_writer(&mut *out, data).is_err() {
        out.truncate(start);
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

/// Appends one event whose data is JSON text already.
pub fn put_raw(out: &mut Vec<u8>, name: Option<&str>, json: &[u8]) {
    open(out, name);
    out.extend_from_slice(json);
    out.extend_from_slice(b"\n\n");
}

/// One event as a frame of its own, in a buffer of `capacity` to start with.
pub fn event(capacity: usize, name: Option<&str>, data: &impl Serialize) -> Bytes {
    let mut out = Vec::with_capacity(capacity);
    put(&mut out, name, data);
    Bytes::from(out)
}

fn open(out: &mut Vec<u8>, name: Option<&str>) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::SseParser;

    #[test]
    fn events_read_back_as_written() {
        let mut out = Vec::new();
        put(
            &mut out,
            Some("message_start"),
            &serde_json::json!({"a": "x\ny"}),
        );
        put(&mut out, None, &serde_json::json!({"b": 1}));
        put_raw(&mut out, Some("error"), b"{\"c\":2}");
        out.extend_from_slice(DONE);
        let mut seen = Vec::new();
        let mut parser = SseParser::new(1 << 16);
        parser
            .feed(&out, |frame| {
                seen.push((
                    String::from_utf8_lossy(frame.event).into_owned(),
                    String::from_utf8_lossy(frame.data).into_owned(),
                ))
            })
            .unwrap();
        assert_eq!(
            seen,
            [
                ("message_start".into(), r#"{"a":"x\ny"}"#.into()),
                (String::new(), r#"{"b":1}"#.into()),
                ("error".into(), r#"{"c":2}"#.into()),
                (String::new(), "[DONE]".into()),
            ]
        );
    }

    #[test]
    fn a_value_json_cannot_hold_still_ends_the_event() {
        let mut keyed = std::collections::BTreeMap::new();
        keyed.insert((1, 2), 3);
        let frame = event(16, Some("x"), &keyed);
        assert_eq!(&frame[..], b"event: x\ndata: {}\n\n");
    }
}

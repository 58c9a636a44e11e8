//! Arbitrary bytes through `proxy::peek`: no panic, the prompt text within the cap, borrowed
//! text lying inside the body, each field read alone equal to the fields read together,
//! nothing found in a body serde_json's skip refuses, and on a body serde_json parses into an
//! object, `model`, `stream` and `rid` equal to what that full parse gives (both keep the
//! last of duplicate keys).

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde_json::{Map, Value};
use tollgate::pipeline::peek::{peek, Peeked, Wants, MAX_TEXT_BYTES};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let all = peek(data, Wants::ALL);
    if let Some(text) = &all.text {
        assert!(text.len() <= MAX_TEXT_BYTES, "text of {} bytes", text.len());
        if let Cow::Borrowed(text) = text {
            let body = data.as_ptr_range();
            let text = text.as_bytes().as_ptr_range();
            assert!(body.start <= text.start && text.end <= body.end);
        }
    }

    let none = Wants::default();
    let alone = |wants| peek(data, wants);
    assert_eq!(
        alone(Wants {
            model: true,
            ..none
        })
        .model,
        all.model
    );
    assert_eq!(
        alone(Wants {
            stream: true,
            ..none
        })
        .stream,
        all.stream
    );
    assert_eq!(alone(Wants { rid: true, ..none }).rid, all.rid);
    assert_eq!(alone(Wants { text: true, ..none }).text, all.text);

    if all != Peeked::default() {
        assert!(std::str::from_utf8(data).is_ok());
        assert!(serde_json::from_slice::<IgnoredAny>(data).is_ok());
    }
    if let Ok(full) = serde_json::from_slice::<Map<String, Value>>(data) {
        assert_eq!(
            all.model.as_deref(),
            full.get("model").and_then(Value::as_str)
        );
        assert_eq!(all.rid.as_deref(), full.get("rid").and_then(Value::as_str));
        assert_eq!(all.stream, full.get("stream") == Some(&Value::Bool(true)));
    }
}

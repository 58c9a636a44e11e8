//! Arbitrary bytes through `proxy::peek`: no panic, the prompt text within the cap, borrowed
//! text lying inside the body, the fields read alone equal to the fields read together, and
//! on a body serde_json parses into an object, `model`, `stream` and `rid` equal to what
//! that full parse gives (both keep the last of duplicate keys).

#![no_main]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use tollgate::proxy::peek::{peek, Wants, MAX_TEXT_BYTES};

fuzz_target!(|data: &[u8]| {
    let all = peek(data, Wants::ALL);
    if let Some(text) = &all.text {
        assert!(text.len() <= MAX_TEXT_BYTES, "text of {} bytes", text.len());
        if let Cow::Borrowed(text) = text {
            let body = data.as_ptr_range();
            let text = text.as_bytes().as_ptr_range();
            assert!(body.start <= text.start && text.end <= body.end);
        }
    }

    let model = peek(
        data,
        Wants {
            model: true,
            ..Wants::default()
        },
    );
    assert_eq!(model.model, all.model);
    let text = peek(
        data,
        Wants {
            text: true,
            ..Wants::default()
        },
    );
    assert_eq!(text.text, all.text);

    if let Ok(full) = serde_json::from_slice::<Map<String, Value>>(data) {
        assert_eq!(all.model.as_deref(), full.get("model").and_then(Value::as_str));
        assert_eq!(all.rid.as_deref(), full.get("rid").and_then(Value::as_str));
        assert_eq!(all.stream, full.get("stream") == Some(&Value::Bool(true)));
    }
});

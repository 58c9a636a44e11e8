//! Arbitrary bodies through the worker spec and PATCH parsers: no panic, statuses match
//! the error kind, messages are one line, and an accepted spec's echo parses back to the
//! same echo (so what `GET /workers` shows could be re-submitted as a spec). The first
//! input byte picks the Content-Type; the rest is the body.

use tollgate::control::spec_body::{check_for_registration, parse_patch, parse_spec, SpecError};

const CONTENT_TYPES: [Option<&[u8]>; 5] = [
    Some(b"application/json"),
    Some(b"application/json; charset=utf-8"),
    Some(b"APPLICATION/JSON"),
    Some(b"text/plain"),
    None,
];

fn check_error(err: &SpecError) {
    let status = err.status().as_u16();
    match err {
        SpecError::UnsupportedMediaType => assert_eq!(status, 415),
        SpecError::Malformed(_) => assert_eq!(status, 400),
        SpecError::Unprocessable(_) => assert_eq!(status, 422),
        SpecError::BadRequest(_) => {
            assert_eq!(status, 400);
            assert_eq!(err.code(), Some("BAD_REQUEST"));
        }
    }
    let message = err.to_string();
    assert!(!message.is_empty());
    assert!(!message.contains('\n'), "{message:?}");
}

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let (content_type, body) = match data.split_first() {
        Some((&selector, rest)) => (CONTENT_TYPES[selector as usize % CONTENT_TYPES.len()], rest),
        None => (CONTENT_TYPES[0], data),
    };

    match parse_spec(content_type, body) {
        Ok(mut spec) => {
            let _ = check_for_registration(&spec);
            let _ = spec.model_id();
            if let Some(key) = &spec.api_key {
                assert!(!key.expose().is_empty());
                assert_eq!(format!("{key:?}"), "<redacted>");
            }
            let echo = spec.echo_json();
            assert!(!echo.contains_key("api_key"));
            let text = serde_json::Value::Object(echo.clone()).to_string();
            match parse_spec(Some(b"application/json"), text.as_bytes()) {
                Ok(again) => assert_eq!(again.echo_json(), echo, "{text}"),
                Err(e) => panic!("echo {text} does not parse back: {e}"),
            }
            if let Ok(patch) = parse_patch(content_type, body) {
                spec.apply_patch(patch);
            }
        }
        Err(err) => check_error(&err),
    }
    if let Err(err) = parse_patch(content_type, body) {
        check_error(&err);
    }
}

//! The `--dp-aware` body rewrite on arbitrary bytes. Checks: no panic; a body is pinned
//! exactly when it is UTF-8 and a JSON object (values checked as leniently as the rewrite
//! does: syntax, not lone surrogate escapes); the result is again an object, carrying the rank
//! asked for; and where the input parses strictly, every other field is unchanged.
//!
//! Input layout: the first byte is the rank, the rest the body.

use std::collections::HashMap;

use serde::de::IgnoredAny;
use serde_json::{Map, Value};
use tollgate::fleet::dp::{pin_rank, RANK_FIELD};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&rank, body)) = data.split_first() else {
        return;
    };
    let rank = u32::from(rank);
    let object = std::str::from_utf8(body).is_ok()
        && serde_json::from_slice::<HashMap<String, IgnoredAny>>(body).is_ok();
    match pin_rank(body, rank) {
        Ok(out) => {
            assert!(object, "a body that is not a JSON object was pinned");
            let fields: HashMap<String, IgnoredAny> =
                serde_json::from_slice(&out).expect("a pinned body is a JSON object");
            assert!(fields.contains_key(RANK_FIELD));
            if let Ok(mut input) = serde_json::from_slice::<Map<String, Value>>(body) {
                let out: Map<String, Value> =
                    serde_json::from_slice(&out).expect("strict input, strict output");
                input.insert(RANK_FIELD.to_owned(), Value::from(rank));
                assert_eq!(out, input, "only the rank changes");
            }
        }
        Err(_) => assert!(!object, "a JSON object was refused"),
    }
}

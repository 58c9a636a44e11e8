//! The Messages check and alias rename (`api::messages::check::check`) on arbitrary bytes.
//! Checks: no panic; a body that is not JSON is refused; a body that passes is sent on
//! byte for byte, or, when its model names the alias, with only the model changed (it parses
//! to the same value with the canonical id, so numbers and unmodelled fields are untouched).
//!
//! Input layout: the first byte picks the route (even: `/v1/messages`, odd: count_tokens),
//! the rest is the body.

use bytes::Bytes;
use serde_json::Value;
use tollgate::api::messages::check::{check as validate, MessagesRoute};

const ALIAS: &str = "fast";
const CANONICAL: &str = "canonical-model";

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let route = if pick % 2 == 0 {
        MessagesRoute::Create
    } else {
        MessagesRoute::CountTokens
    };
    let aliases = [(ALIAS.to_owned(), CANONICAL.to_owned())];
    let input = Bytes::copy_from_slice(body);
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    match validate(route, input, &aliases) {
        Err(_) => {}
        Ok(out) => {
            let Some(mut value) = parsed else {
                // serde_json's arbitrary-precision-free parse into Value refuses numbers
                // past f64 that the borrowed check skips in unmodelled fields: those bodies
                // are JSON all the same. Anything else is a refusal the check missed.
                assert!(
                    serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok(),
                    "a body that is not JSON passed"
                );
                return;
            };
            if value["model"] == ALIAS {
                value["model"] = Value::from(CANONICAL);
                let renamed: Value =
                    serde_json::from_slice(&out.body).expect("a renamed body is JSON");
                assert_eq!(renamed, value, "only the model changes");
            } else {
                assert_eq!(
                    &out.body[..],
                    body,
                    "a body without the alias is sent as written"
                );
            }
        }
    }
}

//! The Responses check and alias rename (`api::responses::check::check`) on arbitrary bytes.
//! Checks: no panic; a body that is not a JSON object is refused; a body that passes is
//! sent on byte for byte, or, when its model names the alias, with only the model changed
//! (it parses to the same value with the canonical id, so numbers and unmodelled fields are
//! untouched); the summary's model is the body's.
//!
//! Input layout: the whole input is the body.

use serde_json::Value;
use tollgate::api::responses::check::check as validate;

const ALIAS: &str = "fast";
const CANONICAL: &str = "canonical-model";

/// One input through the checks above (the fuzz target's body).
pub fn check(body: &[u8]) {
    let aliases = [(ALIAS.to_owned(), CANONICAL.to_owned())];
    let Ok(checked) = validate(body) else {
        return;
    };
    let renamed = checked.renamed(body, &aliases);
    let Ok(mut value) = serde_json::from_slice::<Value>(body) else {
        // A number past f64 in an unmodelled field does not parse into a `Value`, yet the
        // body is JSON all the same. Anything else is a refusal the check missed.
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok(),
            "a body that is not JSON passed"
        );
        return;
    };
    assert!(value.is_object(), "a body that is not an object passed");
    assert_eq!(
        value["model"], *checked.model,
        "the summary names the body's model"
    );
    match renamed {
        Some(out) => {
            assert_eq!(checked.model, ALIAS, "only an alias is renamed");
            value["model"] = Value::from(CANONICAL);
            let renamed: Value = serde_json::from_slice(&out).expect("a renamed body is JSON");
            assert_eq!(renamed, value, "only the model changes");
        }
        None => assert_ne!(checked.model, ALIAS, "an alias is always renamed"),
    }
}

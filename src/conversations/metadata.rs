//! A conversation's `metadata`: at most 16 properties (spec 2), each key at most 64
//! characters and each value a string of at most 512 (OpenAI's bounds). On update the
//! body's metadata is merged into the stored one, a null value deleting its key; the
//! merge itself, with its cap, is the store's (`history::merge_metadata`).

use serde_json::{Map, Value};

use crate::history::MAX_METADATA_PROPERTIES;

/// Longest metadata key, in characters.
pub const MAX_KEY_CHARS: usize = 64;
/// Longest metadata value, in characters.
pub const MAX_VALUE_CHARS: usize = 512;

/// The metadata of a new conversation as stored JSON text; absent or null is `{}`. The
/// error is the message of the 400.
pub fn check_new(metadata: Option<Value>) -> Result<String, String> {
    let map = match metadata {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return Err("'metadata' must be an object of strings".into()),
    };
    for (key, value) in &map {
        check_key(key)?;
        match value {
            Value::String(text) => check_value(key, text)?,
            _ => {
                return Err(format!(
                    "metadata value of '{}' must be a string",
                    clip(key)
                ))
            }
        }
    }
    if map.len() > MAX_METADATA_PROPERTIES {
        return Err(too_many());
    }
    Ok(Value::Object(map).to_string())
}

/// The patch of an update as JSON text: string values set their key, null deletes it; a
/// null patch is `{}` (nothing changes). The merged cap is checked by the store.
pub fn check_patch(metadata: Value) -> Result<String, String> {
    let map = match metadata {
        Value::Null => Map::new(),
        Value::Object(map) => map,
        _ => return Err("'metadata' must be an object of strings and nulls".into()),
    };
    let mut set = 0;
    for (key, value) in &map {
        check_key(key)?;
        match value {
            Value::String(text) => {
                check_value(key, text)?;
                set += 1;
            }
            Value::Null => {}
            _ => {
                return Err(format!(
                    "metadata value of '{}' must be a string or null",
                    clip(key)
                ))
            }
        }
    }
    if set > MAX_METADATA_PROPERTIES {
        return Err(too_many());
    }
    Ok(Value::Object(map).to_string())
}

/// The message of the 400 for metadata past the property cap.
pub fn too_many() -> String {
    format!("metadata can have at most {MAX_METADATA_PROPERTIES} properties")
}

fn check_key(key: &str) -> Result<(), String> {
    if key.chars().count() > MAX_KEY_CHARS {
        return Err(format!(
            "metadata key '{}' is longer than {MAX_KEY_CHARS} characters",
            clip(key)
        ));
    }
    Ok(())
}

fn check_value(key: &str, value: &str) -> Result<(), String> {
    if value.chars().count() > MAX_VALUE_CHARS {
        return Err(format!(
            "metadata value of '{}' is longer than {MAX_VALUE_CHARS} characters",
            clip(key)
        ));
    }
    Ok(())
}

/// A key in a message, cut to a readable length.
fn clip(text: &str) -> &str {
    match text.char_indices().nth(MAX_KEY_CHARS) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn keys(n: usize) -> Value {
        Value::Object((0..n).map(|i| (format!("k{i}"), json!("v"))).collect())
    }

    #[test]
    fn new_metadata_is_an_object_of_at_most_sixteen_strings() {
        assert_eq!(check_new(None).as_deref(), Ok("{}"));
        assert_eq!(check_new(Some(Value::Null)).as_deref(), Ok("{}"));
        assert_eq!(
            check_new(Some(json!({"a": "1"}))).as_deref(),
            Ok(r#"{"a":"1"}"#)
        );
        assert!(check_new(Some(keys(16))).is_ok());
        assert_eq!(check_new(Some(keys(17))), Err(too_many()));
        assert!(check_new(Some(json!({"a": 1}))).is_err());
        assert!(check_new(Some(json!({"a": null}))).is_err());
        assert!(check_new(Some(json!(["a"]))).is_err());
    }

    #[test]
    fn keys_and_values_have_their_lengths() {
        let key = "k".repeat(MAX_KEY_CHARS);
        assert!(check_new(Some(json!({ key: "v" }))).is_ok());
        let key = "k".repeat(MAX_KEY_CHARS + 1);
        assert!(check_new(Some(json!({ key: "v" }))).is_err());
        let value = "é".repeat(MAX_VALUE_CHARS);
        assert!(check_new(Some(json!({ "k": value }))).is_ok());
        let value = "v".repeat(MAX_VALUE_CHARS + 1);
        assert!(check_new(Some(json!({ "k": value }))).is_err());
        assert!(check_patch(json!({ "k": "v".repeat(MAX_VALUE_CHARS + 1) })).is_err());
    }

    #[test]
    fn a_patch_sets_and_deletes() {
        assert_eq!(
            check_patch(json!({"a": "1", "b": null})).as_deref(),
            Ok(r#"{"a":"1","b":null}"#)
        );
        assert_eq!(check_patch(Value::Null).as_deref(), Ok("{}"));
        assert!(check_patch(json!({"a": 1})).is_err());
        assert!(check_patch(json!("x")).is_err());
        assert_eq!(check_patch(keys(17)), Err(too_many()));
        let mut many_deletes = keys(16);
        many_deletes["gone"] = Value::Null;
        assert!(check_patch(many_deletes).is_ok());
    }
}

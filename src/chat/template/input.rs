//! The request's JSON as template values, with the rewrites OpenAI servers make before
//! rendering (vLLM's, so a model sees the same prompt behind tollgate as behind vLLM; the
//! first two are llama.cpp's llama-server's too):
//!
//! - a `content` given as an array of parts becomes one string: the parts' `text`s joined by
//!   `"\n"`. Both servers join text parts with a newline for templates that expect a string.
//!   Any other part type (images, audio) is refused: a text-only pipeline cannot carry it.
//! - a tool call's `function.arguments`, which OpenAI sends as a JSON string, is parsed into
//!   its value, since templates print it with `tojson` or walk it as a mapping. A string that
//!   does not parse stays a string (the template then prints it as sent).
//! - a `content` that is null or absent (an assistant turn that only calls tools) becomes
//!   `""`: templates test it with `in` or add it to strings, which fails on `None` (Qwen3's
//!   does, so transformers alone cannot render a tool-call turn with null content).
//!   llama-server keeps the `null`.
//!
//! Everything else is passed as sent (vLLM rebuilds each message from the fields it knows;
//! unknown fields are kept here), keys in the order they arrived when serde_json keeps it
//! (its `preserve_order` feature).

use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectExt, ObjectRepr, Value};
use serde_json::Value as Json;

use super::TemplateError;

/// Objects with at most this many keys become [`Fields`]; larger ones MiniJinja's own
/// (hashed) map, so a lookup in a client's big schema stays O(1).
const SCANNED: usize = 12;

/// Nesting deeper than this is refused. serde_json's parser stops at 128 levels, so only a
/// `Json` built in code can get here; the bound keeps the conversion's recursion finite.
const MAX_DEPTH: usize = 128;

/// `messages`, normalised as the module doc says.
pub(super) fn messages(messages: &Json) -> Result<Value, TemplateError> {
    let Json::Array(list) = messages else {
        return Err(bad("`messages` must be an array"));
    };
    list.iter().map(message).collect()
}

fn message(message: &Json) -> Result<Value, TemplateError> {
    let Json::Object(fields) = message else {
        return Err(bad("each message must be an object"));
    };
    let mut out = Vec::with_capacity(fields.len() + 1);
    for (key, field) in fields {
        let value = match (key.as_str(), field) {
            ("content", Json::Array(parts)) => text_of_parts(parts)?,
            ("content", Json::Null) => Value::from(""),
            ("tool_calls", Json::Array(calls)) => {
                calls.iter().map(tool_call).collect::<Result<Value, _>>()?
            }
            _ => value(field)?,
        };
        out.push((key.as_str(), value));
    }
    if !fields.contains_key("content") {
        out.push(("content", Value::from("")));
    }
    Ok(mapping(out))
}

fn text_of_parts(parts: &[Json]) -> Result<Value, TemplateError> {
    let mut text = String::new();
    for (i, part) in parts.iter().enumerate() {
        let kind = part.get("type").and_then(Json::as_str);
        let part_text = match (kind, part.get("text").and_then(Json::as_str)) {
            (Some("text"), Some(part_text)) => part_text,
            (Some("text"), None) => return Err(bad("a text content part needs a string `text`")),
            (Some(kind), _) => {
                return Err(bad(format!(
                    "content part of type `{kind}` is not supported (text only)"
                )))
            }
            (None, _) => return Err(bad("each content part needs a string `type`")),
        };
        if i > 0 {
            text.push('\n');
        }
        text.push_str(part_text);
    }
    Ok(Value::from(text))
}

/// One entry of `tool_calls`, its `function.arguments` parsed when it is a JSON string.
fn tool_call(call: &Json) -> Result<Value, TemplateError> {
    let Json::Object(fields) = call else {
        return value(call);
    };
    let mut out = Vec::with_capacity(fields.len());
    for (key, field) in fields {
        let value = match (key.as_str(), field) {
            ("function", Json::Object(function)) => {
                let mut parsed = Vec::with_capacity(function.len());
                for (name, item) in function {
                    let item = match (name.as_str(), item) {
                        ("arguments", Json::String(text)) => {
                            match serde_json::from_str::<Json>(text) {
                                Ok(arguments) => value(&arguments)?,
                                Err(_) => Value::from(text.as_str()),
                            }
                        }
                        _ => value(item)?,
                    };
                    parsed.push((name.as_str(), item));
                }
                mapping(parsed)
            }
            _ => value(field)?,
        };
        out.push((key.as_str(), value));
    }
    Ok(mapping(out))
}

/// Any JSON value, as it is.
pub(super) fn value(json: &Json) -> Result<Value, TemplateError> {
    convert(json, 0)
}

fn convert(json: &Json, depth: usize) -> Result<Value, TemplateError> {
    if depth > MAX_DEPTH {
        return Err(bad("JSON nested too deeply"));
    }
    Ok(match json {
        Json::Null => Value::from(()),
        Json::Bool(b) => Value::from(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            (None, None) => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::from(s.as_str()),
        Json::Array(items) => items
            .iter()
            .map(|item| convert(item, depth + 1))
            .collect::<Result<Value, _>>()?,
        Json::Object(fields) => mapping(
            fields
                .iter()
                .map(|(key, item)| Ok((key.as_str(), convert(item, depth + 1)?)))
                .collect::<Result<Vec<_>, TemplateError>>()?,
        ),
    })
}

/// A JSON object's entries, in the order sent, as a template mapping.
fn mapping(entries: Vec<(&str, Value)>) -> Value {
    if entries.len() > SCANNED {
        return Value::from_pairs(entries);
    }
    Value::from_object(Fields(
        entries
            .into_iter()
            .map(|(key, value)| (Value::from(key), value))
            .collect(),
    ))
}

/// A small mapping read by a scan of its entries. MiniJinja's own map hashes every key with
/// SipHash as it is built, about 8 % of rendering a chat; a message has a handful of keys,
/// and MiniJinja itself reads its maps of up to 12 entries by a scan.
#[derive(Debug)]
struct Fields(Vec<(Value, Value)>);

impl Object for Fields {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        self.0
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.clone())
    }

    fn get_value_by_str(self: &Arc<Self>, key: &str) -> Option<Value> {
        self.0
            .iter()
            .find(|(name, _)| name.as_str() == Some(key))
            .map(|(_, value)| value.clone())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        self.mapped_rev_key_value_enumerator(|this| {
            Box::new(
                this.0
                    .iter()
                    .map(|(key, value)| (key.clone(), value.clone())),
            )
        })
    }

    fn enumerator_len(self: &Arc<Self>) -> Option<usize> {
        Some(self.0.len())
    }
}

fn bad(message: impl Into<String>) -> TemplateError {
    TemplateError::BadInput(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_parts_join_with_newlines() {
        let value = messages(&json!([{"role": "user", "content": [
            {"type": "text", "text": "one"}, {"type": "text", "text": "two"}
        ]}]))
        .unwrap();
        let content = value
            .get_item(&Value::from(0))
            .unwrap()
            .get_attr("content")
            .unwrap();
        assert_eq!(content.as_str(), Some("one\ntwo"));
    }

    #[test]
    fn null_or_missing_content_becomes_empty() {
        let value = messages(&json!([
            {"role": "assistant", "content": null, "tool_calls": []},
            {"role": "assistant", "tool_calls": []},
        ]))
        .unwrap();
        for i in 0..2 {
            let content = value
                .get_item(&Value::from(i))
                .unwrap()
                .get_attr("content")
                .unwrap();
            assert_eq!(content.as_str(), Some(""), "message {i}");
        }
    }

    #[test]
    fn non_text_parts_and_wrong_shapes_are_bad_input() {
        for input in [
            json!({"role": "user"}),
            json!(["not an object"]),
            json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
            json!([{"role": "user", "content": [{"type": "text"}]}]),
            json!([{"role": "user", "content": ["bare string"]}]),
        ] {
            assert!(
                matches!(messages(&input), Err(TemplateError::BadInput(_))),
                "{input}"
            );
        }
    }

    #[test]
    fn tool_call_arguments_are_parsed_when_they_parse() {
        let value = messages(&json!([{"role": "assistant", "content": null, "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{\"city\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "g", "arguments": "{not json"}},
        ]}]))
        .unwrap();
        let calls = value
            .get_item(&Value::from(0))
            .unwrap()
            .get_attr("tool_calls")
            .unwrap();
        let args = |i: usize| {
            calls
                .get_item(&Value::from(i))
                .unwrap()
                .get_attr("function")
                .unwrap()
                .get_attr("arguments")
                .unwrap()
        };
        assert_eq!(args(0).get_attr("city").unwrap().as_str(), Some("Paris"));
        assert_eq!(args(1).as_str(), Some("{not json"));
    }

    #[test]
    fn objects_keep_their_order_and_answer_lookups_at_any_size() {
        for size in [1, SCANNED, SCANNED + 1, 40] {
            let object: serde_json::Map<String, Json> = (0..size)
                .rev()
                .map(|i| (format!("k{i}"), json!(i)))
                .collect();
            let value = value(&Json::Object(object)).unwrap();
            let keys: Vec<String> = value.try_iter().unwrap().map(|k| k.to_string()).collect();
            let want: Vec<String> = (0..size).rev().map(|i| format!("k{i}")).collect();
            assert_eq!(keys, want, "{size} keys");
            assert_eq!(value.len(), Some(size));
            for i in 0..size {
                let key = format!("k{i}");
                assert_eq!(value.get_attr(&key).unwrap(), Value::from(i), "{key}");
                assert_eq!(value.get_item(&Value::from(key)).unwrap(), Value::from(i));
            }
            assert!(value.get_attr("absent").unwrap().is_undefined());
        }
    }

    #[test]
    fn nesting_is_bounded() {
        let mut deep = json!(1);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        assert!(matches!(value(&deep), Err(TemplateError::BadInput(_))));
    }
}

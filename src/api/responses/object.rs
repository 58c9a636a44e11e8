//! The configuration half of a response object: what the request asked for, echoed in the
//! shape the Responses object has (OpenAI's, and the Open Responses schema's).
//!
//! Every field is present, with its type: a value the request gave that has another type
//! is not echoed (the default is), so an object never breaks its schema because of a
//! client's spelling. Where the object's schema asks more of a nested value than the
//! request did (a function tool's `description`, `parameters` and `strict`; `reasoning`'s
//! `effort` and `summary`; `text.format`), the missing keys are written as null, or as the
//! default the gateway applied.

use serde_json::{json, Map, Value};

/// The fields of the response object that echo the request, keyed by name.
pub(super) fn settings(request: &Map<String, Value>) -> Map<String, Value> {
    let given = |name: &str| request.get(name).filter(|v| !v.is_null());
    let number = |name: &str, default: f64| {
        given(name)
            .filter(|v| v.is_number())
            .cloned()
            .unwrap_or_else(|| json!(default))
    };
    let integer = |name: &str| {
        given(name)
            .filter(|v| v.is_i64() || v.is_u64())
            .cloned()
            .unwrap_or(Value::Null)
    };
    let string = |name: &str| {
        given(name)
            .filter(|v| v.is_string())
            .cloned()
            .unwrap_or(Value::Null)
    };
    let tools = tools(given("tools"));
    let has_tools = matches!(&tools, Value::Array(t) if !t.is_empty());
    let tool_choice = given("tool_choice")
        .cloned()
        .unwrap_or_else(|| Value::String(if has_tools { "auto" } else { "none" }.into()));
    let top_logprobs = given("top_logprobs")
        .filter(|v| v.is_i64() || v.is_u64())
        .cloned()
        .unwrap_or(json!(0));
    let mut out = Map::new();
    let mut put = |name: &str, value: Value| {
        out.insert(name.to_owned(), value);
    };
    put("instructions", string("instructions"));
    put("max_output_tokens", integer("max_output_tokens"));
    put("max_tool_calls", integer("max_tool_calls"));
    put(
        "model",
        request.get("model").cloned().unwrap_or(Value::Null),
    );
    put(
        "parallel_tool_calls",
        given("parallel_tool_calls")
            .filter(|v| v.is_boolean())
            .cloned()
            .unwrap_or(Value::Bool(true)),
    );
    put("previous_response_id", string("previous_response_id"));
    put("reasoning", reasoning(given("reasoning")));
    put("temperature", number("temperature", 1.0));
    put("text", text(given("text")));
    put("tool_choice", tool_choice);
    put("tools", tools);
    put("top_p", number("top_p", 1.0));
    put("presence_penalty", number("presence_penalty", 0.0));
    put("frequency_penalty", number("frequency_penalty", 0.0));
    put("top_logprobs", top_logprobs);
    // The gateway never truncates: a context too long is an error.
    put("truncation", Value::String("disabled".into()));
    put("service_tier", service_tier(given("service_tier")));
    put("safety_identifier", string("safety_identifier"));
    put("prompt_cache_key", string("prompt_cache_key"));
    put("user", request.get("user").cloned().unwrap_or(Value::Null));
    put(
        "metadata",
        given("metadata")
            .filter(|v| v.is_object())
            .cloned()
            .unwrap_or_else(|| json!({})),
    );
    out
}

/// The request's tools; a function tool gets `description`, `parameters` and `strict`
/// (null when the request left them out), as the object's `FunctionTool` has them.
fn tools(tools: Option<&Value>) -> Value {
    let Some(Value::Array(tools)) = tools else {
        return json!([]);
    };
    let shaped = tools
        .iter()
        .map(|tool| {
            let mut tool = tool.clone();
            if let Value::Object(fields) = &mut tool {
                if fields.get("type").and_then(Value::as_str) == Some("function") {
                    for key in ["description", "parameters", "strict"] {
                        fields.entry(key).or_insert(Value::Null);
                    }
                }
            }
            tool
        })
        .collect();
    Value::Array(shaped)
}

/// `reasoning` with both `effort` and `summary` (null when not asked for).
fn reasoning(reasoning: Option<&Value>) -> Value {
    let mut shaped = match reasoning {
        Some(Value::Object(fields)) => fields.clone(),
        _ => Map::new(),
    };
    for key in ["effort", "summary"] {
        shaped.entry(key).or_insert(Value::Null);
    }
    Value::Object(shaped)
}

/// `text` with its `format` (`text` unless asked otherwise); a `json_schema` format with
/// its `description` (null) and `strict` (false) when the request left them out.
fn text(text: Option<&Value>) -> Value {
    let mut shaped = match text {
        Some(Value::Object(fields)) => fields.clone(),
        _ => Map::new(),
    };
    let format = shaped
        .entry("format")
        .and_modify(|f| {
            if !f.is_object() {
                *f = json!({"type": "text"});
            }
        })
        .or_insert_with(|| json!({"type": "text"}));
    if let Value::Object(format) = format {
        if format.get("type").and_then(Value::as_str) == Some("json_schema") {
            format.entry("description").or_insert(Value::Null);
            let strict = format.entry("strict").or_insert(Value::Bool(false));
            if !strict.is_boolean() {
                *strict = Value::Bool(false);
            }
        }
    }
    Value::Object(shaped)
}

/// The tier the response was served on: the one asked for, `default` for `auto` or none.
fn service_tier(asked: Option<&Value>) -> Value {
    match asked.and_then(Value::as_str) {
        Some(tier) if tier != "auto" => Value::String(tier.to_owned()),
        _ => Value::String("default".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(request: Value) -> Map<String, Value> {
        settings(request.as_object().unwrap())
    }

    #[test]
    fn a_bare_request_gets_every_field_with_its_type() {
        let s = of(json!({"model": "m", "input": "hi"}));
        assert_eq!(s["model"], "m");
        assert_eq!(s["presence_penalty"], json!(0.0));
        assert_eq!(s["frequency_penalty"], json!(0.0));
        assert_eq!(s["top_logprobs"], json!(0));
        assert_eq!(s["temperature"], json!(1.0));
        assert_eq!(s["top_p"], json!(1.0));
        assert_eq!(s["service_tier"], "default");
        assert_eq!(s["safety_identifier"], Value::Null);
        assert_eq!(s["prompt_cache_key"], Value::Null);
        assert_eq!(s["instructions"], Value::Null);
        assert_eq!(s["previous_response_id"], Value::Null);
        assert_eq!(s["max_output_tokens"], Value::Null);
        assert_eq!(s["max_tool_calls"], Value::Null);
        assert_eq!(s["tools"], json!([]));
        assert_eq!(s["tool_choice"], "none");
        assert_eq!(s["parallel_tool_calls"], true);
        assert_eq!(s["truncation"], "disabled");
        assert_eq!(s["text"], json!({"format": {"type": "text"}}));
        assert_eq!(s["reasoning"], json!({"effort": null, "summary": null}));
        assert_eq!(s["metadata"], json!({}));
        for key in ["safety_identifier", "prompt_cache_key", "user"] {
            assert!(s.contains_key(key), "{key}");
        }
    }

    #[test]
    fn the_request_values_are_echoed() {
        let s = of(json!({
            "model": "m", "input": "hi", "presence_penalty": 0.5, "frequency_penalty": -1,
            "top_logprobs": 3, "service_tier": "flex", "safety_identifier": "u-1",
            "prompt_cache_key": "k", "temperature": 0.2, "top_p": 0.9,
            "max_output_tokens": 64, "max_tool_calls": 2, "instructions": "be brief",
            "previous_response_id": "resp_1", "parallel_tool_calls": false,
            "metadata": {"a": "b"}, "user": "alice",
        }));
        assert_eq!(s["presence_penalty"], json!(0.5));
        assert_eq!(s["frequency_penalty"], json!(-1));
        assert_eq!(s["top_logprobs"], json!(3));
        assert_eq!(s["service_tier"], "flex");
        assert_eq!(s["safety_identifier"], "u-1");
        assert_eq!(s["prompt_cache_key"], "k");
        assert_eq!(s["temperature"], json!(0.2));
        assert_eq!(s["top_p"], json!(0.9));
        assert_eq!(s["max_output_tokens"], 64);
        assert_eq!(s["max_tool_calls"], 2);
        assert_eq!(s["instructions"], "be brief");
        assert_eq!(s["previous_response_id"], "resp_1");
        assert_eq!(s["parallel_tool_calls"], false);
        assert_eq!(s["metadata"], json!({"a": "b"}));
        assert_eq!(s["user"], "alice");
    }

    #[test]
    fn nulls_and_wrong_types_fall_back_to_the_defaults() {
        let s = of(json!({
            "model": "m", "presence_penalty": null, "frequency_penalty": "1",
            "top_logprobs": null, "service_tier": "auto", "safety_identifier": 7,
            "prompt_cache_key": null, "temperature": null, "metadata": null,
            "text": null, "reasoning": null, "tools": null,
        }));
        assert_eq!(s["presence_penalty"], json!(0.0));
        assert_eq!(s["frequency_penalty"], json!(0.0));
        assert_eq!(s["top_logprobs"], json!(0));
        assert_eq!(s["service_tier"], "default");
        assert_eq!(s["safety_identifier"], Value::Null);
        assert_eq!(s["prompt_cache_key"], Value::Null);
        assert_eq!(s["temperature"], json!(1.0));
        assert_eq!(s["metadata"], json!({}));
        assert_eq!(s["text"], json!({"format": {"type": "text"}}));
        assert_eq!(s["reasoning"], json!({"effort": null, "summary": null}));
        assert_eq!(s["tools"], json!([]));
    }

    #[test]
    fn function_tools_carry_description_parameters_and_strict() {
        let s = of(json!({
            "model": "m",
            "tools": [
                {"type": "function", "name": "f", "description": "d",
                 "parameters": {"type": "object"}},
                {"type": "function", "name": "g", "strict": true},
                {"type": "web_search"},
            ],
        }));
        assert_eq!(
            s["tools"],
            json!([
                {"type": "function", "name": "f", "description": "d",
                 "parameters": {"type": "object"}, "strict": null},
                {"type": "function", "name": "g", "description": null, "parameters": null,
                 "strict": true},
                {"type": "web_search"},
            ])
        );
        assert_eq!(s["tool_choice"], "auto");
        let chosen = of(
            json!({"model": "m", "tools": [{"type": "function", "name": "f"}],
                               "tool_choice": {"type": "function", "name": "f"}}),
        );
        assert_eq!(
            chosen["tool_choice"],
            json!({"type": "function", "name": "f"})
        );
    }

    #[test]
    fn text_and_reasoning_are_completed() {
        let s = of(json!({
            "model": "m", "text": {"verbosity": "low"}, "reasoning": {"effort": "high"},
        }));
        assert_eq!(
            s["text"],
            json!({"format": {"type": "text"}, "verbosity": "low"})
        );
        assert_eq!(s["reasoning"], json!({"effort": "high", "summary": null}));
        let schema = of(json!({
            "model": "m",
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
        }));
        assert_eq!(
            schema["text"]["format"],
            json!({"type": "json_schema", "name": "n", "schema": {"type": "object"},
                   "description": null, "strict": false})
        );
        let strict = of(json!({
            "model": "m",
            "text": {"format": {"type": "json_schema", "name": "n", "schema": {},
                                "description": "x", "strict": true}},
        }));
        assert_eq!(strict["text"]["format"]["strict"], true);
        assert_eq!(strict["text"]["format"]["description"], "x");
    }
}

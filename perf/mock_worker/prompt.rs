//! Reading the prompt and generation limits out of request bodies.
//!
//! The mock never runs a tokenizer: it approximates a token as four
//! characters, which is enough for usage numbers and the prefix cache to
//! behave plausibly and deterministically.

use serde_json::Value;

/// The API family of a generation request; each keeps its prompt in a
/// different place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI `/v1/chat/completions`.
    Chat,
    /// OpenAI `/v1/completions`.
    Completions,
    /// SGLang native `/generate`.
    Generate,
    /// Anthropic `/v1/messages`.
    Messages,
    /// OpenAI `/v1/responses`.
    Responses,
}

/// The prompt of one request: its text plus any prompt given as token ids
/// (which have no text, but still count as prompt tokens).
#[derive(Debug, Default, PartialEq)]
pub struct Prompt {
    pub text: String,
    pub id_tokens: u64,
}

impl Prompt {
    /// Prompt tokens: about one per four characters, never zero.
    pub fn tokens(&self) -> u64 {
        (text_tokens(&self.text) + self.id_tokens).max(1)
    }
}

/// Token estimate for a piece of text (may be zero).
pub fn text_tokens(text: &str) -> u64 {
    text.chars().count() as u64 / 4
}

/// Extracts the prompt of a generation request.
pub fn extract(api: Api, body: &Value) -> Prompt {
    let mut prompt = Prompt::default();
    match api {
        Api::Chat => push_messages(&mut prompt, body.get("messages")),
        Api::Completions => push_prompt_field(&mut prompt, body.get("prompt")),
        Api::Generate => {
            push_prompt_field(&mut prompt, body.get("text"));
            push_prompt_field(&mut prompt, body.get("input_ids"));
        }
        Api::Messages => {
            push_content(&mut prompt.text, body.get("system"));
            push_messages(&mut prompt, body.get("messages"));
        }
        Api::Responses => {
            push_content(&mut prompt.text, body.get("instructions"));
            push_responses_input(&mut prompt, body.get("input"));
        }
    }
    prompt
}

/// The client's cap on generated tokens, whichever field name its API
/// uses (`sampling_params.max_new_tokens` for SGLang's `/generate`).
pub fn max_tokens(body: &Value) -> Option<u64> {
    const FIELDS: [&str; 4] = [
        "max_tokens",
        "max_completion_tokens",
        "max_new_tokens",
        "max_output_tokens",
    ];
    let top = FIELDS.iter().filter_map(|f| body.get(*f));
    let sampling = body
        .get("sampling_params")
        .into_iter()
        .flat_map(|sp| FIELDS.iter().filter_map(move |f| sp.get(*f)));
    top.chain(sampling).filter_map(Value::as_u64).min()
}

/// `"stream": true`.
pub fn wants_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

/// `"stream_options": {"include_usage": true}`.
pub fn wants_stream_usage(body: &Value) -> bool {
    body.get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The request's `model` field, if it is a string.
pub fn requested_model(body: &Value) -> Option<&str> {
    body.get("model").and_then(Value::as_str)
}

fn push_messages(prompt: &mut Prompt, messages: Option<&Value>) {
    if let Some(Value::Array(messages)) = messages {
        for message in messages {
            push_content(&mut prompt.text, message.get("content"));
        }
    }
}

/// A message `content`: a string, or an array of parts where text parts
/// carry a `text` field. Nested `content` (e.g. Anthropic tool results)
/// is followed too.
fn push_content(out: &mut String, content: Option<&Value>) {
    match content {
        Some(Value::String(s)) => out.push_str(s),
        Some(Value::Array(parts)) => {
            for part in parts {
                match part {
                    Value::String(s) => out.push_str(s),
                    Value::Object(obj) => {
                        if let Some(Value::String(text)) = obj.get("text") {
                            out.push_str(text);
                        }
                        push_content(out, obj.get("content"));
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// Completions `prompt` / generate `text` / `input_ids`: a string, token
/// ids, or a batch of either.
fn push_prompt_field(prompt: &mut Prompt, field: Option<&Value>) {
    match field {
        Some(Value::String(s)) => prompt.text.push_str(s),
        Some(Value::Number(_)) => prompt.id_tokens += 1,
        Some(Value::Array(items)) => {
            for item in items {
                push_prompt_field(prompt, Some(item));
            }
        }
        _ => {}
    }
}

/// Responses `input`: a string or a list of items (messages with string or
/// part-list content, or tool outputs).
fn push_responses_input(prompt: &mut Prompt, input: Option<&Value>) {
    match input {
        Some(Value::String(s)) => prompt.text.push_str(s),
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(s) => prompt.text.push_str(s),
                    Value::Object(obj) => {
                        push_content(&mut prompt.text, obj.get("content"));
                        if let Some(Value::String(output)) = obj.get("output") {
                            prompt.text.push_str(output);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_messages_string_and_parts() {
        let body = json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [
                {"type": "text", "text": "hello "},
                {"type": "image_url", "image_url": {"url": "x"}},
                {"type": "text", "text": "world"}
            ]},
            {"role": "assistant", "content": null}
        ]});
        let p = extract(Api::Chat, &body);
        assert_eq!(p.text, "be briefhello world");
        assert_eq!(p.tokens(), 4);
    }

    #[test]
    fn completions_prompt_forms() {
        assert_eq!(
            extract(Api::Completions, &json!({"prompt": "abcdefgh"})).tokens(),
            2
        );
        let batch = extract(Api::Completions, &json!({"prompt": ["ab", "cd"]}));
        assert_eq!(batch.text, "abcd");
        let ids = extract(Api::Completions, &json!({"prompt": [1, 2, 3]}));
        assert_eq!(ids.text, "");
        assert_eq!(ids.tokens(), 3);
    }

    #[test]
    fn generate_text_and_ids() {
        let p = extract(Api::Generate, &json!({"text": "0123456789abcdef"}));
        assert_eq!(p.tokens(), 4);
        let p = extract(Api::Generate, &json!({"input_ids": [5, 6]}));
        assert_eq!(p.tokens(), 2);
    }

    #[test]
    fn anthropic_system_and_blocks() {
        let body = json!({
            "system": [{"type": "text", "text": "sys "}],
            "messages": [
                {"role": "user", "content": "question"},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [
                        {"type": "text", "text": " result"}
                    ]}
                ]}
            ]
        });
        assert_eq!(extract(Api::Messages, &body).text, "sys question result");
        let plain = json!({"system": "s", "messages": [{"role": "user", "content": "q"}]});
        assert_eq!(extract(Api::Messages, &plain).text, "sq");
    }

    #[test]
    fn responses_input_forms() {
        assert_eq!(
            extract(Api::Responses, &json!({"input": "hi there"})).text,
            "hi there"
        );
        let items = json!({"instructions": "I:", "input": [
            {"role": "user", "content": "a"},
            {"role": "user", "content": [{"type": "input_text", "text": "b"}]},
            {"type": "function_call_output", "call_id": "c", "output": "c"}
        ]});
        assert_eq!(extract(Api::Responses, &items).text, "I:abc");
    }

    #[test]
    fn empty_or_malformed_prompt_still_counts_one_token() {
        assert_eq!(extract(Api::Chat, &json!({})).tokens(), 1);
        assert_eq!(extract(Api::Chat, &json!({"messages": "x"})).tokens(), 1);
        assert_eq!(extract(Api::Completions, &json!(42)).tokens(), 1);
    }

    #[test]
    fn max_tokens_from_any_field() {
        assert_eq!(max_tokens(&json!({"max_tokens": 5})), Some(5));
        assert_eq!(max_tokens(&json!({"max_completion_tokens": 7})), Some(7));
        assert_eq!(
            max_tokens(&json!({"sampling_params": {"max_new_tokens": 3}})),
            Some(3)
        );
        assert_eq!(max_tokens(&json!({"max_output_tokens": 9})), Some(9));
        assert_eq!(max_tokens(&json!({"max_tokens": "5"})), None);
        assert_eq!(max_tokens(&json!({})), None);
    }

    #[test]
    fn stream_flags() {
        assert!(wants_stream(&json!({"stream": true})));
        assert!(!wants_stream(&json!({"stream": "yes"})));
        assert!(wants_stream_usage(
            &json!({"stream_options": {"include_usage": true}})
        ));
        assert!(!wants_stream_usage(&json!({})));
    }
}

//! What the client asked for, read from an OpenAI chat or completions body (or SGLang's
//! `/generate`), and turned into the engine's sampling parameters.
//!
//! Proto3 zeroes are not the engine's defaults, so every numeric field is set here from
//! the request or from the OpenAI default: temperature 1, top_p 1, top_k -1 (off), min_p 0,
//! penalties 0 and repetition 1.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::chat::stops::{MAX_STOPS, MAX_STOP_BYTES};
use crate::engine::{Params, Sampling};
use crate::parsers::tool::{ToolSpec, Tools};

/// Most `stop_token_ids` a request may carry.
pub const MAX_STOP_TOKEN_IDS: usize = 64;

/// Most choices (`n`) one request may ask for: each is a sequence the engine generates
/// and the gateway decodes, so one request cannot take a whole engine.
pub const MAX_CHOICES: u32 = 16;

/// Most alternatives per token: chat's `top_logprobs` (OpenAI's bound) and completions'
/// `logprobs` (the legacy API's).
pub const MAX_CHAT_TOP_LOGPROBS: u32 = 20;
pub const MAX_COMPLETION_LOGPROBS: u32 = 5;

/// Most functions one request may declare (OpenAI's bound).
pub const MAX_TOOLS: usize = 128;

/// The API a request came in through: what its body carries and the shape of its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`: messages rendered by the chat template.
    Chat,
    /// `/v1/completions`: a prompt string (or token ids) sent as is.
    Completions,
    /// SGLang's native `/generate`: `text` or `input_ids`, `sampling_params`.
    Generate,
    /// `/v1/messages`: a Messages body converted into a chat ([`super::messages`]), whose
    /// output is parsed like a chat's and answered in the Messages shapes.
    Messages,
}

impl Api {
    /// The route's `endpoint` metrics label.
    pub fn endpoint(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Generate => "generate",
            Api::Messages => "messages",
        }
    }

    /// Whether the prompt is a conversation rendered by the chat template, whose output
    /// goes through the worker's tool-call and reasoning parsers.
    pub fn is_chat(self) -> bool {
        matches!(self, Api::Chat | Api::Messages)
    }

    /// The API of the matched `route`, for the routes a generation serves.
    pub fn of(route: crate::http::route::Route) -> Option<Api> {
        use crate::http::route::Route;
        match route {
            Route::ChatCompletions => Some(Api::Chat),
            Route::Completions => Some(Api::Completions),
            Route::Generate => Some(Api::Generate),
            Route::Messages => Some(Api::Messages),
            _ => None,
        }
    }
}

/// `stop`: one string or several.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `prompt` of a completion: text, or token ids sent as they are.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
    /// A one-element batch, as some clients send it.
    Batch([String; 1]),
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The sampling knobs as a body gives them (OpenAI and SGLang name them alike); absent or
/// null means the default.
#[derive(Deserialize, Default)]
struct Knobs {
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    min_p: Option<f32>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    repetition_penalty: Option<f32>,
}

impl Knobs {
    /// The knobs with the OpenAI defaults filled in, checked against their ranges.
    fn resolve(self) -> Result<Sampling, Invalid> {
        let sampling = Sampling {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            top_k: self.top_k.unwrap_or(-1),
            min_p: self.min_p.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
        };
        check(&sampling)?;
        Ok(sampling)
    }
}

/// Sampling from the three knobs a Messages body has, the others at their defaults,
/// checked against the same ranges as a chat's.
pub fn sampling(
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
) -> Result<Sampling, Invalid> {
    Knobs {
        temperature,
        top_p,
        top_k,
        ..Knobs::default()
    }
    .resolve()
}

/// The fields of a chat or completions body the gRPC path reads; others are ignored, as
/// an engine's own server would ignore fields it does not know.
#[derive(Deserialize)]
struct Body {
    model: Option<String>,
    messages: Option<Value>,
    prompt: Option<Prompt>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    #[serde(flatten)]
    knobs: Knobs,
    stop: Option<Stop>,
    stop_token_ids: Option<Vec<u32>>,
    n: Option<u32>,
    /// Chat: `true` asks for log probabilities; completions: how many alternatives.
    logprobs: Option<Value>,
    top_logprobs: Option<u32>,
    #[serde(default)]
    ignore_eos: bool,
    skip_special_tokens: Option<bool>,
    chat_template_kwargs: Option<Map<String, Value>>,
    add_generation_prompt: Option<bool>,
}

/// SGLang's `/generate` body: the prompt and the engine's own sampling parameter names.
#[derive(Deserialize)]
struct GenerateBody {
    text: Option<String>,
    input_ids: Option<Vec<u32>>,
    #[serde(default)]
    sampling_params: GenerateSampling,
    #[serde(default)]
    stream: bool,
}

#[derive(Deserialize, Default)]
struct GenerateSampling {
    max_new_tokens: Option<u32>,
    #[serde(flatten)]
    knobs: Knobs,
    stop: Option<Stop>,
    stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    ignore_eos: bool,
    skip_special_tokens: Option<bool>,
    #[serde(default)]
    no_stop_trim: bool,
}

/// `max_new_tokens` of a `/generate` request that sets none (SGLang's default).
const GENERATE_MAX_NEW_TOKENS: u32 = 128;

/// A request the gRPC path can serve, before its prompt is rendered and tokenized.
pub struct Ask {
    pub route: Api,
    pub model: Option<String>,
    pub input: Input,
    pub stream: bool,
    pub include_usage: bool,
    pub max_tokens: Option<u32>,
    pub stops: Vec<String>,
    /// The stop string stays in the text (`/generate`'s `no_stop_trim`).
    pub visible_stops: bool,
    pub stop_token_ids: Vec<u32>,
    pub skip_special_tokens: bool,
    pub ignore_eos: bool,
    pub sampling: Sampling,
    /// Choices to generate, 1..=[`MAX_CHOICES`].
    pub n: u32,
    /// Log probabilities asked for, with this many alternatives per token.
    pub logprobs: Option<u32>,
    /// The functions a chat request declared, for the tool-call parser; empty when none.
    pub tools: Tools,
    pub tool_choice: ToolChoice,
    /// The request lets the model think (`chat_template_kwargs.enable_thinking` or
    /// `thinking`, true unless set false).
    pub thinking: bool,
    /// The rendered prompt ends inside a reasoning block (the template opened it), so
    /// the output starts in reasoning; set once the prompt is rendered.
    pub opened_by_prompt: bool,
    /// The JSON schema `tool_choice` puts on the output ([`Ask::json_schema`]), built once
    /// where the body is read (off the event loop for a large body): a schema of many
    /// megabytes of tools is not rebuilt on the data-plane thread for each attempt.
    pub schema: Option<String>,
}

/// `tool_choice`: whether and how the model may call the declared functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (OpenAI's default when tools are given).
    Auto,
    /// No calls: the output is not parsed for them.
    None,
    /// At least one call.
    Required,
    /// A call to this function.
    Named(String),
}

/// What becomes the prompt.
pub enum Input {
    Chat {
        messages: Value,
        tools: Option<Value>,
        add_generation_prompt: bool,
        kwargs: Option<Map<String, Value>>,
    },
    Text(String),
    Ids(Vec<u32>),
}

/// Why a body cannot be served; the message is the client's answer (400).
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

impl Ask {
    /// Reads `body` sent to `route`; a Messages body is read by
    /// [`super::messages::ask`], whose refusals have shapes of their own.
    pub fn parse(route: Api, body: &[u8]) -> Result<Ask, Invalid> {
        match route {
            Api::Generate => return Ask::parse_generate(body),
            Api::Messages => {
                return Err(Invalid(
                    "a Messages body is read by the Messages conversion".into(),
                ))
            }
            Api::Chat | Api::Completions => {}
        }
        let body: Body = serde_json::from_slice(body)
            .map_err(|e| Invalid(format!("invalid request body: {e}")))?;
        Ask::of_body(route, body)
    }

    /// Reads a chat completions body the gateway built itself (a Responses turn's chat):
    /// taken as the value it is, never written out and read again.
    pub fn chat(body: Value) -> Result<Ask, Invalid> {
        let body: Body = serde_json::from_value(body)
            .map_err(|e| Invalid(format!("invalid request body: {e}")))?;
        Ask::of_body(Api::Chat, body)
    }

    /// The ask of a chat or completions `body`.
    fn of_body(route: Api, body: Body) -> Result<Ask, Invalid> {
        let n = body.n.unwrap_or(1);
        if !(1..=MAX_CHOICES).contains(&n) {
            return Err(Invalid(format!("n must be between 1 and {MAX_CHOICES}")));
        }
        let logprobs = logprobs(route, body.logprobs, body.top_logprobs)?;
        let input = match route {
            Api::Chat => {
                let messages = body
                    .messages
                    .ok_or_else(|| Invalid("messages is required".into()))?;
                if messages.as_array().is_none_or(|m| m.is_empty()) {
                    return Err(Invalid("messages must be a non-empty array".into()));
                }
                check_roles(&messages)?;
                Input::Chat {
                    messages,
                    tools: body.tools.clone().filter(|t| !t.is_null()),
                    add_generation_prompt: body.add_generation_prompt.unwrap_or(true),
                    kwargs: body.chat_template_kwargs.clone(),
                }
            }
            Api::Completions | Api::Generate | Api::Messages => match body.prompt {
                Some(Prompt::Text(text)) | Some(Prompt::Batch([text])) => Input::Text(text),
                Some(Prompt::Ids(ids)) if !ids.is_empty() => Input::Ids(ids),
                _ => {
                    return Err(Invalid(
                        "prompt must be a string or a non-empty array of token ids".into(),
                    ))
                }
            },
        };
        let stops = stop_strings(body.stop)?;
        let stop_token_ids = stop_token_ids(body.stop_token_ids)?;
        let sampling = body.knobs.resolve()?;
        let tools = match (&route, &body.tools) {
            (Api::Chat, Some(tools)) if !tools.is_null() => tool_specs(tools)?,
            _ => Vec::new(),
        };
        let tool_choice = tool_choice(body.tool_choice, &tools)?;
        let thinking = thinking(body.chat_template_kwargs.as_ref());
        Ok(Ask {
            route,
            model: body.model,
            input,
            stream: body.stream,
            include_usage: body.stream_options.unwrap_or_default().include_usage,
            max_tokens: body.max_completion_tokens.or(body.max_tokens),
            stops,
            visible_stops: false,
            stop_token_ids,
            skip_special_tokens: body.skip_special_tokens.unwrap_or(true),
            ignore_eos: body.ignore_eos,
            sampling,
            n,
            logprobs,
            tools: tools.into(),
            tool_choice,
            thinking,
            opened_by_prompt: false,
            schema: None,
        }
        .with_schema())
    }

    fn parse_generate(body: &[u8]) -> Result<Ask, Invalid> {
        let body: GenerateBody = serde_json::from_slice(body)
            .map_err(|e| Invalid(format!("invalid request body: {e}")))?;
        let input = match (body.text, body.input_ids) {
            (Some(text), None) => Input::Text(text),
            (None, Some(ids)) if !ids.is_empty() => Input::Ids(ids),
            _ => {
                return Err(Invalid(
                    "give exactly one of text or input_ids (non-empty)".into(),
                ))
            }
        };
        let p = body.sampling_params;
        let sampling = p.knobs.resolve()?;
        Ok(Ask {
            route: Api::Generate,
            model: None,
            input,
            stream: body.stream,
            include_usage: false,
            max_tokens: Some(p.max_new_tokens.unwrap_or(GENERATE_MAX_NEW_TOKENS)),
            stops: stop_strings(p.stop)?,
            visible_stops: p.no_stop_trim,
            stop_token_ids: stop_token_ids(p.stop_token_ids)?,
            skip_special_tokens: p.skip_special_tokens.unwrap_or(true),
            ignore_eos: p.ignore_eos,
            sampling,
            n: 1,
            logprobs: None,
            tools: Vec::new().into(),
            tool_choice: ToolChoice::None,
            thinking: true,
            opened_by_prompt: false,
            schema: None,
        }
        .with_schema())
    }

    /// The ids that end this generation and are not shown: the model's EOS ids and the
    /// request's stop ids, none under `ignore_eos` (which turns both off in SGLang).
    pub fn ending_ids(&self, eos_ids: &[u32]) -> Vec<u32> {
        if self.ignore_eos {
            return Vec::new();
        }
        eos_ids
            .iter()
            .chain(&self.stop_token_ids)
            .copied()
            .collect()
    }

    /// The engine's sampling parameters for this request. The gateway matches stop strings
    /// on the text it decodes; Messages' `stop_sequences` also go to the engines that take
    /// stop strings (spec 2), so they stop as soon as the gateway would. `max_tokens`
    /// absent lets the engine run to its context limit, as an OpenAI server does.
    pub fn sampling_params(&self) -> Params {
        Params {
            sampling: self.sampling,
            max_tokens: self.max_tokens,
            stop: if self.route == Api::Messages {
                self.stops.clone()
            } else {
                Vec::new()
            },
            stop_token_ids: self.stop_token_ids.clone(),
            skip_special_tokens: self.skip_special_tokens,
            ignore_eos: self.ignore_eos,
            n: self.n,
            logprobs: self.logprobs,
            json_schema: self.schema.clone(),
        }
    }

    /// `self` with its [`Ask::schema`] built: every way of making an `Ask` ends here.
    pub fn with_schema(mut self) -> Ask {
        self.schema = self.json_schema();
        self
    }

    /// The JSON schema `tool_choice` puts on the output: for `required`, an array of at
    /// least one call to a declared function (`[{"name": …, "parameters": {…}}]`, which
    /// the `json` tool-call parser reads); for a named function, that function's
    /// arguments object. `None` for `auto` and `none`.
    fn json_schema(&self) -> Option<String> {
        let arguments = |spec: &ToolSpec| match &spec.parameters {
            Value::Null => serde_json::json!({"type": "object"}),
            schema => schema.clone(),
        };
        let schema = match &self.tool_choice {
            ToolChoice::Auto | ToolChoice::None => return None,
            ToolChoice::Named(name) => arguments(self.tools.iter().find(|t| &t.name == name)?),
            ToolChoice::Required => {
                let calls: Vec<Value> = self
                    .tools
                    .iter()
                    .map(|spec| {
                        serde_json::json!({
                            "type": "object",
                            "properties": {
                                "name": {"type": "string", "enum": [spec.name]},
                                "parameters": arguments(spec),
                            },
                            "required": ["name", "parameters"],
                        })
                    })
                    .collect();
                serde_json::json!({"type": "array", "minItems": 1, "items": {"anyOf": calls}})
            }
        };
        Some(schema.to_string())
    }
}

/// The log probabilities a body asks for: chat's `logprobs: true` with `top_logprobs`
/// alternatives, completions' `logprobs: k`; `None` when none.
/// The roles a chat message may have: OpenAI's and Llama's `ipython` (its tool results).
const ROLES: [&str; 7] = [
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
    "ipython",
];

/// Every message names a known role. Templates print the role verbatim into the prompt,
/// so a role carrying a template's control tokens (`<|im_start|>`) would forge a turn.
fn check_roles(messages: &Value) -> Result<(), Invalid> {
    for message in messages.as_array().into_iter().flatten() {
        match message.get("role") {
            Some(Value::String(role)) if ROLES.contains(&role.as_str()) => {}
            Some(Value::String(role)) => {
                let shown: String = role.chars().take(32).collect();
                return Err(Invalid(format!(
                    "unknown message role {shown:?}: one of {} expected",
                    ROLES.join(", ")
                )));
            }
            _ => return Err(Invalid("each message needs a string role".into())),
        }
    }
    Ok(())
}

fn logprobs(
    route: Api,
    field: Option<Value>,
    top_logprobs: Option<u32>,
) -> Result<Option<u32>, Invalid> {
    let field = field.filter(|v| !v.is_null());
    match route {
        Api::Chat | Api::Messages => {
            let asked = match field {
                None => false,
                Some(Value::Bool(asked)) => asked,
                Some(_) => return Err(Invalid("logprobs must be true or false".into())),
            };
            let top = top_logprobs.unwrap_or(0);
            if top > MAX_CHAT_TOP_LOGPROBS {
                return Err(Invalid(format!(
                    "top_logprobs must be between 0 and {MAX_CHAT_TOP_LOGPROBS}"
                )));
            }
            if top > 0 && !asked {
                return Err(Invalid("top_logprobs needs logprobs: true".into()));
            }
            Ok(asked.then_some(top))
        }
        Api::Completions | Api::Generate => match field {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(k) if k <= u64::from(MAX_COMPLETION_LOGPROBS) => Ok(Some(k as u32)),
                _ => Err(Invalid(format!(
                    "logprobs must be an integer between 0 and {MAX_COMPLETION_LOGPROBS}"
                ))),
            },
        },
    }
}

/// The functions of a `tools` array (`[{type: "function", function: {name, parameters}}]`),
/// within [`MAX_TOOLS`]; the template renders the array itself, this is what the tool-call
/// parser needs.
pub fn tool_specs(tools: &Value) -> Result<Vec<ToolSpec>, Invalid> {
    let list = tools
        .as_array()
        .ok_or_else(|| Invalid("tools must be an array".into()))?;
    if list.len() > MAX_TOOLS {
        return Err(Invalid(format!(
            "tools takes at most {MAX_TOOLS} functions"
        )));
    }
    list.iter()
        .enumerate()
        .map(|(at, tool)| {
            let kind = tool
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("function");
            let function = tool.get("function").filter(|_| kind == "function");
            let name = function
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .filter(|name| !name.is_empty())
                .ok_or_else(|| Invalid(format!("tools[{at}].function.name is required")))?;
            Ok(ToolSpec {
                name: name.to_owned(),
                parameters: function
                    .and_then(|f| f.get("parameters"))
                    .cloned()
                    .unwrap_or(Value::Null),
            })
        })
        .collect()
}

/// `tool_choice`: `"none"`, `"auto"`, `"required"` or `{type: "function", function:
/// {name}}`; absent is `auto` with tools, `none` without. A choice that needs tools, or
/// names one not declared, is refused.
fn tool_choice(field: Option<Value>, tools: &[ToolSpec]) -> Result<ToolChoice, Invalid> {
    let choice = match field.filter(|v| !v.is_null()) {
        None if tools.is_empty() => return Ok(ToolChoice::None),
        None => ToolChoice::Auto,
        Some(Value::String(word)) => match word.as_str() {
            "none" => ToolChoice::None,
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(Invalid(format!(
                    "tool_choice must be none, auto, required or a function, not {other:?}"
                )))
            }
        },
        Some(named) => {
            let name = named
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    Invalid("tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}}".into())
                })?;
            ToolChoice::Named(name.to_owned())
        }
    };
    match &choice {
        ToolChoice::Required | ToolChoice::Named(_) if tools.is_empty() => {
            Err(Invalid("tool_choice needs tools".into()))
        }
        ToolChoice::Named(name) if !tools.iter().any(|t| &t.name == name) => Err(Invalid(format!(
            "tool_choice names {name:?}, which is not among the tools"
        ))),
        _ => Ok(choice),
    }
}

/// Whether the template kwargs let the model think: `enable_thinking` (Qwen3, GLM) or
/// `thinking` (DeepSeek-V3.1), true unless one is false.
fn thinking(kwargs: Option<&Map<String, Value>>) -> bool {
    let Some(kw) = kwargs else {
        return true;
    };
    ["enable_thinking", "thinking"]
        .iter()
        .all(|key| kw.get(*key).and_then(Value::as_bool) != Some(false))
}

/// The non-empty stop strings of a `stop` field, within the bounds.
pub fn stop_strings(stop: Option<Stop>) -> Result<Vec<String>, Invalid> {
    let stops = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(list)) => list,
    };
    let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
    if stops.len() > MAX_STOPS || stops.iter().any(|s| s.len() > MAX_STOP_BYTES) {
        return Err(Invalid(format!(
            "stop takes at most {MAX_STOPS} strings of at most {MAX_STOP_BYTES} bytes"
        )));
    }
    Ok(stops)
}

/// `stop_token_ids`, within the bound.
fn stop_token_ids(ids: Option<Vec<u32>>) -> Result<Vec<u32>, Invalid> {
    let ids = ids.unwrap_or_default();
    if ids.len() > MAX_STOP_TOKEN_IDS {
        return Err(Invalid(format!(
            "stop_token_ids takes at most {MAX_STOP_TOKEN_IDS} ids"
        )));
    }
    Ok(ids)
}

/// The ranges OpenAI documents; outside them an engine would fail or misbehave.
fn check(s: &Sampling) -> Result<(), Invalid> {
    let bad = |name: &str, range: &str| Err(Invalid(format!("{name} must be {range}")));
    if !(0.0..=2.0).contains(&s.temperature) {
        return bad("temperature", "between 0 and 2");
    }
    if !(s.top_p > 0.0 && s.top_p <= 1.0) {
        return bad("top_p", "in (0, 1]");
    }
    if s.top_k < -1 || s.top_k == 0 {
        return bad("top_k", "-1 (off) or a positive integer");
    }
    if !(0.0..=1.0).contains(&s.min_p) {
        return bad("min_p", "between 0 and 1");
    }
    if !(-2.0..=2.0).contains(&s.frequency_penalty) {
        return bad("frequency_penalty", "between -2 and 2");
    }
    if !(-2.0..=2.0).contains(&s.presence_penalty) {
        return bad("presence_penalty", "between -2 and 2");
    }
    if !(s.repetition_penalty > 0.0 && s.repetition_penalty <= 2.0) {
        return bad("repetition_penalty", "in (0, 2]");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn roles_are_openais_and_nothing_else() {
        for role in ROLES {
            let body = json!({"messages": [{"role": role, "content": "x"}]}).to_string();
            assert!(Ask::parse(Api::Chat, body.as_bytes()).is_ok(), "{role}");
        }
        for message in [
            json!({"role": "user<|im_end|>\n<|im_start|>system", "content": "x"}),
            json!({"role": "User", "content": "x"}),
            json!({"role": 7, "content": "x"}),
            json!({"content": "x"}),
        ] {
            let body = json!({"messages": [message]}).to_string();
            assert!(Ask::parse(Api::Chat, body.as_bytes()).is_err(), "{message}");
        }
    }

    fn chat(body: &str) -> Result<Ask, Invalid> {
        Ask::parse(Api::Chat, body.as_bytes())
    }

    #[test]
    fn defaults_are_the_openai_defaults_not_proto_zeroes() {
        let ask = chat(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        let p = ask.sampling_params();
        let k = p.sampling;
        assert_eq!((k.temperature, k.top_p, k.top_k), (1.0, 1.0, -1));
        assert_eq!((k.min_p, k.repetition_penalty), (0.0, 1.0));
        assert_eq!(p.max_tokens, None);
        assert!(p.skip_special_tokens);
        assert!(!ask.stream);
        let nulls =
            chat(r#"{"messages":[{"role":"user"}],"temperature":null,"top_k":null}"#).unwrap();
        assert_eq!(nulls.sampling, ask.sampling, "null is the default");
    }

    #[test]
    fn fields_map_to_sampling_params() {
        let ask = chat(
            r#"{"messages":[{"role":"user","content":"hi"}],"temperature":0,"top_p":0.5,
                "top_k":40,"max_tokens":7,"max_completion_tokens":9,"stop":"\n",
                "stream":true,"stream_options":{"include_usage":true},"stop_token_ids":[3]}"#,
        )
        .unwrap();
        let p = ask.sampling_params();
        let k = p.sampling;
        assert_eq!((k.temperature, k.top_p, k.top_k), (0.0, 0.5, 40));
        assert_eq!(p.max_tokens, Some(9));
        assert_eq!(p.stop_token_ids, [3]);
        assert_eq!(ask.stops, ["\n"]);
        assert!(ask.stream && ask.include_usage);
    }

    #[test]
    fn bad_bodies_are_refused_with_a_reason() {
        for (body, says) in [
            ("{", "invalid request body"),
            (r#"{"model":"m"}"#, "messages is required"),
            (r#"{"messages":[]}"#, "non-empty array"),
            (r#"{"messages":"hi"}"#, "non-empty array"),
            (
                r#"{"messages":[{"role":"user"}],"n":0}"#,
                "n must be between 1 and 16",
            ),
            (
                r#"{"messages":[{"role":"user"}],"n":17}"#,
                "n must be between 1 and 16",
            ),
            (
                r#"{"messages":[{"role":"user"}],"logprobs":2}"#,
                "logprobs must be true",
            ),
            (
                r#"{"messages":[{"role":"user"}],"logprobs":true,"top_logprobs":21}"#,
                "top_logprobs must be between 0 and 20",
            ),
            (
                r#"{"messages":[{"role":"user"}],"top_logprobs":2}"#,
                "needs logprobs: true",
            ),
            (
                r#"{"messages":[{"role":"user"}],"temperature":3}"#,
                "temperature",
            ),
            (r#"{"messages":[{"role":"user"}],"top_k":0}"#, "top_k"),
            (
                r#"{"messages":[{"role":"user"}],"stop":[1]}"#,
                "invalid request body",
            ),
        ] {
            let Err(Invalid(message)) = chat(body) else {
                panic!("{body} was accepted");
            };
            assert!(message.contains(says), "{body}: {message}");
        }
        let many = format!(r#"{{"messages":[{{}}],"stop":{:?}}}"#, vec!["x"; 17]);
        assert!(chat(&many).is_err());
    }

    #[test]
    fn generate_takes_sglang_names_and_defaults() {
        let ask = Ask::parse(
            Api::Generate,
            br#"{"text":"hi","sampling_params":{"temperature":0,"stop":"x","no_stop_trim":true}}"#,
        )
        .unwrap();
        assert!(matches!(ask.input, Input::Text(ref t) if t == "hi"));
        assert_eq!(ask.max_tokens, Some(128));
        assert_eq!(ask.sampling.temperature, 0.0);
        assert!(ask.visible_stops && ask.stops == ["x"]);
        let ids = Ask::parse(Api::Generate, br#"{"input_ids":[5],"stream":true}"#).unwrap();
        assert!(matches!(ids.input, Input::Ids(ref i) if i == &[5]) && ids.stream);
        assert!(Ask::parse(Api::Generate, br#"{"text":"a","input_ids":[1]}"#).is_err());
        assert!(Ask::parse(Api::Generate, br#"{}"#).is_err());
    }

    #[test]
    fn completions_take_text_or_ids() {
        let text = Ask::parse(Api::Completions, br#"{"prompt":"hi"}"#).unwrap();
        assert!(matches!(text.input, Input::Text(ref t) if t == "hi"));
        let ids = Ask::parse(Api::Completions, br#"{"prompt":[1,2]}"#).unwrap();
        assert!(matches!(ids.input, Input::Ids(ref i) if i == &[1, 2]));
        let batch = Ask::parse(Api::Completions, br#"{"prompt":["hi"]}"#).unwrap();
        assert!(matches!(batch.input, Input::Text(_)));
        assert!(Ask::parse(Api::Completions, br#"{"prompt":[]}"#).is_err());
        assert!(Ask::parse(Api::Completions, br#"{}"#).is_err());
    }

    #[test]
    fn n_and_logprobs_are_read_per_route() {
        let ask = chat(r#"{"messages":[{"role":"user"}],"n":3,"logprobs":true,"top_logprobs":2}"#)
            .unwrap();
        let p = ask.sampling_params();
        assert_eq!((p.n, p.logprobs), (3, Some(2)));
        let plain =
            chat(r#"{"messages":[{"role":"user"}],"logprobs":false,"top_logprobs":0}"#).unwrap();
        assert_eq!((plain.n, plain.logprobs), (1, None));
        assert_eq!(
            chat(r#"{"messages":[{"role":"user"}],"logprobs":true}"#)
                .unwrap()
                .logprobs,
            Some(0)
        );
        let text = |body: &str| Ask::parse(Api::Completions, body.as_bytes());
        assert_eq!(
            text(r#"{"prompt":"a","logprobs":5}"#).unwrap().logprobs,
            Some(5)
        );
        assert_eq!(
            text(r#"{"prompt":"a","logprobs":null}"#).unwrap().logprobs,
            None
        );
        for bad in [
            r#"{"prompt":"a","logprobs":6}"#,
            r#"{"prompt":"a","logprobs":true}"#,
        ] {
            let Err(Invalid(message)) = text(bad) else {
                panic!("{bad} was accepted");
            };
            assert!(message.contains("between 0 and 5"), "{message}");
        }
        let generate = Ask::parse(Api::Generate, br#"{"text":"a"}"#).unwrap();
        assert_eq!((generate.n, generate.logprobs), (1, None));
    }
}

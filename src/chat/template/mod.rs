//! Chat templates rendered as Hugging Face transformers' `apply_chat_template` renders them,
//! so a model behind tollgate's own pipeline sees the prompt it would see behind vLLM or
//! SGLang. transformers compiles templates in an `ImmutableSandboxedEnvironment` with
//! `trim_blocks`, `lstrip_blocks` and the loop-control extension, and adds the `tojson`
//! filter (Python's `json.dumps`), the `raise_exception` and `strftime_now` globals and the
//! `{% generation %}` block; templates also call Python's string and dict methods. This
//! module sets MiniJinja up the same way: pycompat for the methods, Python's `str()` for
//! printed values (`None`, `True`, `['a']`), and the rest in the submodules.
//!
//! Known differences from Python that no real template is known to rely on: the `~` operator
//! formats `none` and `true` MiniJinja's way (lowercase); unknown filters fail at render time
//! rather than at compile time; `strftime_now` reads UTC rather than local time; a namespace
//! stored inside itself (`{% set ns.me = ns %}`) is never freed, as values are reference
//! counted where Python has a cycle collector.
//!
//! Templates are operator configuration, not request data, but a broken one must not take
//! the gateway down: each render has an instruction budget (fuel) and an output bound, and
//! every failure is a [`TemplateError`]. Values a template builds without printing them are
//! bounded only by MiniJinja's own limits (a repeated string up to 100 MB, `range` up to
//! 100,000 items): a template that doubles a string in a loop can still exhaust memory
//! within its budget, as it would in Python.

mod error;
mod find;
mod input;
mod json;
mod py;
mod strftime;

use std::borrow::Cow;
use std::io;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Value};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, UndefinedBehavior};

pub use error::TemplateError;
pub use find::find_template;

/// The name the one template is registered under; shows in render errors (`in chat_template:3`).
const NAME: &str = "chat_template";

/// Variables a template always gets from the request; `chat_template_kwargs` may not replace
/// them (in transformers the call would fail with a duplicate keyword argument).
const RESERVED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// Bounds on one render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest prompt a render may produce, in bytes.
    pub max_output: usize,
    /// Template instructions one render may execute.
    pub fuel: u64,
}

impl Default for Limits {
    /// 16 MiB of prompt (millions of tokens, far past any context window) and 10 million
    /// instructions: a Qwen3-sized template spends about 70 a message, so that is some
    /// 140,000 messages, and a template that never ends stops after about 0.3 s of CPU.
    fn default() -> Self {
        Limits {
            max_output: 16 << 20,
            fuel: 10_000_000,
        }
    }
}

/// What one render takes: the request's fields, as the client sent them.
#[derive(Debug, Clone, Copy)]
pub struct RenderInput<'a> {
    /// The OpenAI chat `messages` array.
    pub messages: &'a serde_json::Value,
    /// The OpenAI `tools` array (`{type: "function", function: {name, description,
    /// parameters}}` each), if any. Without it the template sees `tools` as `none`, as in
    /// transformers.
    pub tools: Option<&'a serde_json::Value>,
    /// Whether to end with the opening of an assistant turn.
    pub add_generation_prompt: bool,
    /// `chat_template_kwargs` (`enable_thinking` and the like): each becomes a variable.
    pub kwargs: Option<&'a serde_json::Map<String, serde_json::Value>>,
    /// The tokenizer's beginning-of-sequence token, when it has one.
    pub bos_token: Option<&'a str>,
    /// The tokenizer's end-of-sequence token, when it has one.
    pub eos_token: Option<&'a str>,
}

/// A chat template compiled once and rendered for every request; `Send + Sync`.
pub struct ChatTemplate {
    env: Environment<'static>,
    limits: Limits,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compiles `source` with the default [`Limits`]; a syntax error is reported here.
    pub fn new(source: &str) -> Result<ChatTemplate, TemplateError> {
        ChatTemplate::with_limits(source, Limits::default())
    }

    /// Compiles `source` with the given bounds on each render.
    pub fn with_limits(source: &str, limits: Limits) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| TemplateError::Syntax(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_fuel(Some(limits.fuel));
        // Debug info clones the template's source and state into every error.
        env.set_debug(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(format_value);
        env.add_filter("tojson", json::tojson);
        env.add_filter("string", string_filter);
        env.add_filter("join", join_filter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", |format: &str| {
            strftime::strftime_now(format)
        });
        let source = without_generation_tags(source).into_owned();
        env.add_template_owned(NAME, source)
            .map_err(|e| TemplateError::Syntax(e.to_string()))?;
        Ok(ChatTemplate { env, limits })
    }

    /// Renders the prompt for one request.
    pub fn render(&self, input: &RenderInput<'_>) -> Result<String, TemplateError> {
        let context = context(input)?;
        let template = self
            .env
            .get_template(NAME)
            .map_err(|e| TemplateError::Render(e.to_string()))?;
        let mut out = BoundedOutput {
            bytes: Vec::new(),
            limit: self.limits.max_output,
            overflowed: false,
        };
        if let Err(err) = template.render_captured_to(context, &mut out) {
            return Err(if out.overflowed {
                TemplateError::OutputTooLarge {
                    limit: self.limits.max_output,
                }
            } else {
                self.classify(&err)
            });
        }
        String::from_utf8(out.bytes)
            .map_err(|_| TemplateError::Render("output is not UTF-8".to_owned()))
    }

    fn classify(&self, err: &Error) -> TemplateError {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
        while let Some(current) = cause {
            if let Some(Raised(message)) = current.downcast_ref::<Raised>() {
                return TemplateError::Raised(message.clone());
            }
            cause = current.source();
        }
        match err.kind() {
            ErrorKind::OutOfFuel => TemplateError::OutOfFuel {
                fuel: self.limits.fuel,
            },
            _ => TemplateError::Render(err.to_string()),
        }
    }
}

/// The template's variables: transformers passes `messages`, `tools` and `documents` (`None`
/// when absent), `add_generation_prompt`, the tokenizer's special tokens, then the kwargs,
/// which may replace the tokens but not the first four.
fn context(input: &RenderInput<'_>) -> Result<Value, TemplateError> {
    let tools = match input.tools {
        None | Some(serde_json::Value::Null) => Value::from(()),
        Some(tools @ serde_json::Value::Array(_)) => input::value(tools)?,
        Some(_) => {
            return Err(TemplateError::BadInput(
                "`tools` must be an array".to_owned(),
            ))
        }
    };
    let mut vars: Vec<(&str, Value)> = vec![
        ("messages", input::messages(input.messages)?),
        ("tools", tools),
        ("documents", Value::from(())),
        (
            "add_generation_prompt",
            Value::from(input.add_generation_prompt),
        ),
    ];
    if let Some(bos) = input.bos_token {
        vars.push(("bos_token", Value::from(bos)));
    }
    if let Some(eos) = input.eos_token {
        vars.push(("eos_token", Value::from(eos)));
    }
    for (name, value) in input.kwargs.into_iter().flatten() {
        if RESERVED.contains(&name.as_str()) {
            return Err(TemplateError::BadInput(format!(
                "chat_template_kwargs may not set `{name}`"
            )));
        }
        vars.push((name, input::value(value)?));
    }
    // Later entries win: a kwarg named `bos_token` replaces the tokenizer's.
    Ok(Value::from_pairs(vars))
}

/// Writes into memory until the bound, then fails the render.
struct BoundedOutput {
    bytes: Vec<u8>,
    limit: usize,
    overflowed: bool,
}

impl io::Write for BoundedOutput {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.bytes.len().saturating_add(data.len()) > self.limit {
            self.overflowed = true;
            return Err(io::Error::other("chat template output bound reached"));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `{{ value }}` prints Python's `str(value)`.
fn format_value(out: &mut minijinja::Output, _: &mut State, value: &Value) -> Result<(), Error> {
    let written = match value.as_str() {
        Some(text) => out.write_str(text),
        None => {
            let mut text = String::new();
            py::write_str(&mut text, value)?;
            out.write_str(&text)
        }
    };
    written.map_err(|_| Error::new(ErrorKind::WriteFailure, "cannot write output"))
}

/// Jinja2's `string` filter: Python's `str(value)`.
fn string_filter(value: &Value) -> Result<Value, Error> {
    if value.as_str().is_some() {
        return Ok(value.clone());
    }
    py::to_str(value).map(Value::from)
}

/// Jinja2's `join(d="", attribute=None)`: each item (or its `attribute`, a dotted path whose
/// numeric parts index sequences) as Python's `str()`, separated by `d`.
fn join_filter(
    value: &Value,
    separator: Option<Value>,
    attribute: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let separator = match separator {
        Some(separator) => Some(separator),
        None => kwargs.get::<Option<Value>>("d")?,
    };
    let separator = match &separator {
        Some(separator) => py::to_str(separator)?,
        None => String::new(),
    };
    let attribute = match attribute {
        Some(attribute) => Some(attribute),
        None => kwargs.get::<Option<Value>>("attribute")?,
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    for (i, mut item) in value.try_iter()?.enumerate() {
        if let Some(path) = &attribute {
            item = lookup_path(&item, path)?;
        }
        if i > 0 {
            out.push_str(&separator);
        }
        py::write_str(&mut out, &item)?;
    }
    Ok(Value::from(out))
}

fn lookup_path(item: &Value, path: &Value) -> Result<Value, Error> {
    let Some(path) = path.as_str() else {
        return item.get_item(path);
    };
    let mut current = item.clone();
    for part in path.split('.') {
        let key = match part.parse::<i64>() {
            Ok(index) => Value::from(index),
            Err(_) => Value::from(part),
        };
        current = current.get_item(&key)?;
    }
    Ok(current)
}

/// The marker `raise_exception` leaves in its error, so a render can tell the template's own
/// refusal from other failures.
#[derive(Debug)]
struct Raised(String);

impl std::fmt::Display for Raised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

fn raise_exception(message: &Value) -> Result<Value, Error> {
    let message = py::to_str(message)?;
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// transformers' `{% generation %}…{% endgeneration %}` marks the assistant's tokens for
/// training masks and renders its body unchanged. MiniJinja has no such tag, so each is
/// rewritten to an always-true `if` with the same whitespace control (`{%- generation %}`
/// becomes `{%- if true %}`), which renders the same.
fn without_generation_tags(source: &str) -> Cow<'_, str> {
    if !source.contains("generation") {
        return Cow::Borrowed(source);
    }
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let (before, tag) = rest.split_at(start);
        out.push_str(before);
        let body = &tag[2..];
        let modifier = body.len() - body.trim_start_matches(['-', '+']).len();
        let (marker, after_marker) = body.split_at(modifier.min(1));
        let name_start = after_marker.len() - after_marker.trim_start().len();
        let name_and_more = &after_marker[name_start..];
        let name_len = name_and_more
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(name_and_more.len());
        let replacement = match &name_and_more[..name_len] {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        let closes = name_and_more[name_len..]
            .trim_start()
            .trim_start_matches(['-', '+'])
            .starts_with("%}");
        match replacement {
            Some(replacement) if closes => {
                out.push_str("{%");
                out.push_str(marker);
                out.push_str(&after_marker[..name_start]);
                out.push_str(replacement);
                rest = &name_and_more[name_len..];
            }
            _ => {
                out.push_str("{%");
                rest = body;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests;

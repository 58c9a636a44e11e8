//! Chat templates never panic, on arbitrary template sources or arbitrary request JSON; a
//! render stays within its output bound and, for the committed templates, gives the same
//! answer twice.
//!
//! Layout: the first byte selects. When its bit 7 is clear, its low six bits modulo 5 pick
//! one of the committed test templates (`tests/fixtures/chat_templates/templates/`) and the
//! rest of the input is the request JSON; when bit 7 is set the rest is `template source \0
//! request JSON`. Bit 6 is `add_generation_prompt`. The request JSON is the `messages` value,
//! or an object with `messages` and optionally `tools` and `kwargs`.
//!
//! Arbitrary sources are always compiled, but rendered only when they cannot build large
//! values or cycles: a template doubles a string in one instruction (`s ~ s`, `'x' * n`,
//! `[s, s] | join`), so no instruction budget bounds its memory; and a namespace stored in
//! itself is never freed (reference counting; Python's collector would free it), which the
//! sanitizer reports as a leak. Templates are operator configuration, not request data; what
//! is fuzzed here is that nothing panics. The committed templates use namespaces and string
//! building on the fuzzed requests.

use serde_json::Value;
use tollgate::chat::template::{ChatTemplate, Limits, RenderInput, TemplateError};

const OWN: [&str; 5] = [
    include_str!("../../tests/fixtures/chat_templates/templates/turns.jinja"),
    include_str!("../../tests/fixtures/chat_templates/templates/tools.jinja"),
    include_str!("../../tests/fixtures/chat_templates/templates/python.jinja"),
    include_str!("../../tests/fixtures/chat_templates/templates/thinking.jinja"),
    include_str!("../../tests/fixtures/chat_templates/templates/agent.jinja"),
];

/// What keeps an arbitrary source from being rendered (see the module doc): operators and
/// filters through which a value grows faster than the instruction count, and namespaces.
const NOT_RENDERED: [&str; 10] = [
    "~",
    "+",
    "*",
    "join",
    "replace",
    "format",
    "indent",
    "center",
    "tojson",
    "namespace",
];

const LIMITS: Limits = Limits {
    max_output: 1 << 20,
    fuel: 200_000,
};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let add_generation_prompt = selector & 0x40 != 0;
    if selector & 0x80 == 0 {
        let source = OWN[usize::from(selector & 0x3f) % OWN.len()];
        let template = ChatTemplate::with_limits(source, LIMITS).expect("own templates compile");
        let first = render(&template, rest, add_generation_prompt);
        let again = render(&template, rest, add_generation_prompt);
        assert_eq!(first, again, "rendering is deterministic");
        return;
    }
    let (source, request) = match rest.iter().position(|&b| b == 0) {
        Some(nul) => (&rest[..nul], &rest[nul + 1..]),
        None => (rest, &[][..]),
    };
    let source = String::from_utf8_lossy(source);
    let Ok(template) = ChatTemplate::with_limits(&source, LIMITS) else {
        return;
    };
    if source.len() <= 1024 && !NOT_RENDERED.iter().any(|g| source.contains(g)) {
        render(&template, request, add_generation_prompt);
    }
}

fn render(
    template: &ChatTemplate,
    request: &[u8],
    add_generation_prompt: bool,
) -> Option<Result<String, TemplateError>> {
    let request: Value = serde_json::from_slice(request).ok()?;
    let (messages, tools, kwargs) = match &request {
        Value::Object(fields) if fields.contains_key("messages") => (
            &fields["messages"],
            fields.get("tools"),
            fields.get("kwargs").and_then(Value::as_object),
        ),
        other => (other, None, None),
    };
    let result = template.render(&RenderInput {
        messages,
        tools,
        add_generation_prompt,
        kwargs,
        bos_token: Some("<s>"),
        eos_token: Some("</s>"),
    });
    match &result {
        Ok(prompt) => assert!(prompt.len() <= LIMITS.max_output, "output within the bound"),
        Err(err) => assert!(!err.to_string().contains('\n'), "one-line error: {err}"),
    }
    Some(result)
}

use serde_json::json;

use super::*;

fn input(messages: &serde_json::Value) -> RenderInput<'_> {
    RenderInput {
        messages,
        tools: None,
        add_generation_prompt: false,
        kwargs: None,
        bos_token: None,
        eos_token: None,
    }
}

fn render(source: &str, messages: serde_json::Value) -> Result<String, TemplateError> {
    ChatTemplate::new(source)?.render(&input(&messages))
}

#[test]
fn compiled_template_is_shareable() {
    fn shareable<T: Send + Sync>() {}
    shareable::<ChatTemplate>();
}

#[test]
fn syntax_error_is_reported_at_compile_time() {
    let err = ChatTemplate::new("{% for m in messages %}{{ m.content }}").unwrap_err();
    assert!(matches!(err, TemplateError::Syntax(_)), "{err:?}");
    assert!(!err.to_string().contains('\n'));
}

#[test]
fn raise_exception_carries_the_templates_message() {
    let source = "{% for m in messages %}{% if m.role == 'bot' %}{{ raise_exception('Roles must be user or assistant, not ' + m.role) }}{% endif %}{% endfor %}";
    let err = render(source, json!([{"role": "bot", "content": "x"}])).unwrap_err();
    assert_eq!(
        err,
        TemplateError::Raised("Roles must be user or assistant, not bot".to_owned())
    );
    assert_eq!(
        err.to_string(),
        "chat template rejected the conversation: Roles must be user or assistant, not bot"
    );

    // From inside a macro and a loop, too.
    let source = "{% macro check(m) %}{% if not m.content %}{{ raise_exception('empty\nmessage') }}{% endif %}{% endmacro %}{% for m in messages %}{{ check(m) }}{% endfor %}";
    let err = render(source, json!([{"role": "user", "content": ""}])).unwrap_err();
    assert_eq!(err, TemplateError::Raised("empty\nmessage".to_owned()));
    assert_eq!(
        err.to_string(),
        "chat template rejected the conversation: empty message"
    );
}

#[test]
fn other_render_failures_are_render_errors() {
    let err = render("{{ messages[0].content.nothing.deeper }}", json!([{}])).unwrap_err();
    assert!(matches!(err, TemplateError::Render(_)), "{err:?}");
    let err = render("{{ messages | no_such_filter }}", json!([])).unwrap_err();
    assert!(matches!(err, TemplateError::Render(_)), "{err:?}");
}

#[test]
fn messages_must_be_an_array_of_objects() {
    for messages in [json!({"role": "user"}), json!("hi"), json!([1])] {
        let err = render("{{ messages }}", messages).unwrap_err();
        assert!(matches!(err, TemplateError::BadInput(_)), "{err:?}");
    }
    let template = ChatTemplate::new("").unwrap();
    let messages = json!([]);
    let tools = json!({"not": "an array"});
    let err = template
        .render(&RenderInput {
            tools: Some(&tools),
            ..input(&messages)
        })
        .unwrap_err();
    assert!(matches!(err, TemplateError::BadInput(_)), "{err:?}");
}

#[test]
fn kwargs_cannot_replace_the_request_but_can_replace_tokens() {
    let template = ChatTemplate::new("{{ bos_token }}|{{ enable_thinking }}").unwrap();
    let messages = json!([]);
    let kwargs = json!({"enable_thinking": false, "bos_token": "<s2>"});
    let rendered = template
        .render(&RenderInput {
            kwargs: kwargs.as_object(),
            bos_token: Some("<s>"),
            ..input(&messages)
        })
        .unwrap();
    assert_eq!(rendered, "<s2>|False");

    let kwargs = json!({"messages": []});
    let err = template
        .render(&RenderInput {
            kwargs: kwargs.as_object(),
            ..input(&messages)
        })
        .unwrap_err();
    assert!(matches!(err, TemplateError::BadInput(_)), "{err:?}");
}

#[test]
fn output_is_bounded() {
    let limits = Limits {
        max_output: 1000,
        ..Limits::default()
    };
    let template = ChatTemplate::with_limits(
        "{% for i in range(100) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}",
        limits,
    )
    .unwrap();
    let messages = json!([{"role": "user", "content": "0123456789"}]);
    assert_eq!(template.render(&input(&messages)).unwrap().len(), 1000);
    let messages = json!([{"role": "user", "content": "0123456789!"}]);
    assert_eq!(
        template.render(&input(&messages)).unwrap_err(),
        TemplateError::OutputTooLarge { limit: 1000 }
    );

    // The default bound: 16 MiB.
    let template = ChatTemplate::new(
        "{% for i in range(100) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}",
    )
    .unwrap();
    let messages = json!([{"role": "user", "content": "x".repeat(200_000)}]);
    assert_eq!(
        template.render(&input(&messages)).unwrap_err(),
        TemplateError::OutputTooLarge { limit: 16 << 20 }
    );
}

#[test]
fn endless_templates_run_out_of_fuel() {
    let limits = Limits {
        fuel: 10_000,
        ..Limits::default()
    };
    let template = ChatTemplate::with_limits(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        limits,
    )
    .unwrap();
    assert_eq!(
        template.render(&input(&json!([]))).unwrap_err(),
        TemplateError::OutOfFuel { fuel: 10_000 }
    );
}

#[test]
fn a_namespace_holding_itself_cannot_be_printed() {
    let source = "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me | tojson }}";
    assert!(matches!(
        render(source, json!([])),
        Err(TemplateError::Render(_))
    ));
    let source = "{% set ns = namespace(a=1) %}{% set ns.me = [ns] %}{{ ns.me }}";
    assert!(matches!(
        render(source, json!([])),
        Err(TemplateError::Render(_))
    ));
}

#[test]
fn values_print_as_python_does() {
    let source = "{{ messages[0].name }}|{{ none }}|{{ true }}|{{ 1.0 }}|{{ messages[0] }}|{{ [none, 2] | join(', ') }}|{{ false | string }}|{{ undefined_thing }}|{{ messages | join('/', attribute='role') }}";
    let rendered = render(
        source,
        json!([{"role": "assistant", "name": null, "content": "x"}]),
    )
    .unwrap();
    assert_eq!(
        rendered,
        "None|None|True|1.0|{'role': 'assistant', 'name': None, 'content': 'x'}|None, 2|False||assistant"
    );
}

#[test]
fn transformers_globals_and_environment() {
    let source = "{%- for m in messages %}\n  {%- if loop.index0 == 1 %}{% continue %}{% endif %}\n  {{- m.content.strip().upper() }}\n  {%- if loop.index0 == 2 %}{% break %}{% endif %}\n{%- endfor %}\n{{ strftime_now('%Y')|length }}\n";
    let rendered = render(
        source,
        json!([{"content": " a "}, {"content": "b"}, {"content": "c"}, {"content": "d"}]),
    )
    .unwrap();
    // trim_blocks eats the newline after a block tag, keep_trailing_newline is off.
    assert_eq!(rendered, "AC4");
}

#[test]
fn generation_blocks_render_their_body() {
    let source = "{% for m in messages %}{%- generation -%}\n  [{{ m.content }}]\n{%- endgeneration %}|{% endfor %}";
    let rendered = render(source, json!([{"content": "a"}, {"content": "b"}])).unwrap();
    assert_eq!(rendered, "[a]|[b]|");
    assert_eq!(
        without_generation_tags("{%+ generation%}x{%endgeneration -%}{% generations %}"),
        "{%+ if true%}x{%endif -%}{% generations %}"
    );
}

#[test]
fn reversing_an_empty_list_or_string() {
    // Qwen3's template scans `messages[::-1]`; MiniJinja 2 panicked on an empty list.
    let source =
        "{% for m in messages[::-1] %}x{% endfor %}[{{ ''[::-1] }}]{{ messages[5:1:-1] | length }}";
    assert_eq!(render(source, json!([])).unwrap(), "[]0");
}

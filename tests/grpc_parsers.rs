//! Tool-call and reasoning parsers on the gRPC path, black box: tollgate in front of the
//! bundled `grpc-engine` (mock mode), which echoes the prompt's ids up to the template's
//! end-of-turn token. So the model "says" `user\n` followed by the user message, and a
//! message written in a model family's tool-call syntax comes back as that family's output:
//! the gateway must turn it into OpenAI `tool_calls`, streamed and not, and split reasoning
//! into `reasoning_content`. The parsers are chosen by flag, by model card, or refused.

use crate::common;
use crate::support;

use std::time::Duration;

use common::tokenizer::{write_tokenizer, IM_END};
use common::{eventually, gateway, post_json, wait_ready, Proc};
use serde_json::{json, Value};
use support::echo::{grpc_url, temp_dir};
use support::{read_frames, start_json};

const WEATHER: &str = "get_weather";

/// An engine stopping at the template's end of turn, and a gateway with `flags` before it.
async fn setup(name: &str, flags: &[&str]) -> (Proc, Proc) {
    let dir = temp_dir("parsers", name);
    let tok = write_tokenizer(&dir);
    let eos = tok.token_to_id(IM_END).unwrap().to_string();
    let engine = common::grpc_engine(&["--model", "echo-model", "--eos-token-id", &eos]);
    let mut args = vec![
        "--worker-urls",
        &grpc_url(&engine),
        "--model-path",
        dir.to_str().unwrap(),
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    args.extend(flags.iter().map(|f| (*f).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let gw = gateway(&args);
    wait_ready(&gw).await;
    (engine, gw)
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": WEATHER, "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}}])
}

fn body(content: &str, stream: bool) -> Value {
    json!({"model": "echo-model", "max_tokens": 400, "stream": stream,
           "messages": [{"role": "user", "content": content}], "tools": tools()})
}

/// `(name, arguments as JSON)` of each call.
type Calls = Vec<(String, Value)>;

/// `(content, reasoning, calls, finish_reason)` of a whole answer.
type Seen = (Value, Value, Calls, String);

fn whole(v: &Value) -> Seen {
    let choice = &v["choices"][0];
    let message = &choice["message"];
    let calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    assert_eq!(c["type"], "function", "{c}");
                    let id = c["id"].as_str().unwrap();
                    assert!(id.starts_with("call_") && id.len() > 10, "{id}");
                    let args = c["function"]["arguments"].as_str().unwrap();
                    let parsed = serde_json::from_str(args)
                        .unwrap_or_else(|e| panic!("arguments {args:?} are not JSON: {e}"));
                    (c["function"]["name"].as_str().unwrap().to_owned(), parsed)
                })
                .collect()
        })
        .unwrap_or_default();
    (
        message["content"].clone(),
        message
            .get("reasoning_content")
            .cloned()
            .unwrap_or(Value::Null),
        calls,
        choice["finish_reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The same from a stream's chunks, accumulated the way the OpenAI SDK does; checks that
/// every call is named once, in its first piece, with an id, and keeps its index.
fn streamed(sse: &str) -> Seen {
    let mut content = String::new();
    let mut reasoning = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = String::new();
    for data in sse.split("\n\n").filter_map(|e| e.strip_prefix("data: ")) {
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"));
        let Some(choice) = v["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        content.push_str(delta["content"].as_str().unwrap_or_default());
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
        for piece in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = piece["index"].as_u64().unwrap() as usize;
            if let Some(id) = piece["id"].as_str() {
                assert_eq!(index, calls.len(), "calls start in order: {sse}");
                let name = piece["function"]["name"].as_str().unwrap();
                calls.push((id.to_owned(), name.to_owned(), String::new()));
            } else {
                assert!(piece["function"].get("name").is_none(), "renamed: {piece}");
            }
            let call = calls
                .get_mut(index)
                .expect("arguments of an announced call");
            call.2
                .push_str(piece["function"]["arguments"].as_str().unwrap_or_default());
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = reason.to_owned();
        }
    }
    let calls = calls
        .into_iter()
        .map(|(_, name, args)| {
            let parsed = serde_json::from_str(&args)
                .unwrap_or_else(|e| panic!("streamed arguments {args:?}: {e}"));
            (name, parsed)
        })
        .collect();
    let content = if content.is_empty() {
        Value::Null
    } else {
        Value::String(content)
    };
    let reasoning = if reasoning.is_empty() {
        Value::Null
    } else {
        Value::String(reasoning)
    };
    (content, reasoning, calls, finish)
}

/// Asks `gw` with `content` streamed and not; both answers must agree.
async fn ask(gw: &Proc, content: &str) -> Seen {
    let url = format!("{}/v1/chat/completions", gw.url());
    let reply = post_json(&url, &body(content, false)).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let one = whole(&reply.json());
    let c = common::client(false);
    let resp = start_json(&c, &url, &body(content, true)).await;
    assert_eq!(resp.status(), 200);
    let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
    assert!(frames.clean_end(), "{frames:?}");
    let sse = frames.text();
    assert!(sse.ends_with("data: [DONE]\n\n"), "{sse}");
    let many = streamed(&sse);
    // A non-streamed answer with calls has null content when the text is empty; the
    // stream then has none either.
    assert_eq!(one, many, "streamed and whole answers differ:\n{sse}");
    one
}

fn weather(city: &str) -> (String, Value) {
    (WEATHER.to_owned(), json!({"city": city}))
}

#[tokio::test]
async fn each_family_syntax_becomes_openai_tool_calls() {
    let cases: &[(&str, &str, Calls)] = &[
        (
            "qwen",
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n\
             </tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": \
             {\"zone\": \"CET\"}}\n</tool_call>",
            vec![
                weather("Paris"),
                ("get_time".to_owned(), json!({"zone": "CET"})),
            ],
        ),
        (
            "mistral",
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
            vec![weather("Oslo")],
        ),
        (
            "qwen_coder",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n\
             <parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            vec![(WEATHER.to_owned(), json!({"city": "Rome", "days": 3}))],
        ),
        (
            "deepseek31",
            "<\u{ff5c}tool\u{2581}calls\u{2581}begin\u{ff5c}><\u{ff5c}tool\u{2581}call\u{2581}\
             begin\u{ff5c}>get_weather<\u{ff5c}tool\u{2581}sep\u{ff5c}>{\"city\": \"Kyiv\"}\
             <\u{ff5c}tool\u{2581}call\u{2581}end\u{ff5c}><\u{ff5c}tool\u{2581}calls\u{2581}\
             end\u{ff5c}>",
            vec![weather("Kyiv")],
        ),
        (
            "kimik2",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0\
             <|tool_call_argument_begin|>{\"city\": \"Lima\"}<|tool_call_end|>\
             <|tool_calls_section_end|>",
            vec![weather("Lima")],
        ),
        (
            "glm45_moe",
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Baku</arg_value>\n\
             </tool_call>",
            vec![weather("Baku")],
        ),
    ];
    for (parser, content, expected) in cases {
        let (_e, gw) = setup(parser, &["--tool-call-parser", parser]).await;
        let (text, _, calls, finish) = ask(&gw, content).await;
        assert_eq!(&calls, expected, "{parser}");
        assert_eq!(finish, "tool_calls", "{parser}");
        // What the model said before the call is the content.
        assert_eq!(text, json!("user\n"), "{parser}");
    }
}

#[tokio::test]
async fn malformed_calls_no_tools_and_tool_choice_none_stay_text() {
    let (_e, gw) = setup("plain", &["--tool-call-parser", "qwen"]).await;
    let broken = "<tool_call>not json</tool_call>";
    let (text, _, calls, finish) = ask(&gw, broken).await;
    assert_eq!(
        (text, calls.len(), finish.as_str()),
        (json!(format!("user\n{broken}")), 0, "stop")
    );

    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
    let url = format!("{}/v1/chat/completions", gw.url());
    for extra in [json!({"tool_choice": "none"}), json!({"tools": null})] {
        let mut b = body(call, false);
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        let reply = post_json(&url, &b).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let (text, _, calls, _) = whole(&reply.json());
        assert_eq!(
            (text, calls.len()),
            (json!(format!("user\n{call}")), 0),
            "{extra}"
        );
    }

    // tool_choice rules.
    for (choice, needle) in [
        (
            json!({"type": "function", "function": {"name": "nope"}}),
            "not among the tools",
        ),
        (json!("sometimes"), "tool_choice must be"),
    ] {
        let mut b = body(call, false);
        b["tool_choice"] = choice;
        let reply = post_json(&url, &b).await;
        support::assert_gateway_error(&reply, 400, "invalid_request");
        assert!(reply.text().contains(needle), "{}", reply.text());
    }
    let mut b = body(call, false);
    b["tools"] = json!([{"type": "function", "function": {}}]);
    let reply = post_json(&url, &b).await;
    support::assert_gateway_error(&reply, 400, "invalid_request");
}

#[tokio::test]
async fn reasoning_is_split_from_the_answer() {
    // DeepSeek-R1 starts in reasoning: the echoed "user\n…" is its thinking up to
    // </think>, the rest is the answer, which may still call a function.
    let (_e, gw) = setup(
        "reasoning",
        &[
            "--reasoning-parser",
            "deepseek_r1",
            "--tool-call-parser",
            "qwen",
        ],
    )
    .await;
    let (text, reasoning, calls, finish) = ask(&gw, "let me think</think>It is sunny.").await;
    assert_eq!(reasoning, json!("user\nlet me think"));
    assert_eq!(text, json!("It is sunny."));
    assert!(calls.is_empty());
    assert_eq!(finish, "stop");

    let (text, reasoning, calls, finish) = ask(
        &gw,
        "weather?</think><tool_call>\n{\"name\": \"get_weather\", \"arguments\": \
         {\"city\": \"Nice\"}}\n</tool_call>",
    )
    .await;
    assert_eq!(reasoning, json!("user\nweather?"));
    assert_eq!(text, Value::Null);
    assert_eq!(calls, vec![weather("Nice")]);
    assert_eq!(finish, "tool_calls");

    // Thinking turned off by the request: all of it is the answer.
    let url = format!("{}/v1/chat/completions", gw.url());
    let mut b = body("a</think>b", false);
    b["chat_template_kwargs"] = json!({"thinking": false});
    b["tools"] = Value::Null;
    let reply = post_json(&url, &b).await;
    let (text, reasoning, _, _) = whole(&reply.json());
    assert_eq!((text, reasoning), (json!("user\na</think>b"), Value::Null));
}

#[tokio::test]
async fn parsers_come_from_the_model_card_and_unknown_names_fail_registration() {
    let dir = temp_dir("parsers", "card");
    let tok = write_tokenizer(&dir);
    let eos = tok.token_to_id(IM_END).unwrap().to_string();
    let engine = common::grpc_engine(&["--model", "echo-model", "--eos-token-id", &eos]);
    let gw = gateway(&["--model-path", dir.to_str().unwrap()]);
    let workers = format!("{}/workers", gw.url());
    let reply = post_json(
        &workers,
        &json!({"url": grpc_url(&engine), "models": [{"id": "echo-model",
                "tool_parser": "hermes"}]}),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    wait_ready(&gw).await;
    let (_, _, calls, _) = ask(
        &gw,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}\n\
         </tool_call>",
    )
    .await;
    assert_eq!(calls, vec![weather("Bern")]);

    let other = common::grpc_engine(&["--model", "other-model"]);
    let reply = post_json(
        &workers,
        &json!({"url": grpc_url(&other), "labels": {"reasoning_parser": "no-such-parser"}}),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    assert!(
        eventually(Duration::from_secs(10), || async {
            gw.log_text()
                .contains("unknown reasoning_parser \\\"no-such-parser\\\"")
                || gw
                    .log_text()
                    .contains("unknown reasoning_parser \"no-such-parser\"")
        })
        .await,
        "{}",
        gw.log_text()
    );
    assert_eq!(common::listed_workers(&gw).await.len(), 1);
}

#[test]
fn unknown_parser_flags_are_refused_at_startup() {
    for flag in ["--tool-call-parser", "--reasoning-parser"] {
        let out = std::process::Command::new(common::gateway_binary())
            .args([flag, "no-such-parser"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{flag}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(flag) && err.contains("passthrough"), "{err}");
    }
}

#[tokio::test]
async fn tool_choice_required_and_named_constrain_the_engine() {
    for service in ["sglang", "vllm"] {
        let dir = temp_dir("parsers", &format!("forced-{service}"));
        let tok = write_tokenizer(&dir);
        let eos = tok.token_to_id(IM_END).unwrap().to_string();
        let engine = common::grpc_engine(&[
            "--service",
            service,
            "--model",
            "echo-model",
            "--eos-token-id",
            &eos,
        ]);
        // The worker's own parser (passthrough here) does not matter: the constraint
        // decides the output's shape.
        let gw = support::echo::gateway_for(&engine, &dir).await;
        let url = format!("{}/v1/chat/completions", gw.url());

        // required: an array of calls; the mock echoes, so the message is that array.
        let mut b = body(
            "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}, \
             {\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}]",
            false,
        );
        b["tool_choice"] = json!("required");
        let reply = post_json(&url, &b).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let (_, _, calls, finish) = whole(&reply.json());
        assert_eq!(
            calls,
            vec![
                weather("Oslo"),
                ("get_time".to_owned(), json!({"zone": "UTC"}))
            ],
            "{service}"
        );
        assert_eq!(finish, "tool_calls");
        support::echo::logged(&engine, "json_schema={\"type\":\"array\",\"minItems\":1").await;
        assert!(
            engine.log_text().contains("\"enum\":[\"get_time\"]"),
            "{}",
            engine.log_text()
        );

        // A named function: the output is its arguments.
        let mut b = body("{\"city\": \"Pisa\"}", true);
        b["tool_choice"] = json!({"type": "function", "function": {"name": WEATHER}});
        let c = common::client(false);
        let resp = start_json(&c, &url, &b).await;
        assert_eq!(resp.status(), 200);
        let frames = read_frames(&mut resp.into_body(), Duration::from_secs(20)).await;
        let (_, _, calls, finish) = streamed(&frames.text());
        assert_eq!(calls, vec![weather("Pisa")], "{service}");
        assert_eq!(finish, "tool_calls");
        support::echo::logged(
            &engine,
            "json_schema={\"type\":\"object\",\"properties\":{\"city\"",
        )
        .await;
    }

    // A service whose constraint fields the gateway does not speak: refused up front.
    let dir = temp_dir("parsers", "forced-trtllm");
    write_tokenizer(&dir);
    let engine = common::grpc_engine(&["--service", "trtllm", "--model", "echo-model"]);
    let gw = support::echo::gateway_for(&engine, &dir).await;
    let mut b = body("x", false);
    b["tool_choice"] = json!("required");
    let reply = post_json(&format!("{}/v1/chat/completions", gw.url()), &b).await;
    support::assert_gateway_error(&reply, 400, "invalid_request");
    assert!(
        reply.text().contains("constrained decoding"),
        "{}",
        reply.text()
    );
    assert!(!engine.log_text().contains("generate request_id"));
}

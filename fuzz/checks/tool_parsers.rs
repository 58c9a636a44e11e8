//! Every tool-call parser (`parsers::tool::registry::NAMES`) on arbitrary model output: no
//! panic; the streamed result (the deltas of pushes at the input's cut points and `finish`,
//! folded by `collect`) equals the one-shot `parse_whole`, for the input's cutting (a
//! character at a time when it gives no steps); `Start` indexes run 0, 1, 2, … each once,
//! and no `Arguments` comes before its call's `Start`. The request's tools are a small
//! fixed set with typed schemas (string, integer, number, boolean, object, array, nullable,
//! `anyOf`) so that the XML parsers type values. Memory is bounded by libFuzzer's `-rss_limit_mb` on the fuzz
//! path, and by [`bound::held_text_is_bounded`] (run as a test by
//! `tests/fuzz_regressions.rs`) for unterminated calls of every family.
//!
//! Input layout: a selector byte (`% NAMES.len()` picks the parser, in `NAMES`' order), then
//! the cutting and the text as `fuzz/checks/pieces.rs` reads them.

use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};
use tollgate::parsers::tool::registry::{by_name, NAMES};
use tollgate::parsers::tool::{
    collect, parse_whole, ToolDelta, ToolParser, ToolSpec, Tools, MAX_HELD_BYTES,
};

use super::pieces::{cut, layout};

/// The request's tools: `f` (what the seeds and the bound check call), `get_weather` and
/// `typed` (the parsers' unit-test names) with a schema for each value type.
pub fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let spec = |name: &str, properties: Value| ToolSpec {
            name: name.to_owned(),
            parameters: json!({"type": "object", "properties": properties}),
        };
        Arc::from(vec![
            spec("f", json!({"a": {"type": "string"}})),
            spec(
                "get_weather",
                json!({"city": {"type": "string"}, "days": {"type": "integer"}}),
            ),
            spec(
                "typed",
                json!({
                    "s": {"type": "string"},
                    "n": {"type": "integer"},
                    "x": {"type": "number"},
                    "flag": {"type": "boolean"},
                    "obj": {"type": "object", "properties": {"k": {"type": "integer"}}},
                    "arr": {"type": "array", "items": {"type": "string"}},
                    "maybe": {"type": ["integer", "null"]},
                    "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]}
                }),
            ),
        ])
    })
}

/// `make`'s parser fed `pieces` and finished; checks the order of calls and arguments.
fn stream(name: &str, make: fn(&Tools) -> Box<dyn ToolParser>, pieces: &[&str]) -> Vec<ToolDelta> {
    let mut parser = make(tools());
    let mut out = Vec::new();
    for piece in pieces {
        parser.push(piece, &mut out);
    }
    parser.finish(&mut out);
    let mut started = 0;
    for delta in &out {
        match delta {
            ToolDelta::Start { index, .. } => {
                assert_eq!(
                    *index, started,
                    "{name}: calls start once, in order: {out:?}"
                );
                started += 1;
            }
            ToolDelta::Arguments { index, .. } => {
                assert!(
                    *index < started,
                    "{name}: arguments before their start: {out:?}"
                );
            }
            ToolDelta::Text(_) => {}
        }
    }
    out
}

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let name = NAMES[usize::from(selector) % NAMES.len()];
    let make = by_name(name).expect("every listed name has a parser");
    let (steps, text) = layout(rest);

    let whole = parse_whole(make(tools()).as_mut(), &text);
    let pieces = cut(&text, steps);
    assert_eq!(
        collect(&stream(name, make, &pieces)),
        whole,
        "{name}: {pieces:?}"
    );
}

/// The bound on what a parser holds after an unterminated call of each family: a test of
/// its own (`tests/fuzz_regressions.rs` runs it), the fuzz target's inputs being far
/// shorter than `MAX_HELD_BYTES`.
#[allow(dead_code)] // not called by the fuzz target
pub mod bound {
    use super::*;

    /// How a call of each family begins and stays open: the parser, then the text that opens a
    /// call (or a header) that the filler then never ends.
    const UNTERMINATED: &[(&str, &str)] = &[
        ("json", r#"{"name":"f","arguments":{"a":""#),
        ("json", r#"{"name":""#),
        ("llama", r#"<|python_tag|>{"name":"f","parameters":{"a":""#),
        ("mistral", r#"[TOOL_CALLS][{"name":"f","arguments":{"a":""#),
        ("mistral", r#"[TOOL_CALLS]f[ARGS]{"a":""#),
        ("mistral", "[TOOL_CALLS]"),
        ("qwen", r#"<tool_call>{"name":""#),
        ("qwen_coder", "<tool_call>\n<function=typed>\n<parameter=s>\n"),
        ("qwen_coder", "<tool_call>\n<function=typed>\n<parameter=obj>\n"),
        ("qwen_coder", "<tool_call>\n<function="),
        ("pythonic", r#"[f(a=""#),
        ("pythonic", "[f(a=["),
        (
            "deepseek",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\":\"",
        ),
        (
            "deepseek",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>",
        ),
        (
            "deepseek31",
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\":\"",
        ),
        ("deepseek31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"),
        (
            "glm45_moe",
            "<tool_call>typed\n<arg_key>s</arg_key>\n<arg_value>",
        ),
        (
            "glm45_moe",
            "<tool_call>typed\n<arg_key>obj</arg_key>\n<arg_value>",
        ),
        ("glm45_moe", "<tool_call>"),
        ("glm47_moe", "<tool_call>typed<arg_key>arr</arg_key><arg_value>"),
        ("glm47_moe", "<tool_call>typed<arg_key>"),
        (
            "step3",
            "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"typed\"><steptml:parameter name=\"s\">",
        ),
        (
            "step3",
            "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"typed\"><steptml:parameter name=\"n\">",
        ),
        (
            "step3",
            "<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name=\"",
        ),
        (
            "kimik2",
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\":\"",
        ),
        ("kimik2", "<|tool_calls_section_begin|><|tool_call_begin|>"),
        (
            "minimax_m2",
            "<minimax:tool_call>\n<invoke name=\"typed\">\n<parameter name=\"s\">",
        ),
        (
            "minimax_m2",
            "<minimax:tool_call>\n<invoke name=\"typed\">\n<parameter name=\"x\">",
        ),
        ("minimax_m2", "<minimax:tool_call>\n<invoke name=\""),
        (
            "gpt_oss",
            "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":\"",
        ),
        ("gpt_oss", "<|channel|>final<|message|>"),
    ];

    /// The opener every parser also gets: Hermes/Qwen's call, never closed.
    const QWEN_OPEN: &str = r#"<tool_call>{"name":"f","arguments":{"a":""#;

    /// What follows an opener: a MiB of words, no markers, quotes or brackets.
    const FILLER_BYTES: usize = 1 << 20;

    /// Each parser fed an opener and then a MiB of filler in 16-byte pieces, without an end:
    /// before `finish`, all but at most `2 × MAX_HELD_BYTES` of it has come out as text or
    /// arguments, and `finish` releases no more than that, so nothing holds the stream
    /// unboundedly. Panics naming the first parser and opener that holds more.
    pub fn held_text_is_bounded() {
        let word = "lorem ipsum dolor sit amet 42 ";
        let filler = word.repeat(FILLER_BYTES / word.len() + 1);
        let cases = UNTERMINATED
            .iter()
            .copied()
            .chain(NAMES.iter().map(|&name| (name, QWEN_OPEN)));
        for (name, opener) in cases {
            let make = by_name(name).expect("every listed name has a parser");
            let mut parser = make(tools());
            let mut out = Vec::new();
            let mut emitted = 0;
            let mut fed = opener.len();
            parser.push(opener, &mut out);
            for piece in filler.as_bytes().chunks(16) {
                let piece = std::str::from_utf8(piece).expect("ASCII filler");
                parser.push(piece, &mut out);
                fed += piece.len();
                emitted += out.drain(..).map(|d| emitted_bytes(&d)).sum::<usize>();
            }
            assert!(
                emitted + 2 * MAX_HELD_BYTES >= fed,
                "{name} after {opener:?}: {fed} bytes fed, only {emitted} out before finish"
            );
            parser.finish(&mut out);
            let released = out.iter().map(emitted_bytes).sum::<usize>();
            assert!(
                released <= 2 * MAX_HELD_BYTES,
                "{name} after {opener:?}: {released} bytes held until finish"
            );
        }
    }

    fn emitted_bytes(delta: &ToolDelta) -> usize {
        match delta {
            ToolDelta::Text(text) => text.len(),
            ToolDelta::Arguments { fragment, .. } => fragment.len(),
            ToolDelta::Start { .. } => 0,
        }
    }
}

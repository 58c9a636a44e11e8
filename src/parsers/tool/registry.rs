//! Which tool parser a request gets: by the name an operator configures (the names vLLM's and
//! SGLang's `--tool-call-parser` take are accepted as aliases) or, when none is configured,
//! from the model id.

use super::{ToolParser, Tools};

/// Makes a tool parser for a request's tools.
pub type MakeParser = fn(&Tools) -> Box<dyn ToolParser>;

/// Every tool parser, by its canonical name.
pub const NAMES: &[&str] = &[
    "json",
    "llama",
    "mistral",
    "qwen",
    "qwen_coder",
    "pythonic",
    "deepseek",
    "deepseek31",
    "glm45_moe",
    "glm47_moe",
    "step3",
    "kimik2",
    "minimax_m2",
    "gpt_oss",
    "passthrough",
];

/// Other names for the parsers, as engines spell them (compared after lowercasing and
/// turning `-` into `_`): vLLM's `hermes`, `llama3_json`, `llama4_json`, `llama4_pythonic`,
/// `deepseek_v3`, `deepseek_v31`, `kimi_k2`, `qwen3_coder`, `glm45`, `glm47`, `openai`;
/// SGLang's `qwen25`, `llama3`, `llama4` (Llama 4's native pythonic form), `deepseekv3`,
/// `deepseekv31`, `glm`, `gpt-oss`, `minimax-m2`.
pub const ALIASES: &[(&str, &str)] = &[
    ("hermes", "qwen"),
    ("qwen25", "qwen"),
    ("qwen3", "qwen"),
    ("llama3", "llama"),
    ("llama3_json", "llama"),
    ("llama4_json", "llama"),
    ("llama4", "pythonic"),
    ("llama4_pythonic", "pythonic"),
    ("deepseekv3", "deepseek"),
    ("deepseek_v3", "deepseek"),
    ("deepseekv31", "deepseek31"),
    ("deepseek_v31", "deepseek31"),
    ("kimi_k2", "kimik2"),
    ("qwen3_coder", "qwen_coder"),
    ("glm", "glm45_moe"),
    ("glm45", "glm45_moe"),
    ("glm4_moe", "glm45_moe"),
    ("glm47", "glm47_moe"),
    ("minimax", "minimax_m2"),
    ("harmony", "gpt_oss"),
    ("openai", "gpt_oss"),
    ("none", "passthrough"),
];

/// Whether `name` is the Harmony parser, which reads the format's special tokens (so
/// the detokenizer must keep them in the text).
pub fn is_harmony(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase().replace('-', "_");
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name.as_str(), |(_, canonical)| canonical);
    name == "gpt_oss"
}

/// The parser called `name` (canonical or alias, any case, `-` or `_`).
pub fn by_name(name: &str) -> Option<MakeParser> {
    let name = name.trim().to_ascii_lowercase().replace('-', "_");
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == name)
        .map_or(name.as_str(), |(_, canonical)| canonical);
    Some(match name {
        "json" => super::json::new,
        "llama" => super::llama::new,
        "mistral" => super::mistral::new,
        "qwen" => super::qwen::new,
        "qwen_coder" => super::qwen_coder::new,
        "pythonic" => super::pythonic::new,
        "deepseek" => super::deepseek::new,
        "deepseek31" => super::deepseek31::new,
        "glm45_moe" => super::glm45_moe::new,
        "glm47_moe" => super::glm47_moe::new,
        "step3" => super::step3::new,
        "kimik2" => super::kimik2::new,
        "minimax_m2" => super::minimax_m2::new,
        "gpt_oss" => super::gpt_oss::new,
        "passthrough" => super::passthrough::new,
        _ => return None,
    })
}

/// Model-id patterns (lowercase substrings) and the parser each implies. The longest
/// pattern found in the lowercased model id wins (the first listed, among equally long
/// ones); no match is `passthrough`.
pub const MODEL_PATTERNS: &[(&str, &str)] = &[
    ("qwen3-coder", "qwen_coder"),
    ("qwen3_coder", "qwen_coder"),
    ("qwen", "qwen"),
    ("qwq", "qwen"),
    ("hermes-2", "qwen"),
    ("hermes-3", "qwen"),
    ("llama-4", "pythonic"),
    ("llama4", "pythonic"),
    ("llama-3", "llama"),
    ("llama3", "llama"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("magistral", "mistral"),
    ("devstral", "mistral"),
    ("codestral", "mistral"),
    ("ministral", "mistral"),
    ("deepseek-v3.1", "deepseek31"),
    ("deepseek-v3.2-exp", "deepseek31"),
    // V3.2 proper writes DSML calls, which no parser here reads.
    ("deepseek-v3.2", "passthrough"),
    ("deepseek-v3", "deepseek"),
    ("deepseek-r1", "deepseek"),
    ("kimi-k2", "kimik2"),
    ("glm-4.5", "glm45_moe"),
    ("glm-4.6", "glm45_moe"),
    ("glm-4.7", "glm47_moe"),
    ("step3", "step3"),
    ("step-3", "step3"),
    ("minimax-m2", "minimax_m2"),
    ("gpt-oss", "gpt_oss"),
];

/// The parser name [`MODEL_PATTERNS`] picks for `model`.
pub fn for_model(model: &str) -> &'static str {
    let model = model.to_ascii_lowercase();
    let mut best: Option<(&str, &'static str)> = None;
    for &(pattern, name) in MODEL_PATTERNS {
        let longer = match best {
            Some((found, _)) => pattern.len() > found.len(),
            None => true,
        };
        if longer && model.contains(pattern) {
            best = Some((pattern, name));
        }
    }
    best.map_or("passthrough", |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::tool::parse_whole;

    #[test]
    fn every_name_resolves() {
        for name in NAMES {
            assert!(by_name(name).is_some(), "{name}");
        }
        for (alias, canonical) in ALIASES {
            assert!(NAMES.contains(canonical), "{alias} -> {canonical}");
        }
        for (_, name) in MODEL_PATTERNS {
            assert!(NAMES.contains(name), "{name}");
        }
        assert!(by_name("nope").is_none());
    }

    #[test]
    fn aliases_pick_the_same_parser() {
        let tools = Tools::from(Vec::new());
        let qwen_call = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
        for alias in ["hermes", "QWEN25", " Qwen "] {
            let make = by_name(alias).unwrap_or(super::super::passthrough::new);
            assert_eq!(
                parse_whole(make(&tools).as_mut(), qwen_call).calls.len(),
                1,
                "{alias}"
            );
        }
        let same =
            |a: &str, b: &str| by_name(a).map(|f| f as usize) == by_name(b).map(|f| f as usize);
        for (alias, canonical) in [
            ("llama3_json", "llama"),
            ("llama4-pythonic", "pythonic"),
            ("deepseekv3", "deepseek"),
            ("deepseek_v31", "deepseek31"),
            ("Kimi_K2", "kimik2"),
            ("qwen3_coder", "qwen_coder"),
            ("glm4_moe", "glm45_moe"),
            ("glm47", "glm47_moe"),
            ("minimax-m2", "minimax_m2"),
            ("gpt-oss", "gpt_oss"),
            ("harmony", "gpt_oss"),
        ] {
            assert!(
                by_name(alias).is_some() && same(alias, canonical),
                "{alias}"
            );
        }
    }

    #[test]
    fn model_ids_pick_the_longest_pattern() {
        for (model, name) in [
            ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen_coder"),
            ("Qwen/Qwen2.5-7B-Instruct", "qwen"),
            ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "pythonic"),
            ("meta-llama/Llama-3.1-8B-Instruct", "llama"),
            ("NousResearch/Hermes-3-Llama-3.1-70B", "qwen"),
            ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mistral"),
            ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek31"),
            ("deepseek-ai/DeepSeek-V3-0324", "deepseek"),
            ("moonshotai/Kimi-K2-Instruct", "kimik2"),
            ("zai-org/GLM-4.5-Air", "glm45_moe"),
            ("zai-org/GLM-4.7", "glm47_moe"),
            ("stepfun-ai/step3", "step3"),
            ("MiniMaxAI/MiniMax-M2", "minimax_m2"),
            ("openai/gpt-oss-120b", "gpt_oss"),
            ("google/gemma-3-27b-it", "passthrough"),
        ] {
            assert_eq!(for_model(model), name, "{model}");
        }
    }

    /// Random mixes of every family's markers, JSON pieces and text: no parser panics, and
    /// each gives the same result however the text is cut.
    #[test]
    fn random_mixes_do_not_depend_on_cutting() {
        use crate::parsers::cuttings::cuttings;
        use crate::parsers::tool::collect;
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        const PIECES: &[&str] = &[
            "<tool_call>",
            "</tool_call>",
            "[TOOL_CALLS]",
            "[ARGS]",
            "<|python_tag|>",
            "<|python_start|>",
            "<｜tool▁calls▁begin｜>",
            "<｜tool▁call▁begin｜>",
            "<｜tool▁sep｜>",
            "<｜tool▁call▁end｜>",
            "<｜tool▁calls▁end｜>",
            "```json\n",
            "```",
            "<|tool_calls_section_begin|>",
            "<|tool_call_begin|>",
            "functions.f:0",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
            "<|tool_calls_section_end|>",
            "<｜tool_calls_begin｜>",
            "<｜tool_call_begin｜>",
            "<｜tool_sep｜>",
            "<steptml:invoke name=\"f\">",
            "<steptml:parameter name=\"p\">",
            "</steptml:parameter>",
            "</steptml:invoke>",
            "<｜tool_call_end｜>",
            "{",
            "}",
            "[",
            "]",
            "(",
            ")",
            "\"",
            "'",
            "\\",
            ",",
            ":",
            ";",
            "=",
            " ",
            "\n",
            "\"name\"",
            "\"arguments\"",
            "\"f\"",
            "f",
            "x",
            "1",
            "True",
            "é",
            "中",
            "<",
        ];
        let tools = Tools::from(Vec::new());
        let mut rng = SmallRng::seed_from_u64(11);
        for round in 0..60 {
            let text: String = (0..rng.gen_range(1..40))
                .map(|_| PIECES[rng.gen_range(0..PIECES.len())])
                .collect();
            for name in NAMES {
                let Some(make) = by_name(name) else { continue };
                let whole = parse_whole(make(&tools).as_mut(), &text);
                for pieces in cuttings(&text, 8, round) {
                    let mut parser = make(&tools);
                    let mut out = Vec::new();
                    pieces.iter().for_each(|piece| parser.push(piece, &mut out));
                    parser.finish(&mut out);
                    assert_eq!(collect(&out), whole, "{name} {pieces:?}");
                }
            }
        }
    }
}

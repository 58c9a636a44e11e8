//! Reasoning parsers by name, and the parser a model's name suggests.
//!
//! Names are the gateway's own ([`NAMES`]); [`by_name`] also takes the names vLLM
//! (`--reasoning-parser`: `deepseek_r1`, `deepseek_v3`, `qwen3`, `kimi_k2`, `glm45`, `glm47`,
//! `step3`, `minimax_m2`, `minimax_m2_append_think`, `openai_gptoss`) and SGLang
//! (`deepseek-r1`, `deepseek-v3`, `qwen3`, `qwen3-thinking`, `kimi`, `kimi_k2`, `glm45`,
//! `step3`, `step3p5`, `minimax`, `minimax-append-think`, `gpt-oss`) publish, so a
//! deployment's existing flag carries over, plus `glm4_moe` (GLM-4.5's model type) and
//! `harmony` (gpt-oss's format, the name Dynamo's tool-call parser uses). The
//! `append_think` names, which upstream keep MiniMax's reasoning inline in the content, get
//! the splitting MiniMax parser: the gateway always splits.

use super::{deepseek_r1, glm45, gpt_oss, kimi, minimax, passthrough, qwen3, step3};
use super::{ReasoningParser, Thinking};

/// Makes a parser for one request.
pub type Constructor = fn(Thinking) -> Box<dyn ReasoningParser>;

/// The gateway's parser names.
pub const NAMES: &[&str] = &[
    "deepseek_r1",
    "qwen3",
    "qwen3_thinking",
    "kimi",
    "glm45",
    "step3",
    "minimax",
    "gpt_oss",
    "passthrough",
];

/// Every accepted name (the gateway's and its peers'), compared ignoring ASCII case and
/// with `-` and `_` alike.
const BY_NAME: &[(&str, Constructor)] = &[
    ("deepseek_r1", deepseek_r1::new),
    // DeepSeek-V3.1/V3.2: the R1 parser when thinking, text otherwise.
    ("deepseek_v3", deepseek_r1::new),
    ("qwen3", qwen3::new),
    ("qwen3_thinking", qwen3::new_thinking),
    ("kimi", kimi::new),
    ("kimi_k2", kimi::new),
    ("glm45", glm45::new),
    ("glm47", glm45::new),
    ("glm4_moe", glm45::new),
    ("step3", step3::new),
    ("step3p5", step3::new),
    ("minimax", minimax::new),
    ("minimax_m2", minimax::new),
    ("minimax_m2_append_think", minimax::new),
    ("minimax_append_think", minimax::new),
    ("gpt_oss", gpt_oss::new),
    ("openai_gptoss", gpt_oss::new),
    ("harmony", gpt_oss::new),
    ("passthrough", passthrough::new),
];

/// The parser called `name` (see the module doc for the names accepted).
pub fn by_name(name: &str) -> Option<Constructor> {
    BY_NAME
        .iter()
        .find(|(known, _)| same_name(known, name))
        .map(|&(_, make)| make)
}

/// Whether `name` is the Harmony parser, which reads the format's special tokens (so
/// the detokenizer must keep them in the text).
pub fn is_harmony(name: &str) -> bool {
    ["gpt_oss", "openai_gptoss", "harmony"]
        .iter()
        .any(|known| same_name(known, name))
}

fn same_name(known: &str, name: &str) -> bool {
    let fold = |c: u8| match c {
        b'-' => b'_',
        c => c.to_ascii_lowercase(),
    };
    known.len() == name.len()
        && known
            .bytes()
            .zip(name.bytes())
            .all(|(k, n)| fold(k) == fold(n))
}

/// Model-name patterns: every piece must occur in the name (ignoring ASCII case); the
/// pattern with the most matched bytes wins, so `DeepSeek-R1-0528-Qwen3-8B` is
/// `deepseek_r1` and `Qwen3-30B-A3B-Thinking-2507` is `qwen3_thinking`. From the peers'
/// docs: R1 series, distills and QwQ-32B use `deepseek_r1`; DeepSeek-V3.1/V3.2 the R1
/// parser when thinking; Qwen3 `qwen3`, its Thinking models `qwen3-thinking`; Kimi `kimi` /
/// `kimi_k2`; GLM-4.5 to 4.7 `glm45`; Step-3 `step3`; MiniMax-M2 (M2.1, M2.5) `minimax`;
/// gpt-oss `gpt-oss`.
const BY_MODEL: &[(&[&str], &str)] = &[
    (&["deepseek-r1"], "deepseek_r1"),
    (&["deepseek-v3.1"], "deepseek_r1"),
    (&["deepseek-v3.2"], "deepseek_r1"),
    (&["qwq"], "deepseek_r1"),
    (&["qwen3"], "qwen3"),
    (&["qwen3", "thinking"], "qwen3_thinking"),
    (&["kimi"], "kimi"),
    (&["glm-4.5"], "glm45"),
    (&["glm-4.6"], "glm45"),
    (&["glm-4.7"], "glm45"),
    (&["step3"], "step3"),
    (&["minimax-m2"], "minimax"),
    (&["gpt-oss"], "gpt_oss"),
];

/// The parser name for `model` (a served model name or path), `passthrough` when no
/// pattern matches.
pub fn for_model(model: &str) -> &'static str {
    let model = model.to_ascii_lowercase();
    BY_MODEL
        .iter()
        .filter(|(pieces, _)| pieces.iter().all(|piece| model.contains(piece)))
        .map(|&(pieces, name)| (pieces.iter().map(|p| p.len()).sum::<usize>(), name))
        .fold(
            None,
            |best: Option<(usize, &'static str)>, (score, name)| match best {
                Some((top, _)) if top >= score => best,
                _ => Some((score, name)),
            },
        )
        .map_or("passthrough", |(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::reasoning::split_whole;

    const ON: Thinking = Thinking {
        enabled: true,
        opened_by_prompt: false,
    };

    fn split(name: &str, text: &str) -> (String, String) {
        let make = by_name(name).unwrap_or_else(|| panic!("no parser {name}"));
        let split = split_whole(make(ON).as_mut(), text);
        (split.reasoning, split.text)
    }

    #[test]
    fn every_name_is_known() {
        for name in NAMES {
            assert!(by_name(name).is_some(), "{name}");
            assert!(by_name(&name.to_uppercase()).is_some(), "{name}");
        }
        for (_, name) in BY_MODEL {
            assert!(NAMES.contains(name), "{name}");
        }
        assert!(NAMES.contains(&for_model("anything")));
    }

    #[test]
    fn aliases_reach_their_family() {
        let r1 = "r</think>a";
        for name in ["deepseek-r1", "DeepSeek_R1", "deepseek-v3", "deepseek_v3"] {
            assert_eq!(split(name, r1), ("r".into(), "a".into()), "{name}");
        }
        let tagged = "<think>r</think>a";
        for name in ["qwen3", "glm45", "glm4_moe", "GLM47", "kimi", "kimi_k2"] {
            assert_eq!(split(name, tagged), ("r".into(), "a".into()), "{name}");
        }
        for name in [
            "qwen3-thinking",
            "step3",
            "step3p5",
            "minimax",
            "minimax-m2",
            "minimax_m2_append_think",
            "minimax-append-think",
        ] {
            assert_eq!(split(name, r1), ("r".into(), "a".into()), "{name}");
        }
        let kimi = "◁think▷r◁/think▷a";
        assert_eq!(split("kimi_k2", kimi), ("r".into(), "a".into()));
        let harmony = "<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>a<|return|>";
        for name in ["gpt_oss", "gpt-oss", "openai_gptoss", "Harmony"] {
            assert_eq!(split(name, harmony), ("r".into(), "a".into()), "{name}");
        }
        assert_eq!(split("passthrough", tagged), (String::new(), tagged.into()));
    }

    #[test]
    fn unknown_names() {
        for name in [
            "",
            "deepseek",
            "qwen",
            "gpt_oss2",
            "passthrough ",
            "qwen3__thinking",
        ] {
            assert!(by_name(name).is_none(), "{name:?}");
        }
    }

    #[test]
    fn models_map_by_longest_match() {
        let cases = [
            ("deepseek-ai/DeepSeek-R1", "deepseek_r1"),
            ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "deepseek_r1"),
            ("deepseek-ai/DeepSeek-R1-0528-Qwen3-8B", "deepseek_r1"),
            ("deepseek-ai/DeepSeek-V3.1-Terminus", "deepseek_r1"),
            ("deepseek-ai/DeepSeek-V3-0324", "passthrough"),
            ("Qwen/QwQ-32B", "deepseek_r1"),
            ("Qwen/Qwen3-8B", "qwen3"),
            ("Qwen/Qwen3-235B-A22B-Thinking-2507", "qwen3_thinking"),
            ("qwen3-30b-a3b-thinking-2507-fp8", "qwen3_thinking"),
            ("Qwen/Qwen2.5-7B-Instruct", "passthrough"),
            ("moonshotai/Kimi-K2-Thinking", "kimi"),
            ("moonshotai/Kimi-VL-A3B-Thinking-2506", "kimi"),
            ("zai-org/GLM-4.5-Air", "glm45"),
            ("zai-org/GLM-4.6", "glm45"),
            ("zai-org/GLM-4.7-FP8", "glm45"),
            ("stepfun-ai/step3", "step3"),
            ("MiniMaxAI/MiniMax-M2.5", "minimax"),
            ("openai/gpt-oss-120b", "gpt_oss"),
            ("meta-llama/Llama-3.1-8B-Instruct", "passthrough"),
            ("", "passthrough"),
        ];
        for (model, name) in cases {
            assert_eq!(for_model(model), name, "{model}");
        }
    }
}

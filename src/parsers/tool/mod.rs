//! Tool-call parsers: one module per model family's syntax, behind [`ToolParser`];
//! [`registry`] maps names and model ids to them. JSON-carrying families share the
//! incremental JSON scanner ([`json_scan`]), XML-carrying ones the parameter reader that
//! types values by the tool's schema ([`xml_params`]).

mod types;

pub use types::*;

pub mod deepseek;
pub mod deepseek31;
pub mod glm45_moe;
pub mod glm47_moe;
pub mod gpt_oss;
pub mod json;
mod json_scan;
pub mod kimik2;
pub mod llama;
pub mod minimax_m2;
pub mod mistral;
pub mod named;
pub mod passthrough;
pub mod pythonic;
pub mod qwen;
pub mod qwen_coder;
pub mod registry;
pub mod step3;
mod xml_params;

//! Reasoning parsers: one module per model family, most of them settings of the shared
//! tag splitter ([`tags`]); [`registry`] maps names and model ids to them.

mod types;

pub use types::*;

pub mod deepseek_r1;
pub mod glm45;
pub mod gpt_oss;
pub mod kimi;
pub mod minimax;
pub mod passthrough;
pub mod qwen3;
pub mod registry;
pub mod step3;
mod tags;

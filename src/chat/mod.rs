//! The gateway's own language work for engines that take token ids (gRPC): chat templates,
//! tokenizers, incremental detokenization and stop rules. Nothing here does IO on the data
//! path; callers own the buffers and the timing.

pub mod boundaries;
pub mod bpe;
pub mod budget;
pub mod detokenize;
pub mod encode_cache;
pub mod encoder;
pub mod language;
pub mod stops;
pub mod template;

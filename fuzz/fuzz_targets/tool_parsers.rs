//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/tool_parsers.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/tool_parsers/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/pieces.rs"]
mod pieces;

#[path = "../checks/tool_parsers.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

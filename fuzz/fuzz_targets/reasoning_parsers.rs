//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/reasoning_parsers.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/reasoning_parsers/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/pieces.rs"]
mod pieces;

#[path = "../checks/reasoning_parsers.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

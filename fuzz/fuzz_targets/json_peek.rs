//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/json_peek.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/json_peek/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/json_peek.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

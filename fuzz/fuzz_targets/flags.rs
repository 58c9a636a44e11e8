//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/flags.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/flags/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/flags.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

//! cargo-fuzz target; the checks and the input layout are in
//! `fuzz/checks/responses_validate.rs`, shared with the stable replay of
//! `tests/fuzz_regressions/responses_validate/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/responses_validate.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

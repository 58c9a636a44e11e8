//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/messages_validate.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/messages_validate/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/messages_validate.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

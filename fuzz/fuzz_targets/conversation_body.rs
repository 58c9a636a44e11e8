//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/conversation_body.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/conversation_body/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/conversation_body.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

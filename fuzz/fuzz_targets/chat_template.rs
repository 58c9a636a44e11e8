//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/chat_template.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/chat_template/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/chat_template.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

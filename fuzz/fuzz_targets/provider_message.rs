//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/provider_message.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/provider_message/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/provider_message.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

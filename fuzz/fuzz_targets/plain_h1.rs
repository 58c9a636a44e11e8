//! cargo-fuzz target; the checks are in `fuzz/checks/plain_h1.rs`, shared with the stable
//! replay of `tests/fuzz_regressions/plain_h1/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/plain_h1.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

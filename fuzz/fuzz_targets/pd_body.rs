//! cargo-fuzz target; the checks are in `fuzz/checks/pd_body.rs`, shared with the stable
//! replay of `tests/fuzz_regressions/pd_body/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/pd_body.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

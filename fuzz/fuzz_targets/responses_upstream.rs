//! cargo-fuzz target; the checks are in `fuzz/checks/responses_upstream.rs`, shared with the
//! stable replay of `tests/fuzz_regressions/responses_upstream/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/responses_upstream.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

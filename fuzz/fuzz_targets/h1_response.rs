//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/h1_response.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/h1_response/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/reads.rs"]
mod reads;

#[path = "../checks/h1_response.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/sse.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/sse/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/reads.rs"]
mod reads;

#[path = "../checks/sse.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

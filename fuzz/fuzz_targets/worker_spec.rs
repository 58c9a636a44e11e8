//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/worker_spec.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/worker_spec/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/worker_spec.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

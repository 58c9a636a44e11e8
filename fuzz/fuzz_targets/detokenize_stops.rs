//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/detokenize_stops.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/detokenize_stops/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/detokenize_stops.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

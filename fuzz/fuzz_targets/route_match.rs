//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/route_match.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/route_match/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/route_match.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

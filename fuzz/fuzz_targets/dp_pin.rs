//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/dp_pin.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/dp_pin/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/dp_pin.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/prom_text.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/prom_text/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/prom_text.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/cache_tree.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/cache_tree/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/cache_tree.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

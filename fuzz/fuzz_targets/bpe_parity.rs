//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/bpe_parity.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/bpe_parity/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/bpe_parity.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

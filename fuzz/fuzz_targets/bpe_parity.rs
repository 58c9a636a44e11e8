//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/bpe_parity.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/bpe_parity/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/bpe_parity.rs"]
mod checks;

// The empty input at init loads both tokenizers before libFuzzer's per-input `-timeout`
// applies: the load (Hugging Face's JSON, the fast path's tables and self-test) takes minutes
// in an unoptimised sanitizer build, and would otherwise be reported as the first input
// timing out.
libfuzzer_sys::fuzz_target!(init: checks::check(b""), |data: &[u8]| checks::check(data));

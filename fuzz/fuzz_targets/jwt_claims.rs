//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/jwt_claims.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/jwt_claims/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/jwt_claims.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/grpc_request.rs`,
//! shared with the stable replay of `tests/fuzz_regressions/grpc_request/`
//! (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/grpc_request.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

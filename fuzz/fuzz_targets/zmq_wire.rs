//! cargo-fuzz target; the checks and the input layout are in `fuzz/checks/zmq_wire.rs`, shared
//! with the stable replay of `tests/fuzz_regressions/zmq_wire/` (`tests/fuzz_regressions.rs`).

#![no_main]

#[path = "../checks/zmq_wire.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));

//! Replays every committed fuzz input in `tests/fuzz_regressions/<target>/` through the same
//! checks the cargo-fuzz target runs (`fuzz/checks/<target>.rs`), on the stable toolchain, so
//! a fixed crash stays fixed in the ordinary `cargo test`. `fuzz/run.sh` copies a new crash's
//! reproducer into that directory; `README.md` files there are notes, not inputs.

use std::ffi::OsStr;
use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

use crate::checks;

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_file() && path.extension() != Some(OsStr::new("md")))
        .collect();
    files.sort();
    files
}

#[test]
fn every_regression_input_passes_its_target_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let mut targets: Vec<PathBuf> = fs::read_dir(&root)
        .expect("tests/fuzz_regressions exists")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_dir())
        .collect();
    targets.sort();
    assert!(
        !targets.is_empty(),
        "no target directories under {}",
        root.display()
    );

    let mut failures = Vec::new();
    let mut replayed = 0;
    for dir in targets {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(check) = checks::by_target(name) else {
            panic!("tests/fuzz_regressions/{name}/ names no target known to fuzz/checks/mod.rs");
        };
        for file in inputs(&dir) {
            let data = fs::read(&file).expect("regression input readable");
            replayed += 1;
            if panic::catch_unwind(|| check(&data)).is_err() {
                failures.push(file.display().to_string());
            }
        }
    }
    assert!(replayed > 0, "no regression inputs found");
    assert!(
        failures.is_empty(),
        "failing regression inputs: {failures:#?}"
    );
}

/// An unterminated call of each tool-call family does not hold the stream (the fuzz target's
/// inputs are too short to reach `MAX_HELD_BYTES`).
#[test]
fn tool_parsers_hold_a_bounded_amount_of_an_unterminated_call() {
    checks::tool_parsers::bound::held_text_is_bounded();
}

/// Likewise for an unended reasoning block, newline run or Harmony header.
#[test]
fn reasoning_parsers_hold_a_bounded_amount_of_an_unended_block() {
    checks::reasoning_parsers::bound::held_text_is_bounded();
}

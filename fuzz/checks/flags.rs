//! Arbitrary command lines through the flag parser: no panic, and every error message is
//! a single line. Arguments are the input split on NUL bytes (non-UTF-8 allowed).

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use tollgate::config::{parse_args, Command};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let args: Vec<OsString> = if data.is_empty() {
        Vec::new()
    } else {
        data.split(|&b| b == 0)
            .map(|arg| OsString::from_vec(arg.to_vec()))
            .collect()
    };
    match parse_args(args) {
        Ok(Command::Run(config)) => {
            assert!(config.runtime.worker_threads >= 1);
            assert!(config.pipeline.max_payload_size >= 1);
            assert!(config.metrics.port > 0);
            if let Some(key) = &config.auth.api_key {
                assert_eq!(format!("{key:?}"), "<redacted>");
            }
            let _ = format!("{config:?}");
        }
        Ok(Command::Help(text)) => assert!(text.contains("--help")),
        Ok(Command::Version(text)) => assert!(text.starts_with("tollgate ")),
        Err(err) => {
            let message = err.to_string();
            assert!(!message.is_empty());
            assert!(!message.contains('\n'), "{message:?}");
        }
    }
}

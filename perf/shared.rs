//! What the bundled engines (`mock-worker`, `grpc-engine`) share: reading flag values and
//! waiting for the signal that stops them. Each binary includes this file as a module.

use std::str::FromStr;

/// The next flag's value as UTF-8 text.
pub fn string_value(parser: &mut lexopt::Parser) -> Result<String, String> {
    use lexopt::prelude::*;
    parser
        .value()
        .map_err(|e| e.to_string())?
        .string()
        .map_err(|e| e.to_string())
}

/// The next flag's value parsed as `T`; the error names `flag` and the value.
pub fn parsed_value<T>(parser: &mut lexopt::Parser, flag: &str) -> Result<T, String>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let raw = string_value(parser)?;
    raw.parse::<T>()
        .map_err(|e| format!("invalid value '{raw}' for {flag}: {e}"))
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

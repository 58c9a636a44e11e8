//! The `tollgate` binary: parse flags, set up logging, run.

use std::process::ExitCode;

use tollgate::config::{parse_args_with_env, Command};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let config =
        match parse_args_with_env(std::env::args_os().skip(1), |var| std::env::var(var).ok()) {
            Ok(Command::Run(config)) => config,
            Ok(Command::Help(text)) | Ok(Command::Version(text)) => {
                println!("{text}");
                return ExitCode::SUCCESS;
            }
            Err(err) => {
                eprintln!("tollgate: {err}");
                return ExitCode::from(2);
            }
        };
    let _log = match tollgate::logging::init(&config.log) {
        Ok(guard) => guard,
        Err(err) => {
            eprintln!("tollgate: cannot set up logging: {err}");
            return ExitCode::from(1);
        }
    };
    match tollgate::startup::run(*config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err}");
            eprintln!("tollgate: {err}");
            ExitCode::from(1)
        }
    }
}

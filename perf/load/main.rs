//! `tollgate-load`: load generator for LLM inference gateways. See `--help`, and
//! `perf/compare.sh`, which drives it against the mock engine, nginx and tollgate.

mod cli;
mod client;
mod exchange;
mod idle;
mod report;
mod run;
mod stats;
mod workload;

use std::process::ExitCode;

fn main() -> ExitCode {
    let options = match cli::parse() {
        Ok(cli::Command::Run(options)) => *options,
        Ok(cli::Command::Help) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("tollgate-load: {message}\n(see --help)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tollgate-load: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let target = match client::Target::resolve(&options.url).await {
            Ok(t) => t,
            Err(message) => {
                eprintln!("tollgate-load: {message}");
                return ExitCode::from(2);
            }
        };
        if let Some(count) = options.idle {
            let held = idle::hold(target, count, options.duration, options.timeout).await;
            report::idle(&options, &held);
            return ExitCode::SUCCESS;
        }
        let (stats, elapsed) = run::load(options.clone(), target).await;
        report::load(&options, &stats, elapsed);
        ExitCode::SUCCESS
    })
}

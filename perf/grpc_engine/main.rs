//! `grpc-engine`: an engine's gRPC service for tollgate's tests and load runs: SGLang's
//! scheduler service (`service.rs`), or vLLM's, TensorRT-LLM's, TokenSpeed's or MLX's
//! (`--service`, one module each, reshaping the same generation as `reshape.rs` says).
//!
//! Two modes behind one service (`service.rs`): a deterministic fake engine that echoes
//! the prompt's token ids (`mock.rs`), and an adapter that makes llama.cpp's llama-server
//! a real gRPC engine (`llama.rs`). Served over HTTP/2 with hyper (`serve.rs`); tonic only
//! supplies the generated service. Each event is one line on stdout (`say.rs`) so tests
//! can check what the gateway sent. Run with `--help` for the flags.

mod cli;
mod disagg;
mod llama;
mod llama_api;
mod mlx;
mod mock;
mod recover;
mod reshape;
mod say;
mod serve;
mod service;
#[path = "../shared.rs"]
mod shared;
mod sink;
mod tokenizer;
mod tokenspeed;
mod trtllm;
mod vllm;
mod vocab;

use std::process::ExitCode;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::cli::{Command, Flags};
use crate::service::{Backend, Engine};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let flags = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Command::Run(flags)) => *flags,
        Ok(Command::Help) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("grpc-engine: {message} (see --help)");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(flags.threads)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("grpc-engine: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(flags));
    // Do not wait for generations still in flight: exit promptly on a signal.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("grpc-engine: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(flags: Flags) -> Result<(), String> {
    let backend = Backend::from_flags(&flags)?;
    let listener = TcpListener::bind((flags.host.as_str(), flags.port))
        .await
        .map_err(|e| format!("cannot listen on {}:{}: {e}", flags.host, flags.port))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read listening address: {e}"))?;
    let service = flags.service;
    // gRPC is HTTP/2 only.
    let tls = match &flags.tls {
        Some((cert, key)) => Some(shared::tls_acceptor(cert, key, &[b"h2"])?),
        None => None,
    };
    let disagg = disagg::Disagg::start(&flags).await?;
    let bootstrap = disagg.bootstrap_port();
    let engine = Arc::new(Engine::new(backend, flags, disagg));
    // The line tests wait for to learn the port (mock-worker's format).
    say::line(format_args!("LISTENING {addr}"));
    if let Some(port) = bootstrap {
        say::line(format_args!("BOOTSTRAP {}:{port}", addr.ip()));
    }
    serve::serve(listener, engine, service, tls).await;
    Ok(())
}

//! `mock-worker`: an LLM engine simulator for tollgate's integration tests
//! and benchmarks.
//!
//! It speaks the HTTP surfaces of SGLang, vLLM and llama.cpp (chat,
//! completions, native generate, Anthropic messages, responses,
//! embeddings, …) with configurable latency, simulated load and prefix
//! cache, and injectable faults, and records what it received so tests can
//! check what the gateway sent. It is built directly on hyper so that it is
//! never the bottleneck of a benchmark. Run with `--help` for the flags;
//! the `/mock/*` routes (see `control.rs`) steer it at run time.

mod body;
mod cache;
mod cli;
mod config;
mod control;
mod engine;
mod formats;
mod inference;
mod metrics;
mod pd;
mod prompt;
mod provider;
mod reqlog;
mod respond;
mod routes;
mod server;
#[path = "../shared.rs"]
mod shared;
mod sse;
mod state;
mod stats;
mod stream;
mod utility;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};

use crate::cli::{Command, Flags};
use crate::state::AppState;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let flags = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Command::Run(flags)) => flags,
        Ok(Command::Help) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("mock-worker: {message} (see --help)");
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
            eprintln!("mock-worker: cannot start runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(&flags));
    // Do not wait for streams still in flight: exit promptly on a signal.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mock-worker: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(flags: &Flags) -> Result<(), String> {
    let listener = listen(&flags.host, flags.port)
        .await
        .map_err(|e| format!("cannot listen on {}:{}: {e}", flags.host, flags.port))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read listening address: {e}"))?;
    let state = Arc::new(AppState::new(flags, addr.port()));

    // The one line tests wait for to learn the port.
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "LISTENING {addr}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("cannot write to stdout: {e}"))?;
    drop(stdout);

    let tls = match &flags.tls {
        // HTTP/2 or HTTP/1.1, as the client's ALPN offers.
        Some((cert, key)) => Some(shared::tls_acceptor(cert, key, &[b"h2", b"http/1.1"])?),
        None => None,
    };
    server::serve(listener, state, tls).await;
    Ok(())
}

/// The accept queue the engines it stands in for listen with: uvicorn's `Server.startup`
/// hands `Config.backlog` (2,048 unless set) to asyncio's `loop.create_server`, and
/// SGLang's and vLLM's HTTP servers run uvicorn without setting it. tokio's
/// own bind asks for 1,024, and a gateway that opens a burst of connections past that
/// (2,000 streams starting at once) had SYNs dropped and retried a second later, a delay
/// no real engine would add.
const ENGINE_BACKLOG: u32 = 2048;

async fn listen(host: &str, port: u16) -> std::io::Result<TcpListener> {
    let addr = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::other("the host resolves to no address"))?;
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ENGINE_BACKLOG)
}

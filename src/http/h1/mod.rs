//! The gateway's own HTTP/1.1 client towards plain-HTTP workers: the relay's fast path.
//!
//! hyper's client runs each connection as a task of its own and hands every body chunk
//! across a one-slot channel, so the client's task and the connection's alternate once per
//! event and every event leaves in a write of its own. Here the task that serves the
//! client drives the worker's connection too ([`conn`]): what one read from the worker
//! brought goes to the client together, the idle connections are a thread-local map
//! ([`pool`]), and a response body's chunked framing is checked in place ([`chunked`])
//! rather than decoded into new buffers. h2c and TLS workers stay on hyper.

pub mod chunked;
pub mod conn;
pub mod head;
pub mod pool;

pub use conn::{exchange, Exchange, H1Body, H1Error};
pub use pool::Keep;

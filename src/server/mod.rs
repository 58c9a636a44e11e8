//! Serving one client connection: HTTP/1.1 with keep-alive (plain requests answered here,
//! the rest by hyper) or h2 by preface (h2c, or over TLS by ALPN), the edge limits, the
//! header-read and keep-alive timeouts, parking of idle HTTP/1.1 connections, and
//! graceful drain on shutdown.

pub mod drain;
pub mod h1_framing;
pub mod health;
pub mod limit;
pub mod listener;
pub mod park_sweep;
mod parkable;
pub mod plain_h1;
pub mod side_listener;
mod smuggling_guard;
mod timeouts;
pub mod tls;
pub mod tokio_io;
#[cfg(test)]
mod wake_count;

pub use smuggling_guard::{SmugglingGuard, CONFLICT_REPLY};

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::{service_fn, HttpService};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::http::body::RespBody;
use crate::http::guard::{Guard, Release};
use crate::http::request_body::RequestBody;
use drain::DrainWait;
use h1_framing::Phase;
use parkable::Parkable;
use plain_h1::{Exchange, Parsed};
use timeouts::{Expiry, Timeouts};

/// Largest request head (request line and headers) accepted; larger → 431.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header fields accepted in one request; more → 431.
pub const MAX_HEADER_FIELDS: usize = 100;

/// The Listener flag group and the edge limits of client connections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSettings {
    /// `--host`: address of the main listener.
    pub host: IpAddr,
    /// `--port`: port of the main listener; 0 asks the OS for a free port.
    pub port: u16,
    /// `--header-read-timeout-secs`: time a client has to send the request head.
    pub header_read_timeout: Duration,
    /// `--keep-alive-timeout-secs`: idle keep-alive client connections are closed after this.
    pub keep_alive_timeout: Duration,
    /// `--max-connections`: client connections open at once over all data-plane threads;
    /// `None` derives it from the open-file limit at startup
    /// ([`limit::default_max_connections`]).
    pub max_connections: Option<usize>,
    /// `--health-check-port`: port of the probe-only listener on `--host`; `None`: off.
    pub health_check_port: Option<u16>,
    /// `--tls-cert-path` / `--tls-key-path`: the main listener speaks TLS when both are set.
    pub tls: tls::TlsSettings,
}

impl Default for ServerSettings {
    fn default() -> ServerSettings {
        ServerSettings {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 30000,
            header_read_timeout: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(75),
            max_connections: None,
            health_check_port: None,
            tls: tls::TlsSettings::default(),
        }
    }
}

/// What answers the requests of client connections. The server owns connections, edge
/// limits and timeouts and knows nothing of routes; the layer above implements this (one
/// value per data-plane thread, shared by that thread's connections).
pub trait Handler: Send + Sync + 'static {
    /// Answers one request. Never fails: every error is a response.
    fn handle(&self, req: Request<RequestBody>) -> impl Future<Output = Response<RespBody>> + Send;
}

/// hyper's connection settings, which every connection of a thread shares: one builder
/// per protocol, [`serve`] picks by the connection's first bytes.
pub struct ConnBuilder {
    h1: http1::Builder,
    h2: http2::Builder<TokioExecutor>,
}

/// Builds hyper's connection settings from the edge limits.
///
/// hyper's own HTTP/1 header-read timeout is off: it also runs while a keep-alive
/// connection waits for its next request, which would make it the idle timeout, and it
/// does not cover the wait for the first bytes before hyper knows the protocol.
/// [`Timeouts`] in [`serve`] applies both limits instead.
pub fn builder() -> ConnBuilder {
    let mut h1 = http1::Builder::new();
    h1.keep_alive(true)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADER_FIELDS)
        .header_read_timeout(None);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new())
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .max_concurrent_streams(1024)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    ConnBuilder { h1, h2 }
}

/// What the connection's timers need to know, shared by its IO adapter, its requests and
/// [`serve`]: requests in flight, a count of request starts and ends, and where the
/// client's byte stream stands.
#[derive(Debug, Default)]
pub struct ConnState {
    active: AtomicUsize,
    /// Bumped on every request start and end.
    epoch: AtomicU64,
    /// The stream's [`Phase`] as the IO adapter last saw it.
    phase: AtomicU8,
    /// [`serve`] asks to take an idle HTTP/1.1 connection back from hyper ([`Parkable`]).
    park: AtomicBool,
    /// On its thread's [`park_sweep`] list.
    listed: AtomicBool,
    /// The thread's [`park_sweep`] found the connection idle long enough to park, and let
    /// go of it.
    park_due: AtomicBool,
}

impl ConnState {
    fn park_requested(&self) -> bool {
        self.park.load(Ordering::Relaxed)
    }

    fn request_park(&self, park: bool) {
        self.park.store(park, Ordering::Relaxed);
    }

    /// Whether the sweep asked for a park since the last call. A load first: the sweep
    /// asks rarely, and the connection looks on every wake.
    fn take_park_due(&self) -> bool {
        self.park_due.load(Ordering::Relaxed) && self.park_due.swap(false, Ordering::Relaxed)
    }

    fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Relaxed) {
            1 => Phase::InHead,
            2 => Phase::Unfollowed,
            3 => Phase::InBody,
            _ => Phase::NoHead,
        }
    }
}

/// The IO adapter's side of [`ConnState`]: publishes the stream's [`Phase`] after each read,
/// touching the shared state only when it changes.
pub struct PhaseReport {
    state: Arc<ConnState>,
    last: Phase,
}

impl PhaseReport {
    pub fn new(state: Arc<ConnState>) -> PhaseReport {
        PhaseReport {
            state,
            last: Phase::NoHead,
        }
    }

    pub fn update(&mut self, phase: Phase) {
        if phase != self.last {
            self.last = phase;
            let code = match phase {
                Phase::NoHead => 0,
                Phase::InHead => 1,
                Phase::Unfollowed => 2,
                Phase::InBody => 3,
            };
            self.state.phase.store(code, Ordering::Relaxed);
        }
    }
}

impl ConnState {
    /// Marks one request as active on its connection until the returned guard goes (with
    /// the response body, when it is finished or abandoned). The guard holds the
    /// connection's `Arc`, so counting a request allocates nothing.
    fn enter(state: &Arc<ConnState>) -> Guard {
        state.active.fetch_add(1, Ordering::Relaxed);
        state.epoch.fetch_add(1, Ordering::Relaxed);
        Guard::counted(state.clone())
    }
}

/// A request's end, called only by the guard [`ConnState::enter`] returned.
impl Release for ConnState {
    fn release(&self) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }
}

/// Serves one connection until the client leaves, a timeout closes it, or shutdown drains
/// it. `state` is the one its IO adapter reports to; `accepted` is when the connection was
/// accepted, so a TLS handshake counts against the first request's header-read timeout.
///
/// The server answers plain HTTP/1.1 requests itself ([`plain_h1`]); hyper serves the
/// connection only when something else comes: h2 (chosen by the first bytes) or an
/// HTTP/1.1 request outside the plain shape. An HTTP/1.1 connection idle for
/// [`park_sweep::PARK_AFTER`] is taken back from hyper and waits for its next request
/// holding no buffer ([`Parkable`]), as the server's own connections do between requests.
pub async fn serve<I, H>(
    io: I,
    state: Arc<ConnState>,
    accepted: tokio::time::Instant,
    handler: Arc<H>,
    settings: &ServerSettings,
    builder: &ConnBuilder,
    mut drain: DrainWait,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    H: Handler,
{
    if drain.is_fired() {
        return;
    }
    let mut timeouts = Timeouts::new(
        accepted,
        settings.header_read_timeout,
        settings.keep_alive_timeout,
    );
    let sleep = tokio::time::sleep_until(timeouts.first_check());
    tokio::pin!(sleep);
    // The handler's future (several KiB: the whole pipeline) is boxed per request. hyper
    // keeps a slot sized for the service's future for the connection's whole life, so an
    // unboxed one would cost every open connection those KiB, streaming or not, where the
    // box costs one allocation per request and is gone once the response head is out. It
    // is written straight into its box ([`crate::boxed`]), not copied there.
    let own = Own {
        handler: handler.clone(),
        state: state.clone(),
    };
    let svc = {
        let state = state.clone();
        service_fn(move |req: Request<Incoming>| {
            let handler = handler.clone();
            let activity = ConnState::enter(&state);
            async move {
                let req = req.map(RequestBody::Hyper);
                let mut resp = crate::boxed::pinned(|| handler.handle(req)).await;
                resp.body_mut().keep_active(activity);
                Ok::<_, Infallible>(resp)
            }
        })
    };
    let mut conn = Conn::Own {
        io: Parkable::new(io, state.clone()),
        fresh: true,
        exchange: None,
    };
    let mut draining = false;
    let mut closing = false;
    loop {
        let step = std::future::poll_fn(|cx| conn.poll_step(cx, builder, &svc, &own));
        let expiry = std::future::poll_fn(|cx| timeouts.poll_expired(&state, sleep.as_mut(), cx));
        // `biased`: the connection runs first, so the timers see what it just read.
        tokio::select! {
            biased;
            step = step => match step {
                Step::Closed => return,
                Step::Started { h1 } => {
                    if h1 {
                        timeouts.enable_parking();
                    }
                }
            },
            () = std::future::poll_fn(|cx| drain.poll_fired(cx)), if !draining => {
                draining = true;
                if !conn.goodbye() {
                    return;
                }
            }
            expired = expiry => {
                match expired {
                    Expiry::Header => {
                        tracing::debug!("no request head within the header read timeout; closing");
                        return;
                    }
                    Expiry::Park => {
                        if !draining {
                            conn.park(&state);
                        }
                    }
                    Expiry::Idle if closing => return,
                    Expiry::Idle => {
                        tracing::trace!("closing idle connection");
                        if !conn.goodbye() {
                            return;
                        }
                        closing = true;
                        timeouts.closing();
                    }
                }
            }
        }
    }
}

/// What [`Conn::poll_step`] has to report to [`serve`].
enum Step {
    /// hyper took the connection over (`h1`: speaking HTTP/1.1, so it parks when idle; the
    /// server's own connections need no park).
    Started { h1: bool },
    /// The connection is over.
    Closed,
}

/// Where a client connection stands: served by the server itself (plain HTTP/1.1
/// requests, and waiting for bytes: just accepted, between requests, or parked), or by
/// hyper in the protocol its first bytes chose.
enum Conn<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    S: HttpService<Incoming>,
{
    /// `fresh`: nothing served yet, so the first bytes still choose the protocol;
    /// `exchange`: the plain request being answered ([`plain_h1`]), boxed so that an idle
    /// connection does not carry its room.
    Own {
        io: Parkable<I>,
        fresh: bool,
        exchange: Option<Box<Exchange>>,
    },
    H1(Box<http1::Connection<Parkable<I>, S>>),
    H2(Pin<Box<http2::Connection<Parkable<I>, S, TokioExecutor>>>),
    Closed,
}

impl<I, S> Conn<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + 'static,
    S: HttpService<Incoming, ResBody = RespBody> + Clone + Unpin + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send + 'static,
{
    /// Drives the connection: reads what the client sends, answers plain HTTP/1.1 requests
    /// itself and hands anything else to hyper, runs hyper, and takes a parked connection
    /// back when hyper lets go of it.
    fn poll_step<H: Handler>(
        &mut self,
        cx: &mut Context<'_>,
        builder: &ConnBuilder,
        svc: &S,
        own: &Own<H>,
    ) -> Poll<Step> {
        loop {
            match self {
                Conn::Own {
                    io,
                    fresh,
                    exchange,
                } => {
                    if let Some(answering) = exchange.as_mut() {
                        if !std::task::ready!(poll_answer(io, answering, cx)) {
                            return Poll::Ready(Step::Closed);
                        }
                        *exchange = None;
                    }
                    if io.has_prefix() && !(*fresh && io.partial_preface()) {
                        if *fresh && io.starts_h2() {
                            return self.hand_to_hyper(builder, svc, false);
                        }
                        match plain_h1::parse(io.prefix()) {
                            Parsed::Request { req, len, close } => {
                                io.consume(len);
                                *exchange = Some(Box::new(own.answer(req, close)));
                                *fresh = false;
                                continue;
                            }
                            Parsed::Hyper => return self.hand_to_hyper(builder, svc, true),
                            Parsed::Partial => {}
                        }
                    }
                    match std::task::ready!(io.poll_fill(cx, *fresh)) {
                        Ok(true) => {}
                        Ok(false) => return Poll::Ready(Step::Closed),
                        Err(err) => {
                            tracing::debug!(error = %err, "connection read failed");
                            return Poll::Ready(Step::Closed);
                        }
                    }
                }
                Conn::H1(hyper) => {
                    let ended = std::task::ready!(Pin::new(&mut **hyper).poll(cx));
                    if ended.is_err() {
                        log_end(ended);
                        return Poll::Ready(Step::Closed);
                    }
                    let Conn::H1(hyper) = std::mem::replace(self, Conn::Closed) else {
                        return Poll::Ready(Step::Closed);
                    };
                    let parts = hyper.into_parts();
                    let mut io = parts.io;
                    // hyper also ends when the client leaves or asked to close; only an
                    // end the parking caused goes on.
                    if !io.parked() {
                        return Poll::Ready(Step::Closed);
                    }
                    io.unpark(parts.read_buf);
                    tracing::trace!("idle connection parked");
                    *self = Conn::Own {
                        io,
                        fresh: false,
                        exchange: None,
                    };
                }
                Conn::H2(hyper) => {
                    log_end(std::task::ready!(hyper.as_mut().poll(cx)));
                    return Poll::Ready(Step::Closed);
                }
                Conn::Closed => return Poll::Ready(Step::Closed),
            }
        }
    }

    /// Gives the connection, with the bytes read so far, to hyper (`h1`: HTTP/1.1, else h2).
    fn hand_to_hyper(&mut self, builder: &ConnBuilder, svc: &S, h1: bool) -> Poll<Step> {
        // Moves the IO out (the state was just matched as the server's own).
        if let Conn::Own { io, .. } = std::mem::replace(self, Conn::Closed) {
            *self = if h1 {
                Conn::H1(Box::new(builder.h1.serve_connection(io, svc.clone())))
            } else {
                Conn::H2(Box::pin(builder.h2.serve_connection(io, svc.clone())))
            };
        }
        Poll::Ready(Step::Started { h1 })
    }

    /// Asks an idle HTTP/1.1 connection to let go of hyper once its response is flushed
    /// (see [`Parkable`]); a connection of the server's own holds no buffer between
    /// requests already.
    fn park(&mut self, state: &ConnState) {
        if let Conn::H1(_) = self {
            state.request_park(true);
        }
    }

    /// Starts a graceful goodbye (HTTP/1.1 closes after the response in flight, h2 sends
    /// GOAWAY); `false` when the connection has nothing in flight and can simply close.
    fn goodbye(&mut self) -> bool {
        match self {
            Conn::Own {
                exchange: Some(answering),
                ..
            } => {
                answering.close_after();
                true
            }
            Conn::H1(hyper) => {
                Pin::new(&mut **hyper).graceful_shutdown();
                true
            }
            Conn::H2(hyper) => {
                hyper.as_mut().graceful_shutdown();
                true
            }
            Conn::Own { exchange: None, .. } | Conn::Closed => false,
        }
    }
}

/// Drives the plain answer in flight on `io`: `true` once it is out and the connection
/// goes on, `false` once the connection is over. The exchange stays until then, so a
/// shutdown that has to wait (TLS sends its close first) is polled again, and nothing
/// the client sent after a close is read meanwhile.
fn poll_answer<I>(
    io: &mut Parkable<I>,
    answering: &mut Exchange,
    cx: &mut Context<'_>,
) -> Poll<bool>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    match answering.poll(io, cx) {
        Poll::Ready(Ok(())) if answering.closes() => {
            // The client was told; a shutdown, not a reset, ends it.
            let _ = std::task::ready!(hyper::rt::Write::poll_shutdown(Pin::new(io), cx));
            Poll::Ready(false)
        }
        Poll::Ready(Ok(())) => Poll::Ready(true),
        Poll::Ready(Err(err)) => {
            tracing::debug!(error = %err, "answer not delivered; closing");
            Poll::Ready(false)
        }
        // Watched as hyper watches a busy connection: one read while nothing unread
        // waits, so a client that leaves cancels its request; pipelined bytes wait for
        // their turn.
        Poll::Pending if io.has_prefix() => Poll::Pending,
        Poll::Pending => match io.poll_fill(cx, false) {
            Poll::Ready(Ok(false) | Err(_)) => Poll::Ready(false),
            Poll::Ready(Ok(true)) | Poll::Pending => Poll::Pending,
        },
    }
}

/// What the server needs to answer a plain request itself: the handler and the
/// connection's state its requests count themselves in.
struct Own<H> {
    handler: Arc<H>,
    state: Arc<ConnState>,
}

impl<H: Handler> Own<H> {
    fn answer(&self, req: Request<RequestBody>, close: bool) -> Exchange {
        let activity = ConnState::enter(&self.state);
        let handler = self.handler.clone();
        // Boxed as hyper's service boxes it (see [`serve`]), written straight into its box.
        let answer: plain_h1::Answer =
            crate::boxed::pinned(move || async move { handler.handle(req).await });
        Exchange::new(answer, close, activity)
    }
}

fn log_end(ended: hyper::Result<()>) {
    if let Err(err) = ended {
        tracing::debug!(error = %err, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::*;
    use crate::server::tokio_io::CheckedStream;

    /// Answers every request with the same body.
    struct Fixed(Bytes);

    impl Handler for Fixed {
        fn handle(
            &self,
            _req: Request<RequestBody>,
        ) -> impl Future<Output = Response<RespBody>> + Send {
            let body = self.0.clone();
            async move { Response::new(RespBody::full(body)) }
        }
    }

    /// A request only hyper serves (a chunked body), so that hyper's park is what runs.
    const TO_HYPER: &[u8] =
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";

    /// Reads one response with a `Content-Length` body; its body.
    async fn response(client: &mut DuplexStream) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|v| v.trim().parse().ok())
                    .expect("a content-length");
                if got.len() >= end + 4 + length {
                    return got[end + 4..end + 4 + length].to_vec();
                }
            }
            let read = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf));
            let n = read.await.expect("the response stalled").expect("read");
            assert!(n > 0, "closed after {} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
    }

    /// The client reads nothing for a while after its request: the whole body is with
    /// hyper, the connection counts as idle, and the park comes due while most of the
    /// response is still unflushed. It must wait for the flush: the response arrives
    /// whole, and the (then parked) connection serves the next request.
    #[tokio::test]
    async fn a_park_waits_until_the_response_is_flushed() {
        let body = Bytes::from(vec![b'x'; 32 * 1024]);
        let (mut client, server) = tokio::io::duplex(1024);
        let state = Arc::new(ConnState::default());
        let io = hyper_util::rt::TokioIo::new(CheckedStream::new(
            server,
            PhaseReport::new(state.clone()),
        ));
        let drain = drain::Drain::default();
        let (settings, builder) = (ServerSettings::default(), builder());
        let handler = Arc::new(Fixed(body.clone()));
        // What each data-plane thread runs beside its connections.
        let _sweep = tokio::spawn(park_sweep::run());
        let serving = serve(
            io,
            state,
            tokio::time::Instant::now(),
            handler,
            &settings,
            &builder,
            drain.waiter(),
        );
        let client_side = async {
            client.write_all(TO_HYPER).await.expect("write");
            tokio::time::sleep(park_sweep::PARK_AFTER * 20).await;
            assert_eq!(response(&mut client).await, body);
            tokio::time::sleep(park_sweep::PARK_AFTER * 5).await;
            client.write_all(TO_HYPER).await.expect("write");
            assert_eq!(response(&mut client).await, body);
        };
        tokio::select! {
            () = serving => panic!("the connection closed"),
            () = client_side => {}
        }
    }
}

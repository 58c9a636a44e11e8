//! The one builder of the gateway's outbound HTTP clients.
//!
//! Three kinds of call leave the gateway, and each wants its pool built differently: the
//! data path forwards client requests to plain-HTTP workers from every data-plane thread,
//! the control plane makes its own few calls to workers (probes, detection, fan-out) over
//! `http://` or `https://`, and token verification fetches an identity provider's metadata
//! and keys. [`ClientOptions`] names those settings once per use, and [`build`] turns any
//! of them into a pooled client, so what each client does is read in one place.

use std::time::Duration;

use hyper::body::Body;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::tls::UpstreamTls;

/// What the TCP connector is wrapped in; it also fixes the client's connector type, so the
/// data path's client has no TLS layer to pass through at all.
pub trait Tls {
    type Connector: Connect + Clone + Send + Sync + 'static;

    /// Wraps the configured TCP connector.
    fn wrap(self, tcp: HttpConnector) -> Self::Connector;
}

/// Cleartext only: the connector refuses any URI that is not `http://`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plain;

impl Tls for Plain {
    type Connector = HttpConnector;

    fn wrap(self, tcp: HttpConnector) -> HttpConnector {
        tcp
    }
}

/// `https://` verified against the roots of an [`UpstreamTls`], and `http://` as is.
#[derive(Clone, Debug)]
pub struct Verified {
    pub tls: UpstreamTls,
    /// Whether TLS offers HTTP/2 through ALPN besides HTTP/1.1.
    pub alpn_h2: bool,
}

impl Tls for Verified {
    type Connector = HttpsConnector<HttpConnector>;

    fn wrap(self, tcp: HttpConnector) -> HttpsConnector<HttpConnector> {
        self.tls.connector(tcp, self.alpn_h2)
    }
}

/// How one client connects and pools its connections.
#[derive(Clone, Debug)]
pub struct ClientOptions<T> {
    tls: T,
    /// HTTP/2 with prior knowledge on every connection (h2c on `http://`).
    http2_only: bool,
    /// `TCP_NODELAY`, so small request heads and bodies leave without waiting.
    nodelay: bool,
    /// `None`: the OS decides how long a connect may take.
    connect_timeout: Option<Duration>,
    max_idle_per_host: usize,
    /// `None`: idle connections never expire.
    idle_timeout: Option<Duration>,
    /// Give the pool a timer: without one it never evicts idle connections in the
    /// background (they are only dropped when found expired).
    evict_idle: bool,
    /// Give HTTP/2 connections a timer.
    h2_timer: bool,
}

impl<T> ClientOptions<T> {
    /// The data path's settings over `tls`: no Nagle delay, idle connections evicted on
    /// their timer, HTTP/2 connections timed, and the pool size and timeouts the gateway
    /// flags or the worker's `http_pool` chose.
    fn data(
        tls: T,
        http2_only: bool,
        max_idle_per_host: usize,
        idle_timeout: Option<Duration>,
        connect_timeout: Duration,
    ) -> ClientOptions<T> {
        ClientOptions {
            tls,
            http2_only,
            nodelay: true,
            connect_timeout: Some(connect_timeout),
            max_idle_per_host,
            idle_timeout,
            evict_idle: true,
            h2_timer: true,
        }
    }
}

impl ClientOptions<Plain> {
    /// The data path's pools to h2c workers (HTTP/2 with prior knowledge), one per
    /// data-plane thread, with no TLS layer. (HTTP/1.1 workers go through `http::h1`.)
    pub fn data_path_h2c(
        max_idle_per_host: usize,
        idle_timeout: Option<Duration>,
        connect_timeout: Duration,
    ) -> ClientOptions<Plain> {
        ClientOptions::data(
            Plain,
            true,
            max_idle_per_host,
            idle_timeout,
            connect_timeout,
        )
    }
}

impl ClientOptions<Verified> {
    /// The pools to gRPC engines, data path and control plane alike: HTTP/2 always, h2c
    /// on `http://` and TLS verified against `tls` on `https://` (`grpcs://`), no Nagle
    /// delay, idle connections kept `idle_timeout`.
    pub fn grpc(tls: UpstreamTls, idle_timeout: Option<Duration>) -> ClientOptions<Verified> {
        let tls = Verified { tls, alpn_h2: true };
        ClientOptions::data(tls, true, usize::MAX, idle_timeout, CONNECT_TIMEOUT)
    }
}

/// How long the control plane's connections stay idle: long enough that periodic probes
/// reuse them between intervals of the default health check, short enough that they do not
/// pile up for removed workers.
const CONTROL_IDLE: Duration = Duration::from_secs(30);
/// Time allowed to establish a TCP connection to a worker, data path and control plane
/// alike: the spec's `http_pool.connect_timeout_secs` default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl ClientOptions<Verified> {
    /// The data path's pools to `https://` workers (external providers included), one set
    /// per data-plane thread: as [`ClientOptions::data_path`], with TLS verified against
    /// `tls` and HTTP/2 or HTTP/1.1 chosen by ALPN.
    pub fn data_path_tls(
        tls: UpstreamTls,
        max_idle_per_host: usize,
        idle_timeout: Option<Duration>,
        connect_timeout: Duration,
    ) -> ClientOptions<Verified> {
        let tls = Verified { tls, alpn_h2: true };
        ClientOptions::data(tls, false, max_idle_per_host, idle_timeout, connect_timeout)
    }

    /// The control plane's own calls to workers: any worker URL, `https://` included (HTTP/2
    /// where TLS negotiates it), or HTTP/2 with prior knowledge when `http2_only`. These
    /// calls are few and each bounds itself as a whole, so the pool is hyper's unbounded
    /// one; idle connections are evicted after [`CONTROL_IDLE`].
    pub fn control_calls(tls: UpstreamTls, http2_only: bool) -> ClientOptions<Verified> {
        ClientOptions {
            tls: Verified { tls, alpn_h2: true },
            http2_only,
            nodelay: true,
            connect_timeout: Some(CONNECT_TIMEOUT),
            max_idle_per_host: usize::MAX,
            idle_timeout: Some(CONTROL_IDLE),
            evict_idle: true,
            h2_timer: false,
        }
    }

    /// Fetches from an identity provider (discovery document, key set): HTTP/1.1 only, and
    /// hyper's own pool defaults, since a client serves one fetch and is dropped (fetches
    /// are rare and run on several runtimes, to which a kept pool would tie connections).
    /// The fetch bounds itself as a whole.
    pub fn oidc() -> ClientOptions<Verified> {
        ClientOptions {
            tls: Verified {
                tls: UpstreamTls::platform(),
                alpn_h2: false,
            },
            http2_only: false,
            nodelay: false,
            connect_timeout: None,
            max_idle_per_host: usize::MAX,
            idle_timeout: Some(Duration::from_secs(90)),
            evict_idle: false,
            h2_timer: false,
        }
    }
}

/// A pooled client sending `B` bodies, built as `options` say. Connections run as tasks on
/// the tokio runtime the client is used from.
pub fn build<T: Tls, B>(options: ClientOptions<T>) -> Client<T::Connector, B>
where
    B: Body + Send,
    B::Data: Send,
{
    let mut tcp = HttpConnector::new();
    tcp.set_nodelay(options.nodelay);
    tcp.set_connect_timeout(options.connect_timeout);
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .http2_only(options.http2_only)
        .pool_max_idle_per_host(options.max_idle_per_host)
        .pool_idle_timeout(options.idle_timeout);
    if options.evict_idle {
        builder.pool_timer(TokioTimer::new());
    }
    if options.h2_timer {
        builder.timer(TokioTimer::new());
    }
    builder.build(options.tls.wrap(tcp))
}

/// An error with its causes on one line (`client error (Connect): tcp connect error:
/// Connection refused`): the outer hyper errors alone do not say what went wrong. Every
/// outbound call reports its failures this way.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECS_10: Duration = Duration::from_secs(10);

    /// Every setting but the TLS choice, in field order: http2_only, nodelay,
    /// connect_timeout, max_idle_per_host, idle_timeout, evict_idle, h2_timer.
    type Settings = (
        bool,
        bool,
        Option<Duration>,
        usize,
        Option<Duration>,
        bool,
        bool,
    );

    fn settings<T>(o: &ClientOptions<T>) -> Settings {
        (
            o.http2_only,
            o.nodelay,
            o.connect_timeout,
            o.max_idle_per_host,
            o.idle_timeout,
            o.evict_idle,
            o.h2_timer,
        )
    }

    #[test]
    fn data_path_is_plain_fast_and_takes_its_tuning() {
        let idle = Some(Duration::from_secs(7));
        let options = ClientOptions::data_path_h2c(500, idle, SECS_10);
        assert_eq!(options.tls, Plain);
        assert_eq!(
            settings(&options),
            (true, true, Some(SECS_10), 500, idle, true, true)
        );
        let unbounded = ClientOptions::data_path_h2c(3, None, SECS_10);
        assert_eq!(
            settings(&unbounded),
            (true, true, Some(SECS_10), 3, None, true, true),
            "no idle timeout stays none"
        );
    }

    #[test]
    fn control_calls_reach_https_with_h2_alpn_and_evict_idle() {
        let options = ClientOptions::control_calls(UpstreamTls::platform(), false);
        assert!(options.tls.alpn_h2);
        let idle = Some(Duration::from_secs(30));
        assert_eq!(
            settings(&options),
            (false, true, Some(SECS_10), usize::MAX, idle, true, false)
        );
        assert!(ClientOptions::control_calls(UpstreamTls::platform(), true).http2_only);
    }

    #[test]
    fn oidc_is_http1_with_hyper_defaults() {
        let options = ClientOptions::oidc();
        assert!(!options.tls.alpn_h2);
        let idle = Some(Duration::from_secs(90));
        assert_eq!(
            settings(&options),
            (false, false, None, usize::MAX, idle, false, false)
        );
    }
}

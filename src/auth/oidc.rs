//! Talking to the identity provider: which URLs the gateway may fetch, and fetching them
//! (spec 1, "JWT / OIDC", rule 3).
//!
//! The discovery URL and the JWKS URI come from configuration and from the IdP's own
//! discovery document, so they are checked before every use: a misconfigured or hostile
//! value must not turn the gateway into a client for internal services (SSRF). Only IP
//! literals and reserved names are judged here; the connection then goes wherever DNS says.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use bytes::Bytes;
use http::header::ACCEPT;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty, Limited};
use serde_json::Value;

use crate::http::client::{self, ClientOptions};
use crate::secret::redact_userinfo;

/// Connect, TLS handshake, request and the whole body must fit in this.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Discovery documents and key sets are a few KiB; anything larger is not one.
pub const MAX_BODY: usize = 1024 * 1024;
/// Path of the discovery document under the issuer (OpenID Connect Discovery 1.0, §4).
const DISCOVERY_PATH: &str = "/.well-known/openid-configuration";

/// Why an IdP URL was refused or a fetch from it failed. The messages name the URL (which
/// comes from configuration or the IdP) and never anything a client sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OidcError {
    /// Not a valid absolute URL.
    Unparsable(String),
    /// A scheme other than `https` (or `http` for a loopback name).
    Scheme(String),
    /// Plain `http` for a host other than `localhost`, `127.0.0.1` or `::1`.
    PlainHttp(String),
    /// The URL carries `user:password@`, which would end up in logs.
    UserInfo(String),
    /// A private, loopback, link-local or otherwise internal IP literal.
    InternalAddress(String),
    /// A host name reserved for internal use (`.internal`, `.local`, `.localhost`), or a
    /// numeric host that is not a plain dotted quad (resolvers read `127.1` as loopback).
    InternalHost(String),
    /// Connection, TLS or protocol failure.
    Transport { url: String, reason: String },
    /// No complete answer within [`FETCH_TIMEOUT`].
    Timeout(String),
    /// A 3xx answer: redirects are not followed.
    Redirect { url: String, status: u16 },
    /// Any other non-2xx answer.
    Status { url: String, status: u16 },
    /// The body exceeds [`MAX_BODY`].
    TooLarge(String),
    /// The body is not JSON.
    NotJson(String),
    /// The discovery document has no string `jwks_uri`.
    NoJwksUri(String),
    /// The body is JSON but has no `keys` array.
    NotKeySet(String),
}

impl fmt::Display for OidcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OidcError::Unparsable(url) => write!(f, "{url:?} is not a valid absolute URL"),
            OidcError::Scheme(url) => write!(f, "{url}: only https URLs are allowed"),
            OidcError::PlainHttp(url) => write!(
                f,
                "{url}: plain http is allowed only for localhost, 127.0.0.1 and ::1"
            ),
            OidcError::UserInfo(url) => write!(f, "{url}: credentials in the URL are not allowed"),
            OidcError::InternalAddress(url) => {
                write!(f, "{url}: internal IP addresses are not allowed")
            }
            OidcError::InternalHost(url) => write!(f, "{url}: internal host names are not allowed"),
            OidcError::Transport { url, reason } => write!(f, "fetching {url} failed: {reason}"),
            OidcError::Timeout(url) => write!(
                f,
                "fetching {url} timed out after {} s",
                FETCH_TIMEOUT.as_secs()
            ),
            OidcError::Redirect { url, status } => {
                write!(f, "{url} answered {status}: redirects are not followed")
            }
            OidcError::Status { url, status } => write!(f, "{url} answered {status}"),
            OidcError::TooLarge(url) => write!(f, "{url}: body larger than {MAX_BODY} bytes"),
            OidcError::NotJson(url) => write!(f, "{url}: body is not valid JSON"),
            OidcError::NoJwksUri(url) => {
                write!(f, "{url}: discovery document has no string jwks_uri")
            }
            OidcError::NotKeySet(url) => write!(f, "{url}: body is not a JSON Web Key Set"),
        }
    }
}

impl std::error::Error for OidcError {}

/// Checks a URL the gateway is about to fetch from the IdP (rule 3) and parses it.
///
/// `https` is required, except that plain `http` is allowed for `localhost`, `127.0.0.1`
/// and `::1` (a local test IdP). IP literals that reach internal networks are refused
/// whatever the scheme, as are host names reserved for internal use.
pub fn check_idp_url(url: &str) -> Result<Uri, OidcError> {
    let shown = || redact_userinfo(url).into_owned();
    let uri: Uri = url.parse().map_err(|_| OidcError::Unparsable(shown()))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(OidcError::Unparsable(shown()));
    };
    if authority.as_str().contains('@') {
        return Err(OidcError::UserInfo(shown()));
    }
    match (scheme, Host::classify(authority.host())) {
        (_, Host::Internal) => Err(OidcError::InternalHost(shown())),
        (_, Host::InternalIp) => Err(OidcError::InternalAddress(shown())),
        ("https", _) | ("http", Host::Loopback) => Ok(uri),
        ("http", Host::Public) => Err(OidcError::PlainHttp(shown())),
        _ => Err(OidcError::Scheme(shown())),
    }
}

/// What a URL's host is, as far as rule 3 is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Host {
    /// `localhost`, `127.0.0.1`, `::1`: the only hosts plain http may use.
    Loopback,
    /// Any other IP literal that reaches a non-public network.
    InternalIp,
    /// A name reserved for internal use, or an ambiguous numeric host.
    Internal,
    /// Everything else.
    Public,
}

impl Host {
    fn classify(host: &str) -> Host {
        if let Some(bracketed) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            // An IPv6 literal; one that does not parse (a zone id, `[fe80::1%eth0]`) is
            // link-local or worse.
            return bracketed
                .parse::<IpAddr>()
                .map_or(Host::InternalIp, Host::classify_ip);
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Host::classify_ip(ip);
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if name == "localhost" {
            Host::Loopback
        } else if is_reserved_name(&name) || looks_numeric(&name) {
            Host::Internal
        } else {
            Host::Public
        }
    }

    fn classify_ip(ip: IpAddr) -> Host {
        if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) || ip == IpAddr::V6(Ipv6Addr::LOCALHOST) {
            Host::Loopback
        } else if is_internal_ip(ip) {
            Host::InternalIp
        } else {
            Host::Public
        }
    }
}

/// `.internal` (cloud metadata and private zones), `.local` (mDNS) and `.localhost`
/// (RFC 6761: resolves to loopback), and those bare labels themselves.
fn is_reserved_name(name: &str) -> bool {
    ["internal", "local", "localhost"]
        .iter()
        .any(|tld| name == *tld || name.strip_suffix(tld).is_some_and(|r| r.ends_with('.')))
}

/// A host whose last label is numeric (`127.1`, `2130706433`, `0x7f.1`) but which is not a
/// dotted quad. No real top-level domain is numeric, while the system resolver reads these
/// inet_aton forms as addresses — a way around the IP literal checks.
fn looks_numeric(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    last.starts_with(|c: char| c.is_ascii_digit())
        && last.chars().all(|c| c.is_ascii_hexdigit() || c == 'x')
}

/// Private, loopback, link-local, unspecified, multicast, broadcast/reserved, CGNAT; for
/// IPv6 also unique-local, link-local, site-local, and IPv4 addresses embedded in IPv6.
fn is_internal_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || a == 0 // "this network", 0.0.0.0 included
        || a >= 240 // reserved
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64.0.0/10
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() {
        return true;
    }
    if (first & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (first & 0xffc0) == 0xfec0
    // site-local fec0::/10 (deprecated, still routed internally)
    {
        return true;
    }
    // ::ffff:a.b.c.d and the deprecated ::a.b.c.d reach the IPv4 address.
    ip.to_ipv4().is_some_and(is_internal_v4)
}

/// The discovery URL of an issuer: `{issuer}/.well-known/openid-configuration`, with one
/// trailing slash of the issuer dropped so that `https://idp/` and `https://idp` agree.
pub fn discovery_url(issuer: &str) -> String {
    let base = issuer.strip_suffix('/').unwrap_or(issuer);
    format!("{base}{DISCOVERY_PATH}")
}

/// Fetches the issuer's discovery document and returns its `jwks_uri`, itself checked
/// against the same URL rules (the document must not point the gateway inwards either).
pub async fn discover(issuer: &str) -> Result<Uri, OidcError> {
    let url = discovery_url(issuer);
    let uri = check_idp_url(&url)?;
    let document = fetch_json(&uri).await?;
    if let Some(named) = document.get("issuer").and_then(Value::as_str) {
        if named.trim_end_matches('/') != issuer.trim_end_matches('/') {
            // Tokens are checked against the configured issuer either way; a mismatch here
            // usually explains why every token is then refused.
            tracing::warn!(url = %url, issuer = named, "discovery document names another issuer");
        }
    }
    let jwks_uri = document
        .get("jwks_uri")
        .and_then(Value::as_str)
        .ok_or_else(|| OidcError::NoJwksUri(url.clone()))?;
    let jwks = check_idp_url(jwks_uri)?;
    tracing::info!(url = %url, jwks_uri = %jwks, "OIDC discovery document fetched");
    Ok(jwks)
}

/// Fetches a JSON Web Key Set and returns its `keys` entries, uninterpreted: which of them
/// are usable is the verifier's business.
pub async fn fetch_jwks(uri: &Uri) -> Result<Vec<Value>, OidcError> {
    match fetch_json(uri).await? {
        Value::Object(mut set) => match set.remove("keys") {
            Some(Value::Array(keys)) => Ok(keys),
            _ => Err(OidcError::NotKeySet(uri.to_string())),
        },
        _ => Err(OidcError::NotKeySet(uri.to_string())),
    }
}

/// GETs `uri` (already passed through [`check_idp_url`]) and parses the body as JSON.
///
/// A new client per call: verification runs on several independent single-threaded
/// runtimes, and a pooled client would tie its connections to whichever runtime made them.
/// Fetches are rare (start-up, then at most hourly or on key rotation), so nothing is lost.
pub async fn fetch_json(uri: &Uri) -> Result<Value, OidcError> {
    let url = uri.to_string();
    let body = tokio::time::timeout(FETCH_TIMEOUT, fetch_body(uri, &url))
        .await
        .map_err(|_| OidcError::Timeout(url.clone()))??;
    serde_json::from_slice(&body).map_err(|_| OidcError::NotJson(url))
}

/// The request itself: status checked, redirects refused, body capped at [`MAX_BODY`].
async fn fetch_body(uri: &Uri, url: &str) -> Result<Bytes, OidcError> {
    let transport = |err: &dyn std::error::Error| OidcError::Transport {
        url: url.to_owned(),
        reason: err.to_string(),
    };
    let client = client::build::<_, Empty<Bytes>>(ClientOptions::oidc());
    let request = Request::get(uri.clone())
        .header(ACCEPT, "application/json")
        .body(Empty::new())
        .map_err(|e| transport(&e))?;
    let response = client.request(request).await.map_err(|e| transport(&e))?;
    check_status(response.status(), url)?;
    let collected = Limited::new(response.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                OidcError::TooLarge(url.to_owned())
            } else {
                transport(&*e)
            }
        })?;
    Ok(collected.to_bytes())
}

fn check_status(status: StatusCode, url: &str) -> Result<(), OidcError> {
    let url = url.to_owned();
    let code = status.as_u16();
    if status.is_success() {
        Ok(())
    } else if status.is_redirection() {
        Err(OidcError::Redirect { url, status: code })
    } else {
        Err(OidcError::Status { url, status: code })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use http::Response;
    use http_body_util::Full;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    use super::*;

    /// A canned answer of the test IdP.
    pub(crate) struct Answer {
        pub status: u16,
        pub headers: Vec<(&'static str, String)>,
        pub body: Vec<u8>,
    }

    impl Answer {
        pub(crate) fn json(body: &Value) -> Answer {
            Answer {
                status: 200,
                headers: Vec::new(),
                body: body.to_string().into_bytes(),
            }
        }
    }

    /// A plain-http IdP on 127.0.0.1 answering every request with `answer(path)`. Returns
    /// its base URL and a counter of requests served.
    pub(crate) async fn serve<F>(answer: F) -> (String, Arc<AtomicUsize>)
    where
        F: Fn(&str) -> Answer + Send + Sync + 'static,
    {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(answer);
        let counter = hits.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let answer = answer.clone();
                let counter = counter.clone();
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let canned = answer(req.uri().path());
                    let mut resp = Response::builder().status(canned.status);
                    for (name, value) in canned.headers {
                        resp = resp.header(name, value);
                    }
                    let resp = resp.body(Full::new(Bytes::from(canned.body))).unwrap();
                    async move { Ok::<_, Infallible>(resp) }
                });
                tokio::spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        (format!("http://{addr}"), hits)
    }

    fn accepted(url: &str) {
        assert!(check_idp_url(url).is_ok(), "{url} should be accepted");
    }

    fn refused(url: &str, expect: fn(String) -> OidcError) {
        assert_eq!(check_idp_url(url), Err(expect(url.to_owned())), "{url}");
    }

    #[test]
    fn https_public_hosts_are_accepted() {
        accepted("https://idp.example.com/.well-known/openid-configuration");
        accepted("https://IDP.Example.COM:8443/realms/x/protocol/openid-connect/certs");
        accepted("https://8.8.8.8/jwks");
        accepted("https://[2001:4860:4860::8888]/jwks");
        accepted("https://idp.example.com./jwks");
        // "local" as an inner label is not the .local TLD.
        accepted("https://local.example.com/jwks");
        accepted("https://myinternal.example/jwks");
    }

    #[test]
    fn plain_http_only_for_loopback_names() {
        accepted("http://localhost:8080/jwks");
        accepted("http://LOCALHOST/jwks");
        accepted("http://localhost./jwks");
        accepted("http://127.0.0.1:9000/jwks");
        accepted("http://[::1]:9000/jwks");
        accepted("https://localhost/jwks");
        accepted("https://127.0.0.1/jwks");
        refused("http://idp.example.com/jwks", OidcError::PlainHttp);
        refused("http://8.8.8.8/jwks", OidcError::PlainHttp);
    }

    #[test]
    fn other_schemes_and_garbage_are_refused() {
        refused("ftp://idp.example.com/jwks", OidcError::Scheme);
        refused("file:///etc/passwd", OidcError::Unparsable);
        refused("idp.example.com/jwks", OidcError::Unparsable);
        refused("/jwks", OidcError::Unparsable);
        refused("", OidcError::Unparsable);
        refused("https://", OidcError::Unparsable);
        refused("https://exa mple.com/", OidcError::Unparsable);
    }

    #[test]
    fn credentials_in_the_url_are_refused_and_not_repeated() {
        for url in [
            "https://admin:hunter2@idp.example.com/jwks",
            "https://admin:hun@ter2@idp.example.com/jwks?a=b@c",
            "https://hunter2@idp.example.com",
        ] {
            let err = check_idp_url(url).unwrap_err();
            assert!(matches!(
                err,
                OidcError::UserInfo(_) | OidcError::Unparsable(_)
            ));
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }

    #[test]
    fn internal_ipv4_literals_are_refused() {
        for host in [
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "127.0.0.2",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "100.64.0.1",
            "100.127.255.254",
        ] {
            refused(&format!("https://{host}/jwks"), OidcError::InternalAddress);
            refused(&format!("http://{host}/jwks"), OidcError::InternalAddress);
        }
        // Just outside the ranges.
        accepted("https://172.32.0.1/jwks");
        accepted("https://100.128.0.1/jwks");
        accepted("https://100.63.255.255/jwks");
    }

    #[test]
    fn internal_ipv6_literals_are_refused() {
        for host in [
            "[::]",
            "[fc00::1]",
            "[fd12:3456::1]",
            "[fe80::1]",
            "[febf::1]",
            "[fec0::1]",
            "[ff02::1]",
            "[::ffff:127.0.0.1]",
            "[::ffff:10.0.0.1]",
            "[::ffff:169.254.169.254]",
            "[::ffff:100.64.0.1]",
            "[::ffff:0.0.0.0]",
            "[::10.0.0.1]",
        ] {
            refused(&format!("https://{host}/jwks"), OidcError::InternalAddress);
        }
        accepted("https://[::ffff:8.8.8.8]/jwks");
        // Zone ids: refused one way or another.
        assert!(check_idp_url("https://[fe80::1%25eth0]/jwks").is_err());
        assert!(check_idp_url("https://[2001:db8::1%25eth0]/jwks").is_err());
    }

    #[test]
    fn internal_names_are_refused() {
        for host in [
            "metadata.google.internal",
            "IDP.CORP.INTERNAL",
            "idp.internal.",
            "printer.local",
            "printer.LOCAL.",
            "internal",
            "local",
            "foo.localhost",
        ] {
            refused(&format!("https://{host}/jwks"), OidcError::InternalHost);
        }
    }

    #[test]
    fn numeric_hosts_that_are_not_dotted_quads_are_refused() {
        for host in ["127.1", "2130706433", "0x7f000001", "0x7f.0.0.1", "10.1"] {
            refused(&format!("https://{host}/jwks"), OidcError::InternalHost);
        }
    }

    #[test]
    fn discovery_url_handles_a_trailing_slash() {
        let expected = "https://idp.example.com/realms/x/.well-known/openid-configuration";
        assert_eq!(discovery_url("https://idp.example.com/realms/x"), expected);
        assert_eq!(discovery_url("https://idp.example.com/realms/x/"), expected);
    }

    #[tokio::test]
    async fn discovery_returns_the_checked_jwks_uri() {
        let (base, hits) = serve(|path| {
            assert_eq!(path, "/tenant/.well-known/openid-configuration");
            Answer::json(&serde_json::json!({"jwks_uri": "http://localhost:1/keys"}))
        })
        .await;
        let jwks = discover(&format!("{base}/tenant/")).await.unwrap();
        assert_eq!(jwks.to_string(), "http://localhost:1/keys");
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn discovery_refuses_an_internal_jwks_uri() {
        let (base, _) = serve(|_| {
            Answer::json(&serde_json::json!({"jwks_uri": "http://169.254.169.254/keys"}))
        })
        .await;
        assert_eq!(
            discover(&base).await,
            Err(OidcError::InternalAddress(
                "http://169.254.169.254/keys".into()
            ))
        );
    }

    #[tokio::test]
    async fn discovery_without_jwks_uri_fails() {
        let (base, _) = serve(|_| Answer::json(&serde_json::json!({"jwks_uri": 5}))).await;
        assert!(matches!(
            discover(&base).await,
            Err(OidcError::NoJwksUri(_))
        ));
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        let (base, hits) = serve(|_| Answer {
            status: 302,
            headers: vec![("location", "https://idp.example.com/".into())],
            body: Vec::new(),
        })
        .await;
        let uri = check_idp_url(&format!("{base}/jwks")).unwrap();
        assert!(matches!(
            fetch_json(&uri).await,
            Err(OidcError::Redirect { status: 302, .. })
        ));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn non_2xx_bad_json_and_oversized_bodies_fail() {
        let (base, _) = serve(|path| match path {
            "/missing" => Answer {
                status: 404,
                headers: Vec::new(),
                body: b"{}".to_vec(),
            },
            "/garbage" => Answer {
                status: 200,
                headers: Vec::new(),
                body: b"<html>".to_vec(),
            },
            _ => Answer {
                status: 200,
                headers: Vec::new(),
                body: vec![b' '; MAX_BODY + 1],
            },
        })
        .await;
        let get = |path: &str| {
            let uri = check_idp_url(&format!("{base}{path}")).unwrap();
            async move { fetch_json(&uri).await }
        };
        assert!(matches!(
            get("/missing").await,
            Err(OidcError::Status { status: 404, .. })
        ));
        assert!(matches!(get("/garbage").await, Err(OidcError::NotJson(_))));
        assert!(matches!(get("/huge").await, Err(OidcError::TooLarge(_))));
    }

    #[tokio::test]
    async fn connection_failures_are_reported() {
        // Bind then drop: nothing listens on this port any more.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let uri = check_idp_url(&format!("http://127.0.0.1:{port}/jwks")).unwrap();
        let err = fetch_json(&uri).await.unwrap_err();
        assert!(matches!(err, OidcError::Transport { .. }), "{err}");
    }
}

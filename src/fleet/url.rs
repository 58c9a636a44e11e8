//! Worker URL rules: the scheme picks the transport and must be lowercase; HTTP and gRPC
//! URLs need a host; `ipc://` needs a path.
//!
//! This is also the one place that decides when two URLs name the same worker ("each URL
//! once", spec 1): [`parse_worker_url`] reduces an HTTP or gRPC URL to what the gateway
//! actually uses, its scheme and authority, in one canonical spelling. The host is
//! lowercased, a default port (`:80` for `http`, `:443` for `https`) and an empty port are
//! dropped, the port is written without leading zeros, and any path is dropped (requests
//! go to the authority with the client's own path, so `/v1`, `/../` or a trailing slash
//! cannot make a second worker of one engine). A query or a fragment is refused instead:
//! the gateway never sends either, so one would be silently lost.

use std::fmt;

use http::uri::{Authority, Scheme};

/// The transport a worker URL selects, with what the data plane needs pre-parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    Http {
        scheme: Scheme,
        authority: Authority,
    },
    Grpc {
        tls: bool,
        authority: Authority,
    },
    Zmq {
        path: String,
    },
}

/// A validated worker URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerUrl {
    /// The URL as the registry stores and reports it (no trailing slash).
    pub normalized: String,
    pub transport: Transport,
}

impl WorkerUrl {
    /// Whether this is an HTTP(S) URL whose host is `domain` or a subdomain of it. Hosts
    /// are normalised at parse time (lowercase, no root dot), so `domain` is given that way.
    pub fn host_within(&self, domain: &str) -> bool {
        let Transport::Http { authority, .. } = &self.transport else {
            return false;
        };
        let host = authority.host();
        host == domain
            || host
                .strip_suffix(domain)
                .is_some_and(|rest| rest.ends_with('.'))
    }
}

/// Why a worker URL was refused. Messages are shown to operators, so they say what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerUrlError {
    Empty,
    MissingScheme,
    UppercaseScheme,
    UnsupportedScheme,
    MissingHost,
    MissingIpcPath,
    QueryOrFragment,
    Invalid,
    /// A valid URL of another transport where only HTTP workers are taken.
    NotHttp,
}

impl fmt::Display for WorkerUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkerUrlError::Empty => "worker URL is empty",
            WorkerUrlError::MissingScheme => {
                "worker URL has no scheme (expected http://, https://, grpc://, grpcs:// or ipc://)"
            }
            WorkerUrlError::UppercaseScheme => "worker URL scheme must be lowercase",
            WorkerUrlError::UnsupportedScheme => {
                "worker URL scheme must be http, https, grpc, grpcs or ipc"
            }
            WorkerUrlError::MissingHost => "worker URL has no host",
            WorkerUrlError::MissingIpcPath => "ipc:// worker URL has no path",
            WorkerUrlError::QueryOrFragment => {
                "worker URL must not have a query (?) or fragment (#): the gateway sends \
                 requests to the worker's scheme and host:port only"
            }
            WorkerUrlError::Invalid => "worker URL is not a valid URL",
            WorkerUrlError::NotHttp => "expected an http:// or https:// URL",
        })
    }
}

impl std::error::Error for WorkerUrlError {}

/// Parses and validates a worker URL.
pub fn parse_worker_url(raw: &str) -> Result<WorkerUrl, WorkerUrlError> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Err(WorkerUrlError::Empty);
    }
    let (scheme, rest) = raw.split_once("://").ok_or(WorkerUrlError::MissingScheme)?;
    if scheme.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(WorkerUrlError::UppercaseScheme);
    }
    let rest = rest.trim_end_matches('/');
    // Blanks and control characters inside a URL are never meant; refusing them keeps the
    // stored form re-parsable (`ipc:// /` must not become `ipc:// `).
    if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(WorkerUrlError::Invalid);
    }
    match scheme {
        "ipc" => {
            if rest.is_empty() {
                return Err(WorkerUrlError::MissingIpcPath);
            }
            Ok(WorkerUrl {
                normalized: format!("ipc://{rest}"),
                transport: Transport::Zmq {
                    path: rest.to_owned(),
                },
            })
        }
        "http" | "https" | "grpc" | "grpcs" => {
            let authority_str = rest.split(['/', '?', '#']).next().unwrap_or("");
            if rest.contains(['?', '#']) {
                return Err(WorkerUrlError::QueryOrFragment);
            }
            if authority_str.is_empty() || authority_str.starts_with(':') {
                return Err(WorkerUrlError::MissingHost);
            }
            if authority_str.contains('@') {
                return Err(WorkerUrlError::Invalid);
            }
            let authority = canonical_authority(scheme, authority_str)?;
            let transport = match scheme {
                "http" => Transport::Http {
                    scheme: Scheme::HTTP,
                    authority: authority.clone(),
                },
                "https" => Transport::Http {
                    scheme: Scheme::HTTPS,
                    authority: authority.clone(),
                },
                "grpc" => Transport::Grpc {
                    tls: false,
                    authority: authority.clone(),
                },
                _ => Transport::Grpc {
                    tls: true,
                    authority: authority.clone(),
                },
            };
            Ok(WorkerUrl {
                normalized: format!("{scheme}://{authority}"),
                transport,
            })
        }
        _ => Err(WorkerUrlError::UnsupportedScheme),
    }
}

/// Parses a worker URL that must select the HTTP transport: the command-line worker flags
/// register HTTP workers only. A missing or unknown scheme is refused as "not HTTP" too,
/// since the one answer that helps there is the list of the two schemes accepted.
pub fn parse_http_worker_url(raw: &str) -> Result<WorkerUrl, WorkerUrlError> {
    match parse_worker_url(raw) {
        Ok(url) if matches!(url.transport, Transport::Http { .. }) => Ok(url),
        Ok(_) | Err(WorkerUrlError::MissingScheme | WorkerUrlError::UnsupportedScheme) => {
            Err(WorkerUrlError::NotHttp)
        }
        Err(err) => Err(err),
    }
}

/// `host[:port]` in its one spelling: host lowercased, port numeric without leading zeros,
/// left out when empty or the scheme's default.
fn canonical_authority(scheme: &str, raw: &str) -> Result<Authority, WorkerUrlError> {
    let parsed = Authority::try_from(raw).map_err(|_| WorkerUrlError::Invalid)?;
    let host = canonical_host(parsed.host())?;
    let default_port = match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    };
    // `Authority` accepts a port it cannot read as a u16 (`h:99999`); such a URL is not one.
    let has_port_text = raw
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && !port.contains(']'));
    let port = parsed.port_u16();
    if has_port_text && port.is_none() {
        return Err(WorkerUrlError::Invalid);
    }
    let canonical = match port {
        Some(port) if Some(port) != default_port => format!("{host}:{port}"),
        _ => host,
    };
    Authority::try_from(canonical.as_str()).map_err(|_| WorkerUrlError::Invalid)
}

/// A host in its one spelling: lowercased, without the root's trailing dot (`h.` and `h`
/// are one name), an IPv6 literal in its shortest form (`[0:0::1]` is `[::1]`).
fn canonical_host(raw: &str) -> Result<String, WorkerUrlError> {
    if let Some(inner) = raw.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match inner.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => Ok(format!("[{ip}]")),
            Err(_) if inner.is_empty() => Err(WorkerUrlError::MissingHost),
            Err(_) => Err(WorkerUrlError::Invalid),
        };
    }
    let host = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
    if host.is_empty() {
        return Err(WorkerUrlError::MissingHost);
    }
    // Only the root's one trailing dot is dropped; any other empty label (`a..b`, `.a`,
    // `a..`) names no host, and keeping it would make the stored form lose a dot each
    // time it is parsed again.
    if host.split('.').any(str::is_empty) {
        return Err(WorkerUrlError::Invalid);
    }
    Ok(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_each_transport() {
        let http = parse_worker_url("http://127.0.0.1:8000/").unwrap();
        assert_eq!(http.normalized, "http://127.0.0.1:8000");
        assert!(matches!(http.transport, Transport::Http { .. }));
        let https = parse_worker_url("https://api.example.com").unwrap();
        assert!(
            matches!(https.transport, Transport::Http { ref scheme, .. } if *scheme == Scheme::HTTPS)
        );
        assert!(matches!(
            parse_worker_url("grpc://h:1").unwrap().transport,
            Transport::Grpc { tls: false, .. }
        ));
        assert!(matches!(
            parse_worker_url("grpcs://h:1").unwrap().transport,
            Transport::Grpc { tls: true, .. }
        ));
        assert_eq!(
            parse_worker_url("ipc:///tmp/engine.sock")
                .unwrap()
                .transport,
            Transport::Zmq {
                path: "/tmp/engine.sock".into()
            }
        );
    }

    #[test]
    fn spellings_of_one_worker_normalise_alike() {
        let canonical = "http://host.example:8000";
        for raw in [
            "http://host.example:8000",
            "http://host.example:8000/",
            "http://HOST.Example:8000",
            "http://host.example:08000",
            "http://host.example:8000/v1",
            "http://host.example:8000/../",
            "http://host.example:8000/a/../b/./",
            "http://host.example.:8000",
        ] {
            assert_eq!(
                parse_worker_url(raw).unwrap().normalized,
                canonical,
                "{raw}"
            );
        }
        for (raw, normalized) in [
            ("http://h:80/", "http://h"),
            ("http://h:", "http://h"),
            ("https://H:443", "https://h"),
            ("https://h:80", "https://h:80"),
            ("http://[::1]:8000/", "http://[::1]:8000"),
            ("http://[0:0:0:0::1]:8000", "http://[::1]:8000"),
            ("http://[::FFFF:7f00:1]:80", "http://[::ffff:127.0.0.1]"),
            ("grpc://H:443", "grpc://h:443"),
        ] {
            assert_eq!(
                parse_worker_url(raw).unwrap().normalized,
                normalized,
                "{raw}"
            );
        }
        let Transport::Http { authority, .. } = parse_worker_url("http://A:80").unwrap().transport
        else {
            panic!("http transport");
        };
        assert_eq!(authority.as_str(), "a");
    }

    #[test]
    fn queries_fragments_and_bad_ports_are_refused() {
        for raw in [
            "http://h:1?x=1",
            "http://h:1/?x=1",
            "http://h:1#frag",
            "http://h:1/#",
            "http://h:1?",
        ] {
            assert_eq!(
                parse_worker_url(raw),
                Err(WorkerUrlError::QueryOrFragment),
                "{raw}"
            );
        }
        assert_eq!(
            parse_worker_url("http://h:99999"),
            Err(WorkerUrlError::Invalid)
        );
        assert_eq!(parse_worker_url("http://h:x"), Err(WorkerUrlError::Invalid));
        assert_eq!(
            parse_worker_url("http://[]:1"),
            Err(WorkerUrlError::MissingHost)
        );
    }

    #[test]
    fn http_only_urls_refuse_other_transports() {
        assert_eq!(
            parse_http_worker_url("https://H:443/").map(|u| u.normalized),
            Ok("https://h".to_owned())
        );
        for raw in ["grpc://h:1", "ipc:///tmp/s", "ftp://h", "h:1"] {
            assert_eq!(
                parse_http_worker_url(raw),
                Err(WorkerUrlError::NotHttp),
                "{raw}"
            );
        }
        assert_eq!(
            parse_http_worker_url("HTTP://h"),
            Err(WorkerUrlError::UppercaseScheme)
        );
        assert_eq!(
            parse_http_worker_url("http://"),
            Err(WorkerUrlError::MissingHost)
        );
    }

    #[test]
    fn rejects_bad_urls_with_reasons() {
        assert_eq!(parse_worker_url(""), Err(WorkerUrlError::Empty));
        assert_eq!(
            parse_worker_url("127.0.0.1:8000"),
            Err(WorkerUrlError::MissingScheme)
        );
        assert_eq!(
            parse_worker_url("HTTP://h:1"),
            Err(WorkerUrlError::UppercaseScheme)
        );
        assert_eq!(
            parse_worker_url("ftp://h"),
            Err(WorkerUrlError::UnsupportedScheme)
        );
        assert_eq!(
            parse_worker_url("http://"),
            Err(WorkerUrlError::MissingHost)
        );
        assert_eq!(
            parse_worker_url("http://:80"),
            Err(WorkerUrlError::MissingHost)
        );
        assert_eq!(
            parse_worker_url("ipc://"),
            Err(WorkerUrlError::MissingIpcPath)
        );
        assert_eq!(parse_worker_url("http://a b"), Err(WorkerUrlError::Invalid));
        assert_eq!(parse_worker_url("ipc:// /"), Err(WorkerUrlError::Invalid));
        assert_eq!(parse_worker_url("ipc://a\t/"), Err(WorkerUrlError::Invalid));
        for empty_label in [
            "grpc://10.111..:50051",
            "http://.h",
            "http://a..b",
            "http://h..:1",
        ] {
            assert_eq!(
                parse_worker_url(empty_label),
                Err(WorkerUrlError::Invalid),
                "{empty_label}"
            );
        }
    }
}

//! Worker URL rules: the scheme picks the transport and must be lowercase; HTTP and gRPC
//! URLs need a host; `ipc://` needs a path.

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

/// Why a worker URL was refused. Messages are shown to operators, so they say what to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerUrlError {
    Empty,
    MissingScheme,
    UppercaseScheme,
    UnsupportedScheme,
    MissingHost,
    MissingIpcPath,
    Invalid,
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
            WorkerUrlError::Invalid => "worker URL is not a valid URL",
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
            // Only scheme://host[:port] is meaningful for a worker; a path prefix is kept in
            // the stored URL but routing appends request paths to the authority.
            let authority_str = rest.split(['/', '?', '#']).next().unwrap_or("");
            if authority_str.is_empty() || authority_str.starts_with(':') {
                return Err(WorkerUrlError::MissingHost);
            }
            if authority_str.contains('@') {
                return Err(WorkerUrlError::Invalid);
            }
            let authority =
                Authority::try_from(authority_str).map_err(|_| WorkerUrlError::Invalid)?;
            if authority.host().is_empty() {
                return Err(WorkerUrlError::MissingHost);
            }
            let transport = match scheme {
                "http" => Transport::Http {
                    scheme: Scheme::HTTP,
                    authority,
                },
                "https" => Transport::Http {
                    scheme: Scheme::HTTPS,
                    authority,
                },
                "grpc" => Transport::Grpc {
                    tls: false,
                    authority,
                },
                _ => Transport::Grpc {
                    tls: true,
                    authority,
                },
            };
            Ok(WorkerUrl {
                normalized: format!("{scheme}://{rest}"),
                transport,
            })
        }
        _ => Err(WorkerUrlError::UnsupportedScheme),
    }
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
    }
}

//! Rules of a request head that hyper leaves to the application (RFC 9110, RFC 9112).
//!
//! hyper hands every header field to the handler as received, repeated fields included,
//! so these checks need only the parsed head. (The one framing rule hyper hides, a head
//! with both `Content-Length` and `Transfer-Encoding`, is enforced on the raw bytes by
//! `server::h1_framing`.) A request that passes costs one pass over its fields and no
//! allocation.
//!
//! - Two `Authorization` fields: 400. The gateway would check one and the worker might
//!   read the other.
//! - No `Host` on HTTP/1.1, or more than one `Host` on any version: 400 (RFC 9112 §3.2).
//!   HTTP/2 carries the authority in `:authority`, which hyper turns into the URI.
//! - A transfer coding other than `chunked` (`gzip, chunked`; hyper decodes the chunking
//!   and would pass the still-encoded body on): 501 (RFC 9112 §6.1). A coding list that does
//!   not end in `chunked` never gets here: hyper answers 400 itself, as §6.3 requires.

use http::header::{AUTHORIZATION, HOST, TRANSFER_ENCODING};
use http::{HeaderMap, Version};

use super::error::GatewayError;

/// Checks a request head; the error is the client's answer. One pass over the fields (a
/// request has a handful, at most `server::MAX_HEADER_FIELDS`) instead of a hashed lookup
/// per rule.
pub fn check(version: Version, headers: &HeaderMap) -> Result<(), GatewayError> {
    let (mut authorizations, mut hosts) = (0usize, 0usize);
    let mut unknown_coding = false;
    for (name, value) in headers {
        if *name == AUTHORIZATION {
            authorizations += 1;
        } else if *name == HOST {
            hosts += 1;
        } else if *name == TRANSFER_ENCODING {
            unknown_coding |= value
                .as_bytes()
                .split(|b| *b == b',')
                .map(<[u8]>::trim_ascii)
                .any(|coding| !coding.is_empty() && !coding.eq_ignore_ascii_case(b"chunked"));
        }
    }
    if authorizations > 1 {
        return Err(GatewayError::InvalidHeaders {
            reason: "more than one Authorization field",
        });
    }
    if hosts > 1 {
        return Err(GatewayError::InvalidHeaders {
            reason: "more than one Host field",
        });
    }
    if hosts == 0 && version == Version::HTTP_11 {
        return Err(GatewayError::InvalidHeaders {
            reason: "an HTTP/1.1 request needs a Host field",
        });
    }
    if unknown_coding {
        return Err(GatewayError::UnsupportedTransferCoding);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn head(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(*k, HeaderValue::from_static(v));
        }
        m
    }

    fn code(version: Version, pairs: &[(&'static str, &'static str)]) -> Option<&'static str> {
        check(version, &head(pairs)).err().map(|e| e.code())
    }

    #[test]
    fn host_rules_follow_the_version() {
        let h11 = Version::HTTP_11;
        assert_eq!(code(h11, &[("host", "a")]), None);
        assert_eq!(code(h11, &[]), Some("invalid_request_headers"));
        assert_eq!(
            code(h11, &[("host", "a"), ("host", "a")]),
            Some("invalid_request_headers")
        );
        assert_eq!(code(Version::HTTP_10, &[]), None);
        assert_eq!(code(Version::HTTP_2, &[]), None);
        assert_eq!(
            code(Version::HTTP_2, &[("host", "a"), ("host", "b")]),
            Some("invalid_request_headers")
        );
    }

    #[test]
    fn one_authorization_only() {
        let h11 = Version::HTTP_11;
        assert_eq!(code(h11, &[("host", "a"), ("authorization", "x")]), None);
        assert_eq!(
            code(
                h11,
                &[
                    ("host", "a"),
                    ("authorization", "x"),
                    ("authorization", "x")
                ]
            ),
            Some("invalid_request_headers")
        );
    }

    #[test]
    fn only_chunked_is_a_known_coding() {
        let h11 = Version::HTTP_11;
        for ok in ["chunked", " Chunked ", "chunked,", "CHUNKED"] {
            assert_eq!(
                code(h11, &[("host", "a"), ("transfer-encoding", ok)]),
                None,
                "{ok}"
            );
        }
        for bad in ["gzip, chunked", "x-custom,chunked", "identity"] {
            assert_eq!(
                code(h11, &[("host", "a"), ("transfer-encoding", bad)]),
                Some("unsupported_transfer_coding"),
                "{bad}"
            );
        }
        assert_eq!(
            code(
                h11,
                &[
                    ("host", "a"),
                    ("transfer-encoding", "deflate"),
                    ("transfer-encoding", "chunked")
                ]
            ),
            Some("unsupported_transfer_coding")
        );
    }
}

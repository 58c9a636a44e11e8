//! Which addresses a client may make the gateway call: an MCP server named in a request
//! (a Responses `mcp` tool's `server_url`, a Messages `mcp_servers` URL) must be on a public
//! address. The gateway otherwise reaches what its clients cannot: its own listeners on
//! 127.0.0.1, a cloud's metadata service on 169.254.169.254, the private network it runs in
//! (a blind SSRF in a multi-tenant deployment). The operator's own servers
//! (`--mcp-config-path`) are not checked, and `--mcp-allow-private-addresses` lifts the
//! check for deployments whose tool servers are private.
//!
//! The host is resolved here and every address it resolves to must be public; the pool then
//! resolves it again to connect, so a name whose records change between the two (DNS
//! rebinding) is not caught by this check alone.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::Uri;

use super::McpError;

/// Fails unless every address `uri`'s host resolves to is public.
pub(super) async fn public_only(uri: &Uri) -> Result<(), McpError> {
    let host = uri.host().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    let addresses: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(address) => vec![address],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|err| McpError::Unreachable(format!("{host}: {err}")))?
            .map(|socket| socket.ip())
            .collect(),
    };
    match addresses.into_iter().find(|a| !is_public(*a)) {
        Some(address) => Err(McpError::Forbidden {
            host: host.to_owned(),
            address,
        }),
        None => Ok(()),
    }
}

/// Whether `address` is on the public internet: not loopback, unspecified, link-local,
/// private (RFC 1918, unique local), shared (100.64/10), documentation, benchmarking,
/// multicast or broadcast; an IPv4-mapped IPv6 address is judged as its IPv4 one.
pub fn is_public(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => public_v4(v4),
            None => public_v6(v6),
        },
    }
}

fn public_v4(a: Ipv4Addr) -> bool {
    let [b0, b1, ..] = a.octets();
    !(a.is_loopback()
        || a.is_unspecified()
        || a.is_private()
        || a.is_link_local()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || b0 == 0
        || (b0 == 100 && (64..128).contains(&b1))
        || (b0 == 198 && (18..20).contains(&b1))
        || b0 >= 240)
}

fn public_v6(a: Ipv6Addr) -> bool {
    let first = a.segments()[0];
    !(a.is_loopback()
        || a.is_unspecified()
        || a.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
        || first == 0x2001 && a.segments()[1] == 0x0db8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_not_public() {
        for internal in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(internal.parse().unwrap()), "{internal}");
        }
        for public in ["1.1.1.1", "8.8.8.8", "172.32.0.1", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn a_server_on_an_internal_address_is_forbidden() {
        for url in [
            "http://127.0.0.1:8080/mcp",
            "http://[::1]:9/mcp",
            "http://localhost:9/mcp",
            "https://169.254.169.254/latest",
        ] {
            let uri: Uri = url.parse().unwrap();
            let err = public_only(&uri).await.unwrap_err();
            assert!(matches!(err, McpError::Forbidden { .. }), "{url}: {err}");
        }
        let public: Uri = "http://1.1.1.1/mcp".parse().unwrap();
        assert!(public_only(&public).await.is_ok());
    }
}

//! Which headers cross the gateway.
//!
//! Towards HTTP workers only an allowlist passes (spec 2, "Forwarded to HTTP and PD
//! workers"): everything else a client sends, `x-api-key` included, stays at the edge.
//! Values are moved, not copied. Headers the client's `Connection` field names are
//! hop-by-hop (RFC 9110 §7.6.1) and never forwarded, even when allowlisted. The client's
//! `x-api-key` stays behind in the client's own map, where only the provider backend's
//! transport reads it (spec 2: forwarded only to the provider).

use http::header::{
    HeaderName, HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TE, TRAILER,
    TRANSFER_ENCODING, UPGRADE,
};
use http::HeaderMap;

/// The client's provider key (spec 2): never read by the gateway, never sent to a worker,
/// only to the provider of `--backend anthropic`.
pub const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// `X-GW-MCP: enabled` asks the provider backend to run the MCP tool loop (spec 2); never
/// forwarded.
pub const X_GW_MCP: HeaderName = HeaderName::from_static("x-gw-mcp");

/// Whether a client request header is forwarded to an HTTP worker.
pub fn forwarded_to_worker(name: &HeaderName) -> bool {
    let n = name.as_str();
    matches!(
        n,
        "authorization"
            | "anthropic-version"
            | "anthropic-beta"
            | "vendor-version"
            | "vendor-beta"
            | "x-request-id"
            | "x-correlation-id"
            | "traceparent"
            | "tracestate"
            | "x-gw-routing-key"
    ) || n.starts_with("x-request-id-")
}

/// How the worker learns the body's media type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContentType {
    /// JSON routes: the gateway states `application/json` itself.
    Json,
    /// Routes whose body format the client chooses (multipart uploads): the client's own
    /// `Content-Type` (with its boundary) is passed on.
    FromClient,
}

/// Builds the header map for the worker from the client's, consuming it but for its
/// `x-api-key` (the first value, marked sensitive) and `X-GW-MCP`, left in `client` for
/// the provider backend, which alone reads them. `worker_bearer` is sent only when the
/// client sent no `Authorization` of its own.
///
/// The worker's map is the client's, emptied and refilled: its allocation is reused, and
/// `client` is left a new map that allocates only if a provider header goes back into it.
pub fn to_worker(
    client: &mut HeaderMap,
    content_type: ContentType,
    worker_bearer: Option<&HeaderValue>,
) -> HeaderMap {
    remove_connection_named(client);
    // The two kept for the provider are picked out of the one pass over the map: a
    // lookup of each by name would hash it twice more on every request.
    let mut provider_key = None;
    let mut mcp = None;
    let mut kept = Kept::default();
    let mut client_content_type = None;
    let mut last_name: Option<HeaderName> = None;
    for (name, value) in client.drain() {
        // `drain` yields the name only for the first of repeated values.
        if let Some(n) = name {
            last_name = Some(n);
        }
        let Some(name) = last_name.as_ref() else {
            continue;
        };
        if *name == CONTENT_TYPE {
            client_content_type.get_or_insert(value);
        } else if forwarded_to_worker(name) {
            kept.push(name.clone(), value);
        } else if *name == X_API_KEY {
            provider_key.get_or_insert(value);
        } else if *name == X_GW_MCP {
            mcp.get_or_insert(value);
        }
    }
    // `drain` keeps the map's memory: the worker's map takes it over.
    let mut out = std::mem::take(client);
    kept.append_to(&mut out);
    match (content_type, client_content_type) {
        (ContentType::FromClient, Some(v)) => {
            out.insert(CONTENT_TYPE, v);
        }
        (ContentType::FromClient, None) => {}
        (ContentType::Json, _) => {
            out.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
    }
    if !out.contains_key(AUTHORIZATION) {
        if let Some(bearer) = worker_bearer {
            out.insert(AUTHORIZATION, bearer.clone());
        }
    }
    if let Some(mut key) = provider_key {
        key.set_sensitive(true);
        client.insert(X_API_KEY, key);
    }
    if let Some(mcp) = mcp {
        client.insert(X_GW_MCP, mcp);
    }
    out
}

/// The forwarded fields, held while the client's map is drained, in order: the first few
/// inline, any beyond them (a client repeating allowlisted fields) in a list.
#[derive(Default)]
struct Kept {
    inline: [Option<(HeaderName, HeaderValue)>; KEPT_INLINE],
    len: usize,
    more: Vec<(HeaderName, HeaderValue)>,
}

/// Forwarded fields held without an allocation: more than the allowlist's usual few.
const KEPT_INLINE: usize = 4;

impl Kept {
    fn push(&mut self, name: HeaderName, value: HeaderValue) {
        match self.inline.get_mut(self.len) {
            Some(slot) => {
                *slot = Some((name, value));
                self.len += 1;
            }
            None => self.more.push((name, value)),
        }
    }

    fn append_to(self, map: &mut HeaderMap) {
        for (name, value) in self.inline.into_iter().flatten().chain(self.more) {
            map.append(name, value);
        }
    }
}

/// Removes the `Connection` fields and every header they name (RFC 9110 §7.6.1): those
/// describe the hop they arrived on. A request without `Connection` costs one lookup.
fn remove_connection_named(headers: &mut HeaderMap) {
    if !headers.contains_key(CONNECTION) {
        return;
    }
    // The values are shared buffers: cloning them is a reference count, not a copy. The
    // usual single field (`Connection: keep-alive`) allocates nothing: `rest` stays empty.
    let mut fields = headers.get_all(CONNECTION).iter().cloned();
    let first = fields.next();
    let rest: Vec<HeaderValue> = fields.collect();
    headers.remove(CONNECTION);
    for field in first.iter().chain(&rest) {
        let Ok(list) = field.to_str() else { continue };
        for token in list.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            headers.remove(token);
        }
    }
}

/// Headers that describe one hop, never relayed from the worker to the client: the fixed
/// set, plus any header the `Connection` header names (RFC 9110 §7.6.1).
///
/// A response framed by `Transfer-Encoding` also loses any `Content-Length` it carries
/// (RFC 9112 §6.3: the coding wins, and the length is wrong or a smuggling attempt); the
/// body is relayed as hyper decoded it, and the client's side frames it anew.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // A worker's response seldom carries any of them: one pass over its few names
    // decides, and the removals (a name lookup each) run only when one is there.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    remove_connection_named(headers);
    if headers.contains_key(TRANSFER_ENCODING) {
        headers.remove(CONTENT_LENGTH);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The fixed hop-by-hop names [`strip_hop_by_hop`] removes (besides `Connection` and the
/// names it lists): one list for both the check and the removal.
const HOP_BY_HOP: [HeaderName; 6] = [
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    TRANSFER_ENCODING,
    UPGRADE,
    TE,
    TRAILER,
];

/// Whether `name` is one [`strip_hop_by_hop`] removes, besides those `Connection` names
/// (which are there only with a `Connection` field).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    *name == CONNECTION || HOP_BY_HOP.contains(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    #[test]
    fn allowlist_passes_and_drops() {
        let mut client = map(&[
            ("authorization", "Bearer c"),
            ("x-api-key", "secret"),
            ("anthropic-version", "2023-06-01"),
            ("vendor-beta", "b"),
            ("x-request-id", "1"),
            ("x-request-id-span", "2"),
            ("x-correlation-id", "3"),
            ("traceparent", "t"),
            ("tracestate", "s"),
            ("x-gw-routing-key", "k"),
            ("cookie", "c"),
            ("content-type", "text/plain"),
            ("host", "gw"),
            ("accept-encoding", "gzip"),
        ]);
        let out = to_worker(&mut client, ContentType::Json, None);
        for kept in [
            "authorization",
            "anthropic-version",
            "vendor-beta",
            "x-request-id",
            "x-request-id-span",
            "x-correlation-id",
            "traceparent",
            "tracestate",
            "x-gw-routing-key",
        ] {
            assert!(out.contains_key(kept), "{kept} should pass");
        }
        for dropped in ["x-api-key", "cookie", "host", "accept-encoding"] {
            assert!(!out.contains_key(dropped), "{dropped} should be dropped");
        }
        // Only the provider key stays behind, for the provider backend.
        assert_eq!(client.len(), 1);
        assert_eq!(client[X_API_KEY], "secret");
        assert!(client[X_API_KEY].is_sensitive());
        assert_eq!(out[CONTENT_TYPE], "application/json");
        assert_eq!(out[AUTHORIZATION], "Bearer c");
    }

    #[test]
    fn worker_key_only_without_client_authorization() {
        let bearer = HeaderValue::from_static("Bearer w");
        let mut client = map(&[("authorization", "Bearer c")]);
        let out = to_worker(&mut client, ContentType::Json, Some(&bearer));
        assert_eq!(out[AUTHORIZATION], "Bearer c");
        let mut client = map(&[]);
        let out = to_worker(&mut client, ContentType::Json, Some(&bearer));
        assert_eq!(out[AUTHORIZATION], "Bearer w");
    }

    #[test]
    fn repeated_values_keep_their_name_and_multipart_type_passes() {
        let mut client = map(&[
            ("x-request-id-a", "1"),
            ("x-request-id-a", "2"),
            ("content-type", "multipart/form-data; boundary=xyz"),
        ]);
        let out = to_worker(&mut client, ContentType::FromClient, None);
        assert_eq!(out.get_all("x-request-id-a").iter().count(), 2);
        assert_eq!(out[CONTENT_TYPE], "multipart/form-data; boundary=xyz");
    }

    #[test]
    fn more_forwarded_fields_than_held_inline_all_pass_in_order() {
        let values: Vec<String> = (0..KEPT_INLINE + 3).map(|i| i.to_string()).collect();
        let mut pairs: Vec<(&str, &str)> = values
            .iter()
            .map(|v| ("x-request-id", v.as_str()))
            .collect();
        pairs.push(("user-agent", "dropped"));
        pairs.push(("traceparent", "t"));
        let mut client = map(&pairs);
        let out = to_worker(&mut client, ContentType::Json, None);
        let got: Vec<&str> = out
            .get_all("x-request-id")
            .iter()
            .map(|v| v.to_str().unwrap_or_default())
            .collect();
        assert_eq!(got, values);
        assert_eq!(out["traceparent"], "t");
        assert!(!out.contains_key("user-agent"));
        assert!(client.is_empty(), "nothing for the provider stays behind");
    }

    #[test]
    fn hop_by_hop_removed() {
        let mut h = map(&[
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("content-type", "text/event-stream"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        let mut h = map(&[
            ("connection", "x-hop, close"),
            ("x-hop", "1"),
            ("x-end", "2"),
        ]);
        strip_hop_by_hop(&mut h);
        assert!(!h.contains_key("x-hop"));
        assert!(h.contains_key("x-end"));
        let mut h = map(&[
            ("transfer-encoding", "chunked"),
            ("content-length", "3"),
            ("content-type", "text/plain"),
        ]);
        strip_hop_by_hop(&mut h);
        assert!(!h.contains_key("content-length"));
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn each_hop_by_hop_name_alone_is_removed() {
        for name in [
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
            "upgrade",
            "te",
            "trailer",
            "connection",
        ] {
            let mut h = map(&[(name, "x"), ("content-length", "2"), ("x-kept", "1")]);
            strip_hop_by_hop(&mut h);
            assert!(!h.contains_key(name), "{name} kept");
            assert!(h.contains_key("x-kept"), "{name}: x-kept lost");
        }
        let mut plain = map(&[
            ("content-type", "application/json"),
            ("content-length", "2"),
        ]);
        strip_hop_by_hop(&mut plain);
        assert_eq!(plain.len(), 2);
    }

    #[test]
    fn provider_headers_stay_with_the_client() {
        let mut client = map(&[
            ("x-api-key", "first"),
            ("x-api-key", "second"),
            ("x-gw-mcp", "enabled"),
            ("authorization", "Bearer c"),
        ]);
        let out = to_worker(&mut client, ContentType::Json, None);
        assert!(!out.contains_key("x-api-key"));
        assert!(!out.contains_key("x-gw-mcp"));
        assert_eq!(client.get_all("x-api-key").iter().count(), 1);
        assert_eq!(client["x-api-key"], "first");
        assert!(client["x-api-key"].is_sensitive());
        assert_eq!(client["x-gw-mcp"], "enabled");
        assert_eq!(out[AUTHORIZATION], "Bearer c");
    }

    #[test]
    fn headers_named_in_connection_are_not_forwarded() {
        let mut client = map(&[
            ("connection", "X-Request-Id"),
            ("connection", " traceparent ,, bad name"),
            ("x-request-id", "1"),
            ("traceparent", "t"),
            ("x-correlation-id", "3"),
        ]);
        let out = to_worker(&mut client, ContentType::Json, None);
        assert!(!out.contains_key("x-request-id"));
        assert!(!out.contains_key("traceparent"));
        assert_eq!(out["x-correlation-id"], "3");
    }
}

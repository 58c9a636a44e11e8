//! Data-parallel ranks (`--dp-aware`).
//!
//! An engine such as SGLang can run several data-parallel ranks behind one HTTP server,
//! each with its own KV cache. With `--dp-aware` the gateway registers one routing target
//! per rank, so load counting and cache-aware routing see each rank on its own, and pins a
//! request to the rank it chose with the body field `data_parallel_rank`.
//!
//! This module holds the pure parts: the rank type, how many ranks an engine has, the
//! name a rank is shown under, and the body rewrite.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use serde_json::Value;

/// The body field that pins a request to a rank (SGLang's name).
pub const RANK_FIELD: &str = "data_parallel_rank";

/// Most ranks one engine is split into. Engines run a handful; the cap keeps a wrong
/// `/server_info` answer from registering thousands of targets.
pub const MAX_DP_SIZE: u32 = 256;

/// How many ranks an engine has, when it has more than one. A size of 0 or 1 is not a
/// `DpSize`: such an engine is a normal single worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DpSize(u32);

impl DpSize {
    /// The size to register, from the spec's `dp_size` (which wins) or else the engine's
    /// `/server_info` figure. `Ok(None)`: a single worker. A size above [`MAX_DP_SIZE`]
    /// fails the registration rather than being silently cut.
    pub fn choose(spec: Option<usize>, discovered: Option<u64>) -> Result<Option<DpSize>, String> {
        let (size, source) = match (spec, discovered) {
            (Some(size), _) => (size as u64, "the spec's dp_size"),
            (None, Some(size)) => (size, "the engine's dp_size"),
            (None, None) => return Ok(None),
        };
        if size <= 1 {
            return Ok(None);
        }
        match u32::try_from(size) {
            Ok(size) if size <= MAX_DP_SIZE => Ok(Some(DpSize(size))),
            _ => Err(format!(
                "{source} {size} is above the gateway's limit of {MAX_DP_SIZE} ranks"
            )),
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }

    /// Every rank of the engine, 0 first.
    pub fn ranks(self) -> impl Iterator<Item = DpRank> {
        (0..self.0).map(move |rank| DpRank { rank, size: self })
    }
}

/// One rank of a data-parallel engine. Only [`DpSize::ranks`] makes one, so `rank` is
/// always below the size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DpRank {
    rank: u32,
    size: DpSize,
}

impl DpRank {
    pub fn rank(self) -> u32 {
        self.rank
    }

    pub fn size(self) -> DpSize {
        self.size
    }

    /// The URL a rank target is listed under: the engine's URL, `@`, the rank. Worker URLs
    /// never have `@` in their authority, so only a worker URL with a path ending in `@N`
    /// could share a rank's name (a POST of it after the engine is refused as a
    /// duplicate).
    pub fn target_url(self, base: &str) -> String {
        format!("{base}@{}", self.rank)
    }
}

/// `dp_size` of a `/server_info` reply, when it is a whole number.
pub fn dp_size_of_server_info(info: &Value) -> Option<u64> {
    info.get("dp_size")?.as_u64()
}

/// Why a body cannot be pinned to a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PinError {
    /// Not JSON (UTF-8 included), or JSON that is not an object: there is nowhere to put
    /// the field.
    NotAnObject,
}

/// The body with `"data_parallel_rank": rank` set. A body that does not carry the field
/// gets it spliced in after its opening brace, leaving every other byte as the client sent
/// it; one that does (a client's own pin) has it replaced, because the gateway counts the
/// request against the rank it chose.
pub fn pin_rank(body: &[u8], rank: u32) -> Result<Bytes, PinError> {
    // JSON is UTF-8 (RFC 8259), and ignored values below are not checked for it: checked
    // here, once, so both paths refuse the same bodies.
    let text = std::str::from_utf8(body).map_err(|_| PinError::NotAnObject)?;
    // Parsing into ignored values checks the whole body and lists its keys without
    // building the values.
    let keys: HashMap<String, IgnoredAny> =
        serde_json::from_str(text).map_err(|_| PinError::NotAnObject)?;
    if keys.contains_key(RANK_FIELD) {
        // Raw values: the other fields are copied as sent, and checked no more strictly
        // than above.
        let mut object: BTreeMap<String, Box<RawValue>> =
            serde_json::from_str(text).map_err(|_| PinError::NotAnObject)?;
        let pinned = serde_json::value::to_raw_value(&rank).map_err(|_| PinError::NotAnObject)?;
        object.insert(RANK_FIELD.to_owned(), pinned);
        return serde_json::to_vec(&object)
            .map(Bytes::from)
            .map_err(|_| PinError::NotAnObject);
    }
    // A parsed object starts with `{` after optional white space.
    let brace = body
        .iter()
        .position(|&b| b == b'{')
        .ok_or(PinError::NotAnObject)?;
    let (head, rest) = body.split_at(brace + 1);
    let field = format!("\"{RANK_FIELD}\":{rank}");
    let mut out = Vec::with_capacity(body.len() + field.len() + 1);
    out.extend_from_slice(head);
    out.extend_from_slice(field.as_bytes());
    if !keys.is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn spec_size_wins_and_one_is_single() {
        assert_eq!(DpSize::choose(None, None), Ok(None));
        assert_eq!(DpSize::choose(None, Some(1)), Ok(None));
        assert_eq!(DpSize::choose(None, Some(0)), Ok(None));
        assert_eq!(DpSize::choose(Some(1), Some(4)), Ok(None));
        assert_eq!(DpSize::choose(Some(2), Some(4)).unwrap().unwrap().get(), 2);
        assert_eq!(DpSize::choose(None, Some(4)).unwrap().unwrap().get(), 4);
        assert!(DpSize::choose(None, Some(257)).unwrap_err().contains("256"));
        assert!(DpSize::choose(Some(usize::MAX), None).is_err());
        assert_eq!(DpSize::choose(None, Some(256)).unwrap().unwrap().get(), 256);
    }

    #[test]
    fn ranks_and_their_urls() {
        let size = DpSize::choose(None, Some(3)).unwrap().unwrap();
        let urls: Vec<String> = size
            .ranks()
            .map(|r| r.target_url("http://e:30000"))
            .collect();
        assert_eq!(
            urls,
            ["http://e:30000@0", "http://e:30000@1", "http://e:30000@2"]
        );
        assert!(size.ranks().all(|r| r.size() == size && r.rank() < 3));
    }

    #[test]
    fn server_info_size() {
        assert_eq!(dp_size_of_server_info(&json!({"dp_size": 4})), Some(4));
        for info in [
            json!({}),
            json!({"dp_size": "4"}),
            json!({"dp_size": -1}),
            json!([]),
        ] {
            assert_eq!(dp_size_of_server_info(&info), None, "{info}");
        }
    }

    #[test]
    fn pin_splices_and_keeps_the_rest() {
        let body = br#" {"model":"m", "messages":[{"role":"user","content":"{x}"}]}"#;
        let out = pin_rank(body, 3).unwrap();
        assert_eq!(
            parsed(&out),
            json!({"model":"m","messages":[{"role":"user","content":"{x}"}],"data_parallel_rank":3})
        );
        assert!(out.ends_with(br#""model":"m", "messages":[{"role":"user","content":"{x}"}]}"#));
        assert_eq!(
            &pin_rank(b"{}", 0).unwrap()[..],
            br#"{"data_parallel_rank":0}"#
        );
        assert_eq!(
            parsed(&pin_rank(b"{ }", 1).unwrap()),
            json!({"data_parallel_rank": 1})
        );
    }

    #[test]
    fn pin_replaces_a_clients_rank() {
        let out = pin_rank(br#"{"data_parallel_rank":7,"a":1}"#, 2).unwrap();
        assert_eq!(parsed(&out), json!({"data_parallel_rank":2,"a":1}));
    }

    #[test]
    fn pin_checks_values_no_more_strictly_with_or_without_a_rank() {
        // A lone surrogate escape: Python's json (SGLang) takes it; so do both paths.
        let lone = br#"{"a":"\ud800"}"#;
        assert!(pin_rank(lone, 1).is_ok());
        let with_rank = br#"{"a":"\ud800","data_parallel_rank":5}"#;
        let out = pin_rank(with_rank, 1).unwrap();
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.contains(r#""a":"\ud800""#), "{text}");
        assert!(text.contains(r#""data_parallel_rank":1"#), "{text}");
        assert!(!text.contains('5'), "{text}");
    }

    #[test]
    fn pin_refuses_what_is_not_an_object() {
        for body in [
            &b""[..],
            b"[1]",
            b"\"{}\"",
            b"{",
            b"{} x",
            b"12",
            b"{\"a\":}",
            b"{\"a\":[{\"b\xa1\":1}]}",
            b"{\"data_parallel_rank\":1,\"a\":[{\"b\xa1\":1}]}",
        ] {
            assert_eq!(pin_rank(body, 0), Err(PinError::NotAnObject), "{body:?}");
        }
    }
}

//! The bodies of a prefill/decode pair, made from the client's JSON object without a full
//! parse: only the top-level members are split (their values stay raw slices of the
//! client's bytes), a few are replaced or added, and the object is written out again in
//! one buffer. Nested values are never parsed or re-serialised, so numbers, key order and
//! unknown fields reach the workers exactly as the client sent them.
//!
//! Two shapes, one per engine protocol:
//! - SGLang's bootstrap: both workers get the same body with `bootstrap_host`,
//!   `bootstrap_port` (the prefill worker's) and `bootstrap_room` (unique per request); a
//!   batch (a `text` or `prompt` list, `input_ids` lists, or `n` > 1) gets one entry per
//!   item in each field, every room distinct.
//! - vLLM's KV-transfer connectors: the prefill body asks for one token, no stream, and a
//!   remote decode (`kv_transfer_params`); the decode body carries the
//!   `kv_transfer_params` the prefill answer returned.

use std::borrow::Cow;
use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// Fields the gateway sets on both legs of an SGLang pair.
const BOOTSTRAP_FIELDS: [&str; 3] = ["bootstrap_host", "bootstrap_port", "bootstrap_room"];

/// What vLLM's prefill leg is asked for besides one token: keep the KV cache for a remote
/// decode (the values vLLM's own disaggregated proxy sends).
pub const REMOTE_DECODE: &str = r#"{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}"#;

/// Members the prefill leg of a vLLM pair must not keep: they would ask for more than one
/// token or for a stream, or are replaced.
const PREFILL_DROPS: [&str; 7] = [
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "min_completion_tokens",
    "kv_transfer_params",
];

/// The largest batch that gets bootstrap fields (a larger one is refused, not expanded
/// into a huge body).
const MAX_BATCH: usize = 4096;

/// Why a body cannot be given its pair fields.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// The body is not a JSON object (`gw_pd_bootstrap_failures_total`).
    NotObject,
    /// A batch larger than the gateway expands.
    BatchTooLarge(usize),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::NotObject => f.write_str(
                "prefill/decode dispatch needs a JSON object body to carry the bootstrap fields",
            ),
            BodyError::BatchTooLarge(n) => {
                write!(
                    f,
                    "a batch of {n} exceeds the {MAX_BATCH} items prefill/decode dispatch takes"
                )
            }
        }
    }
}

/// The unique rooms of SGLang's bootstrap: a counter from a random start, so rooms differ
/// between requests (and between gateway restarts) without a lock.
#[derive(Debug)]
pub struct Rooms {
    next: AtomicU64,
}

impl Rooms {
    /// Rooms counting up from `start` (kept within the 63 bits engines accept).
    pub fn starting_at(start: u64) -> Rooms {
        Rooms {
            next: AtomicU64::new(start >> 1),
        }
    }

    /// One room for a gRPC pair: SGLang's field is an int32, so it is kept below 2^31.
    pub fn take_one(&self) -> u32 {
        (self.take(1) & 0x7fff_ffff) as u32
    }

    /// `count` consecutive rooms, the first returned.
    fn take(&self, count: usize) -> u64 {
        self.next.fetch_add(count as u64, Ordering::Relaxed) & (u64::MAX >> 1)
    }
}

/// Where a prefill worker's KV cache is fetched from.
#[derive(Clone, Copy, Debug)]
pub struct Bootstrap<'a> {
    pub host: &'a str,
    /// `None` is sent as `null` (the engine's default port).
    pub port: Option<u16>,
}

/// How many sequences a body asks for (`n`, or a batch's items): the decode rooms its
/// dispatch takes. A body the gateway cannot read asks for one (it is refused later).
pub fn sequences(body: &[u8]) -> usize {
    Members::of(body)
        .ok()
        .and_then(|members| members.batch_size())
        .unwrap_or(1)
}

/// The body both legs of an SGLang pair get, and the first room it uses.
pub fn with_bootstrap(
    body: &[u8],
    bootstrap: Bootstrap<'_>,
    rooms: &Rooms,
) -> Result<(Bytes, u64), BodyError> {
    let members = Members::of(body)?;
    let batch = members.batch_size();
    if batch.is_some_and(|n| n > MAX_BATCH) {
        return Err(BodyError::BatchTooLarge(batch.unwrap_or_default()));
    }
    let count = batch.unwrap_or(1);
    let first = rooms.take(count);
    let host = serde_json::to_string(bootstrap.host).unwrap_or_else(|_| "\"\"".to_owned());
    let port = bootstrap
        .port
        .map_or_else(|| "null".to_owned(), |p| p.to_string());
    let mut out = members.write_without(&BOOTSTRAP_FIELDS, body.len() + 96 + count * 48);
    match batch {
        None => {
            member(&mut out, "bootstrap_host", host.as_bytes());
            member(&mut out, "bootstrap_port", port.as_bytes());
            member(&mut out, "bootstrap_room", first.to_string().as_bytes());
        }
        Some(n) => {
            member(&mut out, "bootstrap_host", &repeated(host.as_bytes(), n));
            member(&mut out, "bootstrap_port", &repeated(port.as_bytes(), n));
            let rooms: Vec<String> = (0..n as u64)
                .map(|i| (first.wrapping_add(i) & (u64::MAX >> 1)).to_string())
                .collect();
            member(
                &mut out,
                "bootstrap_room",
                format!("[{}]", rooms.join(",")).as_bytes(),
            );
        }
    }
    Ok((close(out), first))
}

/// The prefill leg of a vLLM pair: one token, no stream, a remote decode asked for.
pub fn vllm_prefill(body: &[u8]) -> Result<Bytes, BodyError> {
    let members = Members::of(body)?;
    let completion_cap = members.has("max_completion_tokens");
    let mut out = members.write_without(&PREFILL_DROPS, body.len() + REMOTE_DECODE.len() + 96);
    member(&mut out, "stream", b"false");
    member(&mut out, "max_tokens", b"1");
    if completion_cap {
        member(&mut out, "max_completion_tokens", b"1");
    }
    member(&mut out, "kv_transfer_params", REMOTE_DECODE.as_bytes());
    Ok(close(out))
}

/// The decode leg of a vLLM pair: the client's body with the prefill answer's
/// `kv_transfer_params` (raw JSON), or without any when the prefill gave none (the decode
/// worker then computes the prompt itself).
pub fn vllm_decode(body: &[u8], kv_transfer_params: Option<&RawValue>) -> Result<Bytes, BodyError> {
    let members = Members::of(body)?;
    let extra = kv_transfer_params.map_or(0, |raw| raw.get().len());
    let mut out = members.write_without(&["kv_transfer_params"], body.len() + extra + 32);
    if let Some(raw) = kv_transfer_params {
        member(&mut out, "kv_transfer_params", raw.get().as_bytes());
    }
    Ok(close(out))
}

/// The `kv_transfer_params` of a vLLM prefill answer, when it is a JSON object that
/// carries a non-null one.
pub fn kv_transfer_params(answer: &[u8]) -> Option<Box<RawValue>> {
    let members = Members::of(answer).ok()?;
    let raw = members.get("kv_transfer_params")?;
    (raw.get().trim() != "null").then(|| raw.to_owned())
}

/// A JSON object's top-level members in order, values as raw slices.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    fn of(body: &'a [u8]) -> Result<Members<'a>, BodyError> {
        serde_json::from_slice(body).map_err(|_| BodyError::NotObject)
    }

    fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
    }

    fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The items of a batch request, when it is one: `text` (native generate) or
    /// `prompt` (completions) as a list of prompts, `input_ids` as a list of lists, else
    /// `n` above 1.
    fn batch_size(&self) -> Option<usize> {
        for field in ["text", "prompt", "input_ids"] {
            let Some(items) = self
                .get(field)
                .and_then(|raw| serde_json::from_str::<Vec<&RawValue>>(raw.get()).ok())
            else {
                continue;
            };
            let nested = items.first().is_some_and(|first| {
                let s = first.get().trim_start();
                s.starts_with('[') || (field != "input_ids" && s.starts_with('"'))
            });
            if nested {
                return Some(items.len());
            }
        }
        self.get("n")
            .and_then(|raw| raw.get().trim().parse::<u64>().ok())
            .filter(|n| *n > 1)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// `{` and every member not named in `drop`, each followed by a comma.
    fn write_without(&self, drop: &[&str], capacity: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(capacity);
        out.push(b'{');
        for (key, value) in self.0.iter().filter(|(k, _)| !drop.contains(&k.as_ref())) {
            // Writing a str to a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, key.as_ref());
            out.push(b':');
            out.extend_from_slice(value.get().as_bytes());
            out.push(b',');
        }
        out
    }
}

/// Appends `"name":value,` (`name` needs no escaping).
fn member(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    let _ = write!(out, "\"{name}\":");
    out.extend_from_slice(value);
    out.push(b',');
}

/// Ends the object: the last member's comma becomes the closing brace.
fn close(mut out: Vec<u8>) -> Bytes {
    match out.last_mut() {
        Some(last) if *last == b',' => *last = b'}',
        _ => out.push(b'}'),
    }
    Bytes::from(out)
}

/// `[value,value,…]`, `n` times.
fn repeated(value: &[u8], n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + n * (value.len() + 1));
    out.push(b'[');
    for i in 0..n {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(value);
    }
    out.push(b']');
    out
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some((key, value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push((key.0, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Object)
    }
}

/// A member name: borrowed from the body unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl<'de> Visitor<'de> for Name {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(Name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const AT: Bootstrap<'static> = Bootstrap {
        host: "10.0.0.7",
        port: Some(8998),
    };

    fn value(bytes: &Bytes) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn bootstrap_fields_are_added_and_the_rest_kept_as_sent() {
        let rooms = Rooms::starting_at(84);
        let body = br#"{"model":"m","temperature":0.10000000000000001,"messages":[{"role":"user","content":"hi \u00e9"}]}"#;
        let (out, room) = with_bootstrap(body, AT, &rooms).unwrap();
        assert_eq!(room, 42);
        let text = std::str::from_utf8(&out).unwrap();
        assert!(text.starts_with(r#"{"model":"m","temperature":0.10000000000000001,"messages":[{"role":"user","content":"hi \u00e9"}],"#), "{text}");
        let v = value(&out);
        assert_eq!(v["bootstrap_host"], "10.0.0.7");
        assert_eq!(v["bootstrap_port"], 8998);
        assert_eq!(v["bootstrap_room"], 42);
        let (_, next) = with_bootstrap(body, AT, &rooms).unwrap();
        assert_ne!(next, room, "a room per request");
    }

    #[test]
    fn a_client_bootstrap_field_is_replaced_and_a_missing_port_is_null() {
        let rooms = Rooms::starting_at(0);
        let at = Bootstrap {
            host: "h",
            port: None,
        };
        let (out, _) = with_bootstrap(br#"{"bootstrap_room":7,"a\"b":1}"#, at, &rooms).unwrap();
        let v = value(&out);
        assert_eq!(v["bootstrap_room"], 0);
        assert_eq!(v["bootstrap_port"], Value::Null);
        assert_eq!(v["a\"b"], 1);
        let (out, _) = with_bootstrap(b" {} ", at, &rooms).unwrap();
        assert_eq!(value(&out)["bootstrap_host"], "h");
    }

    #[test]
    fn batches_and_n_get_one_distinct_room_per_item() {
        let rooms = Rooms::starting_at(200);
        for (body, n) in [
            (json!({"text": ["a", "b", "c"]}), 3),
            (json!({"input_ids": [[1, 2], [3]]}), 2),
            (json!({"prompt": ["x", "y"]}), 2),
            (json!({"messages": [], "n": 4}), 4),
        ] {
            let (out, _) = with_bootstrap(body.to_string().as_bytes(), AT, &rooms).unwrap();
            let v = value(&out);
            let rooms = v["bootstrap_room"].as_array().unwrap();
            assert_eq!(rooms.len(), n, "{body}");
            let distinct: std::collections::HashSet<u64> =
                rooms.iter().map(|r| r.as_u64().unwrap()).collect();
            assert_eq!(distinct.len(), n);
            assert_eq!(v["bootstrap_host"].as_array().unwrap().len(), n);
            assert_eq!(v["bootstrap_port"], json!(vec![8998; n]));
        }
        // One prompt of token ids, one text, n of 1: no batch.
        for body in [
            json!({"input_ids": [1, 2, 3]}),
            json!({"prompt": [1, 2]}),
            json!({"text": "a", "n": 1}),
        ] {
            let (out, _) = with_bootstrap(body.to_string().as_bytes(), AT, &rooms).unwrap();
            assert!(value(&out)["bootstrap_room"].is_u64(), "{body}");
        }
        let huge = json!({"n": 100_000}).to_string();
        assert_eq!(
            with_bootstrap(huge.as_bytes(), AT, &rooms).unwrap_err(),
            BodyError::BatchTooLarge(100_000)
        );
    }

    #[test]
    fn bodies_that_are_not_objects_are_refused() {
        let rooms = Rooms::starting_at(0);
        for body in [&b"[1,2]"[..], b"\"s\"", b"{\"a\":", b"", b"{} x"] {
            assert_eq!(
                with_bootstrap(body, AT, &rooms).unwrap_err(),
                BodyError::NotObject
            );
            assert_eq!(vllm_prefill(body).unwrap_err(), BodyError::NotObject);
        }
    }

    #[test]
    fn vllm_prefill_asks_one_token_and_a_remote_decode() {
        let body = json!({"model": "m", "prompt": "p", "stream": true,
            "stream_options": {"include_usage": true}, "max_tokens": 50,
            "max_completion_tokens": 50, "min_tokens": 3});
        let v = value(&vllm_prefill(body.to_string().as_bytes()).unwrap());
        assert_eq!(v["stream"], false);
        assert_eq!(v["max_tokens"], 1);
        assert_eq!(v["max_completion_tokens"], 1);
        assert!(v.get("stream_options").is_none() && v.get("min_tokens").is_none());
        assert_eq!(v["kv_transfer_params"]["do_remote_decode"], true);
        assert_eq!(v["kv_transfer_params"]["do_remote_prefill"], false);
        assert_eq!(v["kv_transfer_params"]["remote_engine_id"], Value::Null);
        assert_eq!(v["prompt"], "p");
        let v = value(&vllm_prefill(br#"{"prompt":"p"}"#).unwrap());
        assert!(v.get("max_completion_tokens").is_none());
    }

    #[test]
    fn vllm_decode_carries_the_prefill_answers_params() {
        let answer =
            br#"{"id":"x","kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1,2]}}"#;
        let params = kv_transfer_params(answer).unwrap();
        let body = br#"{"prompt":"p","stream":true,"kv_transfer_params":{"stale":1}}"#;
        let v = value(&vllm_decode(body, Some(&params)).unwrap());
        assert_eq!(
            v["kv_transfer_params"],
            json!({"remote_engine_id": "e", "remote_block_ids": [1, 2]})
        );
        assert_eq!(v["stream"], true);
        let v = value(&vllm_decode(body, None).unwrap());
        assert!(v.get("kv_transfer_params").is_none());
        assert!(kv_transfer_params(br#"{"kv_transfer_params":null}"#).is_none());
        assert!(kv_transfer_params(br#"{"id":"x"}"#).is_none());
        assert!(kv_transfer_params(b"not json").is_none());
    }
}

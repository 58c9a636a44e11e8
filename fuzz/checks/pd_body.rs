//! The bodies of a prefill/decode pair (`transport::pd::body`) on arbitrary
//! bytes. Checks: no panic; a body takes the pair's fields exactly when it is a JSON object
//! (a batch above the cap aside); every result is again a JSON object with the fields set;
//! and where the input parses strictly, every member the gateway does not set is unchanged.

use std::collections::HashMap;

use serde::de::IgnoredAny;
use serde_json::{Map, Value};
use tollgate::transport::pd::body::{
    kv_transfer_params, vllm_decode, vllm_prefill, with_bootstrap, BodyError, Bootstrap, Rooms,
};

const SET: [&str; 9] = [
    "bootstrap_host",
    "bootstrap_port",
    "bootstrap_room",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "kv_transfer_params",
];

/// The members of a strictly parsed object the gateway leaves alone.
fn untouched(mut map: Map<String, Value>) -> Map<String, Value> {
    map.retain(|k, _| !SET.contains(&k.as_str()) && k != "min_completion_tokens");
    map
}

fn object(bytes: &[u8]) -> bool {
    // `IgnoredAny` skips nested strings without checking their UTF-8; the gateway's reader
    // checks every byte, so a body with invalid UTF-8 anywhere is no JSON object.
    std::str::from_utf8(bytes).is_ok()
        && serde_json::from_slice::<HashMap<String, IgnoredAny>>(bytes).is_ok()
}

/// One input through the checks above (the fuzz target's body).
pub fn check(body: &[u8]) {
    let is_object = object(body);
    let strict = serde_json::from_slice::<Map<String, Value>>(body).ok();
    let rooms = Rooms::starting_at(u64::MAX);
    let at = Bootstrap {
        host: "127.0.0.1",
        port: Some(8998),
    };
    let outs = [
        with_bootstrap(body, at, &rooms).map(|(out, _)| out),
        vllm_prefill(body),
        vllm_decode(
            body,
            kv_transfer_params(br#"{"kv_transfer_params":{"a":1}}"#).as_deref(),
        ),
    ];
    for out in outs {
        match out {
            Ok(out) => {
                assert!(
                    is_object,
                    "a body that is not a JSON object took the fields"
                );
                assert!(object(&out), "the result is not a JSON object");
                if let Some(input) = &strict {
                    let out: Map<String, Value> =
                        serde_json::from_slice(&out).expect("strict input, strict output");
                    assert_eq!(untouched(out), untouched(input.clone()));
                }
            }
            Err(BodyError::NotObject) => assert!(!is_object, "a JSON object was refused"),
            Err(BodyError::BatchTooLarge(_)) => assert!(is_object),
        }
    }
    // An answer's params are taken only from an object.
    if kv_transfer_params(body).is_some() {
        assert!(is_object);
    }
}

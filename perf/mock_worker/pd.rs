//! Prefill/decode roles (`--pd-role`): the mock checks what a disaggregation router sends
//! each leg, as the real engines would need it, and refuses a leg that could not work
//! (400 naming what is missing).
//!
//! - SGLang (and generic) legs carry `bootstrap_host`, `bootstrap_port` and
//!   `bootstrap_room`: single values, or lists of one length for a batch, rooms distinct.
//!   Tests compare the two legs' request logs to see that the pair agreed.
//! - vLLM's prefill leg asks for one token, no stream, and a remote decode in
//!   `kv_transfer_params`; its answer carries `kv_transfer_params` naming this engine
//!   (unless `--pd-omit-kv-params`). The decode leg takes the params it is given (a leg
//!   without them recomputes, as vLLM does); ones that do not come from a mock prefill are
//!   refused.

use std::str::FromStr;

use serde_json::{json, Value};

use crate::cli::Runtime;

/// Which stage of disaggregated serving the mock plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PdRole {
    Prefill,
    Decode,
}

impl FromStr for PdRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "prefill" => Ok(PdRole::Prefill),
            "decode" => Ok(PdRole::Decode),
            other => Err(format!(
                "unknown PD role '{other}' (expected prefill or decode)"
            )),
        }
    }
}

/// The engine id a vLLM-style mock prefill reports.
fn engine_id(port: u16) -> String {
    format!("mock-prefill-{port}")
}

/// Checks one leg's body. `Ok(Some(params))`: the `kv_transfer_params` a vLLM prefill
/// answer must carry.
pub fn check(
    runtime: Runtime,
    role: PdRole,
    port: u16,
    omit_kv: bool,
    body: &Value,
) -> Result<Option<Value>, String> {
    match (runtime, role) {
        (Runtime::Vllm, PdRole::Prefill) => {
            let params = &body["kv_transfer_params"];
            if params["do_remote_decode"] != json!(true) {
                return Err("prefill leg without kv_transfer_params.do_remote_decode".into());
            }
            if body["stream"] != json!(false) || body["max_tokens"] != json!(1) {
                return Err("prefill leg must ask for one token without a stream".into());
            }
            Ok((!omit_kv).then(|| {
                json!({
                    "do_remote_prefill": true,
                    "do_remote_decode": false,
                    "remote_engine_id": engine_id(port),
                    "remote_block_ids": [1, 2, 3],
                    "remote_host": "127.0.0.1",
                    "remote_port": port,
                })
            }))
        }
        (Runtime::Vllm, PdRole::Decode) => match body.get("kv_transfer_params") {
            None => Ok(None),
            Some(params) => {
                let relayed = params["remote_engine_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("mock-prefill-"))
                    && params["do_remote_prefill"] == json!(true);
                if relayed {
                    Ok(None)
                } else {
                    Err(format!(
                        "decode leg with kv_transfer_params no prefill gave: {params}"
                    ))
                }
            }
        },
        _ => bootstrap(body).map(|()| None),
    }
}

/// The three bootstrap fields: present, and of one shape.
fn bootstrap(body: &Value) -> Result<(), String> {
    let host = &body["bootstrap_host"];
    let port = &body["bootstrap_port"];
    let room = &body["bootstrap_room"];
    if host.is_null() || body.get("bootstrap_port").is_none() || room.is_null() {
        return Err("leg without bootstrap_host, bootstrap_port and bootstrap_room".into());
    }
    match (host, port, room) {
        (Value::String(_), Value::Number(_) | Value::Null, Value::Number(r)) if r.is_u64() => {
            Ok(())
        }
        (Value::Array(h), Value::Array(p), Value::Array(r)) => {
            let rooms: std::collections::HashSet<u64> =
                r.iter().filter_map(Value::as_u64).collect();
            if h.len() == p.len() && p.len() == r.len() && rooms.len() == r.len() {
                Ok(())
            } else {
                Err("batch bootstrap fields of different lengths or repeated rooms".into())
            }
        }
        _ => Err("bootstrap fields of mixed or wrong types".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_legs_need_consistent_bootstrap_fields() {
        let ok = json!({"bootstrap_host": "h", "bootstrap_port": null, "bootstrap_room": 5});
        assert!(check(Runtime::Sglang, PdRole::Decode, 1, false, &ok).is_ok());
        let batch = json!({"bootstrap_host": ["h", "h"], "bootstrap_port": [1, 1], "bootstrap_room": [5, 6]});
        assert!(check(Runtime::Sglang, PdRole::Prefill, 1, false, &batch).is_ok());
        let same = json!({"bootstrap_host": ["h", "h"], "bootstrap_port": [1, 1], "bootstrap_room": [5, 5]});
        assert!(check(Runtime::Sglang, PdRole::Prefill, 1, false, &same).is_err());
        assert!(check(Runtime::Sglang, PdRole::Prefill, 1, false, &json!({})).is_err());
    }

    #[test]
    fn vllm_prefill_answers_params_that_decode_accepts() {
        let prefill = json!({"stream": false, "max_tokens": 1,
            "kv_transfer_params": {"do_remote_decode": true}});
        let params = check(Runtime::Vllm, PdRole::Prefill, 9, false, &prefill)
            .unwrap()
            .unwrap();
        let decode = json!({"kv_transfer_params": params});
        assert!(check(Runtime::Vllm, PdRole::Decode, 1, false, &decode).is_ok());
        assert!(check(Runtime::Vllm, PdRole::Decode, 1, false, &json!({})).is_ok());
        let forged = json!({"kv_transfer_params": {"remote_engine_id": "x"}});
        assert!(check(Runtime::Vllm, PdRole::Decode, 1, false, &forged).is_err());
        assert!(check(
            Runtime::Vllm,
            PdRole::Prefill,
            9,
            false,
            &json!({"stream": true})
        )
        .is_err());
        let omitted = check(Runtime::Vllm, PdRole::Prefill, 9, true, &prefill).unwrap();
        assert!(omitted.is_none());
    }
}

//! Run-time tunable behaviour: timings, faults and the simulated load.
//!
//! Every request reads these settings, while only `/mock/config` writes
//! them, so numbers live in atomics and strings in `ArcSwap`: the request
//! path never takes a lock. Patches are validated completely before any
//! field is written, so a bad patch changes nothing.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde_json::{json, Value};

use crate::cli::Flags;

/// Sentinel stored in `drop_after_tokens` and `stall_after_tokens` for "never".
const NO_DROP: u64 = u64::MAX;

/// The live, shared settings.
pub struct LiveConfig {
    ttft_ms: AtomicU64,
    itl_ms: AtomicU64,
    output_tokens: AtomicU64,
    fail_rate_bits: AtomicU64,
    fail_status: AtomicU16,
    drop_after_tokens: AtomicU64,
    stall_after_tokens: AtomicU64,
    stall: AtomicBool,
    slow_headers_ms: AtomicU64,
    unhealthy: AtomicBool,
    model: ArcSwap<String>,
    owned_by: ArcSwap<String>,
    load_running: AtomicU64,
    load_waiting: AtomicU64,
    load_token_usage_bits: AtomicU64,
}

/// Simulated engine load added on top of what the mock really has in
/// flight, so routing tests can make one worker look busy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LoadOverride {
    pub running: u64,
    pub waiting: u64,
    pub token_usage: f64,
}

/// A validated `/mock/config` body: `None` means "leave unchanged".
#[derive(Debug, Default, PartialEq)]
pub struct ConfigPatch {
    ttft_ms: Option<u64>,
    itl_ms: Option<u64>,
    output_tokens: Option<u64>,
    fail_rate: Option<f64>,
    fail_status: Option<u16>,
    /// `Some(None)` clears the setting (JSON `null`).
    drop_after_tokens: Option<Option<u64>>,
    /// `Some(None)` clears the setting (JSON `null`).
    stall_after_tokens: Option<Option<u64>>,
    stall: Option<bool>,
    slow_headers_ms: Option<u64>,
    unhealthy: Option<bool>,
    owned_by: Option<String>,
    model: Option<String>,
    load_running: Option<u64>,
    load_waiting: Option<u64>,
    load_token_usage: Option<f64>,
}

/// Per-request overrides from the body field `"mock": {...}`, letting a
/// test vary one request without touching the global configuration.
#[derive(Debug, Default, PartialEq)]
pub struct RequestOverrides {
    pub ttft_ms: Option<u64>,
    pub itl_ms: Option<u64>,
    pub output_tokens: Option<u64>,
    pub fail_status: Option<u16>,
    pub drop_after_tokens: Option<Option<u64>>,
    pub stall_after_tokens: Option<Option<u64>>,
    pub stall: Option<bool>,
    pub slow_headers_ms: Option<u64>,
    /// Answer 200 with exactly this text as an `application/json` body instead of
    /// generating (a malformed or unusual answer for the gateway to cope with).
    pub reply_body: Option<String>,
}

/// The effective behaviour of one request: global settings with the
/// request's overrides applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Knobs {
    pub ttft_ms: u64,
    pub itl_ms: u64,
    pub output_tokens: u64,
    pub fail_rate: f64,
    pub fail_status: u16,
    /// Set when the request itself asked to fail: it always fails.
    pub forced_fail: bool,
    pub drop_after_tokens: Option<u64>,
    /// Go silent after this many token events, keeping the connection open.
    pub stall_after_tokens: Option<u64>,
    pub stall: bool,
    pub slow_headers_ms: u64,
}

impl LiveConfig {
    pub fn from_flags(flags: &Flags) -> Self {
        LiveConfig {
            ttft_ms: AtomicU64::new(flags.ttft_ms),
            itl_ms: AtomicU64::new(flags.itl_ms),
            output_tokens: AtomicU64::new(flags.output_tokens),
            fail_rate_bits: AtomicU64::new(flags.fail_rate.to_bits()),
            fail_status: AtomicU16::new(flags.fail_status),
            drop_after_tokens: AtomicU64::new(flags.drop_after_tokens.unwrap_or(NO_DROP)),
            stall_after_tokens: AtomicU64::new(flags.stall_after_tokens.unwrap_or(NO_DROP)),
            stall: AtomicBool::new(flags.stall),
            slow_headers_ms: AtomicU64::new(flags.slow_headers_ms),
            unhealthy: AtomicBool::new(flags.unhealthy),
            model: ArcSwap::from_pointee(flags.model.clone()),
            owned_by: ArcSwap::from_pointee(flags.owned_by.clone()),
            load_running: AtomicU64::new(0),
            load_waiting: AtomicU64::new(0),
            load_token_usage_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    pub fn model(&self) -> Arc<String> {
        self.model.load_full()
    }

    pub fn owned_by(&self) -> Arc<String> {
        self.owned_by.load_full()
    }

    pub fn unhealthy(&self) -> bool {
        self.unhealthy.load(Relaxed)
    }

    pub fn itl_ms(&self) -> u64 {
        self.itl_ms.load(Relaxed)
    }

    pub fn load(&self) -> LoadOverride {
        LoadOverride {
            running: self.load_running.load(Relaxed),
            waiting: self.load_waiting.load(Relaxed),
            token_usage: f64::from_bits(self.load_token_usage_bits.load(Relaxed)),
        }
    }

    /// Global settings merged with one request's overrides.
    pub fn knobs(&self, overrides: &RequestOverrides) -> Knobs {
        let drop_after = optional(overrides.drop_after_tokens, &self.drop_after_tokens);
        let stall_after = optional(overrides.stall_after_tokens, &self.stall_after_tokens);
        Knobs {
            ttft_ms: overrides
                .ttft_ms
                .unwrap_or_else(|| self.ttft_ms.load(Relaxed)),
            itl_ms: overrides
                .itl_ms
                .unwrap_or_else(|| self.itl_ms.load(Relaxed)),
            output_tokens: overrides
                .output_tokens
                .unwrap_or_else(|| self.output_tokens.load(Relaxed)),
            fail_rate: f64::from_bits(self.fail_rate_bits.load(Relaxed)),
            fail_status: overrides
                .fail_status
                .unwrap_or_else(|| self.fail_status.load(Relaxed)),
            forced_fail: overrides.fail_status.is_some(),
            drop_after_tokens: drop_after,
            stall_after_tokens: stall_after,
            stall: overrides.stall.unwrap_or_else(|| self.stall.load(Relaxed)),
            slow_headers_ms: overrides
                .slow_headers_ms
                .unwrap_or_else(|| self.slow_headers_ms.load(Relaxed)),
        }
    }

    pub fn apply(&self, patch: &ConfigPatch) {
        fn set<T: Copy>(value: Option<T>, store: impl FnOnce(T)) {
            if let Some(v) = value {
                store(v);
            }
        }
        set(patch.ttft_ms, |v| self.ttft_ms.store(v, Relaxed));
        set(patch.itl_ms, |v| self.itl_ms.store(v, Relaxed));
        set(patch.output_tokens, |v| {
            self.output_tokens.store(v, Relaxed)
        });
        set(patch.fail_rate, |v| {
            self.fail_rate_bits.store(v.to_bits(), Relaxed)
        });
        set(patch.fail_status, |v| self.fail_status.store(v, Relaxed));
        set(patch.drop_after_tokens, |v| {
            self.drop_after_tokens.store(v.unwrap_or(NO_DROP), Relaxed)
        });
        set(patch.stall_after_tokens, |v| {
            self.stall_after_tokens.store(v.unwrap_or(NO_DROP), Relaxed)
        });
        set(patch.stall, |v| self.stall.store(v, Relaxed));
        set(patch.slow_headers_ms, |v| {
            self.slow_headers_ms.store(v, Relaxed)
        });
        set(patch.unhealthy, |v| self.unhealthy.store(v, Relaxed));
        set(patch.load_running, |v| self.load_running.store(v, Relaxed));
        set(patch.load_waiting, |v| self.load_waiting.store(v, Relaxed));
        set(patch.load_token_usage, |v| {
            self.load_token_usage_bits.store(v.to_bits(), Relaxed)
        });
        if let Some(model) = &patch.model {
            self.model.store(Arc::new(model.clone()));
        }
        if let Some(owned_by) = &patch.owned_by {
            self.owned_by.store(Arc::new(owned_by.clone()));
        }
    }

    /// The full current configuration, as returned by `/mock/config`.
    pub fn to_json(&self) -> Value {
        let knobs = self.knobs(&RequestOverrides::default());
        let load = self.load();
        json!({
            "ttft_ms": knobs.ttft_ms,
            "itl_ms": knobs.itl_ms,
            "output_tokens": knobs.output_tokens,
            "fail_rate": knobs.fail_rate,
            "fail_status": knobs.fail_status,
            "drop_after_tokens": knobs.drop_after_tokens,
            "stall_after_tokens": knobs.stall_after_tokens,
            "stall": knobs.stall,
            "slow_headers_ms": knobs.slow_headers_ms,
            "unhealthy": self.unhealthy(),
            "owned_by": self.owned_by().as_str(),
            "model": self.model().as_str(),
            "load": {
                "running": load.running,
                "waiting": load.waiting,
                "token_usage": load.token_usage,
            },
        })
    }
}

impl ConfigPatch {
    /// Validates a `/mock/config` body. Unknown keys are rejected so a typo
    /// in a test fails loudly instead of silently doing nothing.
    pub fn parse(value: &Value) -> Result<ConfigPatch, String> {
        let obj = value
            .as_object()
            .ok_or_else(|| "config patch must be a JSON object".to_string())?;
        let mut patch = ConfigPatch::default();
        for (key, v) in obj {
            match key.as_str() {
                "ttft_ms" => patch.ttft_ms = Some(uint(key, v)?),
                "itl_ms" => patch.itl_ms = Some(uint(key, v)?),
                "output_tokens" => patch.output_tokens = Some(uint(key, v)?),
                "fail_rate" => patch.fail_rate = Some(rate(key, v)?),
                "fail_status" => patch.fail_status = Some(status(key, v)?),
                "drop_after_tokens" => patch.drop_after_tokens = Some(optional_uint(key, v)?),
                "stall_after_tokens" => patch.stall_after_tokens = Some(optional_uint(key, v)?),
                "stall" => patch.stall = Some(boolean(key, v)?),
                "slow_headers_ms" => patch.slow_headers_ms = Some(uint(key, v)?),
                "unhealthy" => patch.unhealthy = Some(boolean(key, v)?),
                "owned_by" => patch.owned_by = Some(string(key, v)?),
                "model" => patch.model = Some(string(key, v)?),
                "load" => patch.parse_load(v)?,
                other => return Err(format!("unknown config key '{other}'")),
            }
        }
        Ok(patch)
    }

    fn parse_load(&mut self, value: &Value) -> Result<(), String> {
        let obj = value
            .as_object()
            .ok_or_else(|| "'load' must be a JSON object".to_string())?;
        for (key, v) in obj {
            match key.as_str() {
                "running" => self.load_running = Some(uint("load.running", v)?),
                "waiting" => self.load_waiting = Some(uint("load.waiting", v)?),
                "token_usage" => self.load_token_usage = Some(rate("load.token_usage", v)?),
                other => return Err(format!("unknown load key '{other}'")),
            }
        }
        Ok(())
    }
}

impl RequestOverrides {
    /// Reads the optional `"mock"` field of a request body.
    pub fn from_body(body: &Value) -> Result<RequestOverrides, String> {
        let mut overrides = RequestOverrides::default();
        let Some(mock) = body.get("mock") else {
            return Ok(overrides);
        };
        if mock.is_null() {
            return Ok(overrides);
        }
        let obj = mock
            .as_object()
            .ok_or_else(|| "'mock' must be a JSON object".to_string())?;
        for (key, v) in obj {
            match key.as_str() {
                "ttft_ms" => overrides.ttft_ms = Some(uint(key, v)?),
                "itl_ms" => overrides.itl_ms = Some(uint(key, v)?),
                "output_tokens" => overrides.output_tokens = Some(uint(key, v)?),
                "fail_status" => overrides.fail_status = Some(status(key, v)?),
                "drop_after_tokens" => overrides.drop_after_tokens = Some(optional_uint(key, v)?),
                "stall_after_tokens" => overrides.stall_after_tokens = Some(optional_uint(key, v)?),
                "stall" => overrides.stall = Some(boolean(key, v)?),
                "slow_headers_ms" => overrides.slow_headers_ms = Some(uint(key, v)?),
                "reply_body" => overrides.reply_body = Some(string(key, v)?),
                other => return Err(format!("unknown mock override '{other}'")),
            }
        }
        Ok(overrides)
    }
}

/// A request's override of an optional count, else the live setting (`NO_DROP`: none).
fn optional(over: Option<Option<u64>>, live: &AtomicU64) -> Option<u64> {
    match over {
        Some(value) => value,
        None => match live.load(Relaxed) {
            NO_DROP => None,
            n => Some(n),
        },
    }
}

fn uint(key: &str, v: &Value) -> Result<u64, String> {
    v.as_u64()
        .ok_or_else(|| format!("'{key}' must be a non-negative integer"))
}

fn optional_uint(key: &str, v: &Value) -> Result<Option<u64>, String> {
    if v.is_null() {
        Ok(None)
    } else {
        uint(key, v).map(Some)
    }
}

fn rate(key: &str, v: &Value) -> Result<f64, String> {
    match v.as_f64() {
        Some(x) if (0.0..=1.0).contains(&x) => Ok(x),
        _ => Err(format!("'{key}' must be a number between 0.0 and 1.0")),
    }
}

fn status(key: &str, v: &Value) -> Result<u16, String> {
    v.as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| http::StatusCode::from_u16(*n).is_ok())
        .ok_or_else(|| format!("'{key}' must be an HTTP status code"))
}

fn boolean(key: &str, v: &Value) -> Result<bool, String> {
    v.as_bool()
        .ok_or_else(|| format!("'{key}' must be a boolean"))
}

fn string(key: &str, v: &Value) -> Result<String, String> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("'{key}' must be a string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live() -> LiveConfig {
        LiveConfig::from_flags(&Flags::default())
    }

    #[test]
    fn patch_changes_only_given_fields() {
        let cfg = live();
        let patch = ConfigPatch::parse(&json!({
            "ttft_ms": 5,
            "fail_rate": 0.5,
            "drop_after_tokens": 2,
            "model": "m2",
            "load": {"running": 3, "token_usage": 0.25}
        }))
        .unwrap();
        cfg.apply(&patch);
        let out = cfg.to_json();
        assert_eq!(out["ttft_ms"], 5);
        assert_eq!(out["itl_ms"], 0);
        assert_eq!(out["output_tokens"], 16);
        assert_eq!(out["fail_rate"], 0.5);
        assert_eq!(out["drop_after_tokens"], 2);
        assert_eq!(out["model"], "m2");
        assert_eq!(out["owned_by"], "sglang");
        assert_eq!(out["load"]["running"], 3);
        assert_eq!(out["load"]["waiting"], 0);
        assert_eq!(out["load"]["token_usage"], 0.25);
    }

    #[test]
    fn null_clears_drop_after_tokens() {
        let cfg = live();
        cfg.apply(&ConfigPatch::parse(&json!({"drop_after_tokens": 4})).unwrap());
        assert_eq!(
            cfg.knobs(&RequestOverrides::default()).drop_after_tokens,
            Some(4)
        );
        cfg.apply(&ConfigPatch::parse(&json!({"drop_after_tokens": null})).unwrap());
        assert_eq!(
            cfg.knobs(&RequestOverrides::default()).drop_after_tokens,
            None
        );
        assert_eq!(cfg.to_json()["drop_after_tokens"], Value::Null);
    }

    #[test]
    fn stall_after_tokens_is_set_overridden_and_cleared() {
        let cfg = live();
        cfg.apply(&ConfigPatch::parse(&json!({"stall_after_tokens": 3})).unwrap());
        assert_eq!(
            cfg.knobs(&RequestOverrides::default()).stall_after_tokens,
            Some(3)
        );
        assert_eq!(cfg.to_json()["stall_after_tokens"], 3);
        let body = json!({"mock": {"stall_after_tokens": null}});
        let overrides = RequestOverrides::from_body(&body).unwrap();
        assert_eq!(cfg.knobs(&overrides).stall_after_tokens, None);
        let body = json!({"mock": {"reply_body": "{oops"}});
        let overrides = RequestOverrides::from_body(&body).unwrap();
        assert_eq!(overrides.reply_body.as_deref(), Some("{oops"));
        cfg.apply(&ConfigPatch::parse(&json!({"stall_after_tokens": null})).unwrap());
        assert_eq!(cfg.to_json()["stall_after_tokens"], Value::Null);
    }

    #[test]
    fn invalid_patch_is_rejected_whole() {
        let cfg = live();
        for bad in [
            json!([1, 2]),
            json!({"ttft_ms": -1}),
            json!({"ttft_ms": 1, "fail_rate": 2.0}),
            json!({"fail_status": 42}),
            json!({"stall": "yes"}),
            json!({"load": {"running": "many"}}),
            json!({"ttft": 3}),
        ] {
            assert!(ConfigPatch::parse(&bad).is_err(), "{bad}");
        }
        assert_eq!(cfg.to_json()["ttft_ms"], 0);
    }

    #[test]
    fn request_overrides_win_over_globals() {
        let cfg = live();
        cfg.apply(&ConfigPatch::parse(&json!({"itl_ms": 7, "drop_after_tokens": 1})).unwrap());
        let body = json!({"mock": {"ttft_ms": 3, "output_tokens": 2, "fail_status": 503,
                                    "drop_after_tokens": null}});
        let knobs = cfg.knobs(&RequestOverrides::from_body(&body).unwrap());
        assert_eq!(knobs.ttft_ms, 3);
        assert_eq!(knobs.itl_ms, 7);
        assert_eq!(knobs.output_tokens, 2);
        assert_eq!(knobs.fail_status, 503);
        assert!(knobs.forced_fail);
        assert_eq!(knobs.drop_after_tokens, None);

        let plain = cfg.knobs(&RequestOverrides::from_body(&json!({})).unwrap());
        assert!(!plain.forced_fail);
        assert_eq!(plain.drop_after_tokens, Some(1));
    }

    #[test]
    fn bad_overrides_are_errors() {
        assert!(RequestOverrides::from_body(&json!({"mock": 5})).is_err());
        assert!(RequestOverrides::from_body(&json!({"mock": {"stall": 1}})).is_err());
        assert!(RequestOverrides::from_body(&json!({"mock": {"nope": 1}})).is_err());
        assert_eq!(
            RequestOverrides::from_body(&json!({"mock": null})).unwrap(),
            RequestOverrides::default()
        );
    }
}

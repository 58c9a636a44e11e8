//! Inference routes: the shared fault/delay prologue, simulated generation
//! and the non-generative endpoints.
//!
//! Order of effects for every inference request: count it, parse the body
//! (400 on bad JSON), resolve the knobs (global config + `"mock"`
//! overrides), then `stall` (hang forever), `slow_headers_ms` (delay the
//! head), failure injection (error status), and finally the route's work,
//! where `drop_after_tokens` cuts the connection and `stall_after_tokens`
//! silences a stream.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::StatusCode;
use serde_json::Value;

use crate::body::Aborted;
use crate::config::{Knobs, RequestOverrides};
use crate::formats::{Completion, Finish};
use crate::prompt::{self, Api};
use crate::provider::{self, Provider};
use crate::respond::{self, ok_json, HttpResult};
use crate::state::AppState;
use crate::stats::Inflight;
use crate::stream::{self, Pacing};
use crate::utility::Task;

/// The inference endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Generate(Api),
    Utility(Task),
}

pub async fn handle(state: &AppState, endpoint: Endpoint, body: &Bytes) -> HttpResult {
    state.stats.record_request();
    let inflight = Inflight::new(state.stats.clone());

    let takes_json = endpoint != Endpoint::Utility(Task::Transcription);
    let json = if takes_json {
        match serde_json::from_slice::<Value>(body) {
            Ok(json) => json,
            Err(e) => return Ok(respond::bad_request(&format!("invalid JSON body: {e}"))),
        }
    } else {
        Value::Null
    };
    let overrides = match RequestOverrides::from_body(&json) {
        Ok(overrides) => overrides,
        Err(message) => return Ok(respond::bad_request(&message)),
    };
    let knobs = state.config.knobs(&overrides);

    if knobs.stall {
        // Hang until the client gives up; hyper then drops this future.
        std::future::pending::<()>().await;
    }
    sleep(Duration::from_millis(knobs.slow_headers_ms)).await;
    if should_fail(&knobs) {
        let status =
            StatusCode::from_u16(knobs.fail_status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let message = format!("mock worker injected failure ({})", status.as_u16());
        return Ok(match state.provider {
            Some(Provider::Anthropic) => {
                provider::anthropic_error(status, error_kind(status), &message)
            }
            _ => respond::error(status, error_kind(status), &message),
        });
    }
    if let Some(body) = overrides.reply_body {
        return Ok(respond::text(StatusCode::OK, "application/json", body));
    }

    let kv_params = match (state.pd_role, endpoint) {
        (Some(role), Endpoint::Generate(_)) => {
            match crate::pd::check(state.runtime, role, state.port, state.pd_omit_kv, &json) {
                Ok(params) => params,
                Err(message) => return Ok(respond::bad_request(&format!("pd check: {message}"))),
            }
        }
        _ => None,
    };
    match endpoint {
        Endpoint::Generate(api) => generate(state, api, &json, &knobs, inflight, kv_params).await,
        Endpoint::Utility(task) => {
            let output = task.run(&json, body.len(), &model_of(state, &json));
            // One "forward pass" worth of latency, then the faults.
            sleep(Duration::from_millis(knobs.ttft_ms)).await;
            if knobs.drop_after_tokens.is_some() {
                return Err(Aborted);
            }
            // Answer ready: the request leaves the running set.
            drop(inflight);
            Ok(match output {
                Ok(value) => ok_json(&value),
                Err(message) => respond::bad_request(&message),
            })
        }
    }
}

/// Simulated text generation, streamed or not.
async fn generate(
    state: &AppState,
    api: Api,
    json: &Value,
    knobs: &Knobs,
    inflight: Inflight,
    kv_params: Option<Value>,
) -> HttpResult {
    let completion = plan(state, api, json, knobs);
    state.stats.record_tokens(
        completion.prompt_tokens,
        completion.cached_tokens,
        completion.completion_tokens,
    );

    if prompt::wants_stream(json) {
        let pacing = Pacing {
            ttft_ms: knobs.ttft_ms,
            itl_ms: knobs.itl_ms,
            drop_after_tokens: knobs.drop_after_tokens,
            stall_after_tokens: knobs.stall_after_tokens,
        };
        return Ok(respond::event_stream(stream::spawn(
            completion, pacing, inflight,
        )));
    }

    let tokens = match knobs.drop_after_tokens {
        Some(cut) => cut.min(completion.completion_tokens),
        None => completion.completion_tokens,
    };
    sleep(stream::generation_time(knobs.ttft_ms, knobs.itl_ms, tokens)).await;
    if knobs.drop_after_tokens.is_some() {
        return Err(Aborted);
    }
    // Answer ready: the request leaves the running set.
    drop(inflight);
    let mut response = completion.response();
    if let Some(params) = kv_params {
        response["kv_transfer_params"] = params;
    }
    Ok(ok_json(&response))
}

/// Fixes the numbers of one generation and feeds the prefix cache.
fn plan(state: &AppState, api: Api, json: &Value, knobs: &Knobs) -> Completion {
    let prompt = prompt::extract(api, json);
    let prompt_tokens = prompt.tokens();
    let cached_bytes = state.observe_prompt(&prompt.text) as u64;
    let (completion_tokens, finish) = output_length(knobs.output_tokens, prompt::max_tokens(json));
    Completion {
        api,
        id: state.next_id(),
        model: model_of(state, json),
        created: unix_seconds(),
        prompt_tokens,
        cached_tokens: (cached_bytes / 4).min(prompt_tokens),
        completion_tokens,
        finish,
        include_usage: prompt::wants_stream_usage(json),
    }
}

/// The simulated model "wants" `natural` tokens; a smaller client cap
/// cuts it short with finish reason `length`.
fn output_length(natural: u64, cap: Option<u64>) -> (u64, Finish) {
    match cap {
        Some(cap) if cap <= natural => (cap, Finish::Length),
        _ => (natural, Finish::Stop),
    }
}

fn should_fail(knobs: &Knobs) -> bool {
    knobs.forced_fail || (knobs.fail_rate > 0.0 && rand::random::<f64>() < knobs.fail_rate)
}

fn error_kind(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 | 404 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_error",
        503 => "service_unavailable",
        _ => "server_error",
    }
}

/// Responses name the model the client asked for (as SGLang does), or the
/// served model when the request names none.
fn model_of(state: &AppState, json: &Value) -> String {
    match prompt::requested_model(json) {
        Some(model) => model.to_string(),
        None => state.config.model().as_str().to_string(),
    }
}

/// Sleeps, registering no timer at all for a zero delay (the benchmark
/// path).
async fn sleep(duration: Duration) {
    if !duration.is_zero() {
        tokio::time::sleep(duration).await;
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_length_caps() {
        assert_eq!(output_length(16, None), (16, Finish::Stop));
        assert_eq!(output_length(16, Some(20)), (16, Finish::Stop));
        assert_eq!(output_length(16, Some(16)), (16, Finish::Length));
        assert_eq!(output_length(16, Some(4)), (4, Finish::Length));
        assert_eq!(output_length(16, Some(0)), (0, Finish::Length));
    }

    #[test]
    fn forced_and_random_failures() {
        let mut knobs = Knobs {
            ttft_ms: 0,
            itl_ms: 0,
            output_tokens: 1,
            fail_rate: 0.0,
            fail_status: 500,
            forced_fail: false,
            drop_after_tokens: None,
            stall_after_tokens: None,
            stall: false,
            slow_headers_ms: 0,
        };
        assert!(!should_fail(&knobs));
        knobs.fail_rate = 1.0;
        assert!(should_fail(&knobs));
        knobs.fail_rate = 0.0;
        knobs.forced_fail = true;
        assert!(should_fail(&knobs));
    }
}

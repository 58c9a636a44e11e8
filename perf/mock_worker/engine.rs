//! Non-inference engine endpoints: health, model listing, the probes a
//! gateway uses to detect the engine type, load reports and metrics.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::body::MockBody;
use crate::cli::Runtime;
use crate::metrics::{self, Scrape};
use crate::reqlog::now_ms;
use crate::respond::{self, ok_json};
use crate::state::{AppState, CONTEXT_LENGTH, MAX_RUNNING_REQUESTS, MAX_TOTAL_NUM_TOKENS};

pub const SGLANG_VERSION: &str = "0.5.0-mock";
pub const VLLM_VERSION: &str = "0.9.0-mock";

/// `/health` and `/health_generate`.
pub fn health(state: &AppState) -> Response<MockBody> {
    if state.config.unhealthy() {
        respond::empty(StatusCode::SERVICE_UNAVAILABLE)
    } else {
        respond::empty(StatusCode::OK)
    }
}

/// `/v1/models`.
pub fn models(state: &AppState) -> Response<MockBody> {
    let mut card = json!({
        "id": state.config.model().as_str(),
        "object": "model",
        "created": 0,
        "owned_by": state.config.owned_by().as_str(),
    });
    if state.runtime == Runtime::Vllm {
        card["max_model_len"] = json!(CONTEXT_LENGTH);
    }
    ok_json(&json!({"object": "list", "data": [card]}))
}

/// SGLang `/server_info` and `/get_server_info`: server arguments.
pub fn server_info(state: &AppState) -> Response<MockBody> {
    let model = state.config.model();
    let load = state.load_snapshot();
    ok_json(&json!({
        "model_path": model.as_str(),
        "tokenizer_path": model.as_str(),
        "served_model_name": model.as_str(),
        "host": state.host,
        "port": state.port,
        "tp_size": 1,
        "dp_size": state.dp_size,
        "pp_size": 1,
        "context_length": CONTEXT_LENGTH,
        "max_running_requests": MAX_RUNNING_REQUESTS,
        "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS,
        "is_embedding": false,
        "disaggregation_mode": "null",
        "version": SGLANG_VERSION,
        "internal_states": [{"last_gen_throughput": load.gen_throughput}],
    }))
}

/// SGLang `/model_info` and `/get_model_info`.
pub fn model_info(state: &AppState) -> Response<MockBody> {
    let model = state.config.model();
    ok_json(&json!({
        "model_path": model.as_str(),
        "tokenizer_path": model.as_str(),
        "is_generation": true,
    }))
}

/// `/version` (SGLang and vLLM report different version strings).
pub fn version(version: &str) -> Response<MockBody> {
    ok_json(&json!({"version": version}))
}

/// llama.cpp `/props`.
pub fn props() -> Response<MockBody> {
    ok_json(&json!({}))
}

/// SGLang `/v1/loads`.
pub fn loads(state: &AppState) -> Response<MockBody> {
    ok_json(&loads_json(state))
}

fn loads_json(state: &AppState) -> Value {
    let load = state.load_snapshot();
    let used_tokens = (load.token_usage * MAX_TOTAL_NUM_TOKENS as f64).round() as u64;
    let utilization = (load.running as f64 / MAX_RUNNING_REQUESTS as f64).min(1.0);
    json!({
        "timestamp": now_ms() as f64 / 1000.0,
        "dp_rank_count": 1,
        "loads": [{
            "dp_rank": 0,
            "num_running_reqs": load.running,
            "num_waiting_reqs": load.waiting,
            "num_total_reqs": load.running + load.waiting,
            "num_used_tokens": used_tokens,
            "max_total_num_tokens": MAX_TOTAL_NUM_TOKENS,
            "token_usage": load.token_usage,
            "gen_throughput": load.gen_throughput,
            "cache_hit_rate": load.cache_hit_rate,
            "utilization": utilization,
            "max_running_requests": MAX_RUNNING_REQUESTS,
        }],
    })
}

/// `/metrics`.
pub fn metrics(state: &AppState) -> Response<MockBody> {
    let model = state.config.model();
    let scrape = Scrape {
        model: model.as_str(),
        load: state.load_snapshot(),
        requests_total: state.stats.requests_total(),
        prompt_tokens_total: state.stats.prompt_tokens_total(),
        generation_tokens_total: state.stats.generation_tokens_total(),
    };
    respond::text(
        StatusCode::OK,
        metrics::CONTENT_TYPE,
        metrics::render(state.metrics_style, &scrape),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Flags;
    use crate::config::ConfigPatch;

    #[test]
    fn loads_reflect_overrides_and_cache() {
        let state = AppState::new(&Flags::default(), 1);
        let patch = json!({"load": {"running": 4, "waiting": 1, "token_usage": 0.5}});
        state.config.apply(&ConfigPatch::parse(&patch).unwrap());
        let text = "y".repeat(64);
        state.observe_prompt(&text);
        state.observe_prompt(&text);
        let v = loads_json(&state);
        let load = &v["loads"][0];
        assert_eq!(v["dp_rank_count"], 1);
        assert_eq!(load["dp_rank"], 0);
        assert_eq!(load["num_running_reqs"], 4);
        assert_eq!(load["num_waiting_reqs"], 1);
        assert_eq!(load["num_total_reqs"], 5);
        assert_eq!(load["token_usage"], 0.5);
        assert_eq!(load["num_used_tokens"], MAX_TOTAL_NUM_TOKENS / 2);
        assert_eq!(load["cache_hit_rate"], 0.5);
    }
}

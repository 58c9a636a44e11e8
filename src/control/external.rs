//! Registering an external provider (spec 1, `runtime_type: external`): no probing (these
//! APIs have no `/health` or engine routes, and every call spends the owner's quota), one
//! `GET /v1/models` with the worker's key sent the way the provider reads it, and the
//! models it lists become the models the worker serves, so `--enable-igw` routes each of
//! them to its provider. A provider that refuses the listing (a wrong key, say) fails the
//! registration with its status, instead of registering a worker that can serve nothing.

use std::time::Duration;

use http::HeaderMap;
use serde_json::Value;

use super::calls::{get_with_headers, CallPool};
use super::detect::model_ids;
use crate::fleet::provider::{KeyStyle, ProviderKey, PROVIDER_LABEL};
use crate::fleet::spec::WorkerSpec;
use crate::fleet::{Discovered, RuntimeType};

/// Lists the provider's models with the worker's key.
pub async fn discover(
    pool: &CallPool,
    spec: &WorkerSpec,
    timeout: Duration,
) -> Result<Discovered, String> {
    let label = spec.labels.get(PROVIDER_LABEL).map(String::as_str);
    let key = ProviderKey::new(KeyStyle::of(&spec.url, label), spec.api_key.as_ref());
    let mut headers = HeaderMap::new();
    key.apply(&mut headers);
    let reply = get_with_headers(pool, &spec.url, headers, "/v1/models", timeout)
        .await
        .map_err(|e| format!("external provider: GET /v1/models failed: {e}"))?;
    if !reply.status.is_success() {
        let hint = if spec.api_key.is_none() {
            " (the worker has no api_key)"
        } else {
            ""
        };
        return Err(format!(
            "external provider answered {} to GET /v1/models{hint}",
            reply.status.as_u16()
        ));
    }
    let models = serde_json::from_slice::<Value>(&reply.body)
        .ok()
        .map(|list| model_ids(&list))
        .unwrap_or_default();
    if models.is_empty() {
        return Err("external provider listed no models at GET /v1/models".into());
    }
    Ok(Discovered {
        runtime: RuntimeType::External,
        models,
        ..Discovered::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_list_shapes_give_their_ids() {
        let openai =
            json!({"object": "list", "data": [{"id": "gpt-a"}, {"id": "gpt-b"}, {"id": "gpt-a"}]});
        assert_eq!(model_ids(&openai), ["gpt-a", "gpt-b"]);
        let anthropic = json!({"data": [{"type": "model", "id": "claude-x"}], "has_more": false});
        assert_eq!(model_ids(&anthropic), ["claude-x"]);
        assert!(model_ids(&json!({"models": []})).is_empty());
    }
}

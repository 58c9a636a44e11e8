//! Which key a worker receives with a client's request.
//!
//! An engine gets the client's `Authorization` when there is one, else the worker's key as
//! a bearer token (spec 1, "What a worker receives"). An external provider gets the
//! worker's own key the way it expects it, in place of whatever the client sent in that
//! header ([`crate::fleet::provider::ProviderKey::apply`]), so the gateway's key (what a
//! client's `Authorization` carries when gateway auth is on) never reaches a third party
//! when the worker has a key of its own. A provider worker without a key passes the
//! client's own `Authorization` through.

use std::borrow::Cow;

use http::header::AUTHORIZATION;
use http::HeaderMap;

use crate::fleet::Worker;

/// Puts `worker`'s credentials into the headers it will receive.
///
/// The map is copied (when borrowed) only when something may be added to it: an engine
/// worker with no key of its own, or a client that sent its own `Authorization`, costs no
/// copy; a provider worker always gets its own map.
pub fn present(worker: &Worker, headers: &mut Cow<'_, HeaderMap>) {
    match &worker.provider {
        Some(provider) => provider.apply(headers.to_mut()),
        None => {
            if !headers.contains_key(AUTHORIZATION) {
                if let Some(bearer) = &worker.bearer {
                    headers.to_mut().insert(AUTHORIZATION, bearer.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::provider::ANTHROPIC_VERSION;
    use crate::fleet::spec::WorkerSpec;
    use crate::fleet::{parse_worker_url, Discovered, RuntimeType, WorkerDefaults};
    use crate::secret::Secret;
    use http::HeaderValue;

    fn worker(url: &str, runtime: RuntimeType, key: Option<&str>, label: Option<&str>) -> Worker {
        let mut spec = WorkerSpec::new(parse_worker_url(url).unwrap());
        spec.runtime_type = runtime;
        spec.api_key = key.map(|k| Secret::new(k.to_owned()));
        if let Some(label) = label {
            spec.labels.insert("provider".into(), label.into());
        }
        Worker::new(
            uuid::Uuid::new_v4(),
            spec,
            Discovered::default(),
            &WorkerDefaults::default(),
        )
    }

    fn client_headers() -> Cow<'static, HeaderMap> {
        let mut h = HeaderMap::new();
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Bearer gateway-key"),
        );
        Cow::Owned(h)
    }

    #[test]
    fn engines_keep_the_clients_authorization() {
        let w = worker("http://127.0.0.1:9", RuntimeType::Sglang, Some("wk"), None);
        let client = client_headers().into_owned();
        let mut h = Cow::Borrowed(&client);
        present(&w, &mut h);
        assert_eq!(h[AUTHORIZATION], "Bearer gateway-key");
        assert!(matches!(h, Cow::Borrowed(_)), "nothing added: not copied");
        let none = HeaderMap::new();
        let mut empty = Cow::Borrowed(&none);
        present(&w, &mut empty);
        assert_eq!(empty[AUTHORIZATION], "Bearer wk");
        assert!(none.is_empty(), "the request's own map is left as it was");
    }

    #[test]
    fn a_provider_gets_its_own_key_never_the_gateways() {
        let w = worker(
            "https://api.openai.com",
            RuntimeType::External,
            Some("sk-o"),
            None,
        );
        let mut h = client_headers();
        present(&w, &mut h);
        assert_eq!(h[AUTHORIZATION], "Bearer sk-o");

        let a = worker(
            "https://api.anthropic.com",
            RuntimeType::External,
            Some("sk-a"),
            None,
        );
        let mut h = client_headers();
        present(&a, &mut h);
        assert!(h.get(AUTHORIZATION).is_none(), "the gateway key stays here");
        assert_eq!(h["x-api-key"], "sk-a");
        assert_eq!(h["anthropic-version"], ANTHROPIC_VERSION);

        let labelled = worker(
            "https://127.0.0.1:9",
            RuntimeType::External,
            Some("k"),
            Some("anthropic"),
        );
        let mut h: Cow<HeaderMap> = Cow::Owned(HeaderMap::new());
        h.to_mut()
            .insert("anthropic-version", HeaderValue::from_static("2099-01-01"));
        present(&labelled, &mut h);
        assert_eq!(h["x-api-key"], "k");
        assert_eq!(
            h["anthropic-version"], "2099-01-01",
            "the client's version wins"
        );
    }

    #[test]
    fn a_provider_without_a_key_takes_the_callers() {
        let w = worker("https://api.openai.com", RuntimeType::External, None, None);
        let mut h = client_headers();
        present(&w, &mut h);
        assert_eq!(h[AUTHORIZATION], "Bearer gateway-key");
    }
}

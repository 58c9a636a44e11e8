//! How an external provider (spec 1, `runtime_type: external`) expects its key.
//!
//! OpenAI-style APIs (OpenAI, and the many that copy its surface) take
//! `Authorization: Bearer <key>`; Anthropic's API takes `x-api-key: <key>` with an
//! `anthropic-version`. A worker on Anthropic's host (or a subdomain), or one labelled
//! `provider: anthropic` (a stand-in or proxy on another host), is Anthropic-style; every
//! other external worker is OpenAI-style.
//!
//! [`Backend`] is the gateway-wide choice of `--backend`: under `anthropic` every HTTP
//! worker is the provider's Messages API itself, reached with the client's own key.

use http::header::{HeaderName, AUTHORIZATION};
use http::{HeaderMap, HeaderValue};

use super::url::WorkerUrl;
use crate::secret::Secret;

/// Anthropic's API host.
const ANTHROPIC_HOST: &str = "api.anthropic.com";
/// The label that marks an external worker on another host as Anthropic-style.
pub const PROVIDER_LABEL: &str = "provider";
/// The API version sent to an Anthropic-style provider when the client names none.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");
const ANTHROPIC_VERSION_HEADER: HeaderName = HeaderName::from_static("anthropic-version");

/// What the HTTP workers are (`--backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// Engines and OpenAI-compatible servers, each route forwarded as it came.
    #[default]
    Http,
    /// Anthropic's Messages API (or a stand-in): only `/v1/messages` is served, with the
    /// client's own provider key; the gateway registers the workers without calling them.
    Anthropic,
}

impl Backend {
    /// The flag's values: `http`, `anthropic` (also spelled `vendor`).
    pub fn parse(value: &str) -> Option<Backend> {
        match value {
            "http" => Some(Backend::Http),
            "anthropic" | "vendor" => Some(Backend::Anthropic),
            _ => None,
        }
    }

    /// Whether the workers are a hosted provider rather than engines.
    pub fn is_provider(self) -> bool {
        self != Backend::Http
    }
}

/// Where an external provider wants its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyStyle {
    /// `Authorization: Bearer <key>`.
    Bearer,
    /// `x-api-key: <key>` (and `anthropic-version`).
    XApiKey,
}

impl KeyStyle {
    /// The style of the provider at `url`, with the worker's `provider` label.
    pub fn of(url: &WorkerUrl, label: Option<&str>) -> KeyStyle {
        if url.host_within(ANTHROPIC_HOST)
            || label.is_some_and(|l| l.eq_ignore_ascii_case("anthropic"))
        {
            KeyStyle::XApiKey
        } else {
            KeyStyle::Bearer
        }
    }
}

/// An external worker's key, pre-built in the header its provider reads.
#[derive(Clone, Debug)]
pub struct ProviderKey {
    pub style: KeyStyle,
    /// `None`: the worker has no key; callers present their own.
    pub value: Option<HeaderValue>,
}

impl ProviderKey {
    pub fn new(style: KeyStyle, key: Option<&Secret>) -> ProviderKey {
        let value = key.and_then(|key| {
            let text = match style {
                KeyStyle::Bearer => format!("Bearer {}", key.expose()),
                KeyStyle::XApiKey => key.expose().to_owned(),
            };
            let mut value = HeaderValue::try_from(text).ok()?;
            value.set_sensitive(true);
            Some(value)
        });
        ProviderKey { style, value }
    }

    /// Puts the key into `headers` where the provider reads it, in place of what was
    /// there (a caller's `Authorization` may hold the gateway's own key, which must not
    /// reach a third party). Without a key, the headers keep the caller's own. An
    /// Anthropic-style provider also gets `anthropic-version` when none is there.
    pub fn apply(&self, headers: &mut HeaderMap) {
        match (self.style, &self.value) {
            (_, None) => {}
            (KeyStyle::Bearer, Some(key)) => {
                headers.insert(AUTHORIZATION, key.clone());
            }
            (KeyStyle::XApiKey, Some(key)) => {
                headers.remove(AUTHORIZATION);
                headers.insert(X_API_KEY, key.clone());
            }
        }
        if self.style == KeyStyle::XApiKey && !headers.contains_key(ANTHROPIC_VERSION_HEADER) {
            headers.insert(
                ANTHROPIC_VERSION_HEADER,
                HeaderValue::from_static(ANTHROPIC_VERSION),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::parse_worker_url;

    #[test]
    fn backend_values() {
        assert_eq!(Backend::parse("http"), Some(Backend::Http));
        assert_eq!(Backend::parse("anthropic"), Some(Backend::Anthropic));
        assert_eq!(Backend::parse("vendor"), Some(Backend::Anthropic));
        assert_eq!(Backend::parse("Anthropic"), None);
        assert!(Backend::Anthropic.is_provider());
        assert!(!Backend::default().is_provider());
    }

    #[test]
    fn anthropic_by_host_or_label() {
        let style = |url: &str, label| KeyStyle::of(&parse_worker_url(url).unwrap(), label);
        assert_eq!(style("https://api.anthropic.com", None), KeyStyle::XApiKey);
        assert_eq!(
            style("https://eu.api.anthropic.com", None),
            KeyStyle::XApiKey
        );
        assert_eq!(
            style("https://notapi.anthropic.com.evil", None),
            KeyStyle::Bearer
        );
        assert_eq!(style("https://api.openai.com", None), KeyStyle::Bearer);
        assert_eq!(
            style("https://127.0.0.1:9", Some("Anthropic")),
            KeyStyle::XApiKey
        );
        assert_eq!(
            style("https://127.0.0.1:9", Some("openai")),
            KeyStyle::Bearer
        );
    }

    #[test]
    fn keys_are_sensitive_and_styled() {
        let secret = Secret::new("sk-test".to_owned());
        let bearer = ProviderKey::new(KeyStyle::Bearer, Some(&secret));
        assert_eq!(bearer.value.as_ref().unwrap(), "Bearer sk-test");
        assert!(bearer.value.unwrap().is_sensitive());
        let x = ProviderKey::new(KeyStyle::XApiKey, Some(&secret));
        assert_eq!(x.value.as_ref().unwrap(), "sk-test");
        assert!(ProviderKey::new(KeyStyle::Bearer, None).value.is_none());
    }
}

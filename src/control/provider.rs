//! External providers (a third-party API such as OpenAI's or Anthropic's) are served by the
//! provider router, which this build does not compile in. A worker spec that targets one
//! is refused where it enters (spec 1, 400 `PROVIDER_NOT_COMPILED`; a `--worker-urls`
//! entry stops startup) instead of being registered and then failing every request sent
//! to it. Every entry point asks [`check_compiled`], so compiling the router in lifts the
//! refusal here and nowhere else.

use std::fmt;

use super::detect::is_external_provider;
use crate::fleet::spec::WorkerSpec;
use crate::fleet::RuntimeType;

/// Whether the external-provider router is part of this build.
const ROUTER_COMPILED: bool = false;

/// A spec that needs the provider router in a build without it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotCompiled {
    url: String,
}

impl fmt::Display for NotCompiled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "worker {} targets an external provider (runtime_type external, or a recognised \
             provider host), but this build has no external-provider router",
            self.url
        )
    }
}

/// Whether the spec stands for an external provider: `runtime_type: external`, or no
/// runtime on a recognised provider host (what registration would turn into `external`).
pub fn targets_external(spec: &WorkerSpec) -> bool {
    match spec.runtime_type {
        RuntimeType::External => true,
        RuntimeType::Unspecified => is_external_provider(&spec.url),
        _ => false,
    }
}

/// Refuses a spec whose router is not compiled in.
pub fn check_compiled(spec: &WorkerSpec) -> Result<(), NotCompiled> {
    if ROUTER_COMPILED || !targets_external(spec) {
        return Ok(());
    }
    Err(NotCompiled {
        url: spec.url.normalized.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::parse_worker_url;

    fn spec(url: &str, runtime: RuntimeType) -> WorkerSpec {
        let mut spec = WorkerSpec::new(parse_worker_url(url).unwrap());
        spec.runtime_type = runtime;
        spec
    }

    #[test]
    fn provider_hosts_and_explicit_external_are_refused() {
        for (url, runtime) in [
            ("https://api.openai.com", RuntimeType::Unspecified),
            ("https://API.Anthropic.com/v1", RuntimeType::Unspecified),
            ("http://127.0.0.1:9", RuntimeType::External),
        ] {
            let err = check_compiled(&spec(url, runtime)).unwrap_err();
            assert!(err.to_string().contains("external provider"), "{err}");
        }
    }

    #[test]
    fn self_hosted_workers_pass() {
        assert!(check_compiled(&spec("http://127.0.0.1:9", RuntimeType::Unspecified)).is_ok());
        // An explicit engine runtime wins over the host, as at registration.
        assert!(check_compiled(&spec("https://api.openai.com", RuntimeType::Vllm)).is_ok());
    }
}

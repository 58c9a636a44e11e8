//! Credentials and what a message may show of them: a leaf module, so any layer can hold
//! a key or print a URL without importing the configuration.

use std::borrow::Cow;
use std::fmt;

/// A credential (a key flag, a worker's `api_key`). `Debug` and `Display` print `<redacted>`;
/// the value is only reachable through [`Secret::expose`], so it cannot end up in a log line
/// by accident.
///
/// Deliberately not `PartialEq`: compare credentials in constant time where they are checked.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value. Call only where the value is actually used (hashing, headers).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `scheme://user:pass@host/...` → `scheme://<redacted>@host/...`: what a message may show
/// of a URL that could carry credentials (a refused flag value, a refused IdP URL).
pub fn redact_userinfo(url: &str) -> Cow<'_, str> {
    let Some(scheme_end) = url.find("://") else {
        return Cow::Borrowed(url);
    };
    let after = &url[scheme_end + 3..];
    let authority_len = after.find(['/', '?', '#']).unwrap_or(after.len());
    match after[..authority_len].rfind('@') {
        Some(at) => Cow::Owned(format!(
            "{}<redacted>{}",
            &url[..scheme_end + 3],
            &after[at..]
        )),
        None => Cow::Borrowed(url),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_print_redacted() {
        let key = Secret::new("sk-1");
        assert_eq!(format!("{key} {key:?}"), "<redacted> <redacted>");
        assert_eq!(key.expose(), "sk-1");
    }

    #[test]
    fn only_the_userinfo_is_redacted() {
        assert_eq!(
            redact_userinfo("https://u:p@idp.example/x@y"),
            "https://<redacted>@idp.example/x@y"
        );
        assert!(matches!(
            redact_userinfo("http://h/a@b"),
            Cow::Borrowed("http://h/a@b")
        ));
        assert!(matches!(redact_userinfo("u:p@h"), Cow::Borrowed("u:p@h")));
    }
}

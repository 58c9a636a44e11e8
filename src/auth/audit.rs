//! Control-plane audit records (spec 1, "Events").
//!
//! One INFO record per control-plane request that reaches the control-plane check while
//! control-plane auth is configured: target `smg::audit`, message `control_plane_audit`.
//! The layout follows the log format, so `--log-json` makes each record one JSON object.
//! Records carry identities (key id, JWT subject), never credentials.

use super::Role;

/// The tracing target of audit records.
pub const TARGET: &str = "smg::audit";

/// How the principal authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthMethod {
    Jwt,
    ApiKey,
    /// No credential was presented.
    None,
}

impl AuthMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Jwt => "jwt",
            AuthMethod::ApiKey => "api_key",
            AuthMethod::None => "none",
        }
    }
}

/// Whether the request was let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthResult {
    Success,
    Denied,
}

impl AuthResult {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthResult::Success => "success",
            AuthResult::Denied => "denied",
        }
    }
}

/// One audit record.
#[derive(Debug)]
pub struct AuditEvent<'a> {
    /// JWT subject, API key id, or `unauthenticated`.
    pub principal: &'a str,
    pub auth_method: AuthMethod,
    /// Absent when the credential did not authenticate.
    pub role: Option<Role>,
    pub method: &'a str,
    pub path: &'a str,
    pub outcome: AuthResult,
    pub request_id: &'a str,
    /// Why the request was denied; absent on success.
    pub details: Option<&'a str>,
}

/// Writes the record (the subscriber adds `timestamp`, `level` and `target`).
pub fn emit(event: &AuditEvent<'_>) {
    tracing::info!(
        target: "smg::audit",
        principal = crate::bounded::log_field(event.principal),
        auth_method = event.auth_method.as_str(),
        role = event.role.map(Role::as_str),
        method = event.method,
        path = crate::bounded::log_field(event.path),
        outcome = event.outcome.as_str(),
        request_id = event.request_id,
        details = event.details,
        "control_plane_audit"
    );
}

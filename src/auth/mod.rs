//! Authentication of the three route groups (spec 1, "Authentication").
//!
//! - Public routes: always open.
//! - Data plane: `--api-key` or a `--tenant-api-key`; open when neither is set; a missing or
//!   unknown token gets 401 with an empty body. Checked on every inference request, so it
//!   hashes the presented token once and looks the digest up: constant cost whatever the
//!   number of tenants.
//! - Control plane: with control-plane auth configured (API keys or JWT/OIDC) an `admin`
//!   principal is required and every decision is audited; otherwise the shared key guards
//!   it (rule 2).

pub mod audit;
pub mod gate;
pub mod jwt;
pub mod keys;
pub mod oidc;

use std::fmt;

use crate::secret::Secret;
use keys::{ControlPlaneKey, TenantKey};

/// The Authentication flag group.
#[derive(Clone, Debug)]
pub struct AuthSettings {
    /// `--api-key`: data-plane shared key, and the key of workers from `--worker-urls`.
    pub api_key: Option<Secret>,
    /// `--tenant-api-key`: data-plane keys that resolve to a tenant identity.
    pub tenant_api_keys: Vec<TenantKey>,
    /// `--control-plane-api-keys` (or `CONTROL_PLANE_API_KEYS`): control-plane keys.
    pub control_plane_api_keys: Vec<ControlPlaneKey>,
    /// `--jwt-issuer` (or `JWT_ISSUER`): OIDC issuer of control-plane JWTs.
    pub jwt_issuer: Option<String>,
    /// `--jwt-audience` (or `JWT_AUDIENCE`): expected `aud` of control-plane JWTs.
    pub jwt_audience: Option<String>,
    /// `--jwt-jwks-uri` (or `JWT_JWKS_URI`): key set URI; discovered from the issuer if unset.
    pub jwt_jwks_uri: Option<String>,
    /// `--jwt-role-claim`: the claim that holds roles.
    pub jwt_role_claim: String,
    /// `--jwt-role-mapping`: IdP role to gateway role, first match wins.
    pub jwt_role_mapping: Vec<(String, Role)>,
    /// `--disable-audit-logging`: no control-plane audit records.
    pub disable_audit_logging: bool,
}

impl Default for AuthSettings {
    fn default() -> AuthSettings {
        AuthSettings {
            api_key: None,
            tenant_api_keys: Vec::new(),
            control_plane_api_keys: Vec::new(),
            jwt_issuer: None,
            jwt_audience: None,
            jwt_jwks_uri: None,
            jwt_role_claim: "roles".to_owned(),
            jwt_role_mapping: Vec::new(),
            disable_audit_logging: false,
        }
    }
}

/// A principal's role on the control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    User,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }

    /// `admin` or `user`, case-insensitive.
    pub fn parse(s: &str) -> Option<Role> {
        if s.eq_ignore_ascii_case("admin") {
            Some(Role::Admin)
        } else if s.eq_ignore_ascii_case("user") {
            Some(Role::User)
        } else {
            None
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

//! The decision per route group: the one place that turns credentials into allow, 401 or
//! 403, and writes the control-plane audit records.

use std::sync::Arc;

use http::header::{HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderMap, Method, Response, StatusCode};

use super::audit::{AuditEvent, AuthMethod, AuthResult};
use super::jwt::{JwtSettings, JwtVerifier};
use super::keys::{bearer_token, ControlPlaneKeys, DataPlaneAccess, DataPlaneKeys};
use super::AuthSettings;
use super::{audit, Role};
use crate::http::body::RespBody;
use crate::http::error::{respond::admin_error, respond::AdminErrorBody};

/// Body of a control-plane 401 without a usable `Authorization` header.
pub const MISSING_CREDENTIAL: &str = "Missing or invalid Authorization header";
/// Body of a control-plane 401 for a credential that is present but not valid.
pub const INVALID_CREDENTIAL: &str = "Invalid authentication token";
/// Body of a control-plane 403 for an authenticated non-admin.
pub const ADMIN_REQUIRED: &str = "Admin role required for control plane access";
const REALM: &str = "Bearer realm=\"control-plane\"";

/// Why a request was refused; [`Denied::into_response`] is where refusals meet the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// Data plane, or the shared-key rule of the control plane: 401 with an empty body.
    Unauthorized,
    /// Control plane with control-plane auth configured: 401, plain text, with a challenge.
    Unauthenticated(&'static str),
    /// Control plane, authenticated but not `admin`: 403, plain text.
    Forbidden,
}

impl Denied {
    pub fn into_response(self) -> Response<RespBody> {
        match self {
            Denied::Unauthorized => admin_error(StatusCode::UNAUTHORIZED, AdminErrorBody::Empty),
            Denied::Unauthenticated(text) => {
                let mut resp = admin_error(StatusCode::UNAUTHORIZED, AdminErrorBody::text(text));
                resp.headers_mut()
                    .insert(WWW_AUTHENTICATE, HeaderValue::from_static(REALM));
                resp
            }
            Denied::Forbidden => {
                admin_error(StatusCode::FORBIDDEN, AdminErrorBody::text(ADMIN_REQUIRED))
            }
        }
    }
}

/// The tenant a data-plane request authenticated as (`auth:<tenant_id>`), attached to the
/// request for tenant rate limits and scheduling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant(pub Arc<str>);

/// Decides, per route group, whether a request may proceed.
pub struct Authenticator {
    data: DataPlaneKeys,
    control_keys: ControlPlaneKeys,
    jwt: Option<JwtVerifier>,
    audit: bool,
}

impl Authenticator {
    /// Builds the checks from the configuration. JWT needs the IdP's discovery document at
    /// startup; if that fails, the error is logged and the control plane falls back to the
    /// shared-key rule (rule 3), unless control-plane keys are configured.
    pub async fn new(config: &AuthSettings) -> Authenticator {
        let jwt = match (&config.jwt_issuer, &config.jwt_audience) {
            (Some(issuer), Some(audience)) => {
                let settings = JwtSettings {
                    issuer: issuer.clone(),
                    audience: audience.clone(),
                    jwks_uri: config.jwt_jwks_uri.clone(),
                    role_claim: config.jwt_role_claim.clone(),
                    role_mapping: config.jwt_role_mapping.clone(),
                };
                match JwtVerifier::init(settings).await {
                    Ok(verifier) => Some(verifier),
                    Err(err) => {
                        tracing::error!(
                            error = %err,
                            "control-plane JWT authentication failed to initialise; \
                             the control plane falls back to the shared --api-key rule"
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        let auth = Authenticator {
            data: DataPlaneKeys::new(config.api_key.as_ref(), &config.tenant_api_keys),
            control_keys: ControlPlaneKeys::new(&config.control_plane_api_keys),
            jwt,
            audit: !config.disable_audit_logging,
        };
        tracing::info!(
            data_plane = if auth.data.is_open() {
                "open"
            } else {
                "bearer keys"
            },
            tenant_keys = config.tenant_api_keys.len(),
            control_plane = auth.control_plane_mode(),
            control_plane_keys = config.control_plane_api_keys.len(),
            audit = auth.audit && auth.control_plane_configured(),
            "authentication configured"
        );
        auth
    }

    /// How the control plane is guarded, for the startup log line.
    fn control_plane_mode(&self) -> &'static str {
        match (self.control_keys.is_empty(), self.jwt.is_some()) {
            (false, true) => "admin api keys or jwt",
            (false, false) => "admin api keys",
            (true, true) => "admin jwt",
            (true, false) if self.data.is_open() => "open",
            (true, false) if self.data.has_shared_key() => "shared --api-key",
            (true, false) => "closed (tenant keys never unlock it)",
        }
    }

    /// Whether the data plane takes requests without a key (no `--api-key`, no tenant
    /// keys): a caller's `Authorization` is then its own, not a gateway key.
    pub fn data_plane_open(&self) -> bool {
        self.data.is_open()
    }

    /// Whether control-plane auth (keys or JWT) is in force (rule 1).
    pub fn control_plane_configured(&self) -> bool {
        !self.control_keys.is_empty() || self.jwt.is_some()
    }

    /// Data plane: `Ok(Some(tenant))` for a tenant key, `Ok(None)` for the shared key or an
    /// open data plane, `Err(Unauthorized)` otherwise.
    pub fn data_plane(&self, headers: &HeaderMap) -> Result<Option<Tenant>, Denied> {
        let authorization = headers.get(AUTHORIZATION).map(HeaderValue::as_bytes);
        match self.data.check(authorization) {
            DataPlaneAccess::Open | DataPlaneAccess::Shared => Ok(None),
            DataPlaneAccess::Tenant(tenant) => Ok(Some(Tenant(tenant.clone()))),
            DataPlaneAccess::Denied => Err(Denied::Unauthorized),
        }
    }

    /// Control plane: `Ok(())` when the request may proceed, else why not.
    pub async fn control_plane(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<(), Denied> {
        let authorization = headers.get(AUTHORIZATION).map(HeaderValue::as_bytes);
        if !self.control_plane_configured() {
            // Rule 2: only the shared key, and only when one is configured.
            if self.data.is_open() || self.data.is_shared_key(authorization) {
                return Ok(());
            }
            return Err(Denied::Unauthorized);
        }
        let decision = self.decide(authorization).await;
        if self.audit {
            let request_id = request_id(headers);
            audit::emit(&AuditEvent {
                principal: decision.principal.as_deref().unwrap_or("unauthenticated"),
                auth_method: decision.method,
                role: decision.role,
                method: method.as_str(),
                path,
                outcome: if decision.denial.is_none() {
                    AuthResult::Success
                } else {
                    AuthResult::Denied
                },
                request_id: &request_id,
                details: decision.details.as_deref(),
            });
        }
        match decision.denial {
            None => Ok(()),
            Some(denied) => Err(denied),
        }
    }

    /// Rule 1: a control-plane key or a JWT, with role admin.
    async fn decide(&self, authorization: Option<&[u8]>) -> Decision {
        let Some(token) = bearer_token(authorization) else {
            return Decision::denied(
                AuthMethod::None,
                None,
                Denied::Unauthenticated(MISSING_CREDENTIAL),
                "missing bearer token".into(),
            );
        };
        if let Some(key) = self.control_keys.check(authorization) {
            return Decision::for_role(AuthMethod::ApiKey, key.id.to_owned(), key.role);
        }
        // Only something shaped like a JWT is handed to the verifier; anything else is
        // recorded as the unknown API key it most likely is.
        let jwt_token = std::str::from_utf8(token)
            .ok()
            .filter(|t| looks_like_jwt(t))
            .zip(self.jwt.as_ref());
        let Some((token, jwt)) = jwt_token else {
            return Decision::denied(
                AuthMethod::ApiKey,
                None,
                Denied::Unauthenticated(INVALID_CREDENTIAL),
                "unknown API key".into(),
            );
        };
        match jwt.verify(token).await {
            Ok(principal) => Decision::for_role(AuthMethod::Jwt, principal.subject, principal.role),
            Err(err) => Decision::denied(
                AuthMethod::Jwt,
                None,
                Denied::Unauthenticated(INVALID_CREDENTIAL),
                err.to_string(),
            ),
        }
    }
}

/// The outcome of a control-plane check, with what the audit record needs.
struct Decision {
    method: AuthMethod,
    principal: Option<String>,
    role: Option<Role>,
    denial: Option<Denied>,
    details: Option<String>,
}

impl Decision {
    fn for_role(method: AuthMethod, principal: String, role: Role) -> Decision {
        let forbidden = role != Role::Admin;
        Decision {
            method,
            principal: Some(principal),
            role: Some(role),
            denial: forbidden.then_some(Denied::Forbidden),
            details: forbidden.then(|| "admin role required".to_owned()),
        }
    }

    fn denied(
        method: AuthMethod,
        principal: Option<String>,
        denial: Denied,
        details: String,
    ) -> Decision {
        Decision {
            method,
            principal,
            role: None,
            denial: Some(denial),
            details: Some(details),
        }
    }
}

/// The compact JWS shape: three dot-separated segments, header and payload non-empty (an
/// empty signature still counts, so unsigned `alg: none` tokens are audited as JWTs).
fn looks_like_jwt(token: &str) -> bool {
    let mut segments = token.split('.');
    matches!(
        (segments.next(), segments.next(), segments.next(), segments.next()),
        (Some(h), Some(p), Some(_), None) if !h.is_empty() && !p.is_empty()
    )
}

/// The correlation id: the client's `x-request-id` when it is a sane token, else a new one.
fn request_id(headers: &HeaderMap) -> String {
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string())
}

#[cfg(test)]
mod tests {
    use super::looks_like_jwt;

    #[test]
    fn jwt_shape() {
        assert!(looks_like_jwt("a.b.c"));
        assert!(looks_like_jwt("a.b."));
        assert!(!looks_like_jwt(".b.c"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("sk-plain-key"));
        assert!(!looks_like_jwt(".."));
    }
}

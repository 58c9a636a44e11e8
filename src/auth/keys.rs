//! Static bearer keys: the data-plane shared and tenant keys, and the control-plane keys.
//!
//! Every configured key is reduced to its SHA-256 digest at startup and the plaintext is not
//! kept here. A presented token is hashed once and then compared digest to digest: the cost
//! of a check does not depend on how close a guess is, and the data-plane lookup costs the
//! same with one tenant or ten thousand.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use ring::digest::{digest, SHA256};

use super::Role;
use crate::secret::Secret;

/// SHA-256 of a key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    pub fn of(key: &[u8]) -> KeyDigest {
        let mut out = [0u8; 32];
        out.copy_from_slice(digest(&SHA256, key).as_ref());
        KeyDigest(out)
    }

    /// Equality without an early exit, so timing says nothing about where digests differ.
    pub fn ct_eq(&self, other: &KeyDigest) -> bool {
        let diff = self
            .0
            .iter()
            .zip(other.0.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyDigest(..)")
    }
}

/// The token of an `Authorization: Bearer <token>` header value: scheme case-insensitive,
/// surrounding spaces ignored; `None` for another scheme or an empty token.
pub fn bearer_token(authorization: Option<&[u8]>) -> Option<&[u8]> {
    let value = authorization?;
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// `--tenant-api-key tenant_id:key`, validated.
#[derive(Clone)]
pub struct TenantKey {
    pub tenant_id: String,
    pub key: Secret,
}

impl TenantKey {
    /// Splits at the first `:`; both sides must be non-empty and the id free of spaces.
    pub fn parse(raw: &str) -> Result<TenantKey, &'static str> {
        let (id, key) = raw.split_once(':').ok_or("expected tenant_id:key")?;
        if id.is_empty() || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("expected tenant_id:key with a non-empty tenant id without spaces");
        }
        if key.is_empty() {
            return Err("expected tenant_id:key with a non-empty key");
        }
        Ok(TenantKey {
            tenant_id: id.to_owned(),
            key: Secret::new(key),
        })
    }
}

impl fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantKey({}:<redacted>)", self.tenant_id)
    }
}

/// `--control-plane-api-keys id:name:role:key`, validated.
#[derive(Clone)]
pub struct ControlPlaneKey {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub key: Secret,
}

impl ControlPlaneKey {
    /// Splits at the first three `:` (the key itself may contain more).
    pub fn parse(raw: &str) -> Result<ControlPlaneKey, &'static str> {
        const SHAPE: &str = "expected id:name:role:key with role admin or user";
        let mut parts = raw.splitn(4, ':');
        let (Some(id), Some(name), Some(role), Some(key)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SHAPE);
        };
        let role = Role::parse(role).ok_or(SHAPE)?;
        if id.is_empty() || key.is_empty() {
            return Err("expected id:name:role:key with a non-empty id and key");
        }
        Ok(ControlPlaneKey {
            id: id.to_owned(),
            name: name.to_owned(),
            role,
            key: Secret::new(key),
        })
    }
}

impl fmt::Debug for ControlPlaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ControlPlaneKey({}:{}:{}:<redacted>)",
            self.id, self.name, self.role
        )
    }
}

/// What a data-plane credential amounts to.
#[derive(Debug, PartialEq, Eq)]
pub enum DataPlaneAccess<'a> {
    /// Neither `--api-key` nor tenant keys are configured.
    Open,
    /// The shared `--api-key`.
    Shared,
    /// A tenant key; the tenant identity `auth:<tenant_id>`.
    Tenant(&'a Arc<str>),
    /// Missing, malformed or unknown.
    Denied,
}

/// The data-plane keys, by digest.
pub struct DataPlaneKeys {
    shared: Option<KeyDigest>,
    tenants: HashMap<KeyDigest, Arc<str>>,
}

impl DataPlaneKeys {
    pub fn new(shared: Option<&Secret>, tenants: &[TenantKey]) -> DataPlaneKeys {
        DataPlaneKeys {
            shared: shared.map(|s| KeyDigest::of(s.expose().as_bytes())),
            tenants: tenants
                .iter()
                .map(|t| {
                    (
                        KeyDigest::of(t.key.expose().as_bytes()),
                        Arc::from(format!("auth:{}", t.tenant_id)),
                    )
                })
                .collect(),
        }
    }

    /// No data-plane key at all: every data-plane request is let through.
    pub fn is_open(&self) -> bool {
        self.shared.is_none() && self.tenants.is_empty()
    }

    /// Whether `--api-key` is configured.
    pub fn has_shared_key(&self) -> bool {
        self.shared.is_some()
    }

    /// Checks an `Authorization` header value.
    pub fn check(&self, authorization: Option<&[u8]>) -> DataPlaneAccess<'_> {
        if self.is_open() {
            return DataPlaneAccess::Open;
        }
        let Some(token) = bearer_token(authorization) else {
            return DataPlaneAccess::Denied;
        };
        let presented = KeyDigest::of(token);
        if self.shared.is_some_and(|shared| shared.ct_eq(&presented)) {
            return DataPlaneAccess::Shared;
        }
        match self.tenants.get(&presented) {
            Some(tenant) => DataPlaneAccess::Tenant(tenant),
            None => DataPlaneAccess::Denied,
        }
    }

    /// Whether the header carries exactly the shared `--api-key` (control-plane rule 2).
    pub fn is_shared_key(&self, authorization: Option<&[u8]>) -> bool {
        match (self.shared, bearer_token(authorization)) {
            (Some(shared), Some(token)) => shared.ct_eq(&KeyDigest::of(token)),
            _ => false,
        }
    }
}

/// Who a control-plane key belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyIdentity {
    pub id: String,
    pub name: String,
    pub role: Role,
}

/// The control-plane keys, by digest. Few, and checked off the hot path, so every entry is
/// compared (no early exit).
pub struct ControlPlaneKeys {
    keys: Vec<(KeyDigest, KeyIdentity)>,
}

impl ControlPlaneKeys {
    pub fn new(keys: &[ControlPlaneKey]) -> ControlPlaneKeys {
        ControlPlaneKeys {
            keys: keys
                .iter()
                .map(|k| {
                    (
                        KeyDigest::of(k.key.expose().as_bytes()),
                        KeyIdentity {
                            id: k.id.clone(),
                            name: k.name.clone(),
                            role: k.role,
                        },
                    )
                })
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The key's identity when the header carries one of the configured keys.
    pub fn check(&self, authorization: Option<&[u8]>) -> Option<&KeyIdentity> {
        let presented = KeyDigest::of(bearer_token(authorization)?);
        let mut found = None;
        for (digest, identity) in &self.keys {
            if digest.ct_eq(&presented) && found.is_none() {
                found = Some(identity);
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(raw: &str) -> TenantKey {
        TenantKey::parse(raw).unwrap()
    }

    #[test]
    fn bearer_token_forms() {
        assert_eq!(bearer_token(Some(b"Bearer abc")), Some(&b"abc"[..]));
        assert_eq!(bearer_token(Some(b"bearer  abc ")), Some(&b"abc"[..]));
        assert_eq!(bearer_token(Some(b"BEARER abc")), Some(&b"abc"[..]));
        assert_eq!(bearer_token(Some(b"Bearer ")), None);
        assert_eq!(bearer_token(Some(b"Bearer")), None);
        assert_eq!(bearer_token(Some(b"Bearerabc")), None);
        assert_eq!(bearer_token(Some(b"Basic abc")), None);
        assert_eq!(bearer_token(Some(b"")), None);
        assert_eq!(bearer_token(None), None);
    }

    #[test]
    fn tenant_key_parsing() {
        let t = tenant("acme:s3cr:et");
        assert_eq!(t.tenant_id, "acme");
        assert_eq!(t.key.expose(), "s3cr:et");
        assert!(TenantKey::parse("nocolon").is_err());
        assert!(TenantKey::parse(":key").is_err());
        assert!(TenantKey::parse("acme:").is_err());
        assert!(TenantKey::parse("a b:key").is_err());
        assert!(!format!("{t:?}").contains("s3cr"));
    }

    #[test]
    fn control_plane_key_parsing() {
        let k = ControlPlaneKey::parse("k1:Ops team:ADMIN:abc:def").unwrap();
        assert_eq!(k.id, "k1");
        assert_eq!(k.name, "Ops team");
        assert_eq!(k.role, Role::Admin);
        assert_eq!(k.key.expose(), "abc:def");
        assert!(ControlPlaneKey::parse("k1:n:superuser:abc").is_err());
        assert!(ControlPlaneKey::parse("k1:n:admin").is_err());
        assert!(ControlPlaneKey::parse("k1:n:admin:").is_err());
        assert!(ControlPlaneKey::parse(":n:admin:abc").is_err());
        assert!(!format!("{k:?}").contains("abc"));
    }

    #[test]
    fn open_data_plane_lets_everything_through() {
        let keys = DataPlaneKeys::new(None, &[]);
        assert!(keys.is_open());
        assert_eq!(keys.check(None), DataPlaneAccess::Open);
        assert!(!keys.is_shared_key(Some(b"Bearer x")));
    }

    #[test]
    fn shared_and_tenant_keys() {
        let shared = Secret::new("shared-key");
        let keys = DataPlaneKeys::new(Some(&shared), &[tenant("a:ka"), tenant("b:kb")]);
        assert_eq!(
            keys.check(Some(b"Bearer shared-key")),
            DataPlaneAccess::Shared
        );
        match keys.check(Some(b"Bearer kb")) {
            DataPlaneAccess::Tenant(t) => assert_eq!(&**t, "auth:b"),
            other => panic!("{other:?}"),
        }
        assert_eq!(keys.check(Some(b"Bearer nope")), DataPlaneAccess::Denied);
        assert_eq!(keys.check(None), DataPlaneAccess::Denied);
        assert_eq!(keys.check(Some(b"shared-key")), DataPlaneAccess::Denied);
        assert!(keys.is_shared_key(Some(b"Bearer shared-key")));
        assert!(!keys.is_shared_key(Some(b"Bearer ka")));
    }

    #[test]
    fn tenant_keys_alone_close_the_data_plane() {
        let keys = DataPlaneKeys::new(None, &[tenant("a:ka")]);
        assert!(!keys.is_open());
        assert_eq!(keys.check(None), DataPlaneAccess::Denied);
        assert!(!keys.is_shared_key(Some(b"Bearer ka")));
    }

    #[test]
    fn control_plane_keys_resolve_identity() {
        let keys = ControlPlaneKeys::new(&[
            ControlPlaneKey::parse("k1:one:admin:aaa").unwrap(),
            ControlPlaneKey::parse("k2:two:user:bbb").unwrap(),
        ]);
        assert_eq!(keys.check(Some(b"Bearer aaa")).unwrap().role, Role::Admin);
        assert_eq!(keys.check(Some(b"Bearer bbb")).unwrap().id, "k2");
        assert!(keys.check(Some(b"Bearer ccc")).is_none());
        assert!(keys.check(None).is_none());
    }

    #[test]
    fn digest_equality() {
        let a = KeyDigest::of(b"x");
        assert!(a.ct_eq(&KeyDigest::of(b"x")));
        assert!(!a.ct_eq(&KeyDigest::of(b"y")));
    }
}

//! Control-plane JWTs issued by an OIDC provider (spec 1, "JWT / OIDC").
//!
//! Checks, in order: the header names an accepted algorithm and a key id (before any key
//! is looked at, so `none` and HMAC tokens never reach a key); the key id is in the IdP's
//! key set; signature; `exp` (required), `nbf`, `iss` and `aud`, with 30 s of clock skew.
//! The role then comes from the claims (rules 4-6).
//!
//! The key set is fetched on first use and kept for an hour in an [`ArcSwap`], so verifying
//! reads it without locking. A token naming an unknown key triggers a refetch (key
//! rotation); fetches are serialised and at most one starts per [`REFETCH_INTERVAL`],
//! however many requests ask, so a flood of tokens with made-up key ids cannot be turned
//! into a flood of requests to the IdP. A failed refetch leaves the old keys in service.
//!
//! No error message here contains the token or anything read from it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::Uri;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{errors::ErrorKind, Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, MutexGuard};

use super::oidc::{self, OidcError};
use super::Role;

/// The only signature algorithms accepted (rule 1).
pub const ACCEPTED_ALGORITHMS: [Algorithm; 5] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::ES256,
    Algorithm::ES384,
];
/// Allowed clock skew for `exp` and `nbf`.
pub const LEEWAY_SECS: u64 = 30;
/// How long a fetched key set is trusted before it is fetched again.
pub const KEY_SET_TTL: Duration = Duration::from_secs(3600);
/// Minimum time between two key-set fetches, whatever triggers them.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(10);
/// Claims searched for roles when the configured claim is absent (rule 4), in this order.
const FALLBACK_ROLE_CLAIMS: [&str; 4] = ["role", "roles", "groups", "group"];
/// Claims naming the principal, in order of preference.
const SUBJECT_CLAIMS: [&str; 3] = ["sub", "email", "preferred_username"];
/// Principal of a valid token that names nobody.
const UNKNOWN_SUBJECT: &str = "unknown";

/// The `--jwt-*` options.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// `--jwt-issuer`: the expected `iss`, and where discovery starts.
    pub issuer: String,
    /// `--jwt-audience`: a value `aud` must contain.
    pub audience: String,
    /// `--jwt-jwks-uri`; when `None`, discovered from the issuer.
    pub jwks_uri: Option<String>,
    /// `--jwt-role-claim`, default `roles`.
    pub role_claim: String,
    /// `--jwt-role-mapping idp_role=gateway_role`, in flag order.
    pub role_mapping: Vec<(String, Role)>,
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtPrincipal {
    /// `sub`, else `email`, else `preferred_username`, else `unknown`.
    pub subject: String,
    pub role: Role,
}

/// Why JWT authentication could not be set up at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtInitError {
    /// `--jwt-issuer` or `--jwt-audience` is empty.
    EmptySetting(&'static str),
    /// `--jwt-jwks-uri` breaks the URL rules.
    JwksUri(OidcError),
    /// The discovery document could not be fetched or used.
    Discovery(OidcError),
}

impl fmt::Display for JwtInitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwtInitError::EmptySetting(flag) => write!(f, "{flag} must not be empty"),
            JwtInitError::JwksUri(err) => write!(f, "invalid --jwt-jwks-uri: {err}"),
            JwtInitError::Discovery(err) => write!(f, "OIDC discovery failed: {err}"),
        }
    }
}

impl std::error::Error for JwtInitError {}

/// Why a token was refused. Goes to logs and audit `details`, so it describes the problem
/// without quoting the token: not even the key id, which the client chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtError {
    /// Not three base64url parts with a JSON header naming a known algorithm (`none`
    /// included: it is not an algorithm the decoder knows).
    MalformedHeader,
    /// A known algorithm outside [`ACCEPTED_ALGORITHMS`] (HMAC, PSS, EdDSA).
    Algorithm(Algorithm),
    /// The header has no `kid`.
    MissingKid,
    /// The key set could not be fetched and no earlier copy exists.
    KeysUnavailable(Option<OidcError>),
    /// The `kid` is not in the key set, even after a refetch.
    UnknownKid,
    /// The key named by `kid` is not for this algorithm (e.g. an ES384 token, P-256 key).
    KeyMismatch(Algorithm),
    /// The key named by `kid` could not be used.
    UnusableKey,
    /// The signature does not verify.
    BadSignature,
    /// The payload is not a JSON object.
    MalformedClaims,
    /// A required claim (`exp`, `iss`, `aud`) is missing or of the wrong type.
    MissingClaim(&'static str),
    /// `exp` is more than the allowed skew in the past.
    Expired,
    /// `nbf` is more than the allowed skew in the future.
    NotYetValid,
    WrongIssuer,
    WrongAudience,
}

impl fmt::Display for JwtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwtError::MalformedHeader => {
                f.write_str("malformed token header or unsupported algorithm")
            }
            JwtError::Algorithm(alg) => write!(f, "algorithm {alg:?} is not accepted"),
            JwtError::MissingKid => f.write_str("token header has no kid"),
            JwtError::KeysUnavailable(Some(err)) => write!(f, "key set unavailable: {err}"),
            JwtError::KeysUnavailable(None) => f.write_str("key set unavailable"),
            JwtError::UnknownKid => f.write_str("token kid is not in the key set"),
            JwtError::KeyMismatch(alg) => {
                write!(f, "the key named by kid is not for algorithm {alg:?}")
            }
            JwtError::UnusableKey => f.write_str("the key named by kid is unusable"),
            JwtError::BadSignature => f.write_str("invalid signature"),
            JwtError::MalformedClaims => f.write_str("malformed token claims"),
            JwtError::MissingClaim(claim) => write!(f, "missing or invalid {claim} claim"),
            JwtError::Expired => f.write_str("token expired"),
            JwtError::NotYetValid => f.write_str("token not yet valid"),
            JwtError::WrongIssuer => f.write_str("wrong issuer"),
            JwtError::WrongAudience => f.write_str("wrong audience"),
        }
    }
}

impl std::error::Error for JwtError {}

/// What the header says, once it passed [`check_header`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenHeader {
    pub alg: Algorithm,
    pub kid: String,
}

/// The checks made before any key is touched: the header parses, names one of
/// [`ACCEPTED_ALGORITHMS`] and carries a non-empty `kid`. An HMAC token "signed" with the
/// IdP's public key as the secret stops here, whatever key its `kid` names.
pub fn check_header(token: &str) -> Result<TokenHeader, JwtError> {
    let header = jsonwebtoken::decode_header(token).map_err(|_| JwtError::MalformedHeader)?;
    if !ACCEPTED_ALGORITHMS.contains(&header.alg) {
        return Err(JwtError::Algorithm(header.alg));
    }
    match header.kid {
        Some(kid) if !kid.is_empty() => Ok(TokenHeader {
            alg: header.alg,
            kid,
        }),
        _ => Err(JwtError::MissingKid),
    }
}

/// The gateway role the claims grant (rules 4-6).
///
/// Values come from `role_claim`; only when the token lacks it (absent or null) from
/// `role`, `roles`, `groups`, `group`, in that order. Each claim is a string or an array
/// whose non-string items are skipped. Without `mapping`, the first value that reads as
/// `admin` or `user` (any case) decides; with it, the first value that has a mapping
/// (exact match) decides and the others are ignored. Nothing decides: [`Role::User`].
pub fn role_from_claims(
    claims: &Map<String, Value>,
    role_claim: &str,
    mapping: &[(String, Role)],
) -> Role {
    let sources: Vec<&Value> = match claims.get(role_claim) {
        Some(value) if !value.is_null() => vec![value],
        _ => FALLBACK_ROLE_CLAIMS
            .iter()
            .filter_map(|name| claims.get(*name))
            .collect(),
    };
    sources
        .into_iter()
        .flat_map(claim_strings)
        .find_map(|value| map_role(value, mapping))
        .unwrap_or(Role::User)
}

/// The strings of a claim that is a string or an array.
fn claim_strings(value: &Value) -> impl Iterator<Item = &str> {
    let items = match value {
        Value::Array(items) => items.as_slice(),
        single => std::slice::from_ref(single),
    };
    items.iter().filter_map(Value::as_str)
}

fn map_role(value: &str, mapping: &[(String, Role)]) -> Option<Role> {
    if mapping.is_empty() {
        return Role::parse(value);
    }
    mapping
        .iter()
        .find(|(idp_role, _)| idp_role == value)
        .map(|(_, role)| *role)
}

/// The principal recorded in the audit log: `sub`, else `email`, else
/// `preferred_username` (the first non-empty string), else `unknown`.
fn subject(claims: &Map<String, Value>) -> String {
    SUBJECT_CLAIMS
        .iter()
        .find_map(|name| claims.get(*name)?.as_str().filter(|s| !s.is_empty()))
        .unwrap_or(UNKNOWN_SUBJECT)
        .to_owned()
}

/// One verification key of the IdP and the algorithms it may be used with.
struct VerifyKey {
    decoding: DecodingKey,
    algorithms: Vec<Algorithm>,
}

impl VerifyKey {
    /// The key set entry as a verification key with its `kid`, or `None` when it is not
    /// one this verifier can use: no `kid`, `use` other than `sig`, a key type or curve
    /// outside the accepted algorithms, or an `alg` outside them.
    fn from_entry(entry: Value) -> Option<(String, VerifyKey)> {
        let jwk: Jwk = serde_json::from_value(entry).ok()?;
        let kid = jwk.common.key_id.clone().filter(|kid| !kid.is_empty())?;
        if jwk
            .common
            .public_key_use
            .as_ref()
            .is_some_and(|u| *u != PublicKeyUse::Signature)
        {
            return None;
        }
        let family: &[Algorithm] = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => &ACCEPTED_ALGORITHMS[..3],
            AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
                EllipticCurve::P256 => &[Algorithm::ES256],
                EllipticCurve::P384 => &[Algorithm::ES384],
                _ => return None,
            },
            _ => return None,
        };
        // The JWK's own `alg`, when given, narrows the family to that one algorithm.
        let declared = match jwk.common.key_algorithm {
            Some(alg) => Some(alg.to_string().parse::<Algorithm>().ok()?),
            None => None,
        };
        let algorithms: Vec<Algorithm> = family
            .iter()
            .copied()
            .filter(|alg| declared.is_none_or(|d| d == *alg))
            .collect();
        if algorithms.is_empty() {
            return None;
        }
        let decoding = DecodingKey::from_jwk(&jwk).ok()?;
        Some((
            kid,
            VerifyKey {
                decoding,
                algorithms,
            },
        ))
    }
}

/// A snapshot of the IdP's keys.
#[derive(Default)]
struct KeySet {
    keys: HashMap<String, Arc<VerifyKey>>,
    /// When these keys were fetched; `None` before the first successful fetch.
    fetched_at: Option<Instant>,
}

impl KeySet {
    /// The usable keys of a key set's entries; the first of two entries with one `kid` wins.
    fn from_entries(entries: Vec<Value>) -> KeySet {
        let mut keys = HashMap::new();
        for (kid, key) in entries.into_iter().filter_map(VerifyKey::from_entry) {
            keys.entry(kid).or_insert_with(|| Arc::new(key));
        }
        KeySet {
            keys,
            fetched_at: Some(Instant::now()),
        }
    }

    fn is_fresh(&self) -> bool {
        self.fetched_at.is_some_and(|at| at.elapsed() < KEY_SET_TTL)
    }

    fn get(&self, kid: &str) -> Option<Arc<VerifyKey>> {
        self.keys.get(kid).cloned()
    }
}

/// Book-keeping of key-set fetches; its mutex is what serialises them.
#[derive(Default)]
struct FetchState {
    last_attempt: Option<Instant>,
    /// Why the last fetch failed, reported while no keys are available at all.
    last_error: Option<OidcError>,
}

/// Verifies control-plane JWTs. Shared by every data-plane thread behind an `Arc`; each
/// may run its own single-threaded runtime, and nothing here is tied to one.
pub struct JwtVerifier {
    issuer: String,
    audience: String,
    role_claim: String,
    role_mapping: Vec<(String, Role)>,
    jwks_uri: Uri,
    keys: ArcSwap<KeySet>,
    fetch: Mutex<FetchState>,
}

impl JwtVerifier {
    /// Checks the settings and finds the key set: `--jwt-jwks-uri` when given (checked
    /// against the URL rules), else the `jwks_uri` of the issuer's discovery document.
    /// The key set itself is fetched on first use.
    pub async fn init(settings: JwtSettings) -> Result<JwtVerifier, JwtInitError> {
        if settings.issuer.is_empty() {
            return Err(JwtInitError::EmptySetting("--jwt-issuer"));
        }
        if settings.audience.is_empty() {
            return Err(JwtInitError::EmptySetting("--jwt-audience"));
        }
        let jwks_uri = match &settings.jwks_uri {
            Some(uri) => oidc::check_idp_url(uri).map_err(JwtInitError::JwksUri)?,
            None => oidc::discover(&settings.issuer)
                .await
                .map_err(JwtInitError::Discovery)?,
        };
        Ok(JwtVerifier::new(settings, jwks_uri, KeySet::default()))
    }

    fn new(settings: JwtSettings, jwks_uri: Uri, keys: KeySet) -> JwtVerifier {
        JwtVerifier {
            issuer: settings.issuer,
            audience: settings.audience,
            role_claim: settings.role_claim,
            role_mapping: settings.role_mapping,
            jwks_uri,
            keys: ArcSwap::from_pointee(keys),
            fetch: Mutex::new(FetchState::default()),
        }
    }

    /// Verifies `token` and says whom it authenticates, with which role.
    pub async fn verify(&self, token: &str) -> Result<JwtPrincipal, JwtError> {
        let header = check_header(token)?;
        let key = self.key_for(&header.kid).await?;
        if !key.algorithms.contains(&header.alg) {
            return Err(JwtError::KeyMismatch(header.alg));
        }
        let data = jsonwebtoken::decode::<Map<String, Value>>(
            token,
            &key.decoding,
            &self.validation(header.alg),
        )
        .map_err(rejection)?;
        Ok(JwtPrincipal {
            subject: subject(&data.claims),
            role: role_from_claims(&data.claims, &self.role_claim, &self.role_mapping),
        })
    }

    /// `exp`, `iss` and `aud` required; `nbf` checked when present; 30 s of skew. The
    /// issuer matches with or without a trailing slash, which IdPs and operators write
    /// inconsistently (`https://tenant.auth0.com/`).
    fn validation(&self, alg: Algorithm) -> Validation {
        let mut validation = Validation::new(alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let issuer = self.issuer.trim_end_matches('/');
        validation.set_issuer(&[issuer.to_owned(), format!("{issuer}/")]);
        validation.set_audience(&[&self.audience]);
        validation
    }

    /// The key named `kid`, from the cached key set when it is fresh and has it; otherwise
    /// after a refetch (subject to the rate limit). A stale key set keeps serving a key it
    /// has while another request is refetching, rather than queueing behind the fetch.
    async fn key_for(&self, kid: &str) -> Result<Arc<VerifyKey>, JwtError> {
        let seen = self.keys.load_full();
        let state = match seen.get(kid) {
            Some(key) if seen.is_fresh() => return Ok(key),
            Some(key) => match self.fetch.try_lock() {
                Ok(state) => state,
                Err(_) => return Ok(key),
            },
            None => self.fetch.lock().await,
        };
        self.refresh(state, &seen).await?;
        self.keys.load().get(kid).ok_or(JwtError::UnknownKid)
    }

    /// Fetches the key set unless another request did so while this one waited for the
    /// lock, or the last attempt is less than [`REFETCH_INTERVAL`] ago. Errs only when no
    /// key set has ever been fetched: otherwise the old keys stay in service.
    async fn refresh(
        &self,
        mut state: MutexGuard<'_, FetchState>,
        seen: &Arc<KeySet>,
    ) -> Result<(), JwtError> {
        if !Arc::ptr_eq(&self.keys.load(), seen) {
            return Ok(());
        }
        let rate_limited = state
            .last_attempt
            .is_some_and(|at| at.elapsed() < REFETCH_INTERVAL);
        if !rate_limited {
            state.last_attempt = Some(Instant::now());
            match oidc::fetch_jwks(&self.jwks_uri).await {
                Ok(entries) => {
                    let set = KeySet::from_entries(entries);
                    tracing::info!(url = %self.jwks_uri, keys = set.keys.len(), "JWKS fetched");
                    self.keys.store(Arc::new(set));
                    state.last_error = None;
                }
                Err(err) => {
                    tracing::warn!(url = %self.jwks_uri, error = %err, "JWKS fetch failed");
                    state.last_error = Some(err);
                }
            }
        }
        if self.keys.load().fetched_at.is_some() {
            Ok(())
        } else {
            Err(JwtError::KeysUnavailable(state.last_error.clone()))
        }
    }
}

/// The decoder's verdict in this module's terms; its own messages may quote the token.
fn rejection(err: jsonwebtoken::errors::Error) -> JwtError {
    match err.kind() {
        ErrorKind::InvalidSignature | ErrorKind::Crypto(_) => JwtError::BadSignature,
        ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidRsaKey(_) | ErrorKind::InvalidKeyFormat => {
            JwtError::UnusableKey
        }
        ErrorKind::InvalidAlgorithm => JwtError::MalformedHeader,
        ErrorKind::ExpiredSignature => JwtError::Expired,
        ErrorKind::ImmatureSignature => JwtError::NotYetValid,
        ErrorKind::InvalidIssuer => JwtError::WrongIssuer,
        ErrorKind::InvalidAudience => JwtError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) => JwtError::MissingClaim(match claim.as_str() {
            "exp" => "exp",
            "iss" => "iss",
            "aud" => "aud",
            _ => "required",
        }),
        _ => JwtError::MalformedClaims,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use jsonwebtoken::{EncodingKey, Header};
    use ring::rand::SystemRandom;
    use ring::signature::{
        EcdsaKeyPair, EcdsaSigningAlgorithm, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING,
        ECDSA_P384_SHA384_FIXED_SIGNING,
    };
    use serde_json::json;

    use super::*;
    use crate::auth::oidc::tests::{serve, Answer};

    const ISSUER: &str = "https://idp.example.com/realms/gw";
    const AUDIENCE: &str = "tollgate";

    /// A 2048-bit RSA key made for these tests only, and its modulus as base64url.
    const RSA_PRIVATE_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIIEvgIBADANBgkqhkiG9w0BAQEFAASCBKgwggSkAgEAAoIBAQCc9Wg/+7lCeFPf
QcmZ3g8i2gujYUuc8U76JrzCPVbPxjtycL0oQ6KZInK7Gw5bNAOurqwkR3JkyZJU
KCHDng5YbQo1Ko68z0ci62Y5715VGPvHdQvpFkSU88cQoxXTY12yaoTZxXrdiv0G
CC/pSebBssH6GYNGAkOSe+seDNy4Z66bD/kAWCOOanwkUtlNYR0VodYsChNJHaTW
vdP0AnvTtTt5AAE72xlmYXuTgsEUz8xTFL/gUHlnzXAxLSuCBtHuEam20HazSc8i
2e/PBKr6kU/6KHfC1SfEVhsdM3GnEZLbslnDPBmSm+IVfqxTdw4hySOSVtE6xC6d
K+bGs9EbAgMBAAECggEARKRabCj1Eym2XFvUA9OGQRKkplXlkIRDqsiIIlZbAdDK
rLi7MMGreVcEX+lsNNyhg6JmLBOG5qb0tJM8eOVFlsxQ+4FaHR51GMNj2JBja8na
SpdYlx4i7hVSiGcaI3FAR8enw+lGW17uWtX3xgmIvksj4/GGZHaXAJfq8iBj4szd
cyznU0CK/iMN84ISaJxY//vXcWPZQAk/icceufSNQunDoxYpbxhTIiA2l6BmvGJ3
jPuyJTO/uloxj9Mc6gqPKGKQ/ZcsjEtitiM7GBRGf+glohZgLkSeTph33vK50pgX
UISBW71FYcHbeh9cJYVK0uTTJpzLwx6dic6UP5460QKBgQDVolDH30MkedjRvlQN
cauTUkY27T1VjeuS1naWJ6xE0F14XcuIxpjszbL5HCcIfBSYyupgoegEGIC4pm7s
KBySmBf/bBYKvIZjOW9tN/dTnQmydym0qFpKV1Qhg0B4rhbL3p7nxrwoVz6nsMXk
oGC+28ebi4duo1GO0csRdDFbwwKBgQC8FdE9L5/echh1JlY0oidMruMd3P3lqs9S
ax3xu40Sw0qORBIWLU3xzU5QhRrM0hBeVHuW7UC6teJmcHNEAynJsWfY04LoexCR
MHPnjflRykes2tLL4wOXQQ4sBM5jniagE0qcQmDLnC0L+6NnRVFiAJAV7OPRdNCl
PTu/RHbXyQKBgQCVJ//YnPPm+r+8KXPL8ypE8LOfU+J34l+wpNYlHkvzu7sW9/3M
YESTSUcFEHfcP62txDcCAujYOzdcNK/LaHISk+hlaFS3aEs36fj3O5UOJt2HYhWX
UdfAgdp2j4oq9/lom+U8lA/45nkTYaO5bZQ+jXp/Clsjjxm5apaqeAKiOwKBgQCT
pfDevl8aqaiHdnPf15dQPE3wKIZr353mzk3wcNG68/G4IrmsDR6N/iRHU2YJebH9
ywZGIbNZnuS+k/H4Zx9LxOeHr+qpA8qqn0WtdadNzKRdjl5CTdCI0ToF1jQKwaEC
soI0jmscC1rVeFH7BNBxRY3WmGLzD2em/53CdUVx+QKBgDyA8+aRcQcegwu/CgBW
BIU6r13a7hMzivWtAFxbQ+LGdDd7yBPm1eXFevTGLTTKIwo6pzb9ILCb6JHFFYK3
Z5PiC+bAPQlQMMIZPj2fNzY8Kb6dpduypcYoha0jRE3zt60gyo9VGOnpMjtCcJdt
szfqj3GzesXmKSJN+eA66oJ9
-----END PRIVATE KEY-----
";
    const RSA_MODULUS: &str = "nPVoP_u5QnhT30HJmd4PItoLo2FLnPFO-ia8wj1Wz8Y7cnC9KEOimSJyuxsOWzQDrq6sJEdyZMmSVCghw54OWG0KNSqOvM9HIutmOe9eVRj7x3UL6RZElPPHEKMV02NdsmqE2cV63Yr9Bggv6UnmwbLB-hmDRgJDknvrHgzcuGeumw_5AFgjjmp8JFLZTWEdFaHWLAoTSR2k1r3T9AJ707U7eQABO9sZZmF7k4LBFM_MUxS_4FB5Z81wMS0rggbR7hGpttB2s0nPItnvzwSq-pFP-ih3wtUnxFYbHTNxpxGS27JZwzwZkpviFX6sU3cOIckjklbROsQunSvmxrPRGw";

    fn b64url(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            }
        }
        out
    }

    /// A signing key and its public JWK.
    struct TestKey {
        alg: Algorithm,
        kid: String,
        encoding: EncodingKey,
        jwk: Value,
        /// The raw public key, for the "HMAC with the public key" attack.
        public: Vec<u8>,
    }

    fn ec_key(kid: &str, alg: Algorithm) -> TestKey {
        let (signing, crv): (&'static EcdsaSigningAlgorithm, _) = match alg {
            Algorithm::ES256 => (&ECDSA_P256_SHA256_FIXED_SIGNING, "P-256"),
            _ => (&ECDSA_P384_SHA384_FIXED_SIGNING, "P-384"),
        };
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(signing, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(signing, pkcs8.as_ref(), &rng).unwrap();
        // Uncompressed point: 0x04 || x || y.
        let public = pair.public_key().as_ref().to_vec();
        let half = (public.len() - 1) / 2;
        let jwk = json!({
            "kty": "EC", "crv": crv, "kid": kid, "use": "sig",
            "x": b64url(&public[1..1 + half]), "y": b64url(&public[1 + half..]),
        });
        TestKey {
            alg,
            kid: kid.to_owned(),
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk,
            public,
        }
    }

    fn rsa_key(kid: &str, alg: Algorithm) -> TestKey {
        TestKey {
            alg,
            kid: kid.to_owned(),
            encoding: EncodingKey::from_rsa_pem(RSA_PRIVATE_PEM.as_bytes()).unwrap(),
            jwk: json!({"kty": "RSA", "kid": kid, "n": RSA_MODULUS, "e": "AQAB"}),
            public: RSA_MODULUS.as_bytes().to_vec(),
        }
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    fn claims(extra: Value) -> Value {
        let mut claims = json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now() + 300,
            "roles": ["admin"],
        });
        for (name, value) in extra.as_object().unwrap() {
            claims[name] = value.clone();
        }
        claims
    }

    fn sign(key: &TestKey, claims: &Value) -> String {
        let mut header = Header::new(key.alg);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
    }

    /// A token with an arbitrary header and signature, e.g. `alg: none`.
    fn forge(header: &Value, claims: &Value, signature: &[u8]) -> String {
        format!(
            "{}.{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes()),
            b64url(signature)
        )
    }

    fn settings(jwks_uri: Option<String>) -> JwtSettings {
        JwtSettings {
            issuer: ISSUER.into(),
            audience: AUDIENCE.into(),
            jwks_uri,
            role_claim: "roles".into(),
            role_mapping: Vec::new(),
        }
    }

    /// A verifier holding `keys` as a freshly fetched key set, with the refetch rate limit
    /// engaged so that nothing is fetched: no network.
    fn with_keys(settings: JwtSettings, keys: &[&TestKey]) -> JwtVerifier {
        let entries = keys.iter().map(|k| k.jwk.clone()).collect();
        let verifier = JwtVerifier::new(
            settings,
            Uri::from_static("http://127.0.0.1:9/jwks"),
            KeySet::from_entries(entries),
        );
        verifier.fetch.try_lock().unwrap().last_attempt = Some(Instant::now());
        verifier
    }

    fn jwks(keys: &[&TestKey]) -> Value {
        json!({"keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>()})
    }

    /// Pretends the last fetch attempt, and the key set if any, are `age` old.
    async fn age(verifier: &JwtVerifier, age: Duration) {
        let then = Instant::now().checked_sub(age).unwrap();
        verifier.fetch.lock().await.last_attempt = Some(then);
        let current = verifier.keys.load_full();
        verifier.keys.store(Arc::new(KeySet {
            keys: current.keys.clone(),
            fetched_at: current.fetched_at.map(|_| then),
        }));
    }

    #[test]
    fn verifier_is_send_and_sync_and_verify_is_send() {
        fn send_sync<T: Send + Sync>(_: &T) {}
        fn send<T: Send>(_: &T) {}
        let verifier = with_keys(settings(None), &[]);
        send_sync(&verifier);
        send(&verifier.verify("x"));
    }

    #[tokio::test]
    async fn es256_es384_and_rs256_tokens_verify() {
        let es256 = ec_key("k256", Algorithm::ES256);
        let es384 = ec_key("k384", Algorithm::ES384);
        let rs256 = rsa_key("rsa", Algorithm::RS256);
        let rs512 = rsa_key("rsa", Algorithm::RS512);
        let verifier = with_keys(settings(None), &[&es256, &es384, &rs256]);
        for key in [&es256, &es384, &rs256, &rs512] {
            let principal = verifier.verify(&sign(key, &claims(json!({})))).await;
            assert_eq!(
                principal,
                Ok(JwtPrincipal {
                    subject: "alice".into(),
                    role: Role::Admin
                }),
                "{:?}",
                key.alg
            );
        }
    }

    #[tokio::test]
    async fn expiry_honours_thirty_seconds_of_skew() {
        let key = ec_key("k", Algorithm::ES256);
        let verifier = with_keys(settings(None), &[&key]);
        let within = sign(&key, &claims(json!({"exp": now() - 15})));
        assert!(verifier.verify(&within).await.is_ok());
        let beyond = sign(&key, &claims(json!({"exp": now() - 45})));
        assert_eq!(verifier.verify(&beyond).await, Err(JwtError::Expired));
        let early = sign(&key, &claims(json!({"nbf": now() + 15})));
        assert!(verifier.verify(&early).await.is_ok());
        let too_early = sign(&key, &claims(json!({"nbf": now() + 45})));
        assert_eq!(
            verifier.verify(&too_early).await,
            Err(JwtError::NotYetValid)
        );
    }

    #[tokio::test]
    async fn exp_iss_and_aud_are_required() {
        let key = ec_key("k", Algorithm::ES256);
        let verifier = with_keys(settings(None), &[&key]);
        for claim in ["exp", "iss", "aud"] {
            let mut body = claims(json!({}));
            body.as_object_mut().unwrap().remove(claim);
            assert_eq!(
                verifier.verify(&sign(&key, &body)).await,
                Err(JwtError::MissingClaim(claim))
            );
        }
        let stringly = sign(&key, &claims(json!({"exp": "tomorrow"})));
        assert_eq!(
            verifier.verify(&stringly).await,
            Err(JwtError::MissingClaim("exp"))
        );
    }

    #[tokio::test]
    async fn issuer_and_audience_are_checked() {
        let key = ec_key("k", Algorithm::ES256);
        let verifier = with_keys(settings(None), &[&key]);
        let wrong_iss = sign(&key, &claims(json!({"iss": "https://evil.example.com"})));
        assert_eq!(
            verifier.verify(&wrong_iss).await,
            Err(JwtError::WrongIssuer)
        );
        let wrong_aud = sign(&key, &claims(json!({"aud": "someone-else"})));
        assert_eq!(
            verifier.verify(&wrong_aud).await,
            Err(JwtError::WrongAudience)
        );
        let aud_list = sign(&key, &claims(json!({"aud": ["other", AUDIENCE]})));
        assert!(verifier.verify(&aud_list).await.is_ok());
        let slash = sign(&key, &claims(json!({"iss": format!("{ISSUER}/")})));
        assert!(verifier.verify(&slash).await.is_ok());
    }

    #[tokio::test]
    async fn unknown_kid_and_missing_kid_are_refused() {
        let key = ec_key("k", Algorithm::ES256);
        let stranger = ec_key("other", Algorithm::ES256);
        let verifier = with_keys(settings(None), &[&key]);
        assert_eq!(
            verifier.verify(&sign(&stranger, &claims(json!({})))).await,
            Err(JwtError::UnknownKid)
        );
        let mut header = Header::new(Algorithm::ES256);
        header.kid = None;
        let no_kid = jsonwebtoken::encode(&header, &claims(json!({})), &key.encoding).unwrap();
        assert_eq!(verifier.verify(&no_kid).await, Err(JwtError::MissingKid));
    }

    #[tokio::test]
    async fn bad_signatures_are_refused() {
        let key = ec_key("k", Algorithm::ES256);
        let impostor = ec_key("k", Algorithm::ES256);
        let verifier = with_keys(settings(None), &[&key]);
        let forged = sign(&impostor, &claims(json!({})));
        assert_eq!(verifier.verify(&forged).await, Err(JwtError::BadSignature));
        // A genuine signature over other claims.
        let genuine = sign(&key, &claims(json!({"roles": "user"})));
        let other = sign(&key, &claims(json!({"roles": "admin"})));
        let [header, _, signature]: [&str; 3] =
            genuine.split('.').collect::<Vec<_>>().try_into().unwrap();
        let payload = other.split('.').nth(1).unwrap();
        let spliced = format!("{header}.{payload}.{signature}");
        assert_eq!(verifier.verify(&spliced).await, Err(JwtError::BadSignature));
    }

    #[tokio::test]
    async fn alg_none_is_refused() {
        let key = ec_key("k", Algorithm::ES256);
        let verifier = with_keys(settings(None), &[&key]);
        for alg in ["none", "None", "NONE", ""] {
            let token = forge(&json!({"alg": alg, "kid": "k"}), &claims(json!({})), b"");
            assert_eq!(check_header(&token), Err(JwtError::MalformedHeader));
            assert_eq!(
                verifier.verify(&token).await,
                Err(JwtError::MalformedHeader)
            );
        }
    }

    #[tokio::test]
    async fn hmac_signed_with_the_public_key_is_refused() {
        let ec = ec_key("k", Algorithm::ES256);
        let rsa = rsa_key("r", Algorithm::RS256);
        let verifier = with_keys(settings(None), &[&ec, &rsa]);
        for key in [&ec, &rsa] {
            for secret in [key.public.clone(), key.jwk.to_string().into_bytes()] {
                for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
                    let mut header = Header::new(alg);
                    header.kid = Some(key.kid.clone());
                    let token = jsonwebtoken::encode(
                        &header,
                        &claims(json!({})),
                        &EncodingKey::from_secret(&secret),
                    )
                    .unwrap();
                    assert_eq!(verifier.verify(&token).await, Err(JwtError::Algorithm(alg)));
                }
            }
        }
    }

    #[tokio::test]
    async fn keys_are_bound_to_their_algorithms() {
        let p256 = ec_key("k", Algorithm::ES256);
        let pretend = ec_key("k", Algorithm::ES384);
        let verifier = with_keys(settings(None), &[&p256]);
        // ES384 header naming the P-256 key.
        assert_eq!(
            verifier.verify(&sign(&pretend, &claims(json!({})))).await,
            Err(JwtError::KeyMismatch(Algorithm::ES384))
        );
        // An RSA key declared RS256 only does not verify RS512.
        let mut rs256_only = rsa_key("r", Algorithm::RS256);
        rs256_only.jwk["alg"] = json!("RS256");
        let rs512 = rsa_key("r", Algorithm::RS512);
        let verifier = with_keys(settings(None), &[&rs256_only]);
        assert!(verifier
            .verify(&sign(&rs256_only, &claims(json!({}))))
            .await
            .is_ok());
        assert_eq!(
            verifier.verify(&sign(&rs512, &claims(json!({})))).await,
            Err(JwtError::KeyMismatch(Algorithm::RS512))
        );
    }

    #[test]
    fn key_set_keeps_only_usable_signature_keys() {
        let es = ec_key("es", Algorithm::ES256);
        let mut enc = rsa_key("enc", Algorithm::RS256);
        enc.jwk["use"] = json!("enc");
        let mut oaep = rsa_key("oaep", Algorithm::RS256);
        oaep.jwk["alg"] = json!("RSA-OAEP");
        let mut pss = rsa_key("pss", Algorithm::RS256);
        pss.jwk["alg"] = json!("PS256");
        let mut no_kid = rsa_key("", Algorithm::RS256);
        no_kid.jwk.as_object_mut().unwrap().remove("kid");
        let set = KeySet::from_entries(vec![
            es.jwk.clone(),
            enc.jwk,
            oaep.jwk,
            pss.jwk,
            no_kid.jwk,
            json!({"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}),
            json!({"kty": "OKP", "crv": "Ed25519", "kid": "ed", "x": "AAAA"}),
            json!({"kty": "EC", "crv": "P-521", "kid": "p521", "x": "AA", "y": "AA"}),
            json!({"kty": "RSA", "kid": "strange-alg", "alg": "XX999", "n": "AQ", "e": "AQ"}),
            json!("not a key"),
        ]);
        assert_eq!(set.keys.keys().collect::<Vec<_>>(), vec!["es"]);
    }

    #[test]
    fn errors_never_quote_the_token() {
        let kid = "kid-chosen-by-the-client";
        let token = forge(&json!({"alg": "HS256", "kid": kid}), &json!({}), b"sig");
        let errors = [
            check_header(&token).unwrap_err(),
            check_header("garbage-token").unwrap_err(),
            JwtError::UnknownKid,
            JwtError::KeyMismatch(Algorithm::ES256),
        ];
        for err in errors {
            let text = err.to_string();
            assert!(!text.contains(kid) && !text.contains("garbage"), "{text}");
        }
    }

    #[test]
    fn check_header_reads_alg_and_kid() {
        let token = forge(&json!({"alg": "RS384", "kid": "abc"}), &json!({}), b"");
        assert_eq!(
            check_header(&token),
            Ok(TokenHeader {
                alg: Algorithm::RS384,
                kid: "abc".into()
            })
        );
        let empty_kid = forge(&json!({"alg": "RS384", "kid": ""}), &json!({}), b"");
        assert_eq!(check_header(&empty_kid), Err(JwtError::MissingKid));
        for alg in ["PS256", "EdDSA"] {
            let token = forge(&json!({"alg": alg, "kid": "abc"}), &json!({}), b"");
            assert!(matches!(check_header(&token), Err(JwtError::Algorithm(_))));
        }
        for junk in ["", ".", "..", "a.b.c", "not a token"] {
            assert_eq!(
                check_header(junk),
                Err(JwtError::MalformedHeader),
                "{junk:?}"
            );
        }
    }

    #[tokio::test]
    async fn claims_that_are_not_an_object_are_refused() {
        let key = ec_key("k", Algorithm::ES256);
        let verifier = with_keys(settings(None), &[&key]);
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some("k".into());
        let token = jsonwebtoken::encode(&header, &json!([1, 2]), &key.encoding).unwrap();
        assert_eq!(
            verifier.verify(&token).await,
            Err(JwtError::MalformedClaims)
        );
    }

    #[tokio::test]
    async fn principal_and_role_come_from_the_claims() {
        let key = ec_key("k", Algorithm::ES256);
        let mut mapped = settings(None);
        mapped.role_claim = "groups".into();
        mapped.role_mapping = vec![("gw-admins".into(), Role::Admin)];
        let verifier = with_keys(mapped, &[&key]);
        let token = sign(
            &key,
            &claims(json!({"sub": null, "email": "bob@example.com", "groups": ["gw-admins"]})),
        );
        assert_eq!(
            verifier.verify(&token).await,
            Ok(JwtPrincipal {
                subject: "bob@example.com".into(),
                role: Role::Admin
            })
        );
        // The configured claim holds no mapped value: user, whatever `roles` says.
        let plain = sign(&key, &claims(json!({"groups": ["staff"]})));
        assert_eq!(
            verifier.verify(&plain).await.map(|p| p.role),
            Ok(Role::User)
        );
    }

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    fn role(claims: Value, role_claim: &str, mapping: &[(&str, Role)]) -> Role {
        let mapping: Vec<(String, Role)> =
            mapping.iter().map(|(k, r)| ((*k).to_owned(), *r)).collect();
        role_from_claims(&map(claims), role_claim, &mapping)
    }

    #[test]
    fn role_from_the_configured_claim_string_or_array() {
        assert_eq!(role(json!({"roles": "admin"}), "roles", &[]), Role::Admin);
        assert_eq!(role(json!({"roles": "ADMIN"}), "roles", &[]), Role::Admin);
        assert_eq!(
            role(json!({"roles": ["viewer", "Admin"]}), "roles", &[]),
            Role::Admin
        );
        assert_eq!(role(json!({"perm": ["admin"]}), "perm", &[]), Role::Admin);
        // The first recognised value decides.
        assert_eq!(
            role(json!({"roles": ["user", "admin"]}), "roles", &[]),
            Role::User
        );
        assert_eq!(
            role(json!({"roles": ["admin", "user"]}), "roles", &[]),
            Role::Admin
        );
    }

    #[test]
    fn non_string_values_are_ignored() {
        let noisy = json!({"roles": [1, null, true, {"admin": 1}, ["admin"], "admin"]});
        assert_eq!(role(noisy, "roles", &[]), Role::Admin);
        assert_eq!(role(json!({"roles": 7}), "roles", &[]), Role::User);
        assert_eq!(
            role(json!({"roles": {"r": "admin"}}), "roles", &[]),
            Role::User
        );
    }

    #[test]
    fn fallback_claims_only_when_the_configured_claim_is_absent() {
        // Present (even without a usable value): no fallback.
        assert_eq!(
            role(json!({"perm": [], "role": "admin"}), "perm", &[]),
            Role::User
        );
        assert_eq!(
            role(json!({"perm": 5, "role": "admin"}), "perm", &[]),
            Role::User
        );
        assert_eq!(
            role(json!({"perm": "x", "groups": ["admin"]}), "perm", &[]),
            Role::User
        );
        // Absent or null: role, roles, groups, group, in that order.
        assert_eq!(role(json!({"role": "admin"}), "perm", &[]), Role::Admin);
        assert_eq!(
            role(json!({"perm": null, "group": "admin"}), "perm", &[]),
            Role::Admin
        );
        let all = json!({"group": "admin", "groups": ["admin"], "roles": "user", "role": "x"});
        assert_eq!(role(all, "perm", &[]), Role::User);
        let later = json!({"group": "user", "groups": ["admin"], "role": ["x"]});
        assert_eq!(role(later, "perm", &[]), Role::Admin);
        assert_eq!(role(json!({"group": ["ADMIN"]}), "perm", &[]), Role::Admin);
    }

    #[test]
    fn with_mapping_the_first_mapped_value_decides() {
        let mapping = [("platform-admins", Role::Admin), ("devs", Role::User)];
        let r = |claims| role(claims, "groups", &mapping);
        assert_eq!(
            r(json!({"groups": ["admin", "platform-admins"]})),
            Role::Admin
        );
        assert_eq!(
            r(json!({"groups": ["devs", "platform-admins"]})),
            Role::User
        );
        assert_eq!(
            r(json!({"groups": ["x", "platform-admins", "devs"]})),
            Role::Admin
        );
        // Unmapped values, the plain names included, are ignored; matching is exact.
        assert_eq!(r(json!({"groups": ["admin"]})), Role::User);
        assert_eq!(r(json!({"groups": ["Platform-Admins"]})), Role::User);
        // Mapping applies to fallback claims too.
        let fallback = json!({"role": "platform-admins"});
        assert_eq!(role(fallback, "perm", &mapping), Role::Admin);
        // The first row for a value wins.
        let twice = [("ops", Role::User), ("ops", Role::Admin)];
        assert_eq!(role(json!({"roles": "ops"}), "roles", &twice), Role::User);
    }

    #[test]
    fn no_role_means_user() {
        assert_eq!(role(json!({}), "roles", &[]), Role::User);
        assert_eq!(role(json!({"roles": ["viewer"]}), "roles", &[]), Role::User);
        assert_eq!(role(json!({"roles": "admins"}), "roles", &[]), Role::User);
        assert_eq!(role(json!({}), "roles", &[("a", Role::Admin)]), Role::User);
    }

    #[test]
    fn subject_prefers_sub_then_email_then_preferred_username() {
        let all = json!({"sub": "s", "email": "e", "preferred_username": "p"});
        assert_eq!(subject(&map(all)), "s");
        assert_eq!(subject(&map(json!({"sub": "", "email": "e"}))), "e");
        assert_eq!(
            subject(&map(json!({"sub": 42, "preferred_username": "p"}))),
            "p"
        );
        assert_eq!(subject(&map(json!({}))), "unknown");
    }

    #[tokio::test]
    async fn init_refuses_empty_settings_and_bad_jwks_uri() {
        let mut s = settings(Some("http://10.0.0.1/jwks".into()));
        assert!(matches!(
            JwtVerifier::init(s.clone()).await,
            Err(JwtInitError::JwksUri(OidcError::InternalAddress(_)))
        ));
        s.audience.clear();
        assert!(matches!(
            JwtVerifier::init(s.clone()).await,
            Err(JwtInitError::EmptySetting("--jwt-audience"))
        ));
        s.issuer.clear();
        assert!(matches!(
            JwtVerifier::init(s).await,
            Err(JwtInitError::EmptySetting("--jwt-issuer"))
        ));
        let internal_issuer = JwtSettings {
            issuer: "https://idp.corp.internal".into(),
            ..settings(None)
        };
        assert!(matches!(
            JwtVerifier::init(internal_issuer).await,
            Err(JwtInitError::Discovery(OidcError::InternalHost(_)))
        ));
    }

    /// A test IdP answering every path with the shared status and key set.
    async fn idp(
        keys: Arc<std::sync::Mutex<(u16, Value)>>,
    ) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        serve(move |_| {
            let (status, body) = keys.lock().unwrap().clone();
            Answer {
                status,
                ..Answer::json(&body)
            }
        })
        .await
    }

    #[tokio::test]
    async fn discovery_at_init_then_keys_fetched_once_on_first_use() {
        let key = ec_key("k", Algorithm::ES256);
        let key_set = jwks(&[&key]);
        let base_url = Arc::new(std::sync::OnceLock::<String>::new());
        let (base, hits) = serve({
            let base_url = base_url.clone();
            move |path| {
                let base = base_url.get().cloned().unwrap_or_default();
                if path == "/realm/.well-known/openid-configuration" {
                    Answer::json(&json!({
                        "issuer": format!("{base}/realm"),
                        "jwks_uri": format!("{base}/certs"),
                    }))
                } else {
                    assert_eq!(path, "/certs");
                    Answer::json(&key_set)
                }
            }
        })
        .await;
        base_url.set(base.clone()).unwrap();
        let issuer = format!("{base}/realm");
        let s = JwtSettings {
            issuer: issuer.clone(),
            ..settings(None)
        };
        let verifier = JwtVerifier::init(s).await.unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 1, "discovery only");
        let token = sign(&key, &claims(json!({"iss": issuer})));
        for _ in 0..3 {
            assert!(verifier.verify(&token).await.is_ok());
        }
        assert_eq!(
            hits.load(Ordering::SeqCst),
            2,
            "one key set fetch, then cached"
        );
    }

    #[tokio::test]
    async fn init_fails_when_discovery_fails() {
        let keys = Arc::new(std::sync::Mutex::new((404, json!({}))));
        let (base, _) = idp(keys).await;
        let s = JwtSettings {
            issuer: base,
            ..settings(None)
        };
        assert!(matches!(
            JwtVerifier::init(s).await,
            Err(JwtInitError::Discovery(OidcError::Status {
                status: 404,
                ..
            }))
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_first_verifies_share_one_fetch() {
        let key = ec_key("k", Algorithm::ES256);
        let shared = Arc::new(std::sync::Mutex::new((200, jwks(&[&key]))));
        let (base, hits) = idp(shared).await;
        let verifier = Arc::new(
            JwtVerifier::init(settings(Some(format!("{base}/certs"))))
                .await
                .unwrap(),
        );
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "explicit jwks_uri: no discovery"
        );
        let token = Arc::new(sign(&key, &claims(json!({}))));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (verifier, token) = (verifier.clone(), token.clone());
            tasks.spawn(async move { verifier.verify(&token).await });
        }
        while let Some(result) = tasks.join_next().await {
            assert!(result.unwrap().is_ok());
        }
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        // Unknown kids right after a fetch: refused without asking the IdP again.
        let stranger = ec_key("new", Algorithm::ES256);
        for _ in 0..5 {
            let token = sign(&stranger, &claims(json!({})));
            assert_eq!(verifier.verify(&token).await, Err(JwtError::UnknownKid));
        }
        assert_eq!(hits.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn unknown_kid_refetches_after_the_interval() {
        let old = ec_key("old", Algorithm::ES256);
        let new = ec_key("new", Algorithm::ES256);
        let shared = Arc::new(std::sync::Mutex::new((200, jwks(&[&old]))));
        let (base, hits) = idp(shared.clone()).await;
        let verifier = JwtVerifier::init(settings(Some(format!("{base}/certs"))))
            .await
            .unwrap();
        assert!(verifier
            .verify(&sign(&old, &claims(json!({}))))
            .await
            .is_ok());
        // Rotation: the IdP now publishes the new key only.
        shared.lock().unwrap().1 = jwks(&[&new]);
        let rotated = sign(&new, &claims(json!({})));
        assert_eq!(verifier.verify(&rotated).await, Err(JwtError::UnknownKid));
        assert_eq!(hits.load(Ordering::SeqCst), 1, "rate limited");
        age(&verifier, REFETCH_INTERVAL + Duration::from_secs(1)).await;
        assert!(verifier.verify(&rotated).await.is_ok());
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        // The old key left the set with the refetch.
        assert_eq!(
            verifier.verify(&sign(&old, &claims(json!({})))).await,
            Err(JwtError::UnknownKid)
        );
    }

    #[tokio::test]
    async fn stale_keys_are_refetched_and_kept_when_the_refetch_fails() {
        let key = ec_key("k", Algorithm::ES256);
        let shared = Arc::new(std::sync::Mutex::new((200, jwks(&[&key]))));
        let (base, hits) = idp(shared.clone()).await;
        let verifier = JwtVerifier::init(settings(Some(format!("{base}/certs"))))
            .await
            .unwrap();
        let token = sign(&key, &claims(json!({})));
        assert!(verifier.verify(&token).await.is_ok());
        // An hour later the IdP is down: the refetch is attempted, the old keys still serve.
        shared.lock().unwrap().0 = 503;
        age(&verifier, KEY_SET_TTL + Duration::from_secs(1)).await;
        assert!(verifier.verify(&token).await.is_ok());
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        // Within the interval, no new attempt.
        assert!(verifier.verify(&token).await.is_ok());
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        // Back up: the next attempt refreshes the set.
        shared.lock().unwrap().0 = 200;
        age(&verifier, KEY_SET_TTL + Duration::from_secs(1)).await;
        assert!(verifier.verify(&token).await.is_ok());
        assert_eq!(hits.load(Ordering::SeqCst), 3);
        assert!(verifier.keys.load().is_fresh());
    }

    #[tokio::test]
    async fn first_fetch_failure_is_reported_and_rate_limited() {
        let key = ec_key("k", Algorithm::ES256);
        let shared = Arc::new(std::sync::Mutex::new((500, json!({}))));
        let (base, hits) = idp(shared.clone()).await;
        let verifier = JwtVerifier::init(settings(Some(format!("{base}/certs"))))
            .await
            .unwrap();
        let token = sign(&key, &claims(json!({})));
        for _ in 0..3 {
            let err = verifier.verify(&token).await.unwrap_err();
            assert!(
                matches!(
                    &err,
                    JwtError::KeysUnavailable(Some(OidcError::Status { status: 500, .. }))
                ),
                "{err}"
            );
        }
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        // A body that is JSON but not a key set.
        shared.lock().unwrap().0 = 200;
        age(&verifier, REFETCH_INTERVAL + Duration::from_secs(1)).await;
        assert!(matches!(
            verifier.verify(&token).await,
            Err(JwtError::KeysUnavailable(Some(OidcError::NotKeySet(_))))
        ));
    }
}

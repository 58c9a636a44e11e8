//! A local OpenID Connect issuer for the authentication tests, plus the keys and tokens it
//! vouches for.
//!
//! [`Issuer`] is a tiny HTTP/1.1 server on 127.0.0.1 (port 0) on its own thread. It serves
//! the discovery document at `/.well-known/openid-configuration` and the key set at
//! `/jwks`, and counts how often each is fetched, so a test can see the gateway's key-set
//! caching. Keys can be published or replaced while the gateway runs (key rotation).
//!
//! [`SigningKey`] makes ES256/ES384 keys with `ring` and RSA keys with the `openssl` CLI
//! (absent CLI: [`SigningKey::rsa`] returns `None` and the caller skips the RSA cases), and
//! signs tokens with `jsonwebtoken`. Forged tokens (`alg: none`, HS256 keyed with public key
//! material, tampered signatures) are built by the free functions at the bottom.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, EcdsaSigningAlgorithm, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING,
    ECDSA_P384_SHA384_FIXED_SIGNING,
};
use serde_json::{json, Value};

/// Base64url without padding (RFC 7515 section 2), as JOSE wants it.
pub fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..chars {
            let index = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[index as usize]));
        }
    }
    out
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// What the issuer serves, changeable while it runs.
struct State {
    keys: Mutex<Vec<Value>>,
    /// `jwks_uri` announced by discovery; `None`: this issuer's `/jwks`.
    discovery_jwks_uri: Mutex<Option<String>>,
    /// Discovery answers 500 while set.
    discovery_broken: AtomicBool,
    /// Paths answered with `302 Found` to the given location instead.
    redirects: Mutex<Vec<(String, String)>>,
    jwks_fetches: AtomicUsize,
    discovery_fetches: AtomicUsize,
    stop: AtomicBool,
}

/// A running local OIDC issuer. Stops accepting connections when dropped.
pub struct Issuer {
    url: String,
    addr: std::net::SocketAddr,
    state: Arc<State>,
}

fn listener_addr(ip: &str, port: u16) -> std::net::SocketAddr {
    format!("{ip}:{port}")
        .parse()
        .expect("issuer socket address")
}

impl Issuer {
    /// Starts an issuer on 127.0.0.1 serving `keys` (JWK objects).
    pub fn start(keys: Vec<Value>) -> Issuer {
        Self::start_on("127.0.0.1", keys)
    }

    /// Starts an issuer on `ip` (e.g. another loopback address) serving `keys`.
    pub fn start_on(ip: &str, keys: Vec<Value>) -> Issuer {
        Self::start_named(ip, ip, keys)
    }

    /// Starts an issuer listening on `ip` whose URLs name `host` (e.g. `localhost`).
    pub fn start_named(host: &str, ip: &str, keys: Vec<Value>) -> Issuer {
        let listener = TcpListener::bind((ip, 0)).expect("bind the OIDC issuer");
        let port = listener.local_addr().expect("issuer address").port();
        let url = format!("http://{host}:{port}");
        let state = Arc::new(State {
            keys: Mutex::new(keys),
            discovery_jwks_uri: Mutex::new(None),
            discovery_broken: AtomicBool::new(false),
            redirects: Mutex::new(Vec::new()),
            jwks_fetches: AtomicUsize::new(0),
            discovery_fetches: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let served = state.clone();
        let issuer_url = url.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if served.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let state = served.clone();
                let issuer_url = issuer_url.clone();
                std::thread::spawn(move || serve(conn, &state, &issuer_url));
            }
        });
        Issuer {
            url,
            addr: listener_addr(ip, port),
            state,
        }
    }

    /// The issuer identifier (`iss`), also the base of its URLs: `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The key set URL this issuer serves.
    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.url)
    }

    /// How many times `/jwks` was requested.
    pub fn jwks_fetches(&self) -> usize {
        self.state.jwks_fetches.load(Ordering::SeqCst)
    }

    /// How many times the discovery document was requested.
    pub fn discovery_fetches(&self) -> usize {
        self.state.discovery_fetches.load(Ordering::SeqCst)
    }

    /// Adds a key to the served key set.
    pub fn publish(&self, jwk: Value) {
        self.state.keys.lock().expect("keys").push(jwk);
    }

    /// Replaces the served key set.
    pub fn set_keys(&self, keys: Vec<Value>) {
        *self.state.keys.lock().expect("keys") = keys;
    }

    /// Makes discovery announce `uri` as `jwks_uri` instead of this issuer's `/jwks`.
    pub fn announce_jwks_uri(&self, uri: &str) {
        *self.state.discovery_jwks_uri.lock().expect("uri") = Some(uri.to_string());
    }

    /// Answers requests for `path` (e.g. `/jwks`) with `302 Found` to `location`. Such
    /// requests are counted as fetches all the same.
    pub fn redirect(&self, path: &str, location: &str) {
        self.state
            .redirects
            .lock()
            .expect("redirects")
            .push((path.to_string(), location.to_string()));
    }

    /// While `broken`, discovery answers 500.
    pub fn break_discovery(&self, broken: bool) {
        self.state.discovery_broken.store(broken, Ordering::SeqCst);
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// Answers one request on `conn` and closes it.
fn serve(mut conn: TcpStream, state: &State, issuer_url: &str) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 64 * 1024 {
            return;
        }
    }
    let head = String::from_utf8_lossy(&head);
    let mut parts = head.lines().next().unwrap_or_default().split_whitespace();
    let method = parts.next().unwrap_or_default();
    let target = parts.next().unwrap_or_default();
    let path = target.split('?').next().unwrap_or_default();
    let redirect = state
        .redirects
        .lock()
        .expect("redirects")
        .iter()
        .find(|(from, _)| from == path)
        .map(|(_, to)| to.clone());
    if let Some(location) = redirect {
        match path {
            "/jwks" => state.jwks_fetches.fetch_add(1, Ordering::SeqCst),
            _ => state.discovery_fetches.fetch_add(1, Ordering::SeqCst),
        };
        let response = format!(
            "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n"
        );
        let _ = conn.write_all(response.as_bytes());
        let _ = conn.shutdown(std::net::Shutdown::Both);
        return;
    }
    let (status, body) = match (method, path) {
        ("GET", "/.well-known/openid-configuration") => {
            state.discovery_fetches.fetch_add(1, Ordering::SeqCst);
            if state.discovery_broken.load(Ordering::SeqCst) {
                (
                    "500 Internal Server Error",
                    json!({"error": "broken on purpose"}),
                )
            } else {
                let jwks_uri = state
                    .discovery_jwks_uri
                    .lock()
                    .expect("uri")
                    .clone()
                    .unwrap_or_else(|| format!("{issuer_url}/jwks"));
                (
                    "200 OK",
                    json!({
                        "issuer": issuer_url,
                        "jwks_uri": jwks_uri,
                        "id_token_signing_alg_values_supported":
                            ["RS256", "RS384", "RS512", "ES256", "ES384"],
                        "response_types_supported": ["code"],
                        "subject_types_supported": ["public"],
                    }),
                )
            }
        }
        ("GET", "/jwks") => {
            state.jwks_fetches.fetch_add(1, Ordering::SeqCst);
            let keys = state.keys.lock().expect("keys").clone();
            ("200 OK", json!({ "keys": keys }))
        }
        _ => ("404 Not Found", json!({"error": "not found"})),
    };
    let body = body.to_string();
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = conn.write_all(response.as_bytes());
    let _ = conn.flush();
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

/// A private key with its public JWK.
pub struct SigningKey {
    pub kid: String,
    pub alg: Algorithm,
    encoding: EncodingKey,
    /// The public key as a JWK object (with `kid`, `alg`, `use`).
    pub jwk: Value,
    /// The public key as PEM (RSA keys only), for algorithm-confusion forgeries.
    pub public_pem: Option<String>,
}

impl SigningKey {
    /// A fresh P-256 key.
    pub fn es256(kid: &str) -> SigningKey {
        Self::ec(
            kid,
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            Algorithm::ES256,
            "P-256",
        )
    }

    /// A fresh P-384 key.
    pub fn es384(kid: &str) -> SigningKey {
        Self::ec(
            kid,
            &ECDSA_P384_SHA384_FIXED_SIGNING,
            Algorithm::ES384,
            "P-384",
        )
    }

    fn ec(
        kid: &str,
        ring_alg: &'static EcdsaSigningAlgorithm,
        alg: Algorithm,
        crv: &str,
    ) -> SigningKey {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(ring_alg, &rng).expect("generate an EC key");
        let pair = EcdsaKeyPair::from_pkcs8(ring_alg, pkcs8.as_ref(), &rng).expect("EC key");
        // Uncompressed point: 0x04 || x || y.
        let point = pair.public_key().as_ref();
        let half = (point.len() - 1) / 2;
        let (x, y) = point[1..].split_at(half);
        let jwk = json!({
            "kty": "EC",
            "crv": crv,
            "x": b64url(x),
            "y": b64url(y),
            "kid": kid,
            "use": "sig",
            "alg": alg_name(alg),
        });
        SigningKey {
            kid: kid.to_string(),
            alg,
            encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk,
            public_pem: None,
        }
    }

    /// An RSA key signing with `alg` (RS256/384/512 or PS256). All RSA keys of one test
    /// process share one 2048-bit key pair made by the `openssl` CLI; `None` (after a note
    /// on stderr) when the CLI is missing or fails.
    pub fn rsa(kid: &str, alg: Algorithm) -> Option<SigningKey> {
        let material = rsa_material()?;
        let jwk = json!({
            "kty": "RSA",
            "n": material.n,
            "e": "AQAB",
            "kid": kid,
            "use": "sig",
            "alg": alg_name(alg),
        });
        Some(SigningKey {
            kid: kid.to_string(),
            alg,
            encoding: EncodingKey::from_rsa_pem(material.private_pem.as_bytes())
                .expect("openssl's RSA key loads"),
            jwk,
            public_pem: Some(material.public_pem.clone()),
        })
    }

    /// Signs `claims` with this key, `kid` in the header.
    pub fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        self.sign_with_header(&header, claims)
    }

    /// Signs `claims` under `header` as given (which may name another `kid` or none).
    pub fn sign_with_header(&self, header: &Header, claims: &Value) -> String {
        jsonwebtoken::encode(header, claims, &self.encoding).expect("sign a token")
    }

    /// Signs `claims` with this key's algorithm but names `kid` in the header.
    pub fn sign_as_kid(&self, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = kid.map(str::to_string);
        self.sign_with_header(&header, claims)
    }
}

pub fn alg_name(alg: Algorithm) -> &'static str {
    match alg {
        Algorithm::HS256 => "HS256",
        Algorithm::HS384 => "HS384",
        Algorithm::HS512 => "HS512",
        Algorithm::ES256 => "ES256",
        Algorithm::ES384 => "ES384",
        Algorithm::RS256 => "RS256",
        Algorithm::RS384 => "RS384",
        Algorithm::RS512 => "RS512",
        Algorithm::PS256 => "PS256",
        Algorithm::PS384 => "PS384",
        Algorithm::PS512 => "PS512",
        Algorithm::EdDSA => "EdDSA",
    }
}

struct RsaMaterial {
    private_pem: String,
    public_pem: String,
    /// Modulus, base64url.
    n: String,
}

/// One RSA key pair per test process, made by the `openssl` CLI.
fn rsa_material() -> Option<&'static RsaMaterial> {
    static MATERIAL: OnceLock<Option<RsaMaterial>> = OnceLock::new();
    MATERIAL
        .get_or_init(|| match make_rsa_material() {
            Ok(material) => Some(material),
            Err(why) => {
                eprintln!("NOTE: skipping RSA cases: {why}");
                None
            }
        })
        .as_ref()
}

fn make_rsa_material() -> Result<RsaMaterial, String> {
    let dir = std::env::temp_dir().join(format!(
        "tollgate-auth-rsa-{}-{}",
        std::process::id(),
        now()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("temp dir: {e}"))?;
    let key = dir.join("key.pem");
    let key_arg = key.to_string_lossy().into_owned();
    let result = (|| {
        let out = |args: &[&str]| -> Result<String, String> {
            let output = Command::new("openssl")
                .args(args)
                .output()
                .map_err(|e| format!("openssl CLI not runnable: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "openssl {args:?} failed: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                ));
            }
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        };
        out(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &key_arg,
        ])?;
        let modulus = out(&["rsa", "-in", &key_arg, "-noout", "-modulus"])?;
        let hex = modulus
            .trim()
            .strip_prefix("Modulus=")
            .ok_or_else(|| format!("unexpected modulus output {modulus:?}"))?;
        let n = hex_bytes(hex)?;
        let public_pem = out(&["rsa", "-in", &key_arg, "-pubout"])?;
        let private_pem =
            std::fs::read_to_string(&key).map_err(|e| format!("read the RSA key: {e}"))?;
        Ok(RsaMaterial {
            private_pem,
            public_pem,
            n: b64url(&n),
        })
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn hex_bytes(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| format!("hex: {e}")))
        .collect()
}

/// Standard claims: `iss`, `aud`, `sub`, `iat` now, `exp` in ten minutes, plus `extra`'s
/// fields (which may override any of them).
pub fn claims(issuer: &str, audience: &str, sub: &str, extra: Value) -> Value {
    let mut claims = json!({
        "iss": issuer,
        "aud": audience,
        "sub": sub,
        "iat": now(),
        "exp": now() + 600,
    });
    if let (Some(map), Value::Object(extra)) = (claims.as_object_mut(), extra) {
        map.extend(extra);
    }
    claims
}

/// An unsigned token: header `{"alg": "none", "kid": kid}` and an empty signature.
pub fn alg_none(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "JWT", "kid": kid});
    format!(
        "{}.{}.",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    )
}

/// An HS256 token whose HMAC secret is `secret` (e.g. a published public key), naming
/// `kid`: the classic algorithm-confusion forgery.
pub fn hs256(kid: &str, secret: &[u8], claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.to_string());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret)).expect("HS256")
}

/// `token` with one character in the middle of its signature changed.
pub fn tamper(token: &str) -> String {
    let sig_start = token.rfind('.').expect("a JWS") + 1;
    let at = sig_start + (token.len() - sig_start) / 2;
    let mut bytes = token.as_bytes().to_vec();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).expect("ascii")
}

#[cfg(test)]
mod tests {
    use super::b64url;

    #[test]
    fn base64url_matches_rfc_4648_vectors() {
        let cases: &[(&[u8], &str)] = &[
            (b"", ""),
            (b"f", "Zg"),
            (b"fo", "Zm8"),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg"),
            (b"fooba", "Zm9vYmE"),
            (b"foobar", "Zm9vYmFy"),
            (&[0xfb, 0xff, 0xfe], "-__-"),
        ];
        for (input, want) in cases {
            assert_eq!(b64url(input), *want, "{input:?}");
        }
    }
}

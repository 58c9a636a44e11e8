//! Cost of the authentication check a request pays: the data-plane key check (shared key,
//! one of 100 tenant keys, a refused key), a control-plane API key, and a control-plane JWT
//! whose key set is already cached (served once by a throwaway local key-set server).

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{SystemTime, UNIX_EPOCH};

use criterion::{criterion_group, criterion_main, Criterion};
use http::{HeaderMap, HeaderValue, Method};
use tollgate::auth::gate::Authenticator;
use tollgate::config::{parse_args, Command, Config};

fn config(args: &[String]) -> Config {
    match parse_args(args.iter().map(Into::into)) {
        Ok(Command::Run(config)) => *config,
        other => panic!("bench flags refused: {other:?}"),
    }
}

fn authenticator(config: &Config) -> Authenticator {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(Authenticator::new(&config.auth))
}

fn bearer(token: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).expect("header"),
    );
    headers
}

fn bench_data_plane(c: &mut Criterion) {
    let mut args = vec![
        "--api-key".to_owned(),
        "sk-shared-0123456789abcdef0123456789abcdef".to_owned(),
    ];
    for i in 0..100 {
        args.push("--tenant-api-key".to_owned());
        args.push(format!(
            "tenant-{i:03}:sk-tenant-{i:03}-0123456789abcdef01234567"
        ));
    }
    let auth = authenticator(&config(&args));
    let shared = bearer("sk-shared-0123456789abcdef0123456789abcdef");
    let tenant = bearer("sk-tenant-042-0123456789abcdef01234567");
    let unknown = bearer("sk-unknown-0123456789abcdef0123456789abc");
    assert!(matches!(auth.data_plane(&shared), Ok(None)));
    assert!(matches!(auth.data_plane(&tenant), Ok(Some(_))));
    assert!(auth.data_plane(&unknown).is_err());

    let mut group = c.benchmark_group("auth_data_plane");
    group.bench_function("shared_key", |b| {
        b.iter(|| black_box(auth.data_plane(black_box(&shared)).is_ok()))
    });
    group.bench_function("tenant_key_of_100", |b| {
        b.iter(|| black_box(auth.data_plane(black_box(&tenant)).is_ok()))
    });
    group.bench_function("unknown_key", |b| {
        b.iter(|| black_box(auth.data_plane(black_box(&unknown)).is_err()))
    });
    let open = authenticator(&config(&[]));
    group.bench_function("open", |b| {
        b.iter(|| black_box(open.data_plane(black_box(&shared)).is_ok()))
    });
    group.finish();
}

fn bench_control_plane(c: &mut Criterion) {
    let args: Vec<String> = [
        "--control-plane-api-keys",
        "ops:Operations:admin:cp-admin-0123456789abcdef0123456789ab",
        "ro:Read only:user:cp-user-0123456789abcdef0123456789abcd",
        "--disable-audit-logging",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let auth = authenticator(&config(&args));
    let admin = bearer("cp-admin-0123456789abcdef0123456789ab");
    bench_admin_check(c, "auth_control_plane/api_key_admin", &auth, &admin);
}

/// base64url without padding, enough for a JWK's coordinates.
fn b64url(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// Serves `body` to every request on a loopback port, from a background thread.
fn serve_key_set(body: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    port
}

fn bench_jwt(c: &mut Criterion) {
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).expect("key");
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
        .expect("key");
    let point = pair.public_key().as_ref();
    let jwks = serde_json::json!({"keys": [{
        "kty": "EC", "crv": "P-256", "kid": "bench", "alg": "ES256", "use": "sig",
        "x": b64url(&point[1..33]), "y": b64url(&point[33..65]),
    }]});
    let port = serve_key_set(jwks.to_string());
    let issuer = format!("http://127.0.0.1:{port}");
    let args: Vec<String> = [
        "--jwt-issuer",
        &issuer,
        "--jwt-audience",
        "tollgate",
        "--jwt-jwks-uri",
        &format!("{issuer}/jwks"),
        "--disable-audit-logging",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let auth = authenticator(&config(&args));
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let claims = serde_json::json!({
        "iss": issuer, "aud": "tollgate", "sub": "bench-admin",
        "exp": now + 3600, "iat": now, "roles": ["admin"],
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("bench".to_owned());
    let token = jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_ec_der(pkcs8.as_ref()),
    )
    .expect("token");
    let admin = bearer(&token);
    // The first check fetches the key set; every later one is served from the cache.
    bench_admin_check(c, "auth_control_plane/jwt_es256_cached", &auth, &admin);
}

/// Benches one admin control-plane check, after asserting that it passes.
fn bench_admin_check(c: &mut Criterion, name: &str, auth: &Authenticator, headers: &HeaderMap) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let method = Method::GET;
    assert!(runtime
        .block_on(auth.control_plane(&method, "/workers", headers))
        .is_ok());
    c.bench_function(name, |b| {
        b.iter(|| {
            let verdict = runtime.block_on(auth.control_plane(&method, "/workers", headers));
            black_box(verdict.is_ok())
        })
    });
}

criterion_group!(benches, bench_data_plane, bench_control_plane, bench_jwt);
criterion_main!(benches);

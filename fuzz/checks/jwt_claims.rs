//! Arbitrary input through the JWT checks that run on attacker-chosen data before (header)
//! or after (claims) the signature check: no panic, only accepted algorithms pass the
//! header check, no error message quotes the token, and role extraction reads only the
//! claims rule 4 names.

use serde_json::{Map, Value};
use tollgate::auth::jwt::{check_header, role_from_claims, ACCEPTED_ALGORITHMS};
use tollgate::auth::Role;

/// Claims rule 4 may read when the configured one is absent.
const FALLBACKS: [&str; 4] = ["role", "roles", "groups", "group"];

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    if let Ok(token) = std::str::from_utf8(data) {
        header_check(token);
    }
    if let Ok(claims) = serde_json::from_slice::<Map<String, Value>>(data) {
        for role_claim in ["roles", "groups", "custom"] {
            roles(&claims, role_claim);
        }
    }
}

fn header_check(token: &str) {
    match check_header(token) {
        Ok(header) => {
            assert!(ACCEPTED_ALGORITHMS.contains(&header.alg));
            assert!(!header.kid.is_empty());
        }
        Err(err) => {
            let message = err.to_string();
            assert!(
                !message.is_empty() && !message.contains('\n'),
                "{message:?}"
            );
            // A token piece is base64url; no word of any message is 12 such characters long,
            // so finding one in the message means it was quoted.
            let base64url = |p: &&str| {
                p.len() >= 12
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            };
            for piece in token.split('.').filter(base64url) {
                assert!(!message.contains(piece), "{message:?} quotes the token");
            }
        }
    }
}

fn roles(claims: &Map<String, Value>, role_claim: &str) {
    let plain = role_from_claims(claims, role_claim, &[]);
    let mapping = [
        ("admin".to_owned(), Role::Admin),
        ("ops".to_owned(), Role::Admin),
        ("viewer".to_owned(), Role::User),
    ];
    let mapped = role_from_claims(claims, role_claim, &mapping);

    // A mapping that grants nothing grants nothing.
    let all_user = [
        ("admin".to_owned(), Role::User),
        ("ops".to_owned(), Role::User),
    ];
    assert_eq!(role_from_claims(claims, role_claim, &all_user), Role::User);

    // Claims outside rule 4 do not matter.
    let mut noisy = claims.clone();
    noisy.insert("zz_unrelated".into(), Value::String("admin".into()));
    assert_eq!(role_from_claims(&noisy, role_claim, &[]), plain);
    assert_eq!(role_from_claims(&noisy, role_claim, &mapping), mapped);

    // When the configured claim is there, the fallbacks are not read.
    if claims.get(role_claim).is_some_and(|v| !v.is_null()) {
        let mut bare = claims.clone();
        for name in FALLBACKS.iter().filter(|name| **name != role_claim) {
            bare.remove(*name);
        }
        assert_eq!(role_from_claims(&bare, role_claim, &[]), plain);
        assert_eq!(role_from_claims(&bare, role_claim, &mapping), mapped);
    }
}

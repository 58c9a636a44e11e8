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

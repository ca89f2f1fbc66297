//! Test support of the HTTP server's tests, split by job: spawning and
//! stopping `aci serve --http` replicas ([`replica`]), JWT keys and tokens
//! ([`keys`]), checking results against the frozen schemas ([`contract`]),
//! counting what MariaDB executed ([`general_log`]), and reading a
//! replica's memory ([`replica::Replica::memory`]).

#![allow(dead_code, unreachable_pub)]

pub mod contract;
pub mod general_log;
pub mod keys;
pub mod replica;

use std::path::PathBuf;
use std::time::Duration;

/// An HTTP client for the tests. In a workspace build rustls has both the
/// ring and the aws-lc-rs providers (another crate's dev-dependencies enable
/// the second), so none is the default: use ring, as the rest of the
/// workspace does.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A guard against a hung server, not a timing assertion.
pub const HANG_GUARD: Duration = Duration::from_secs(120);

/// A file with `text` in the tests' temporary directory.
pub fn temp_file(name: &str, text: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "http-{}-{}-{name}",
        std::process::id(),
        fastrand_suffix()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

/// A short random suffix for ids and file names.
pub fn fastrand_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// A fresh id with `tag`.
pub fn unique(tag: &str) -> String {
    format!("{tag}-{}", fastrand_suffix())
}

/// Hex SHA-256 of `token`, as `[auth.tokens.NAME] sha256` wants it.
pub fn sha256_hex(token: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

//! Test support of the HTTP server's tests, split by job: spawning and
//! stopping `aci serve --http` replicas and sending them raw HTTP requests
//! ([`replica`]), JWT keys and tokens ([`keys`]), and counting what MariaDB
//! executed ([`general_log`]).

pub(crate) mod general_log;
pub(crate) mod keys;
pub(crate) mod replica;

/// An HTTP client for the tests. In a workspace build rustls has both the
/// ring and the aws-lc-rs providers (another crate's dev-dependencies enable
/// the second), so none is the default: use ring, as the rest of the
/// workspace does.
pub(crate) fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Hex SHA-256 of `token`, as `[auth.tokens.NAME] sha256` wants it.
pub(crate) fn sha256_hex(token: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

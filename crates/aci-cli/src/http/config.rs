//! The configuration sections of `aci serve --http`: `[auth]` and `[serve]`.
//!
//! The example of every key is the README's "Serving many agents over HTTP"
//! section; `crate::config`'s test parses it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// The TLS files of `[serve]`, all given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// The certificate chain, leaf first (PEM).
    pub(crate) cert: PathBuf,
    /// Its private key (PEM).
    pub(crate) key: PathBuf,
    /// CAs whose client certificates are required (PEM), if any.
    pub(crate) client_ca: Option<PathBuf>,
}

/// `[auth]`: who may call over HTTP.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthSection {
    /// The MCP endpoint's public URL, for the protected resource metadata.
    pub(crate) resource: Option<String>,
    /// Static API tokens by principal.
    #[serde(default)]
    pub(crate) tokens: BTreeMap<String, TokenSection>,
    /// JWT access tokens.
    pub(crate) jwt: Option<JwtSection>,
}

/// `[auth.tokens.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenSection {
    /// Hex SHA-256 of the token (never the token itself).
    pub(crate) sha256: String,
    /// Tool calls per run for this principal, overriding `[run] budget`.
    pub(crate) run_budget: Option<u32>,
    /// May see every run's review page (`/runs/<run_id>`), not only its own.
    #[serde(default)]
    pub(crate) review: bool,
}

/// `[auth.jwt]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JwtSection {
    /// The required `iss`.
    pub(crate) issuer: String,
    /// The required `aud`.
    pub(crate) audience: String,
    /// A JSON Web Key Set file with the issuer's public keys.
    pub(crate) jwks_file: PathBuf,
    /// Clock skew allowed on `exp` and `nbf` (default 30).
    pub(crate) leeway_secs: Option<u64>,
    /// A claim that, when it is `true` in a token, lets its principal see
    /// every run's review page (as `review = true` does for a static token).
    pub(crate) review_claim: Option<String>,
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn unknown_auth_keys_are_errors() {
        let err = Config::parse("[auth.tokens.a]\nsha256 = \"00\"\ntoken = \"x\"\n").unwrap_err();
        assert!(err.contains("unknown field `token`"), "{err}");
        let err = Config::parse("[serve]\nmax_inflight = 3\n").unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }
}

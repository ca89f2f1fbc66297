//! The configuration sections of `aci serve --http`: `[auth]` and `[serve]`.
//!
//! ```toml
//! [auth]
//! # The URL agents reach the MCP endpoint at, named in the protected resource
//! # metadata (default: http://<Host header>/mcp).
//! resource = "https://aci.example.com/mcp"
//! [auth.tokens.oncall-bot]   # a static API token; the table name is the principal
//! sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! run_budget = 50            # optional: tool calls per run for this principal
//! [auth.jwt]                 # JWT access tokens (OAuth 2.1 resource server)
//! issuer = "https://login.example.com/"
//! audience = "aci"
//! jwks_file = "/etc/aci/jwks.json"   # RS256, ES256 and EdDSA keys
//! leeway_secs = 30
//!
//! [serve]                           # (struct in crate::config: shared with stdio)
//! max_in_flight = 64                 # calls running at once in this replica
//! max_in_flight_per_principal = 16   # and per principal (default: no own limit)
//! allowed_hosts = ["aci.example.com"] # Host headers accepted (default: loopback names)
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

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
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn every_documented_key_parses() {
        let doc: String = include_str!("config.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .filter_map(|l| l.strip_prefix("//! "))
            .skip_while(|l| !l.starts_with("```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        let config = Config::parse(&doc).unwrap();
        let token = &config.auth.tokens["oncall-bot"];
        assert_eq!(token.run_budget, Some(50));
        let jwt = config.auth.jwt.as_ref().unwrap();
        assert_eq!(jwt.audience, "aci");
        assert_eq!(jwt.leeway_secs, Some(30));
        assert_eq!(config.serve.max_in_flight, Some(64));
        assert_eq!(config.serve.max_in_flight_per_principal, Some(16));
    }

    #[test]
    fn unknown_auth_keys_are_errors() {
        let err = Config::parse("[auth.tokens.a]\nsha256 = \"00\"\ntoken = \"x\"\n").unwrap_err();
        assert!(err.contains("unknown field `token`"), "{err}");
        let err = Config::parse("[serve]\nmax_inflight = 3\n").unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }
}

//! Bearer authentication of every MCP request: static API tokens and JWT
//! access tokens, as one tower layer in front of the MCP service.
//!
//! - A static token is known only by its SHA-256; a presented token is
//!   hashed and compared with every configured digest in constant time (no
//!   early exit), so neither the token nor which entry it is close to leaks
//!   through timing. Its principal is the table name.
//! - A JWT must be signed by a key of the configured JWKS (RS256, ES256 or
//!   EdDSA; the header's `alg` must be the key's), with `iss` and `aud` as
//!   configured and `exp`/`nbf` holding within the leeway; its principal is
//!   `sub`.
//! - Anything else is HTTP 401 with a `WWW-Authenticate: Bearer` challenge
//!   that names the protected resource metadata (RFC 9728); the request never
//!   reaches the MCP service, so nothing is run or recorded.
//!
//! Nothing here logs a token or a claim; only the principal of an accepted
//! request is ever written anywhere (the run's owner).

use std::fmt;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::config::{AuthSection, JwtSection};
use super::metrics::Metrics;
use super::workers::Connection;
use crate::error::CliError;
use crate::server::Principal;

/// The path of the OAuth Protected Resource Metadata document.
pub(crate) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Longest principal accepted from a JWT's `sub`, in bytes.
const MAX_PRINCIPAL_BYTES: usize = 256;

/// Why a request was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No bearer token at all.
    Missing,
    /// A token that no configured credential accepts.
    Invalid,
}

/// The configured credentials.
pub(crate) struct Authenticator {
    tokens: Vec<StaticToken>,
    jwt: Option<JwtVerifier>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("tokens", &self.tokens.len())
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

struct StaticToken {
    digest: [u8; 32],
    principal: Principal,
}

struct JwtVerifier {
    keys: Vec<VerifyKey>,
    issuer: String,
    audience: String,
    leeway_secs: u64,
    review_claim: Option<String>,
}

struct VerifyKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    /// The other claims, for the configured review claim.
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

impl Authenticator {
    /// The credentials of `[auth]`; `None` when it configures neither kind.
    ///
    /// # Errors
    /// A one-line configuration error for a malformed digest, an unreadable
    /// or unusable JWKS file, or a JWKS without a usable key.
    pub(crate) fn from_config(section: &AuthSection) -> Result<Option<Self>, CliError> {
        let mut tokens = Vec::with_capacity(section.tokens.len());
        for (name, token) in &section.tokens {
            if name.is_empty() || name.chars().any(char::is_control) {
                return Err(CliError::config(
                    "auth.tokens: a principal name must be non-empty text",
                ));
            }
            let digest = parse_digest(&token.sha256).ok_or_else(|| {
                CliError::config(format!(
                    "auth.tokens.{name}: sha256 must be 64 hex digits (the SHA-256 of the token)"
                ))
            })?;
            tokens.push(StaticToken {
                digest,
                principal: Principal::new(name, token.run_budget).with_review(token.review),
            });
        }
        let jwt = section.jwt.as_ref().map(JwtVerifier::load).transpose()?;
        if tokens.is_empty() && jwt.is_none() {
            return Ok(None);
        }
        Ok(Some(Self { tokens, jwt }))
    }

    /// The principal of a request with these headers.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, AuthFailure> {
        self.authenticate_token(bearer_token(headers)?)
    }

    /// The principal of a bearer token (from the header, or the review
    /// cookie).
    pub(crate) fn authenticate_token(&self, token: &str) -> Result<Principal, AuthFailure> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for entry in &self.tokens {
            // Every entry is compared in full, whatever matched before.
            if constant_time_eq(&entry.digest, &digest) {
                found = Some(&entry.principal);
            }
        }
        if let Some(principal) = found {
            return Ok(principal.clone());
        }
        match &self.jwt {
            Some(jwt) => jwt.verify(token),
            None => Err(AuthFailure::Invalid),
        }
    }
}

impl JwtVerifier {
    fn load(section: &JwtSection) -> Result<Self, CliError> {
        let path = section.jwks_file.display();
        let text = std::fs::read_to_string(&section.jwks_file).map_err(|e| {
            CliError::config(format!("auth.jwt: cannot read jwks_file {path}: {e}"))
        })?;
        let set: JwkSet = serde_json::from_str(&text).map_err(|_| {
            CliError::config(format!(
                "auth.jwt: jwks_file {path} is not a JSON Web Key Set"
            ))
        })?;
        let mut keys = Vec::new();
        for jwk in &set.keys {
            let Some(algorithm) = key_algorithm(jwk) else {
                continue;
            };
            let key = DecodingKey::from_jwk(jwk).map_err(|_| {
                CliError::config(format!(
                    "auth.jwt: jwks_file {path} has a key that cannot be used"
                ))
            })?;
            keys.push(VerifyKey {
                kid: jwk.common.key_id.clone(),
                algorithm,
                key,
            });
        }
        if keys.is_empty() {
            return Err(CliError::config(format!(
                "auth.jwt: jwks_file {path} has no RS256, ES256 or EdDSA key"
            )));
        }
        Ok(Self {
            keys,
            issuer: section.issuer.clone(),
            audience: section.audience.clone(),
            leeway_secs: section.leeway_secs.unwrap_or(30),
            review_claim: section.review_claim.clone(),
        })
    }

    fn verify(&self, token: &str) -> Result<Principal, AuthFailure> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| AuthFailure::Invalid)?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.issuer]);
        validation.set_audience(&[&self.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = self.leeway_secs;
        let candidates = self.keys.iter().filter(|key| {
            key.algorithm == header.alg
                && (header.kid.is_none() || key.kid.is_none() || key.kid == header.kid)
        });
        for candidate in candidates {
            let Ok(data) = jsonwebtoken::decode::<Claims>(token, &candidate.key, &validation)
            else {
                continue;
            };
            let sub = data.claims.sub;
            if sub.is_empty()
                || sub.len() > MAX_PRINCIPAL_BYTES
                || sub.chars().any(char::is_control)
            {
                return Err(AuthFailure::Invalid);
            }
            let reviewer = self.review_claim.as_ref().is_some_and(|claim| {
                data.claims.other.get(claim) == Some(&serde_json::Value::Bool(true))
            });
            return Ok(Principal::new(&sub, None).with_review(reviewer));
        }
        Err(AuthFailure::Invalid)
    }
}

/// The algorithm a key verifies: the JWK's `alg` when it names one of the
/// three, else the one its key type implies. Other keys are skipped.
fn key_algorithm(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Algorithm> {
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            Algorithm::ES256
        }
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        _ => return None,
    };
    match jwk.common.key_algorithm {
        None => Some(implied),
        Some(KeyAlgorithm::RS256) if implied == Algorithm::RS256 => Some(implied),
        Some(KeyAlgorithm::ES256) if implied == Algorithm::ES256 => Some(implied),
        Some(KeyAlgorithm::EdDSA) if implied == Algorithm::EdDSA => Some(implied),
        Some(_) => None,
    }
}

fn bearer_token(headers: &HeaderMap) -> Result<&str, AuthFailure> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(AuthFailure::Missing);
    };
    let value = value.to_str().map_err(|_| AuthFailure::Invalid)?;
    let (scheme, token) = value.split_once(' ').ok_or(AuthFailure::Invalid)?;
    let token = token.trim();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
        return Err(AuthFailure::Invalid);
    }
    Ok(token)
}

fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0_u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.chunks_exact(2)) {
        let text = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(text, 16).ok()?;
    }
    Some(digest)
}

/// Equality of two digests that looks at every byte whatever differs first.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let difference = a
        .iter()
        .zip(b)
        .fold(0_u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    std::hint::black_box(difference) == 0
}

/// What the authentication layer needs.
#[derive(Debug)]
pub(crate) struct AuthLayerState {
    /// `None` with `--insecure-no-auth`: every request is anonymous.
    pub(crate) authenticator: Option<Authenticator>,
    /// The configured public resource URL, if any.
    pub(crate) resource: Option<String>,
    pub(crate) metrics: Arc<Metrics>,
}

/// The tower layer's function: authenticates the request or answers 401.
/// Marks the request's connection as having carried an authenticated
/// request (every request, without `[auth]`): it is shed after the
/// unauthenticated ones when the replica is at its connection cap.
fn mark_authenticated(request: &Request) {
    if let Some(ConnectInfo(connection)) = request.extensions().get::<ConnectInfo<Connection>>() {
        connection.state.authenticated();
    }
}

pub(crate) async fn require_bearer(
    State(state): State<Arc<AuthLayerState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(authenticator) = &state.authenticator else {
        mark_authenticated(&request);
        return next.run(request).await;
    };
    match authenticator.authenticate(request.headers()) {
        Ok(principal) => {
            mark_authenticated(&request);
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(failure) => {
            state.metrics.unauthorized();
            unauthorized(&state, request.headers(), failure)
        }
    }
}

/// The layer of the review routes: a bearer token as for `/mcp`, or the
/// same token from the review cookie a browser got at `/login`; a browser's
/// navigation without either is sent to `/login`.
pub(crate) async fn require_reviewer(
    State(state): State<Arc<AuthLayerState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(authenticator) = &state.authenticator else {
        mark_authenticated(&request);
        return next.run(request).await;
    };
    let headers = request.headers();
    let outcome = if headers.contains_key(header::AUTHORIZATION) {
        authenticator.authenticate(headers)
    } else {
        match super::login::cookie_token(headers) {
            Some(token) => authenticator.authenticate_token(&token),
            None => Err(AuthFailure::Missing),
        }
    };
    match outcome {
        Ok(principal) => {
            mark_authenticated(&request);
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(failure) => {
            state.metrics.unauthorized();
            if super::login::is_navigation(request.method(), request.headers()) {
                let target = request
                    .uri()
                    .path_and_query()
                    .map_or("/", axum::http::uri::PathAndQuery::as_str);
                return super::login::to_login(target);
            }
            unauthorized(&state, request.headers(), failure)
        }
    }
}

fn unauthorized(state: &AuthLayerState, headers: &HeaderMap, failure: AuthFailure) -> Response {
    let metadata = format!(
        "{}{METADATA_PATH}",
        origin(state.resource.as_deref(), headers)
    );
    let challenge = match failure {
        AuthFailure::Missing => format!("Bearer resource_metadata=\"{metadata}\""),
        AuthFailure::Invalid => {
            format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\"")
        }
    };
    let mut response = (StatusCode::UNAUTHORIZED, Body::from("unauthorized\n")).into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// `scheme://authority` of the configured resource URL, else of the request's
/// `Host` (over plain HTTP) when it looks like a host name.
pub(crate) fn origin(resource: Option<&str>, headers: &HeaderMap) -> String {
    if let Some((scheme, rest)) = resource.and_then(|r| r.split_once("://")) {
        let authority = rest.split('/').next().unwrap_or(rest);
        return format!("{scheme}://{authority}");
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_and_compare() {
        let digest = Sha256::digest(b"test");
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
        let parsed = parse_digest(&hex).unwrap();
        assert!(constant_time_eq(&parsed, &digest.into()));
        assert!(parse_digest(&hex.to_uppercase()).is_some());
        let mut other = parsed;
        other[31] ^= 1;
        assert!(!constant_time_eq(&parsed, &other));
        for bad in ["", "abc", &hex[1..], &format!("{}zz", &hex[2..])] {
            assert!(parse_digest(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer_token(&headers), Err(AuthFailure::Missing));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer_token(&headers), Ok("abc"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  abc "),
        );
        assert_eq!(bearer_token(&headers), Ok("abc"));
        for bad in ["Basic abc", "Bearer", "Bearer ", "abc"] {
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(bad));
            assert_eq!(bearer_token(&headers), Err(AuthFailure::Invalid), "{bad}");
        }
    }

    #[test]
    fn static_tokens_name_their_principal() {
        let hex: String = Sha256::digest(b"s3cret-token")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let section: AuthSection = toml::from_str(&format!(
            "[tokens.oncall-bot]\nsha256 = \"{hex}\"\nrun_budget = 5\n[tokens.other]\nsha256 = \"{}\"\n",
            "0".repeat(64)
        ))
        .unwrap();
        let auth = Authenticator::from_config(&section).unwrap().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret-token"),
        );
        let principal = auth.authenticate(&headers).unwrap();
        assert_eq!(principal.name(), "oncall-bot");
        assert_eq!(principal.run_budget(), Some(5));
        assert!(!format!("{auth:?}{principal:?}").contains("s3cret"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer s3cret-tokem"),
        );
        assert_eq!(auth.authenticate(&headers), Err(AuthFailure::Invalid));
    }

    #[test]
    fn no_credentials_is_no_authenticator_and_bad_digests_are_errors() {
        assert!(
            Authenticator::from_config(&AuthSection::default())
                .unwrap()
                .is_none()
        );
        let section: AuthSection = toml::from_str("[tokens.a]\nsha256 = \"secret\"\n").unwrap();
        let err = Authenticator::from_config(&section)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("64 hex digits") && !err.contains("secret"),
            "{err}"
        );
    }

    #[test]
    fn the_challenge_names_the_metadata() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert_eq!(origin(None, &headers), "http://127.0.0.1:8080");
        assert_eq!(
            origin(Some("https://aci.example.com/mcp"), &headers),
            "https://aci.example.com"
        );
        headers.insert(header::HOST, HeaderValue::from_static("evil\"host"));
        assert_eq!(origin(None, &headers), "http://localhost");
    }
}

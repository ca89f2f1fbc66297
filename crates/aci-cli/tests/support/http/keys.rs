//! JWT signing keys for the tests: an RSA key committed for the tests only
//! (ring cannot generate RSA keys), and ES256 / EdDSA keys generated at test
//! time with ring. Each comes with its public JWK.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair as _};
use serde_json::{Value, json};

/// A private key and its public JWK.
pub(crate) struct SigningKey {
    pub(crate) kid: String,
    pub(crate) algorithm: Algorithm,
    key: EncodingKey,
    pub(crate) jwk: Value,
}

impl SigningKey {
    /// The committed test-only RSA key (RS256).
    pub(crate) fn rsa() -> Self {
        let pem = include_bytes!("keys/rsa-test-key.pem");
        let jwk: Value = serde_json::from_str(include_str!("keys/rsa-test-jwk.json")).unwrap();
        Self {
            kid: jwk["kid"].as_str().unwrap().to_owned(),
            algorithm: Algorithm::RS256,
            key: EncodingKey::from_rsa_pem(pem).unwrap(),
            jwk,
        }
    }

    /// A fresh P-256 key (ES256).
    pub(crate) fn es256(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        Self {
            kid: kid.to_owned(),
            algorithm: Algorithm::ES256,
            key: EncodingKey::from_ec_der(pkcs8.as_ref()),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
                "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                "y": URL_SAFE_NO_PAD.encode(&point[33..]),
            }),
        }
    }

    /// A fresh Ed25519 key (EdDSA).
    pub(crate) fn ed25519(kid: &str) -> Self {
        let rng = SystemRandom::new();
        let pkcs8 = signature::Ed25519KeyPair::generate_pkcs8(&rng).unwrap();
        let pair = signature::Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap();
        Self {
            kid: kid.to_owned(),
            algorithm: Algorithm::EdDSA,
            key: EncodingKey::from_ed_der(pkcs8.as_ref()),
            jwk: json!({
                "kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig",
                "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()),
            }),
        }
    }

    /// A JWT with `claims`, signed by this key, naming its `kid`.
    pub(crate) fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.algorithm);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.key).unwrap()
    }
}

/// A JWKS document with the public keys of `keys`.
pub(crate) fn jwks(keys: &[&SigningKey]) -> String {
    json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() }).to_string()
}

/// Seconds since the epoch.
pub(crate) fn now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_secs()).unwrap()
}

/// Claims for `sub` valid for an hour, from `issuer` to `audience`.
pub(crate) fn claims(issuer: &str, audience: &str, sub: &str) -> Value {
    json!({ "iss": issuer, "aud": audience, "sub": sub, "iat": now(), "nbf": now() - 5, "exp": now() + 3600 })
}

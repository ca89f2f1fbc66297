//! Scope fingerprints: SHA-256 over a canonical JSON of tool name and scope.
//!
//! The canonical form sorts object keys by their UTF-8 bytes, writes no
//! insignificant whitespace, escapes strings as JSON does, and writes every
//! number that is an integer in value (`1`, `1.0`, `1e0`) as that integer.
//! It does not depend on serde_json's map ordering (`preserve_order`) or number
//! representation (`arbitrary_precision`), so the fingerprint is stable across
//! processes, builds and machines.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of the canonical `{"scope":…,"tool":…}` document; 32 bytes, shown as
/// 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScopeFingerprint([u8; 32]);

impl ScopeFingerprint {
    /// The fingerprint of `tool_name` with the (already normalized) `scope`.
    #[must_use]
    pub fn of(tool_name: &str, scope: &Value) -> Self {
        Self::of_canonical(tool_name, &canonical_json(scope))
    }

    /// The fingerprint of `tool_name` with a scope already in canonical JSON
    /// (from [`canonical_json`]), so callers that keep the canonical text do
    /// not compute it twice.
    #[must_use]
    pub fn of_canonical(tool_name: &str, canonical_scope: &str) -> Self {
        let mut tool = Vec::with_capacity(tool_name.len() + 2);
        write_string(tool_name, &mut tool);
        let mut hasher = Sha256::new();
        hasher.update(b"{\"scope\":");
        hasher.update(canonical_scope.as_bytes());
        hasher.update(b",\"tool\":");
        hasher.update(&tool);
        hasher.update(b"}");
        Self(hasher.finalize().into())
    }

    /// The raw digest.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hex digits.
    #[must_use]
    pub fn to_hex(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for ScopeFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0_u8; 64];
        for (i, b) in self.0.iter().enumerate() {
            out[2 * i] = HEX[usize::from(b >> 4)];
            out[2 * i + 1] = HEX[usize::from(b & 0x0f)];
        }
        f.write_str(std::str::from_utf8(&out).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for ScopeFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScopeFingerprint({self})")
    }
}

/// The text is not 64 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a scope fingerprint is 64 lowercase hex digits")]
pub struct FingerprintParseError;

impl FromStr for ScopeFingerprint {
    type Err = FingerprintParseError;

    fn from_str(text: &str) -> Result<Self, FingerprintParseError> {
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return Err(FingerprintParseError);
        }
        let mut out = [0_u8; 32];
        for (i, pair) in bytes.chunks_exact(2).enumerate() {
            out[i] = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
        }
        Ok(Self(out))
    }
}

fn hex_digit(b: u8) -> Result<u8, FingerprintParseError> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        _ => Err(FingerprintParseError),
    }
}

/// Appends the canonical JSON text of `value` to `out`.
pub fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(key, out);
                out.push(b':');
                write_canonical(item, out);
            }
            out.push(b'}');
        }
    }
}

/// The canonical JSON text of `value`.
#[must_use]
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(128);
    write_canonical(value, &mut out);
    // Only JSON text (valid UTF-8) was written.
    String::from_utf8(out).unwrap_or_default()
}

fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) {
    use std::io::Write as _;
    let _ = if let Some(i) = n.as_i64() {
        write!(out, "{i}")
    } else if let Some(u) = n.as_u64() {
        write!(out, "{u}")
    } else if let Some(f) = n.as_f64() {
        // Integral floats inside the exactly representable range are written as
        // integers, so `1.0` and `1` agree.
        if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
            #[allow(clippy::cast_possible_truncation)]
            let i = f as i64;
            write!(out, "{i}")
        } else if f.is_finite() {
            write!(out, "{f:e}")
        } else {
            write!(out, "null")
        }
    } else {
        write!(out, "null")
    };
}

/// JSON string escaping exactly as serde_json writes it: the short escapes for
/// `"`, `\\`, newline, carriage return, tab, backspace and form feed, `\u00XX`
/// for the other control characters, everything else verbatim.
fn write_string(s: &str, out: &mut Vec<u8>) {
    // Writing a `&str` into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fp(scope: &str) -> ScopeFingerprint {
        ScopeFingerprint::of("query_logs", &serde_json::from_str(scope).unwrap())
    }

    #[test]
    fn key_order_whitespace_and_integral_numbers_do_not_matter() {
        let a = fp(r#"{"topic":"APPLICATION","query":"timeout","lookback_minutes":60}"#);
        let b = fp(r#"{ "lookback_minutes" : 60.0,
                        "query": "timeout", "topic": "APPLICATION" }"#);
        let c = fp(r#"{"query":"timeout","lookback_minutes":6e1,"topic":"APPLICATION"}"#);
        assert_eq!(a, b);
        assert_eq!(a, c);
    }

    #[test]
    fn different_scopes_and_tools_differ() {
        let a = fp(r#"{"query":"timeout"}"#);
        assert_ne!(a, fp(r#"{"query":"Timeout"}"#));
        assert_ne!(a, fp(r#"{"query":"timeout "}"#));
        assert_ne!(a, fp(r#"{"query":["timeout"]}"#));
        assert_ne!(a, fp(r#"{"query":"timeout","x":null}"#));
        assert_ne!(fp(r#"{"n":1}"#), fp(r#"{"n":1.5}"#));
        assert_ne!(fp(r#"{"n":1}"#), fp(r#"{"n":"1"}"#));
        let scope = json!({"query": "timeout"});
        assert_ne!(
            ScopeFingerprint::of("query_logs", &scope),
            ScopeFingerprint::of("lookup_knowledge", &scope)
        );
    }

    #[test]
    fn canonical_text_is_exact() {
        let v: Value = serde_json::from_str(
            r#"{"b":[1.0,-2,2.5,1e300,18446744073709551615],"a":"é\"\n\u0001","c":{"z":true,"y":null}}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":"é\"\n\u0001","b":[1,-2,2.5e0,1e300,18446744073709551615],"c":{"y":null,"z":true}}"#
        );
    }

    #[test]
    fn known_vector_is_stable_across_builds() {
        // Pinned: changing the canonical form changes every stored fingerprint.
        let f = ScopeFingerprint::of("t", &json!({"q": 1}));
        let text = f.to_string();
        assert_eq!(text.len(), 64);
        assert_eq!(
            text,
            format!("{:x}", Sha256::digest(br#"{"scope":{"q":1},"tool":"t"}"#))
        );
        assert_eq!(text.parse::<ScopeFingerprint>(), Ok(f));
        assert!("xyz".parse::<ScopeFingerprint>().is_err());
        assert!(text.to_uppercase().parse::<ScopeFingerprint>().is_err());
    }
}

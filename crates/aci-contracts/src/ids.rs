//! Validated identifiers: the framework's tool call id and the harness's run id.
//!
//! Both share one rule: 1 to [`MAX_ID_BYTES`] bytes of ASCII letters, digits and
//! `_ - . :`. Anything else (blank, whitespace, control characters, non-ASCII,
//! Redis Cluster hash tags `{ }`, glob characters `* ? [ ]`, path separators,
//! quotes) is rejected. The exact bytes are kept: no trimming, no case folding,
//! no normalization.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted identifier, in bytes.
pub const MAX_ID_BYTES: usize = 128;

/// Why a string is not a valid identifier.
///
/// The error never echoes the rejected text, so it is safe to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The string is empty.
    #[error("identifier is empty")]
    Empty,
    /// The string is longer than [`MAX_ID_BYTES`].
    #[error("identifier is {len} bytes long; at most {MAX_ID_BYTES} are allowed")]
    TooLong {
        /// Length of the rejected string in bytes.
        len: usize,
    },
    /// The string holds a byte outside `[A-Za-z0-9_.:-]`.
    #[error("identifier has a forbidden byte at offset {offset}")]
    ForbiddenByte {
        /// Byte offset of the first forbidden byte.
        offset: usize,
    },
}

/// Checks `value` against the identifier rule.
///
/// # Errors
/// [`IdError`] names the first rule the value breaks.
pub fn validate_id(value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty);
    }
    if value.len() > MAX_ID_BYTES {
        return Err(IdError::TooLong { len: value.len() });
    }
    match value.bytes().position(|b| !is_id_byte(b)) {
        Some(offset) => Err(IdError::ForbiddenByte { offset }),
        None => Ok(()),
    }
}

/// Whether `b` may appear in an identifier.
#[must_use]
pub const fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':')
}

macro_rules! validated_id {
    ($(#[$meta:meta])* $name:ident, $schema_name:literal, $what:literal) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// Validates `value` and keeps its exact bytes.
            ///
            /// # Errors
            /// [`IdError`] when the value breaks the identifier rule.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate_id(&value)?;
                Ok(Self(value))
            }

            /// The identifier exactly as it was supplied.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Gives back the owned string.
            #[must_use]
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(value: &str) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(value: &str) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let value = String::deserialize(deserializer)?;
                Self::new(value).map_err(serde::de::Error::custom)
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed($schema_name)
            }

            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!({
                    "type": "string",
                    "description": $what,
                    "minLength": 1,
                    "maxLength": MAX_ID_BYTES,
                    "pattern": "^[A-Za-z0-9_.:-]{1,128}$"
                })
            }
        }
    };
}

validated_id!(
    /// The id the agent framework gave a tool call, kept byte for byte.
    ///
    /// The boundary never invents, replaces or derives one: a result can only be
    /// cited by the id the framework chose.
    ToolCallId,
    "ToolCallId",
    "The tool call id chosen by the agent framework; cite results by it."
);

validated_id!(
    /// The id of one agent run, owned by the harness.
    RunId,
    "RunId",
    "The id of the agent run this call belongs to."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_allowed_alphabet() {
        for ok in ["a", "call_01", "toolu_01A-b.c:d", "0", &"x".repeat(128)] {
            assert_eq!(ToolCallId::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn rejects_unsafe_values_with_typed_errors() {
        assert_eq!(ToolCallId::new(""), Err(IdError::Empty));
        assert_eq!(
            ToolCallId::new("x".repeat(129)),
            Err(IdError::TooLong { len: 129 })
        );
        for (bad, offset) in [
            (" a", 0),
            ("a ", 1),
            ("a\tb", 1),
            ("a\nb", 1),
            ("a\0b", 1),
            ("é", 0),
            ("调用", 0),
            ("{run}", 0),
            ("a}", 1),
            ("a*", 1),
            ("a?", 1),
            ("a[", 1),
            ("a]", 1),
            ("a/b", 1),
            ("a\\b", 1),
            ("a\"b", 1),
            ("a'b", 1),
            ("a`b", 1),
        ] {
            assert_eq!(
                RunId::new(bad),
                Err(IdError::ForbiddenByte { offset }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn no_normalization_case_is_significant() {
        let a = ToolCallId::new("Call").unwrap();
        let b = ToolCallId::new("call").unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn deserialization_validates() {
        assert!(serde_json::from_str::<ToolCallId>("\"ok-1\"").is_ok());
        assert!(serde_json::from_str::<ToolCallId>("\"\"").is_err());
        assert!(serde_json::from_str::<ToolCallId>("\"a b\"").is_err());
        assert!(serde_json::from_str::<RunId>("\"{tag}\"").is_err());
        assert!(serde_json::from_str::<RunId>("17").is_err());
    }

    #[test]
    fn error_text_never_echoes_the_value() {
        let err = ToolCallId::new("secret-token value").unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }
}

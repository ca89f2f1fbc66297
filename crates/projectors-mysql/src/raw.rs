//! The raw response of a [`MysqlSource`](crate::MysqlSource): ordered
//! columns and typed rows, as the source returned them (minus what the
//! executor's own fetch limits dropped, which it flags).
//!
//! The raw response is recorded for the harness and never shown to the model.

use serde::{Deserialize, Serialize};

/// What a source returned for one statement.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RawResultSet {
    /// The columns, in the statement's order.
    pub columns: Vec<RawColumn>,
    /// The rows, each with one value per column, in column order.
    pub rows: Vec<Vec<RawCell>>,
    /// The source had more rows than `rows` holds (the executor stopped
    /// fetching at its row or byte cap).
    #[serde(default)]
    pub more_rows: bool,
    /// The executor shortened at least one text or binary value before
    /// recording it.
    #[serde(default)]
    pub values_shortened: bool,
}

/// One result column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RawColumn {
    /// The column's name or alias.
    pub name: String,
    /// How its values are typed.
    pub kind: RawColumnKind,
}

impl RawColumn {
    /// A column named `name` of `kind`.
    pub fn new(name: impl Into<String>, kind: RawColumnKind) -> Self {
        Self {
            name: name.into(),
            kind,
        }
    }
}

/// The type of a column, as far as the source tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawColumnKind {
    /// `BIT(1)`.
    Boolean,
    /// Signed integers (TINYINT .. BIGINT, YEAR).
    Integer,
    /// Unsigned integers (`... UNSIGNED`, `BIT(n)` with n > 1).
    UnsignedInteger,
    /// DECIMAL / NUMERIC.
    Decimal,
    /// FLOAT (single precision).
    Float,
    /// DOUBLE / REAL.
    Double,
    /// Character data (CHAR, VARCHAR, TEXT, ENUM, SET), and `NULL`-typed columns.
    Text,
    /// Binary data (BINARY, VARBINARY, BLOB, GEOMETRY, binary strings).
    Binary,
    /// DATE.
    Date,
    /// TIME.
    Time,
    /// DATETIME / TIMESTAMP.
    DateTime,
    /// JSON (MySQL's native type; on MariaDB, a table column with a
    /// `json_valid` check, which the executor looks up).
    Json,
}

/// One typed value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawCell {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// An exact decimal, as the source wrote it (for example `"12.500000"`).
    Decimal(String),
    /// A single-precision float.
    Float(f32),
    /// A double-precision float.
    Double(f64),
    /// A calendar date. MySQL's zero date has all parts zero.
    Date {
        /// Year, 0..=9999.
        year: u16,
        /// Month, 0..=12.
        month: u8,
        /// Day, 0..=31.
        day: u8,
    },
    /// A time of day or a duration (MySQL TIME spans -838:59:59 to 838:59:59).
    Time {
        /// Whether the duration is negative.
        negative: bool,
        /// Whole hours (days already folded in).
        hours: u32,
        /// Minutes, 0..=59.
        minutes: u8,
        /// Seconds, 0..=59.
        seconds: u8,
        /// Microseconds, 0..=999999.
        micros: u32,
    },
    /// A date and time without time zone.
    DateTime {
        /// Year, 0..=9999.
        year: u16,
        /// Month, 0..=12.
        month: u8,
        /// Day, 0..=31.
        day: u8,
        /// Hour, 0..=23.
        hour: u8,
        /// Minute, 0..=59.
        minute: u8,
        /// Second, 0..=59.
        second: u8,
        /// Microseconds, 0..=999999.
        micros: u32,
    },
    /// Text.
    Text(String),
    /// Bytes (recorded as base64).
    Bytes(#[serde(with = "base64_bytes")] Vec<u8>),
    /// A JSON document, as text.
    Json(String),
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

impl RawCell {
    /// An upper bound of this value's size in the recorded JSON, in bytes.
    /// Executors use it to keep the raw response within their byte budget.
    #[must_use]
    pub fn recorded_bytes_upper_bound(&self) -> usize {
        // Tag and punctuation: `{"date_time":{...}}` and friends stay below 128.
        const OVERHEAD: usize = 128;
        OVERHEAD
            + match self {
                Self::Decimal(text) | Self::Text(text) | Self::Json(text) => {
                    invocation_core::json_size::quoted_len(text)
                }
                Self::Bytes(bytes) => bytes.len().div_ceil(3) * 4,
                _ => 0,
            }
    }
}

//! Driver values and column metadata -> raw values and column kinds.

use aci_contracts::SqlValue;
use mysql_async::consts::{ColumnFlags, ColumnType};
use mysql_async::{Column, Value};

use crate::{RawCell, RawColumn, RawColumnKind};

/// MySQL's `binary` character set: the column holds bytes, not text.
const BINARY_CHARSET: u16 = 63;

pub(crate) fn column(column: &Column) -> RawColumn {
    RawColumn::new(column.name_str().into_owned(), column_kind(column))
}

pub(crate) fn column_kind(column: &Column) -> RawColumnKind {
    let unsigned = column.flags().contains(ColumnFlags::UNSIGNED_FLAG);
    let binary = column.character_set() == BINARY_CHARSET;
    match column.column_type() {
        ColumnType::MYSQL_TYPE_TINY
        | ColumnType::MYSQL_TYPE_SHORT
        | ColumnType::MYSQL_TYPE_INT24
        | ColumnType::MYSQL_TYPE_LONG
        | ColumnType::MYSQL_TYPE_LONGLONG => {
            if unsigned {
                RawColumnKind::UnsignedInteger
            } else {
                RawColumnKind::Integer
            }
        }
        ColumnType::MYSQL_TYPE_YEAR => RawColumnKind::Integer,
        ColumnType::MYSQL_TYPE_DECIMAL | ColumnType::MYSQL_TYPE_NEWDECIMAL => {
            RawColumnKind::Decimal
        }
        ColumnType::MYSQL_TYPE_FLOAT => RawColumnKind::Float,
        ColumnType::MYSQL_TYPE_DOUBLE => RawColumnKind::Double,
        ColumnType::MYSQL_TYPE_DATE | ColumnType::MYSQL_TYPE_NEWDATE => RawColumnKind::Date,
        ColumnType::MYSQL_TYPE_TIME | ColumnType::MYSQL_TYPE_TIME2 => RawColumnKind::Time,
        ColumnType::MYSQL_TYPE_DATETIME
        | ColumnType::MYSQL_TYPE_DATETIME2
        | ColumnType::MYSQL_TYPE_TIMESTAMP
        | ColumnType::MYSQL_TYPE_TIMESTAMP2 => RawColumnKind::DateTime,
        ColumnType::MYSQL_TYPE_BIT if column.column_length() == 1 => RawColumnKind::Boolean,
        ColumnType::MYSQL_TYPE_BIT => RawColumnKind::UnsignedInteger,
        ColumnType::MYSQL_TYPE_JSON => RawColumnKind::Json,
        ColumnType::MYSQL_TYPE_NULL => RawColumnKind::Text,
        ColumnType::MYSQL_TYPE_VARCHAR
        | ColumnType::MYSQL_TYPE_VAR_STRING
        | ColumnType::MYSQL_TYPE_STRING
        | ColumnType::MYSQL_TYPE_ENUM
        | ColumnType::MYSQL_TYPE_SET
        | ColumnType::MYSQL_TYPE_TINY_BLOB
        | ColumnType::MYSQL_TYPE_MEDIUM_BLOB
        | ColumnType::MYSQL_TYPE_LONG_BLOB
        | ColumnType::MYSQL_TYPE_BLOB
            if !binary =>
        {
            RawColumnKind::Text
        }
        _ => RawColumnKind::Binary,
    }
}

/// Converts one driver value of a column of `kind`, keeping at most
/// `max_bytes` of text and binary. Returns whether it was shortened.
pub(crate) fn value(value: Value, kind: RawColumnKind, max_bytes: usize) -> (RawCell, bool) {
    let converted = match (kind, value) {
        (_, Value::NULL) => RawCell::Null,
        (RawColumnKind::UnsignedInteger, Value::Int(i)) if i >= 0 => {
            RawCell::UInt(i.unsigned_abs())
        }
        (_, Value::Int(i)) => RawCell::Int(i),
        (RawColumnKind::Integer, Value::UInt(u)) => {
            i64::try_from(u).map_or(RawCell::UInt(u), RawCell::Int)
        }
        (_, Value::UInt(u)) => RawCell::UInt(u),
        (_, Value::Float(f)) => RawCell::Float(f),
        (_, Value::Double(f)) => RawCell::Double(f),
        (RawColumnKind::Date, Value::Date(year, month, day, ..)) => {
            RawCell::Date { year, month, day }
        }
        (_, Value::Date(year, month, day, hour, minute, second, micros)) => RawCell::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        },
        (_, Value::Time(negative, days, hours, minutes, seconds, micros)) => RawCell::Time {
            negative,
            hours: days.saturating_mul(24).saturating_add(u32::from(hours)),
            minutes,
            seconds,
            micros,
        },
        (RawColumnKind::Boolean, Value::Bytes(bytes)) => {
            RawCell::Bool(bytes.iter().any(|b| *b != 0))
        }
        (RawColumnKind::UnsignedInteger, Value::Bytes(bytes)) if bytes.len() <= 8 => {
            // BIT(n): big-endian bytes.
            RawCell::UInt(bytes.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b)))
        }
        (RawColumnKind::Decimal, Value::Bytes(bytes)) => RawCell::Decimal(lossy(bytes)),
        (RawColumnKind::Text | RawColumnKind::Json, Value::Bytes(bytes)) => {
            let text = lossy(bytes);
            let (text, cut) = shorten_text(text, max_bytes);
            let value = if kind == RawColumnKind::Json {
                RawCell::Json(text)
            } else {
                RawCell::Text(text)
            };
            return (value, cut);
        }
        (_, Value::Bytes(mut bytes)) => {
            let cut = bytes.len() > max_bytes;
            bytes.truncate(max_bytes);
            return (RawCell::Bytes(bytes), cut);
        }
    };
    (converted, false)
}

/// UTF-8 text; invalid sequences (only possible when the server does not
/// convert to the connection's utf8mb4) become U+FFFD.
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
}

/// Keeps at most `max_bytes` bytes, cut at a character boundary.
fn shorten_text(mut text: String, max_bytes: usize) -> (String, bool) {
    if text.len() <= max_bytes {
        return (text, false);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}

/// A placeholder value for the driver.
pub(crate) fn param(value: &SqlValue) -> Value {
    match value {
        SqlValue::Null => Value::NULL,
        SqlValue::Bool(b) => Value::Int(i64::from(*b)),
        SqlValue::Int(i) => Value::Int(*i),
        SqlValue::UInt(u) => Value::UInt(*u),
        SqlValue::Float(f) => Value::Double(*f),
        SqlValue::Text(text) => Value::Bytes(text.as_bytes().to_vec()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_at_char_boundaries() {
        let (text, cut) = shorten_text("a😀b".to_owned(), 3);
        assert_eq!((text.as_str(), cut), ("a", true));
        let (text, cut) = shorten_text("abc".to_owned(), 3);
        assert_eq!((text.as_str(), cut), ("abc", false));
    }

    #[test]
    fn values_follow_their_column_kind() {
        let cases = [
            (
                Value::UInt(u64::MAX),
                RawColumnKind::UnsignedInteger,
                RawCell::UInt(u64::MAX),
            ),
            (
                Value::Int(5),
                RawColumnKind::UnsignedInteger,
                RawCell::UInt(5),
            ),
            (Value::UInt(5), RawColumnKind::Integer, RawCell::Int(5)),
            (
                Value::Bytes(vec![1]),
                RawColumnKind::Boolean,
                RawCell::Bool(true),
            ),
            (
                Value::Bytes(vec![1, 0]),
                RawColumnKind::UnsignedInteger,
                RawCell::UInt(256),
            ),
            (
                Value::Bytes(b"1.50".to_vec()),
                RawColumnKind::Decimal,
                RawCell::Decimal("1.50".into()),
            ),
            (
                Value::Date(2024, 1, 2, 0, 0, 0, 0),
                RawColumnKind::Date,
                RawCell::Date {
                    year: 2024,
                    month: 1,
                    day: 2,
                },
            ),
            (
                Value::Time(true, 1, 2, 3, 4, 5),
                RawColumnKind::Time,
                RawCell::Time {
                    negative: true,
                    hours: 26,
                    minutes: 3,
                    seconds: 4,
                    micros: 5,
                },
            ),
            (
                Value::Bytes(vec![0xff, 0]),
                RawColumnKind::Binary,
                RawCell::Bytes(vec![0xff, 0]),
            ),
        ];
        for (driver, kind, expected) in cases {
            assert_eq!(value(driver, kind, 100), (expected, false), "{kind:?}");
        }
        assert_eq!(
            value(Value::Bytes(vec![7; 10]), RawColumnKind::Binary, 4),
            (RawCell::Bytes(vec![7; 4]), true)
        );
    }
}

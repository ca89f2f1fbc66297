//! UTC timestamps on the wire: RFC 3339 with millisecond precision and a `Z`.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant in UTC, held as milliseconds since the Unix epoch.
///
/// It serializes as RFC 3339 in UTC with exactly three fractional digits,
/// for example `2026-11-30T10:16:16.123Z`, so equal instants always have equal
/// text. Deserialization accepts any RFC 3339 UTC form (`Z` or `+00:00`, any
/// fraction) and keeps millisecond precision.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// The text is not an RFC 3339 UTC timestamp between years 0000 and 9999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not an RFC 3339 UTC timestamp")]
pub struct TimestampError;

const MS_PER_DAY: i64 = 86_400_000;
/// 0000-01-01T00:00:00Z
const MIN_MILLIS: i64 = -62_167_219_200_000;
/// 9999-12-31T23:59:59.999Z
const MAX_MILLIS: i64 = 253_402_300_799_999;

impl Timestamp {
    /// The instant `millis` milliseconds after the Unix epoch, clamped to the
    /// years 0000..=9999 that RFC 3339 can write.
    #[must_use]
    pub const fn from_unix_millis(millis: i64) -> Self {
        let clamped = if millis < MIN_MILLIS {
            MIN_MILLIS
        } else if millis > MAX_MILLIS {
            MAX_MILLIS
        } else {
            millis
        };
        Self(clamped)
    }

    /// Milliseconds since the Unix epoch.
    #[must_use]
    pub const fn unix_millis(self) -> i64 {
        self.0
    }

    /// Parses RFC 3339 in UTC (`Z`, `z` or `+00:00`).
    ///
    /// # Errors
    /// [`TimestampError`] for anything else, including other offsets.
    pub fn parse(text: &str) -> Result<Self, TimestampError> {
        parse_rfc3339_utc(text).ok_or(TimestampError)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0.div_euclid(MS_PER_DAY);
        let in_day = self.0.rem_euclid(MS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        let (hour, minute, second, milli) = (
            in_day / 3_600_000,
            in_day / 60_000 % 60,
            in_day / 1000 % 60,
            in_day % 1000,
        );
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{milli:03}Z"
        )
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Timestamp {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("Timestamp")
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "An instant in UTC, RFC 3339 with milliseconds, for example 2026-11-30T10:16:16.123Z."
        })
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar.
const fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    (year, month, day)
}

/// (year, month, day) to days since 1970-01-01.
const fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

const fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn digits(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        bytes
            .iter()
            .fold(0_i64, |acc, b| acc * 10 + i64::from(b - b'0')),
    )
}

fn parse_rfc3339_utc(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap(year) => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut millis = 0;
    if let Some((b'.', fraction)) = rest.split_first() {
        let len = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        let mut scaled = fraction[..len].to_vec();
        scaled.resize(3, b'0');
        millis = digits(&scaled[..3])?;
        rest = &fraction[len..];
    }
    if !matches!(rest, b"Z" | b"z" | b"+00:00" | b"-00:00") {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let total = days * MS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + millis;
    Some(Timestamp::from_unix_millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(
            Timestamp::from_unix_millis(0).to_string(),
            "1970-01-01T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_unix_millis(1_796_033_776_123).to_string(),
            "2026-11-30T10:16:16.123Z"
        );
        assert_eq!(
            Timestamp::from_unix_millis(951_782_400_000).to_string(),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            Timestamp::from_unix_millis(-1).to_string(),
            "1969-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn parses_utc_forms_and_rejects_others() {
        let t = Timestamp::parse("2026-11-30T10:16:16.123Z").unwrap();
        assert_eq!(t.unix_millis(), 1_796_033_776_123);
        assert_eq!(
            Timestamp::parse("2026-11-30T10:16:16Z")
                .unwrap()
                .unix_millis(),
            1_796_033_776_000
        );
        assert_eq!(
            Timestamp::parse("2026-11-30T10:16:16.1239+00:00")
                .unwrap()
                .unix_millis(),
            1_796_033_776_123
        );
        for bad in [
            "",
            "2026-11-30",
            "2026-11-30T10:16:16+01:00",
            "2026-02-30T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T10:16:16.Z",
            "２０２６-11-30T10:16:16Z",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn round_trips_every_day_of_a_leap_cycle() {
        let start = days_from_civil(1999, 12, 1);
        for d in start..start + 1500 {
            let t = Timestamp::from_unix_millis(d * MS_PER_DAY + 45_296_789);
            assert_eq!(Timestamp::parse(&t.to_string()), Ok(t));
        }
    }
}

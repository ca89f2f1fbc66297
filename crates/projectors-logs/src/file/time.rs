//! Timestamp layouts and fixed time zones.
//!
//! Zones are fixed offsets (`UTC`, `+02:00`): no time-zone database is
//! bundled, so a named zone with daylight saving time cannot be configured
//! (write the logs with an offset, or in UTC, instead).

use aci_contracts::Timestamp;
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use invocation_core::whitespace::collapse_whitespace;

/// How a time field is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// RFC 3339 (`T` or a space between date and time); without an offset
    /// the configured zone applies.
    Rfc3339,
    /// Seconds since the epoch (a JSON number or a decimal string, with an
    /// optional fraction).
    EpochSeconds,
    /// Milliseconds since the epoch.
    EpochMillis,
    /// A `strftime` layout (chrono's); without `%z` the zone applies.
    Strftime(String),
}

/// A layout and the zone of times written without an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimeRule {
    pub(crate) layout: Layout,
    pub(crate) zone: FixedOffset,
}

impl Default for TimeRule {
    fn default() -> Self {
        Self {
            layout: Layout::Rfc3339,
            zone: utc(),
        }
    }
}

fn utc() -> FixedOffset {
    // 0 is always in range.
    Utc.fix()
}

/// Parses `UTC`/`Z` or `±HH:MM`/`±HHMM`.
pub(crate) fn parse_zone(text: &str) -> Option<FixedOffset> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("utc") || text == "Z" {
        return Some(utc());
    }
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let digits: String = rest.chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i32 = digits[..2].parse().ok()?;
    let minutes: i32 = digits[2..].parse().ok()?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60))
}

/// Parses the `timestamp` setting.
pub(crate) fn parse_layout(text: &str) -> Option<Layout> {
    match text {
        "rfc3339" => Some(Layout::Rfc3339),
        "epoch_seconds" => Some(Layout::EpochSeconds),
        "epoch_millis" => Some(Layout::EpochMillis),
        other if other.contains('%') => Some(Layout::Strftime(other.to_owned())),
        _ => None,
    }
}

/// Milliseconds of a chrono time, if representable as a [`Timestamp`].
fn millis<Tz: TimeZone>(at: &DateTime<Tz>) -> Option<Timestamp> {
    Some(Timestamp::from_unix_millis(at.timestamp_millis()))
}

fn local(naive: NaiveDateTime, zone: FixedOffset) -> Option<Timestamp> {
    millis(&zone.from_local_datetime(&naive).single()?)
}

/// Epoch seconds (with an optional fraction) as milliseconds.
fn epoch(value: f64, scale: f64) -> Option<Timestamp> {
    let ms = value * scale;
    // Years 0..=9999, as the contract's timestamps.
    (ms.is_finite() && (-62_167_219_200_000.0..=253_402_300_799_999.0).contains(&ms))
        .then(|| Timestamp::from_unix_millis(ms.floor() as i64))
}

impl TimeRule {
    /// A time written as text.
    pub(crate) fn parse_text(&self, text: &str) -> Option<Timestamp> {
        let text = text.trim();
        match &self.layout {
            Layout::Rfc3339 => parse_rfc3339(text, self.zone),
            Layout::EpochSeconds => epoch(text.parse().ok()?, 1000.0),
            Layout::EpochMillis => epoch(text.parse().ok()?, 1.0),
            Layout::Strftime(layout) => {
                if let Ok(at) = DateTime::parse_from_str(text, layout) {
                    return millis(&at);
                }
                if let Ok(naive) = NaiveDateTime::parse_from_str(text, layout) {
                    return local(naive, self.zone);
                }
                let date = NaiveDate::parse_from_str(text, layout).ok()?;
                local(date.and_hms_opt(0, 0, 0)?, self.zone)
            }
        }
    }

    /// A time written as a JSON number (epoch layouts only).
    pub(crate) fn parse_number(&self, value: f64) -> Option<Timestamp> {
        match self.layout {
            Layout::EpochSeconds => epoch(value, 1000.0),
            Layout::EpochMillis => epoch(value, 1.0),
            _ => None,
        }
    }
}

/// RFC 3339, or the same without an offset (then in `zone`).
pub(crate) fn parse_rfc3339(text: &str, zone: FixedOffset) -> Option<Timestamp> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return millis(&at);
    }
    for layout in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, layout) {
            return local(naive, zone);
        }
    }
    None
}

/// `Mmm dd hh:mm:ss` (RFC 3164, no year): the year is the one that puts the
/// time at most a day after `reference` (the end of the window).
pub(crate) fn parse_bsd(text: &str, zone: FixedOffset, reference: Timestamp) -> Option<Timestamp> {
    let reference_year = DateTime::<Utc>::from_timestamp_millis(reference.unix_millis())?
        .with_timezone(&zone)
        .year();
    let squeezed = collapse_whitespace(text);
    for year in [reference_year, reference_year - 1] {
        let with_year = format!("{year} {squeezed}");
        let naive = NaiveDateTime::parse_from_str(&with_year, "%Y %b %d %H:%M:%S").ok()?;
        let at = local(naive, zone)?;
        if at.unix_millis() <= reference.unix_millis() + 86_400_000 {
            return Some(at);
        }
    }
    None
}

/// MariaDB's `YYMMDD hh:mm:ss` (`# Time:` lines; the hour may have one digit).
pub(crate) fn parse_mariadb(text: &str, zone: FixedOffset) -> Option<Timestamp> {
    let squeezed = collapse_whitespace(text);
    let naive = NaiveDateTime::parse_from_str(&squeezed, "%y%m%d %H:%M:%S%.f").ok()?;
    local(naive, zone)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    #[test]
    fn zones_and_layouts() {
        let plus2 = parse_zone("+02:00").unwrap();
        assert_eq!(parse_zone("-0530").unwrap().local_minus_utc(), -19_800);
        assert!(parse_zone("Europe/Paris").is_none());
        assert!(parse_zone("+25:00").is_none());
        let rule = TimeRule {
            layout: Layout::Rfc3339,
            zone: plus2,
        };
        assert_eq!(
            rule.parse_text("2026-12-01T14:00:00.250Z"),
            Some(at("2026-12-01T14:00:00.250Z"))
        );
        assert_eq!(
            rule.parse_text("2026-12-01 16:00:00"),
            Some(at("2026-12-01T14:00:00Z"))
        );
        let rule = TimeRule {
            layout: parse_layout("%d/%b/%Y:%H:%M:%S %z").unwrap(),
            zone: utc(),
        };
        assert_eq!(
            rule.parse_text("01/Dec/2026:15:00:00 +0100"),
            Some(at("2026-12-01T14:00:00Z"))
        );
        let rule = TimeRule {
            layout: Layout::EpochMillis,
            zone: utc(),
        };
        assert_eq!(
            rule.parse_number(1_796_133_600_000.0),
            Some(Timestamp::from_unix_millis(1_796_133_600_000))
        );
        assert_eq!(rule.parse_number(f64::NAN), None);
        assert_eq!(parse_layout("iso"), None);
    }

    #[test]
    fn bsd_year_is_inferred_from_the_window_end() {
        let utc = utc();
        let end = at("2026-01-01T00:30:00Z");
        assert_eq!(
            parse_bsd("Dec 31 23:59:00", utc, end),
            Some(at("2025-12-31T23:59:00Z"))
        );
        assert_eq!(
            parse_bsd("Jan  1 00:10:00", utc, end),
            Some(at("2026-01-01T00:10:00Z"))
        );
        assert_eq!(
            parse_mariadb("261201  9:05:01", utc),
            Some(at("2026-12-01T09:05:01Z"))
        );
    }
}

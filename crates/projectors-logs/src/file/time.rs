//! Timestamp layouts and time zones.
//!
//! A zone is a fixed offset (`UTC`, `+02:00`) or an IANA name
//! (`Europe/Berlin`), resolved with the tz database compiled into the binary
//! (`chrono-tz`): nothing is read from the host at run time, so the same
//! configuration reads the same times on every machine.
//!
//! Local times of a named zone around its daylight-saving changes:
//! - in a fall-back overlap (the repeated hour, `Europe/Berlin` 2026-10-25
//!   02:30 happens twice) the earlier instant is taken (the first pass,
//!   still on summer time);
//! - in a spring-forward gap (`Europe/Berlin` 2026-03-29 02:30 never
//!   happens) the time does not exist: the line does not parse and is
//!   counted in `stats.unparsed`, never guessed.

use aci_contracts::Timestamp;
use chrono::offset::LocalResult;
use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
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

/// The zone of times written without an offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Zone {
    /// A fixed offset from UTC.
    Fixed(FixedOffset),
    /// An IANA zone, with its daylight-saving rules.
    Named(Tz),
}

impl Default for Zone {
    fn default() -> Self {
        Self::Fixed(utc())
    }
}

impl Zone {
    /// The instant of a local time: the earlier one in an overlap, `None` in
    /// a gap (see the module docs).
    fn resolve(self, naive: NaiveDateTime) -> Option<Timestamp> {
        match self {
            Self::Fixed(offset) => millis(&offset.from_local_datetime(&naive).single()?),
            Self::Named(tz) => match tz.from_local_datetime(&naive) {
                LocalResult::Single(at) => millis(&at),
                LocalResult::Ambiguous(earlier, later) => {
                    Some(millis(&earlier)?.min(millis(&later)?))
                }
                LocalResult::None => None,
            },
        }
    }

    /// The local calendar year at `at`.
    fn year_at(self, at: DateTime<Utc>) -> i32 {
        match self {
            Self::Fixed(offset) => at.with_timezone(&offset).year(),
            Self::Named(tz) => at.with_timezone(&tz).year(),
        }
    }
}

/// A layout and the zone of times written without an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TimeRule {
    pub(crate) layout: Layout,
    pub(crate) zone: Zone,
}

impl Default for TimeRule {
    fn default() -> Self {
        Self {
            layout: Layout::Rfc3339,
            zone: Zone::default(),
        }
    }
}

fn utc() -> FixedOffset {
    // 0 is always in range.
    Utc.fix()
}

/// Parses `UTC`/`Z`, `±HH:MM`/`±HHMM`, or an IANA zone name
/// (`Europe/Berlin`, exact spelling).
pub(crate) fn parse_zone(text: &str) -> Option<Zone> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("utc") || text == "Z" {
        return Some(Zone::Fixed(utc()));
    }
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return text.parse::<Tz>().ok().map(Zone::Named),
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
    FixedOffset::east_opt(sign * (hours * 3600 + minutes * 60)).map(Zone::Fixed)
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

fn local(naive: NaiveDateTime, zone: Zone) -> Option<Timestamp> {
    zone.resolve(naive)
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
pub(crate) fn parse_rfc3339(text: &str, zone: Zone) -> Option<Timestamp> {
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
pub(crate) fn parse_bsd(text: &str, zone: Zone, reference: Timestamp) -> Option<Timestamp> {
    let reference_year = zone.year_at(DateTime::<Utc>::from_timestamp_millis(
        reference.unix_millis(),
    )?);
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

/// A local time in `layout` (a chrono layout without an offset), in `zone`;
/// runs of whitespace in `text` count as one space (space-padded hours).
pub(crate) fn parse_local(text: &str, layout: &str, zone: Zone) -> Option<Timestamp> {
    let squeezed = collapse_whitespace(text);
    let naive = NaiveDateTime::parse_from_str(&squeezed, layout).ok()?;
    local(naive, zone)
}

/// klog's `mmdd hh:mm:ss.uuuuuu` (no year): the year is chosen as for RFC
/// 3164 syslog, the one that puts the time at most a day after `reference`.
pub(crate) fn parse_klog(text: &str, zone: Zone, reference: Timestamp) -> Option<Timestamp> {
    let reference_year = zone.year_at(DateTime::<Utc>::from_timestamp_millis(
        reference.unix_millis(),
    )?);
    for year in [reference_year, reference_year - 1] {
        let with_year = format!("{year}{text}");
        let naive = NaiveDateTime::parse_from_str(&with_year, "%Y%m%d %H:%M:%S%.f").ok()?;
        let at = local(naive, zone)?;
        if at.unix_millis() <= reference.unix_millis() + 86_400_000 {
            return Some(at);
        }
    }
    None
}

/// PostgreSQL's `%m` / `%t` (`2026-12-01 14:00:00.123 UTC`): the zone
/// abbreviation `UTC`/`GMT`/`UCT`/`Z`, or a numeric `+03`/`-05:30`, is read;
/// any other abbreviation (`CET`, `EST`: ambiguous in general) means `zone`.
pub(crate) fn parse_postgres(text: &str, zone: Zone) -> Option<Timestamp> {
    let text = text.trim();
    // `YYYY-MM-DD hh:mm:ss[.fff]` is the part before the second space.
    let (datetime, abbreviation) = match text.char_indices().filter(|(_, c)| *c == ' ').nth(1) {
        Some((i, _)) => (&text[..i], text[i + 1..].trim()),
        None => (text, ""),
    };
    let zone = match abbreviation {
        "" => zone,
        "UTC" | "GMT" | "UCT" | "Z" => Zone::default(),
        numeric if numeric.starts_with(['+', '-']) => {
            let digits = numeric.len() - 1 - numeric.matches(':').count();
            if digits == 2 {
                parse_zone(&format!("{numeric}00"))?
            } else {
                parse_zone(numeric)?
            }
        }
        _ => zone,
    };
    let naive = NaiveDateTime::parse_from_str(datetime, "%Y-%m-%d %H:%M:%S%.f").ok()?;
    local(naive, zone)
}

/// MariaDB's `YYMMDD hh:mm:ss` (`# Time:` lines; the hour may have one digit).
pub(crate) fn parse_mariadb(text: &str, zone: Zone) -> Option<Timestamp> {
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
        assert_eq!(
            parse_zone("-0530"),
            FixedOffset::east_opt(-19_800).map(Zone::Fixed)
        );
        assert!(parse_zone("Mars/Olympus_Mons").is_none());
        assert!(parse_zone("europe/berlin").is_none());
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
            zone: Zone::default(),
        };
        assert_eq!(
            rule.parse_text("01/Dec/2026:15:00:00 +0100"),
            Some(at("2026-12-01T14:00:00Z"))
        );
        let rule = TimeRule {
            layout: Layout::EpochMillis,
            zone: Zone::default(),
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
        let utc = Zone::default();
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

    fn berlin() -> Zone {
        parse_zone("Europe/Berlin").unwrap()
    }

    #[test]
    fn named_zones_follow_their_daylight_saving_rules() {
        assert!(matches!(berlin(), Zone::Named(Tz::Europe__Berlin)));
        let rule = |zone| TimeRule {
            layout: Layout::Rfc3339,
            zone,
        };
        // Winter +01:00, summer +02:00.
        assert_eq!(
            rule(berlin()).parse_text("2026-12-01 15:00:00"),
            Some(at("2026-12-01T14:00:00Z"))
        );
        assert_eq!(
            rule(berlin()).parse_text("2026-07-01T16:00:00.5"),
            Some(at("2026-07-01T14:00:00.500Z"))
        );
        // An explicit offset wins over the zone.
        assert_eq!(
            rule(berlin()).parse_text("2026-07-01T16:00:00Z"),
            Some(at("2026-07-01T16:00:00Z"))
        );
        let shanghai = parse_zone("Asia/Shanghai").unwrap();
        assert_eq!(
            rule(shanghai).parse_text("2026-07-01 22:00:00"),
            Some(at("2026-07-01T14:00:00Z"))
        );
        let new_york = parse_zone("America/New_York").unwrap();
        assert_eq!(
            rule(new_york).parse_text("2026-01-15 09:00:00"),
            Some(at("2026-01-15T14:00:00Z"))
        );
        assert_eq!(
            rule(new_york).parse_text("2026-07-15 10:00:00"),
            Some(at("2026-07-15T14:00:00Z"))
        );
    }

    #[test]
    fn overlaps_take_the_earlier_instant_and_gaps_do_not_parse() {
        let rule = TimeRule {
            layout: Layout::Rfc3339,
            zone: berlin(),
        };
        // 2026-10-25 03:00 CEST falls back to 02:00 CET: 02:30 happens at
        // 00:30Z (summer time) and again at 01:30Z; the earlier is taken.
        assert_eq!(
            rule.parse_text("2026-10-25 02:30:00"),
            Some(at("2026-10-25T00:30:00Z"))
        );
        assert_eq!(
            rule.parse_text("2026-10-25 03:00:00"),
            Some(at("2026-10-25T02:00:00Z"))
        );
        // 2026-03-29 02:00 CET springs forward to 03:00 CEST: 02:30 never
        // happens there.
        assert_eq!(rule.parse_text("2026-03-29 02:30:00"), None);
        assert_eq!(
            rule.parse_text("2026-03-29 01:59:59"),
            Some(at("2026-03-29T00:59:59Z"))
        );
        assert_eq!(
            rule.parse_text("2026-03-29 03:00:00"),
            Some(at("2026-03-29T01:00:00Z"))
        );
        // The same rules for syslog's RFC 3164 and MariaDB's slow log times,
        // and strftime layouts without %z.
        let end = at("2026-10-25T12:00:00Z");
        assert_eq!(
            parse_bsd("Oct 25 02:30:00", berlin(), end),
            Some(at("2026-10-25T00:30:00Z"))
        );
        assert_eq!(parse_bsd("Mar 29 02:30:00", berlin(), end), None);
        assert_eq!(
            parse_mariadb("261025  2:30:00", berlin()),
            Some(at("2026-10-25T00:30:00Z"))
        );
        assert_eq!(parse_mariadb("260329  2:30:00", berlin()), None);
        let strftime = TimeRule {
            layout: parse_layout("%d.%m.%Y %H:%M:%S").unwrap(),
            zone: berlin(),
        };
        assert_eq!(
            strftime.parse_text("25.10.2026 02:30:00"),
            Some(at("2026-10-25T00:30:00Z"))
        );
        assert_eq!(strftime.parse_text("29.03.2026 02:30:00"), None);
    }

    #[test]
    fn bsd_year_uses_the_local_year_of_the_window_end() {
        // 2026-01-01T00:30+09:00 is still 2025 in UTC.
        let tokyo = parse_zone("Asia/Tokyo").unwrap();
        let end = at("2025-12-31T15:30:00Z");
        assert_eq!(
            parse_bsd("Jan  1 00:10:00", tokyo, end),
            Some(at("2025-12-31T15:10:00Z"))
        );
    }
}

//! One line into `{ timestamp, level, message }` plus fields: JSON lines,
//! logfmt and syslog (RFC 3164 and RFC 5424).
//!
//! A line that is not of its format, or has no time this file's rule can
//! read, is `None` (the scan counts it). Nothing here panics on any input.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use aci_contracts::Timestamp;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::time::{TimeRule, parse_bsd, parse_rfc3339};
use crate::RawLogEvent;
use invocation_core::json_size::{escaped_len, serialized_len};

/// Bytes of JSON the extra fields of one event may take in the raw record.
pub(crate) const FIELDS_BUDGET: usize = 1024;

/// Keys of the time, level and message, tried in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    pub(crate) time: Vec<String>,
    pub(crate) level: Vec<String>,
    pub(crate) message: Vec<String>,
    /// Every distinct key of the three lists (for the quick JSON scan).
    names: Vec<String>,
    /// Positions in `names` of `time`, `level` and `message`.
    time_at: Vec<usize>,
    level_at: Vec<usize>,
    message_at: Vec<usize>,
}

impl Keys {
    /// The configured keys, or the usual spellings.
    pub(crate) fn new(time: Option<&str>, level: Option<&str>, message: Option<&str>) -> Self {
        fn keys(configured: Option<&str>, defaults: &[&str]) -> Vec<String> {
            configured.map_or_else(
                || defaults.iter().map(|k| (*k).to_owned()).collect(),
                |k| vec![k.to_owned()],
            )
        }
        let time = keys(time, &["timestamp", "time", "ts", "@timestamp"]);
        let level = keys(level, &["level", "severity", "lvl"]);
        let message = keys(message, &["message", "msg"]);
        let mut names: Vec<String> = Vec::new();
        let mut at = |list: &[String]| -> Vec<usize> {
            list.iter()
                .map(|key| {
                    names.iter().position(|n| n == key).unwrap_or_else(|| {
                        names.push(key.clone());
                        names.len() - 1
                    })
                })
                .collect()
        };
        let (time_at, level_at, message_at) = (at(&time), at(&level), at(&message));
        Self {
            time,
            level,
            message,
            names,
            time_at,
            level_at,
            message_at,
        }
    }
}

/// A line-based format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LineFormat {
    /// One JSON object per line.
    Json(Keys),
    /// logfmt pairs.
    Logfmt(Keys),
    /// RFC 3164 / RFC 5424.
    Syslog,
}

/// How a format may write a character of the message differently in the
/// line (which the matcher's byte prefilter must allow for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escapes {
    /// The message is in the line verbatim.
    None,
    /// `\"` and `\\` inside quoted values.
    Backslash,
    /// JSON: the short escapes and `\uXXXX` for any character.
    Json,
    /// Verbatim, but CRI may split a word across a partial (`P`) line and
    /// the line completing it.
    CriPartial,
}

/// A line format with its time rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineParser {
    pub(crate) format: LineFormat,
    pub(crate) time: TimeRule,
}

/// Extra fields of one event, within [`FIELDS_BUDGET`].
pub(crate) struct Fields {
    map: BTreeMap<String, Value>,
    used: usize,
}

impl Fields {
    pub(crate) const fn new() -> Self {
        Self {
            map: BTreeMap::new(),
            used: 0,
        }
    }

    /// Adds `key`, unless the budget is spent (then `fields_truncated` says so).
    /// Names the event itself uses get a leading `_`.
    pub(crate) fn insert(&mut self, key: &str, value: Value) {
        let key = match key {
            "timestamp" | "level" | "message" | "fields_truncated" => format!("_{key}"),
            other => other.to_owned(),
        };
        let cost = escaped_len(&key) + serialized_len(&value).unwrap_or(usize::MAX);
        if self.used.saturating_add(cost).saturating_add(4) <= FIELDS_BUDGET {
            self.used += cost + 4;
            self.map.insert(key, value);
        } else {
            self.map
                .insert("fields_truncated".to_owned(), Value::Bool(true));
        }
    }

    pub(crate) fn into_map(self) -> BTreeMap<String, Value> {
        self.map
    }
}

impl LineParser {
    /// How the message may be escaped in the line.
    pub(crate) const fn escapes(&self) -> Escapes {
        match self.format {
            LineFormat::Json(_) => Escapes::Json,
            LineFormat::Logfmt(_) => Escapes::Backslash,
            LineFormat::Syslog => Escapes::None,
        }
    }

    /// Parses one line (without its line ending). `reference` is the end of
    /// the window (for RFC 3164's missing year).
    pub(crate) fn parse(&self, line: &[u8], reference: Timestamp) -> Option<RawLogEvent> {
        match &self.format {
            LineFormat::Json(keys) => self.json(line, keys),
            LineFormat::Logfmt(keys) => self.logfmt(line, keys),
            LineFormat::Syslog => syslog(&super::lossy(line), &self.time, reference),
        }
    }

    /// What the scan needs of a line: for JSON lines only its time and
    /// message (the event is built from the line again, by [`parse`], only
    /// when it is kept); for the other formats the event. `None` exactly
    /// when [`parse`] gives `None`.
    ///
    /// [`parse`]: Self::parse
    pub(crate) fn scan<'a>(&self, line: &'a [u8], reference: Timestamp) -> Option<Scanned<'a>> {
        let LineFormat::Json(keys) = &self.format else {
            return self.parse(line, reference).map(Scanned::Event);
        };
        match quick_json(line, keys)? {
            Quick::Found { time, message } => {
                let timestamp = match time {
                    Scalar::Str(text) => self.time.parse_text(&text)?,
                    Scalar::Number(n) => self.time.parse_number(n)?,
                    Scalar::Null | Scalar::Other => return None,
                };
                Some(Scanned::Lazy { timestamp, message })
            }
            // A message that is not a string: its text is the JSON of the value.
            Quick::Full => self.json(line, keys).map(Scanned::Event),
        }
    }

    fn json(&self, line: &[u8], keys: &Keys) -> Option<RawLogEvent> {
        let mut object: Map<String, Value> = serde_json::from_slice(line).ok()?;
        let time_key = keys.time.iter().find(|k| object.contains_key(k.as_str()))?;
        let timestamp = match object.remove(time_key.as_str())? {
            Value::String(text) => self.time.parse_text(&text)?,
            Value::Number(n) => self.time.parse_number(n.as_f64()?)?,
            _ => return None,
        };
        let mut take_text = |names: &[String]| -> String {
            for name in names {
                if let Some(value) = object.remove(name.as_str()) {
                    return match value {
                        Value::String(s) => s,
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                }
            }
            String::new()
        };
        let level = take_text(&keys.level);
        let message = take_text(&keys.message);
        let mut fields = Fields::new();
        for (key, value) in object {
            fields.insert(&key, value);
        }
        Some(RawLogEvent {
            timestamp,
            level,
            message,
            fields: fields.into_map(),
        })
    }

    fn logfmt(&self, line: &[u8], keys: &Keys) -> Option<RawLogEvent> {
        let text = super::lossy(line);
        let mut pairs = parse_logfmt(&text)?;
        let time_key = keys.time.iter().find(|k| pairs.contains_key(k.as_str()))?;
        let timestamp = self.time.parse_text(&pairs.remove(time_key.as_str())?)?;
        let mut take = |names: &[String]| {
            names
                .iter()
                .find_map(|n| pairs.remove(n.as_str()))
                .unwrap_or_default()
        };
        let level = take(&keys.level);
        let message = take(&keys.message);
        let mut fields = Fields::new();
        for (key, value) in pairs {
            fields.insert(&key, Value::String(value));
        }
        Some(RawLogEvent {
            timestamp,
            level,
            message,
            fields: fields.into_map(),
        })
    }
}

/// What [`LineParser::scan`] found in a line.
pub(crate) enum Scanned<'a> {
    /// A JSON line's time and message; the event is parsed from the line
    /// only if it is kept.
    Lazy {
        timestamp: Timestamp,
        message: Cow<'a, str>,
    },
    /// The whole event.
    Event(RawLogEvent),
}

impl Scanned<'_> {
    pub(crate) const fn timestamp(&self) -> Timestamp {
        match self {
            Self::Lazy { timestamp, .. } => *timestamp,
            Self::Event(event) => event.timestamp,
        }
    }
}

/// A value of one of the time, level or message keys, as the quick scan
/// reads it.
enum Scalar<'a> {
    Str(Cow<'a, str>),
    Number(f64),
    Null,
    /// A boolean, array or object.
    Other,
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Other)
            }
            // As `serde_json::Number::as_f64`.
            #[allow(clippy::cast_precision_loss)]
            fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Number(v as f64))
            }
            #[allow(clippy::cast_precision_loss)]
            fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Number(v as f64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Number(v))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Str(Cow::Owned(v.to_owned())))
            }
            fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
                Ok(Scalar::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar<'de>, A::Error> {
                Valid.visit_seq(seq).map(|Valid| Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar<'de>, A::Error> {
                Valid.visit_map(map).map(|Valid| Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// Any JSON value, read as [`Value`] reads it (the same recursion limit,
/// number range, string and escape checks) without building it: a line
/// fails the quick scan exactly when it fails `serde_json::from_slice`.
struct Valid;

impl<'de> Deserialize<'de> for Valid {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Valid)
    }
}

impl<'de> Visitor<'de> for Valid {
    type Value = Self;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(Self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(Self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(Self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(Self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(Self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(Self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<Self>()?.is_some() {}
        Ok(Self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        while map.next_entry::<Self, Self>()?.is_some() {}
        Ok(Self)
    }
}

/// An object key, borrowed from the line unless it has escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// What the quick scan of a JSON line found.
enum Quick<'a> {
    /// The value of the chosen time key and the message text.
    Found {
        time: Scalar<'a>,
        message: Cow<'a, str>,
    },
    /// The message is not a string or null: parse the line whole.
    Full,
}

/// The quick scan of a JSON object: the values of the time, level and message
/// keys (the last of a repeated key, as `Map` keeps it), everything else
/// only validated.
struct QuickSeed<'k>(&'k Keys);

/// Room for every distinct key of [`Keys`]: the defaults are 4 + 3 + 2, a
/// configured key replaces a list.
const MAX_KEYS: usize = 9;

type Slots<'de> = [Option<Scalar<'de>>; MAX_KEYS];

impl<'de> DeserializeSeed<'de> for QuickSeed<'_> {
    type Value = Slots<'de>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for QuickSeed<'_> {
    type Value = Slots<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut slots = Slots::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match self.0.names.iter().position(|n| *n == *key) {
                Some(i) if i < MAX_KEYS => slots[i] = Some(map.next_value::<Scalar<'de>>()?),
                _ => {
                    map.next_value::<Valid>()?;
                }
            }
        }
        Ok(slots)
    }
}

/// The time and message of a JSON line, chosen as [`LineParser::json`]
/// chooses them (the first present key of each list, a key taken by the
/// time not read again as the level, …); `None` when the line is not a JSON
/// object or has no time key.
fn quick_json<'a>(line: &'a [u8], keys: &Keys) -> Option<Quick<'a>> {
    if keys.names.len() > MAX_KEYS {
        return Some(Quick::Full);
    }
    // JSON text is UTF-8 (`from_slice` refuses a line that is not): checked
    // once here rather than string by string.
    let text = std::str::from_utf8(line).ok()?;
    let mut de = serde_json::Deserializer::from_str(text);
    let mut slots = QuickSeed(keys).deserialize(&mut de).ok()?;
    de.end().ok()?;
    let time_at = *keys.time_at.iter().find(|&&i| slots[i].is_some())?;
    let level_at = keys
        .level_at
        .iter()
        .copied()
        .find(|&i| i != time_at && slots[i].is_some());
    let message_at = keys
        .message_at
        .iter()
        .copied()
        .find(|&i| i != time_at && Some(i) != level_at && slots[i].is_some());
    let message = match message_at.and_then(|i| slots[i].take()) {
        None | Some(Scalar::Null) => Cow::Borrowed(""),
        Some(Scalar::Str(text)) => text,
        Some(Scalar::Number(_) | Scalar::Other) => return Some(Quick::Full),
    };
    let time = slots[time_at].take()?;
    Some(Quick::Found { time, message })
}

/// `key=value key="a \"quoted\" value" flag` into a map (the last of a
/// repeated key wins); `None` for an unterminated quote or an empty key.
pub(crate) fn parse_logfmt(text: &str) -> Option<BTreeMap<String, String>> {
    let mut pairs = BTreeMap::new();
    let mut chars = text.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        let Some(&(start, _)) = chars.peek() else {
            break;
        };
        let mut end = text.len();
        let mut has_value = false;
        while let Some(&(i, c)) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                end = i;
                has_value = c == '=';
                break;
            }
            chars.next();
        }
        let key = &text[start..end];
        if key.is_empty() {
            return None;
        }
        let mut value = String::new();
        if has_value {
            chars.next(); // '='
            if chars.next_if(|(_, c)| *c == '"').is_some() {
                let mut closed = false;
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => match chars.next()?.1 {
                            'n' => value.push('\n'),
                            't' => value.push('\t'),
                            'r' => value.push('\r'),
                            other => value.push(other),
                        },
                        other => value.push(other),
                    }
                }
                if !closed {
                    return None;
                }
            } else {
                while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                    value.push(c);
                }
            }
        }
        pairs.insert(key.to_owned(), value);
    }
    Some(pairs)
}

const SEVERITIES: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
];

/// RFC 5424 (`<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG`), RFC 3164
/// (`<PRI>Mmm dd hh:mm:ss HOST TAG[PID]: MSG`) and the same with an RFC 3339
/// time instead (rsyslog's file format); `<PRI>` is optional.
fn syslog(line: &str, rule: &TimeRule, reference: Timestamp) -> Option<RawLogEvent> {
    let mut fields = Fields::new();
    let mut rest = line.trim_start_matches('\u{feff}');
    let mut level = String::new();
    if let Some(after) = rest.strip_prefix('<') {
        let close = after.find('>')?;
        let pri: u16 = after[..close].parse().ok().filter(|p| *p <= 191)?;
        level = SEVERITIES[usize::from(pri % 8)].to_owned();
        fields.insert("facility", Value::from(pri / 8));
        rest = &after[close + 1..];
    }
    if let Some(after) = rest.strip_prefix("1 ") {
        return rfc5424(after, level, fields, rule);
    }
    let (timestamp, after) = if rest.as_bytes().first().is_some_and(u8::is_ascii_digit) {
        let (time, after) = rest.split_once(' ')?;
        (parse_rfc3339(time, rule.zone)?, after)
    } else {
        // `Mmm dd hh:mm:ss` is 15 characters (the day space-padded).
        let time = rest.get(..15)?;
        (parse_bsd(time, rule.zone, reference)?, rest.get(15..)?)
    };
    let after = after.trim_start();
    let (host, after) = after.split_once(' ').unwrap_or((after, ""));
    fields.insert("host", Value::String(host.to_owned()));
    // `TAG[PID]: message`; a line without a tag keeps all of it as the message.
    let message = match after.split_once(": ") {
        Some((tag, message)) if !tag.is_empty() && !tag.contains(' ') => {
            let (app, pid) = match tag.split_once('[') {
                Some((app, pid)) => (app, pid.strip_suffix(']')),
                None => (tag, None),
            };
            fields.insert("app", Value::String(app.to_owned()));
            if let Some(pid) = pid {
                fields.insert("pid", Value::String(pid.to_owned()));
            }
            message
        }
        _ => after,
    };
    Some(RawLogEvent {
        timestamp,
        level,
        message: message.to_owned(),
        fields: fields.into_map(),
    })
}

fn rfc5424(rest: &str, level: String, mut fields: Fields, rule: &TimeRule) -> Option<RawLogEvent> {
    let mut parts = rest.splitn(6, ' ');
    let time = parts.next()?;
    let timestamp = parse_rfc3339(time, rule.zone)?;
    for name in ["host", "app", "pid", "msgid"] {
        let value = parts.next()?;
        if value != "-" {
            fields.insert(name, Value::String(value.to_owned()));
        }
    }
    let rest = parts.next().unwrap_or("");
    let (data, message) = structured_data(rest)?;
    if data != "-" && !data.is_empty() {
        fields.insert("structured_data", Value::String(data.to_owned()));
    }
    Some(RawLogEvent {
        timestamp,
        level,
        message: message.trim_start_matches('\u{feff}').to_owned(),
        fields: fields.into_map(),
    })
}

/// Splits `-` or `[id k="v"][…]` (with `\]` escapes) from the message.
fn structured_data(rest: &str) -> Option<(&str, &str)> {
    if let Some(message) = rest.strip_prefix('-') {
        return Some(("-", message.strip_prefix(' ').unwrap_or(message)));
    }
    if rest.is_empty() {
        return Some(("", ""));
    }
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() && bytes[i] == b'[' {
        let mut quoted = false;
        i += 1;
        loop {
            match bytes.get(i)? {
                b'\\' => i += 1,
                b'"' => quoted = !quoted,
                b']' if !quoted => break,
                _ => {}
            }
            i += 1;
        }
        i += 1;
    }
    if i == 0 {
        return None;
    }
    let (data, message) = rest.split_at(i.min(rest.len()));
    Some((data, message.strip_prefix(' ').unwrap_or(message)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::time::{Layout, parse_zone};

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).unwrap()
    }

    fn parser(format: LineFormat) -> LineParser {
        LineParser {
            format,
            time: TimeRule::default(),
        }
    }

    #[test]
    fn json_lines() {
        let p = parser(LineFormat::Json(Keys::new(None, None, None)));
        let e = p
            .parse(
                r#"{"ts":"2026-12-01T14:00:00Z","level":"WARN","msg":"pool \"é\" \u4e2d","pod":"a","n":1}"#.as_bytes(),
                at("2026-12-01T15:00:00Z"),
            )
            .unwrap();
        assert_eq!(e.timestamp, at("2026-12-01T14:00:00Z"));
        assert_eq!(e.level, "WARN");
        assert_eq!(e.message, "pool \"é\" 中");
        assert_eq!(e.fields["pod"], "a");
        assert!(p.parse(b"not json", at("2026-12-01T15:00:00Z")).is_none());
        assert!(
            p.parse(br#"{"msg":"no time"}"#, at("2026-12-01T15:00:00Z"))
                .is_none()
        );
        let p = LineParser {
            format: LineFormat::Json(Keys::new(Some("t"), None, Some("m"))),
            time: TimeRule {
                layout: Layout::EpochSeconds,
                zone: parse_zone("UTC").unwrap(),
            },
        };
        let e = p
            .parse(
                br#"{"t":1796133600.5,"m":"x","message":"other"}"#,
                at("2026-12-01T15:00:00Z"),
            )
            .unwrap();
        assert_eq!(e.timestamp, at("2026-12-01T14:00:00.500Z"));
        assert_eq!(e.fields["_message"], "other");
    }

    /// The quick scan agrees with the full parse on every line: the same
    /// lines parse, with the same time and message.
    #[test]
    fn the_quick_json_scan_agrees_with_the_full_parse() {
        let end = at("2026-12-01T15:00:00Z");
        let deep = format!(
            r#"{{"ts":"2026-12-01T14:00:00Z","x":{}{}}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        let lines = [
            r#"{"ts":"2026-12-01T14:00:00Z","level":"WARN","msg":"pool \"é\" \u4e2d"}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","msg":"first","msg":"last"}"#,
            r#"{"t\u0073":"2026-12-01T14:00:00Z","m\u0073g":"escaped keys"}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","msg":42}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","msg":null,"level":7}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","msg":{"a":[1,2]}}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","message":"m","msg":"other"}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","x":1e400,"msg":"big number"}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","x":"\ud800","msg":"lone surrogate"}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","x":"\q","msg":"bad escape"}"#,
            r#"{"ts":"2026-12-01T14:00:00Z","msg":"trailing"} x"#,
            r#"{"ts":"2026-12-01T14:00:00Z","msg":"trailing comma",}"#,
            r#"{"ts":null,"msg":"null time"}"#,
            r#"{"ts":true,"time":"2026-12-01T14:00:00Z"}"#,
            r#"{"time":"2026-12-01T14:00:00Z","ts":"not a time"}"#,
            r#"{"timestamp":1796133600,"msg":"number time"}"#,
            r#"{"msg":"no time"}"#,
            r#"["ts","2026-12-01T14:00:00Z"]"#,
            r#"{"ts":"2026-12-01T14:00:00Z","msg":"ctl	tab"}"#,
            "",
            "{",
            &deep,
        ];
        let keyed = [
            Keys::new(None, None, None),
            Keys::new(Some("ts"), Some("ts"), Some("ts")),
            Keys::new(Some("msg"), Some("level"), Some("msg")),
        ];
        let mut bytes: Vec<Vec<u8>> = lines.iter().map(|l| l.as_bytes().to_vec()).collect();
        bytes.push(
            b"{\"ts\":\"2026-12-01T14:00:00Z\",\"x\":\"\xff\",\"msg\":\"bad utf-8\"}".to_vec(),
        );
        for keys in keyed {
            let p = parser(LineFormat::Json(keys));
            for line in &bytes {
                let full = p.parse(line, end);
                let quick = p.scan(line, end);
                let shown = String::from_utf8_lossy(line);
                assert_eq!(full.is_some(), quick.is_some(), "{shown}");
                if let (Some(full), Some(quick)) = (full, quick) {
                    let (timestamp, message) = match quick {
                        Scanned::Lazy { timestamp, message } => (timestamp, message.into_owned()),
                        Scanned::Event(e) => (e.timestamp, e.message),
                    };
                    assert_eq!(
                        (timestamp, message),
                        (full.timestamp, full.message),
                        "{shown}"
                    );
                }
            }
        }
        let p = parser(LineFormat::Json(Keys::new(None, None, None)));
        assert!(
            p.scan(deep.as_bytes(), end).is_none(),
            "beyond the recursion limit"
        );
        assert!(
            p.scan(lines[7].as_bytes(), end).is_none(),
            "a number out of range"
        );
        assert!(
            p.scan(lines[8].as_bytes(), end).is_none(),
            "a lone surrogate"
        );
    }

    #[test]
    fn logfmt_lines() {
        let p = parser(LineFormat::Logfmt(Keys::new(None, None, None)));
        let e = p
            .parse(
                br#"time=2026-12-01T14:00:00Z level=error msg="conn \"x\" refused" retry flag= k=v"#,
                at("2026-12-01T15:00:00Z"),
            )
            .unwrap();
        assert_eq!(e.level, "error");
        assert_eq!(e.message, r#"conn "x" refused"#);
        assert_eq!(e.fields["k"], "v");
        assert_eq!(e.fields["retry"], "");
        assert!(
            p.parse(
                br#"time=2026-12-01T14:00:00Z msg="open"#,
                at("2026-12-01T15:00:00Z")
            )
            .is_none()
        );
        assert!(parse_logfmt("=x").is_none());
    }

    #[test]
    fn syslog_lines() {
        let p = parser(LineFormat::Syslog);
        let end = at("2026-12-01T15:00:00Z");
        let e = p
            .parse(
                b"<11>Dec  1 14:00:01 node-3 kernel[0]: Out of memory: Killed process 23144 (java)",
                end,
            )
            .unwrap();
        assert_eq!(e.timestamp, at("2026-12-01T14:00:01Z"));
        assert_eq!(e.level, "err");
        assert_eq!(e.message, "Out of memory: Killed process 23144 (java)");
        assert_eq!(e.fields["app"], "kernel");
        let e = p
            .parse(
                br#"<165>1 2026-12-01T14:00:02.003+01:00 host app 77 ID47 [ex@1 k="a\]b"] BOM message"#,
                end,
            )
            .unwrap();
        assert_eq!(e.timestamp, at("2026-12-01T13:00:02.003Z"));
        assert_eq!(e.level, "notice");
        assert_eq!(e.message, "BOM message");
        assert_eq!(e.fields["msgid"], "ID47");
        let e = p
            .parse(
                b"2026-12-01T14:00:03+00:00 node-3 kubelet: Node became NotReady",
                end,
            )
            .unwrap();
        assert_eq!(e.level, "");
        assert_eq!(e.message, "Node became NotReady");
        let e = p
            .parse(b"<13>1 2026-12-01T14:00:04Z - - - - -", end)
            .unwrap();
        assert_eq!(e.message, "");
        for bad in [
            &b"<999>Dec  1 14:00:01 h x: y"[..],
            b"garbage",
            b"<1",
            b"",
            b"Dec",
        ] {
            assert!(p.parse(bad, end).is_none(), "{bad:?}");
        }
    }
}

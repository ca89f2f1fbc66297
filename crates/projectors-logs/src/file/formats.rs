//! One line into `{ timestamp, level, message }` plus fields: JSON lines,
//! logfmt and syslog (RFC 3164 and RFC 5424).
//!
//! A line that is not of its format, or has no time this file's rule can
//! read, is `None` (the scan counts it). Nothing here panics on any input.

use std::collections::BTreeMap;

use aci_contracts::Timestamp;
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
        Self {
            time: keys(time, &["timestamp", "time", "ts", "@timestamp"]),
            level: keys(level, &["level", "severity", "lvl"]),
            message: keys(message, &["message", "msg"]),
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
            LineFormat::Syslog => syslog(&String::from_utf8_lossy(line), &self.time, reference),
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
        let text = String::from_utf8_lossy(line);
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

//! The MariaDB/MySQL slow query log: multi-line entries into one event per
//! statement.
//!
//! ```text
//! # Time: 261201 14:53:53                       (MariaDB; MySQL: 2026-12-01T14:53:53.123456Z)
//! # User@Host: app[app] @ localhost []
//! # Thread_id: 8  Schema: shop  QC_hit: No
//! # Query_time: 1.500123  Lock_time: 0.000045  Rows_sent: 1  Rows_examined: 91204
//! use shop;
//! SET timestamp=1764600833;
//! SELECT * FROM orders WHERE customer_id = 42;
//! ```
//!
//! - The time is `SET timestamp=N;` (epoch seconds, exact) when present, else
//!   the last `# Time:` line (MariaDB writes one only when the second
//!   changes), in the configured zone when it has no offset.
//! - The message is `Query_time: <q>s Lock_time: <l>s Rows_sent: <s>
//!   Rows_examined: <e> <statement>` with the statement's literals masked:
//!   quoted strings become `'<str>'`, then [`mask`](crate::mask::mask) turns
//!   numbers, ids and addresses into placeholders and folds whitespace, so
//!   statements of one shape make one pattern and no literal value reaches
//!   the agent. The numbers, user, host and schema are also fields.
//! - The server's start banner (`… Version: …`, `Tcp port:`, `Time Id
//!   Command Argument`) is skipped; an entry without a time or a statement
//!   is counted as unparsed.

use aci_contracts::Timestamp;
use serde_json::Value;

use super::formats::Fields;
use super::time::{TimeRule, parse_mariadb, parse_rfc3339};
use crate::RawLogEvent;
use crate::mask::mask;

/// The header values of the entry being read.
#[derive(Default)]
struct Entry {
    user_host: Option<String>,
    schema: Option<String>,
    query_time: Option<String>,
    lock_time: Option<String>,
    rows_sent: Option<String>,
    rows_examined: Option<String>,
    set_timestamp: Option<Timestamp>,
    statement: String,
    started: bool,
}

/// Reads slow log lines in order and yields finished entries.
pub(crate) struct SlowLogParser {
    rule: TimeRule,
    /// The last `# Time:` seen (it applies to later entries too).
    time: Option<Timestamp>,
    entry: Entry,
    /// Whether the entry's statement has begun (a `#` line then starts the next).
    in_statement: bool,
}

/// What one finished entry became.
pub(crate) enum Finished {
    /// An event.
    Event(RawLogEvent),
    /// An entry without a time or a statement.
    Unparsed,
}

impl SlowLogParser {
    pub(crate) fn new(rule: TimeRule) -> Self {
        Self {
            rule,
            time: None,
            entry: Entry::default(),
            in_statement: false,
        }
    }

    /// Feeds one line (without its line ending); returns the entry it ended.
    pub(crate) fn line(&mut self, line: &[u8]) -> Option<Finished> {
        let text = super::lossy(line);
        let text = text.trim_end();
        if let Some(header) = text.strip_prefix('#') {
            let finished = if self.in_statement {
                self.finish()
            } else {
                None
            };
            self.header(header.trim());
            return finished;
        }
        if is_banner(text) || text.is_empty() {
            return None;
        }
        self.entry.started = true;
        if !self.in_statement {
            let lower = text.to_ascii_lowercase();
            if let Some(schema) = lower.strip_prefix("use ") {
                let schema = schema.trim_end_matches(';').trim_matches('`');
                self.entry.schema = Some(schema.to_owned());
                return None;
            }
            if let Some(seconds) = lower
                .strip_prefix("set timestamp=")
                .and_then(|s| s.trim_end_matches(';').trim().parse::<i64>().ok())
            {
                self.entry.set_timestamp =
                    Some(Timestamp::from_unix_millis(seconds.saturating_mul(1000)));
                return None;
            }
        }
        self.in_statement = true;
        if !self.entry.statement.is_empty() {
            self.entry.statement.push(' ');
        }
        // Bounded: a statement longer than this is cut (masking folds it anyway).
        if self.entry.statement.len() < 64 * 1024 {
            self.entry.statement.push_str(text);
        }
        None
    }

    /// Ends the last entry (at the end of the file).
    pub(crate) fn finish(&mut self) -> Option<Finished> {
        let entry = std::mem::take(&mut self.entry);
        self.in_statement = false;
        if !entry.started && entry.query_time.is_none() {
            return None;
        }
        let Some(timestamp) = entry.set_timestamp.or(self.time) else {
            return Some(Finished::Unparsed);
        };
        let statement = entry.statement.trim();
        if statement.is_empty() {
            return Some(Finished::Unparsed);
        }
        let shape = mask(&mask_string_literals(statement));
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".to_owned());
        let message = format!(
            "Query_time: {}s Lock_time: {}s Rows_sent: {} Rows_examined: {} {shape}",
            show(&entry.query_time),
            show(&entry.lock_time),
            show(&entry.rows_sent),
            show(&entry.rows_examined),
        );
        let mut fields = Fields::new();
        for (name, value) in [
            ("query_time", &entry.query_time),
            ("lock_time", &entry.lock_time),
            ("rows_sent", &entry.rows_sent),
            ("rows_examined", &entry.rows_examined),
        ] {
            if let Some(number) = value.as_deref().and_then(|v| v.parse::<f64>().ok()) {
                fields.insert(name, Value::from(number));
            }
        }
        if let Some(user_host) = entry.user_host {
            fields.insert("user_host", Value::String(user_host));
        }
        if let Some(schema) = entry.schema {
            fields.insert("schema", Value::String(schema));
        }
        Some(Finished::Event(RawLogEvent {
            timestamp,
            level: String::new(),
            message,
            fields: fields.into_map(),
        }))
    }

    fn header(&mut self, header: &str) {
        self.entry.started = true;
        if let Some(time) = header.strip_prefix("Time:") {
            let time = time.trim();
            self.time =
                parse_rfc3339(time, self.rule.zone).or_else(|| parse_mariadb(time, self.rule.zone));
        } else if let Some(user_host) = header.strip_prefix("User@Host:") {
            self.entry.user_host = Some(user_host.trim().to_owned());
        } else {
            // `Key: value  Key: value` pairs.
            let mut words = header.split_whitespace();
            while let Some(key) = words.next() {
                let Some(key) = key.strip_suffix(':') else {
                    continue;
                };
                let Some(value) = words.next() else { break };
                let slot = match key {
                    "Query_time" => &mut self.entry.query_time,
                    "Lock_time" => &mut self.entry.lock_time,
                    "Rows_sent" => &mut self.entry.rows_sent,
                    "Rows_examined" => &mut self.entry.rows_examined,
                    "Schema" => &mut self.entry.schema,
                    _ => continue,
                };
                *slot = Some(value.to_owned());
            }
        }
    }
}

fn is_banner(text: &str) -> bool {
    text.contains(", Version: ")
        || text.starts_with("Tcp port:")
        || (text.starts_with("Time") && text.contains("Command") && text.contains("Argument"))
}

/// Replaces every quoted string (`'…'`, `"…"`, with `''` and backslash
/// escapes) by `'<str>'`. An unterminated quote masks to the end.
pub(crate) fn mask_string_literals(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' && c != '"' {
            out.push(c);
            continue;
        }
        let quote = c;
        while let Some(d) = chars.next() {
            if d == '\\' {
                chars.next();
            } else if d == quote {
                if chars.peek() == Some(&quote) {
                    chars.next();
                } else {
                    break;
                }
            }
        }
        out.push_str("'<str>'");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str) -> (Vec<RawLogEvent>, usize) {
        let mut parser = SlowLogParser::new(TimeRule::default());
        let mut out = Vec::new();
        let mut unparsed = 0;
        let mut take = |f: Option<Finished>| match f {
            Some(Finished::Event(e)) => out.push(e),
            Some(Finished::Unparsed) => unparsed += 1,
            None => {}
        };
        for line in text.split('\n') {
            take(parser.line(line.as_bytes()));
        }
        take(parser.finish());
        (out, unparsed)
    }

    #[test]
    fn entries_become_masked_events() {
        let log = "/usr/sbin/mariadbd, Version: 10.11.6-MariaDB (Debian). started with:\n\
Tcp port: 3306  Unix socket: /run/mysqld/mysqld.sock\n\
Time\t\t    Id Command\tArgument\n\
# Time: 261201 14:53:53\n\
# User@Host: app[app] @ localhost []\n\
# Thread_id: 8  Schema: shop  QC_hit: No\n\
# Query_time: 1.500123  Lock_time: 0.000045  Rows_sent: 1  Rows_examined: 91204\n\
use shop;\n\
SET timestamp=1764600833;\n\
SELECT * FROM orders\n\
  WHERE email = 'a''b@x.com' AND id = 42;\n\
# User@Host: app[app] @ localhost []\n\
# Query_time: 0.2  Lock_time: 0  Rows_sent: 0  Rows_examined: 7\r\n\
SELECT * FROM orders WHERE email = \"z@y\" AND id = 9;\n\
# Query_time: 0.2\n";
        let (events, unparsed) = events(log);
        assert_eq!(unparsed, 1, "the last entry has no statement");
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0].timestamp,
            Timestamp::from_unix_millis(1_764_600_833_000)
        );
        assert_eq!(
            events[0].message,
            "Query_time: 1.500123s Lock_time: 0.000045s Rows_sent: 1 Rows_examined: 91204 \
             SELECT * FROM orders WHERE email = '<str>' AND id = <num>;"
        );
        assert_eq!(events[0].fields["schema"], "shop");
        assert_eq!(events[0].fields["rows_examined"], 91204.0);
        // The second entry has no SET timestamp: the sticky `# Time:` applies.
        assert_eq!(
            events[1].timestamp,
            Timestamp::parse("2026-12-01T14:53:53Z").unwrap()
        );
        assert!(
            events[1]
                .message
                .ends_with("email = '<str>' AND id = <num>;")
        );
    }

    #[test]
    fn literals() {
        assert_eq!(
            mask_string_literals(r"a = 'it\'s' or b = 'x''y' or c = 'open"),
            "a = '<str>' or b = '<str>' or c = '<str>'"
        );
    }
}

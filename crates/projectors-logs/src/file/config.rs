//! `[logs]`: which files hold which topic, in which format.

use std::collections::BTreeMap;
use std::path::PathBuf;

use aci_contracts::LogTopic;
use serde::Deserialize;

/// The `[logs]` configuration section.
///
/// Keys: `max_raw_events`, and per topic (`[logs.topics.<TOPIC>]`) `dir`,
/// `files`, `format`, `pattern`, `time_key`, `level_key`, `message_key`,
/// `timestamp`, `time_zone`. The one example of every key is the README's
/// "Configuration" section (a test parses it); the crate's README describes
/// each format and the timestamp rules.
///
/// With no topic configured the embedded mock stays the log source. Unknown
/// keys are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsConfig {
    /// The files of each topic; a topic left out is `DATA_SOURCE_UNKNOWN`.
    #[serde(default)]
    pub topics: BTreeMap<LogTopic, TopicConfig>,
    /// Most matched events returned to the projector per call, the most
    /// recent ones (default 200); `match_count` still counts all.
    #[serde(default)]
    pub max_raw_events: Option<usize>,
}

impl LogsConfig {
    /// Whether any topic has files (otherwise the mock is the source).
    #[must_use]
    pub fn is_configured(&self) -> bool {
        !self.topics.is_empty()
    }
}

/// One topic's files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    /// The directory that holds the files. Nothing outside it is opened:
    /// globs match file names in it, and a symlink whose target leaves it is
    /// refused.
    pub dir: PathBuf,
    /// File-name globs (`*`, `?`, `[...]`, `{a,b}`) matched against the names
    /// of the files directly in `dir`; no `/`, no `..`. Each must match at
    /// least one file when a query runs. Names ending in `.gz` (or starting
    /// with the gzip magic) are decompressed.
    pub files: Vec<String>,
    /// How each file is written.
    pub format: LogFormat,
    /// JSON lines / logfmt: the key of the time.
    #[serde(default)]
    pub time_key: Option<String>,
    /// JSON lines / logfmt: the key of the level.
    #[serde(default)]
    pub level_key: Option<String>,
    /// JSON lines / logfmt: the key of the message.
    #[serde(default)]
    pub message_key: Option<String>,
    /// `pattern`: the regular expression (the `regex` crate's syntax) a line
    /// that starts an event matches, with the named groups `timestamp` and
    /// `message` (required), `level` (optional) and any other kept as a
    /// field. Lines it does not match continue the event before them.
    #[serde(default)]
    pub pattern: Option<String>,
    /// JSON lines / logfmt / `pattern`: how the time is written (default
    /// `rfc3339`).
    #[serde(default)]
    pub timestamp: Option<String>,
    /// The zone of times written without an offset (layouts without `%z`,
    /// RFC 3164 syslog, MariaDB's `# Time: YYMMDD`, the presets' local
    /// times such as nginx's and Redis'): `UTC` (the default),
    /// `±HH:MM`, or an IANA zone name (`Europe/Berlin`, `America/New_York`;
    /// the tz database is compiled in). In a named zone, a local time in the
    /// repeated hour of a fall-back change is the earlier instant, and one in
    /// the skipped hour of a spring-forward change does not parse (counted in
    /// `stats.unparsed`).
    #[serde(default)]
    pub time_zone: Option<String>,
}

/// A file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LogFormat {
    /// One JSON object per line.
    JsonLines,
    /// `key=value key="quoted value"` per line.
    Logfmt,
    /// RFC 3164 or RFC 5424 syslog lines (with or without `<PRI>`).
    Syslog,
    /// The MariaDB/MySQL slow query log (multi-line entries).
    MysqlSlow,
    /// Text lines read with the topic's `pattern`; lines it does not match
    /// continue the event before them.
    Pattern,
    /// Spring Boot's default logback line, stack traces as continuation.
    SpringBoot,
    /// PostgreSQL's stderr log with `log_line_prefix = '%m [%p] '`.
    Postgresql,
    /// Redis' own log.
    Redis,
    /// nginx's error log.
    NginxError,
    /// MariaDB's error log.
    MariadbError,
    /// Kubernetes components (klog).
    Klog,
    /// Container runtime log files (`/var/log/containers`).
    Cri,
}

impl LogFormat {
    /// Whether the window can be found by seeking (every event starts at a
    /// line the format recognizes); all formats but the slow log.
    #[must_use]
    pub const fn is_line_based(self) -> bool {
        !matches!(self, Self::MysqlSlow)
    }

    /// The preset's `format` name, for the presets (`None` for the other
    /// formats).
    #[must_use]
    pub const fn preset_name(self) -> Option<&'static str> {
        match self {
            Self::SpringBoot => Some("spring_boot"),
            Self::Postgresql => Some("postgresql"),
            Self::Redis => Some("redis"),
            Self::NginxError => Some("nginx_error"),
            Self::MariadbError => Some("mariadb_error"),
            Self::Klog => Some("klog"),
            Self::Cri => Some("cri"),
            Self::JsonLines | Self::Logfmt | Self::Syslog | Self::MysqlSlow | Self::Pattern => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_unknown_keys() {
        let config: LogsConfig = toml_like(
            r#"{"topics": {"APPLICATION": {"dir": "/x", "files": ["a*"], "format": "json_lines"}}}"#,
        )
        .unwrap();
        assert_eq!(
            config.topics[&LogTopic::Application].format,
            LogFormat::JsonLines
        );
        assert!(toml_like(r#"{"topics": {}, "bogus": 1}"#).is_err());
        assert!(
            toml_like(r#"{"topics": {"NOPE": {"dir": "/x", "files": [], "format": "syslog"}}}"#)
                .is_err()
        );
        assert!(
            toml_like(
                r#"{"topics": {"APPLICATION": {"dir": "/x", "files": [], "format": "syslog", "path": "/etc"}}}"#
            )
            .is_err()
        );
    }

    fn toml_like(json: &str) -> serde_json::Result<LogsConfig> {
        serde_json::from_str(json)
    }
}

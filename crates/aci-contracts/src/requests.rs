//! What the agent supplies to each tool.
//!
//! Requests are logical only: none carries a tool call id, a result size,
//! ranking knobs, infrastructure coordinates, connection data or secrets.
//! Unknown fields are rejected.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{LogTopic, SqlValue};

/// Default `lookback_minutes` of a log query.
pub const DEFAULT_LOOKBACK_MINUTES: u32 = 60;
/// Smallest accepted `lookback_minutes`.
pub const MIN_LOOKBACK_MINUTES: u32 = 1;
/// Largest accepted `lookback_minutes` (one day).
pub const MAX_LOOKBACK_MINUTES: u32 = 1440;
/// Longest accepted `query` of `lookup_knowledge` and `query_logs`, in
/// characters. Results echo the query as their scope, so this bound (with the
/// ban on control characters) is what lets every projection fit the default
/// agent result limit.
pub const MAX_QUERY_CHARS: usize = 256;
/// The most bytes a valid query takes inside a JSON string: at most four per
/// character (a 4-byte UTF-8 character; `"` and `\` escape to two bytes, and
/// the only control characters allowed, tab, line feed and carriage return,
/// escape to two).
pub const MAX_QUERY_JSON_BYTES: usize = 4 * MAX_QUERY_CHARS;

/// Why a decoded request is still not acceptable. Maps to `INVALID_INPUT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// A required text field is empty or only whitespace.
    #[error("field `{0}` must not be blank")]
    Blank(&'static str),
    /// `lookback_minutes` is outside 1..=1440.
    #[error("lookback_minutes must be between 1 and 1440")]
    LookbackOutOfRange,
    /// A text field is longer than allowed.
    #[error("field `{0}` is too long")]
    TooLong(&'static str),
    /// A text field holds a control character other than tab, line feed or
    /// carriage return.
    #[error("field `{0}` holds a control character")]
    ControlCharacter(&'static str),
}

/// Input of `lookup_knowledge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "lookup_knowledge request")]
pub struct LookupKnowledgeRequest {
    /// What to look up, in plain words: a symptom, an error message or a
    /// component name (at most 256 characters).
    #[schemars(length(min = 1, max = 256))]
    pub query: String,
}

impl LookupKnowledgeRequest {
    /// Checks what the schema cannot: the query is not blank and at most
    /// [`MAX_QUERY_CHARS`] characters.
    ///
    /// # Errors
    /// [`RequestError`] naming the broken rule.
    pub fn validate(&self) -> Result<(), RequestError> {
        bounded_query(&self.query)
    }
}

/// Input of `query_logs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "query_logs request")]
pub struct QueryLogsRequest {
    /// Which logical log topic to search.
    pub topic: LogTopic,
    /// Words to match in log messages, for example `timeout` or
    /// `connection pool` (at most 256 characters).
    #[schemars(length(min = 1, max = 256))]
    pub query: String,
    /// How many minutes back from now to search, 1 to 1440; 60 when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1440), extend("default" = 60))]
    pub lookback_minutes: Option<u32>,
}

impl QueryLogsRequest {
    /// The lookback window, with the default applied.
    #[must_use]
    pub fn effective_lookback_minutes(&self) -> u32 {
        self.lookback_minutes.unwrap_or(DEFAULT_LOOKBACK_MINUTES)
    }

    /// Checks what the schema cannot: a non-blank query of at most
    /// [`MAX_QUERY_CHARS`] characters and a window in 1..=1440.
    ///
    /// # Errors
    /// [`RequestError`] naming the broken rule.
    pub fn validate(&self) -> Result<(), RequestError> {
        bounded_query(&self.query)?;
        if !(MIN_LOOKBACK_MINUTES..=MAX_LOOKBACK_MINUTES)
            .contains(&self.effective_lookback_minutes())
        {
            return Err(RequestError::LookbackOutOfRange);
        }
        Ok(())
    }
}

/// Input of `query_mysql`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "query_mysql request")]
pub struct QueryMysqlRequest {
    /// The logical name of the business database to read, as the operator named it.
    #[schemars(length(min = 1))]
    pub data_source: String,
    /// One read-only SELECT statement with `?` placeholders for values.
    #[schemars(length(min = 1))]
    pub sql: String,
    /// Values for the `?` placeholders, in order: strings, numbers, booleans or null.
    #[serde(default)]
    pub params: Vec<SqlValue>,
}

impl QueryMysqlRequest {
    /// Checks what the schema cannot: data source and statement are not blank.
    ///
    /// # Errors
    /// [`RequestError::Blank`] naming the blank field.
    pub fn validate(&self) -> Result<(), RequestError> {
        non_blank("data_source", &self.data_source)?;
        non_blank("sql", &self.sql)
    }
}

fn bounded_query(query: &str) -> Result<(), RequestError> {
    non_blank("query", query)?;
    if query.chars().count() > MAX_QUERY_CHARS {
        return Err(RequestError::TooLong("query"));
    }
    if query
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    {
        return Err(RequestError::ControlCharacter("query"));
    }
    Ok(())
}

fn non_blank(field: &'static str, value: &str) -> Result<(), RequestError> {
    if value.trim().is_empty() {
        Err(RequestError::Blank(field))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_rejected() {
        for (value, ok) in [
            (json!({"query": "q"}), true),
            (json!({"query": "q", "topK": 5}), false),
            (json!({"query": "q", "tool_call_id": "x"}), false),
        ] {
            assert_eq!(
                serde_json::from_value::<LookupKnowledgeRequest>(value).is_ok(),
                ok
            );
        }
        assert!(
            serde_json::from_value::<QueryLogsRequest>(
                json!({"topic": "APPLICATION", "query": "q", "region": "eu"})
            )
            .is_err()
        );
        assert!(
            serde_json::from_value::<QueryMysqlRequest>(
                json!({"data_source": "d", "sql": "select 1", "limit": 10})
            )
            .is_err()
        );
    }

    #[test]
    fn logs_lookback_defaults_and_range() {
        let r: QueryLogsRequest =
            serde_json::from_value(json!({"topic": "SYSTEM_EVENTS", "query": "oom"})).unwrap();
        assert_eq!(r.effective_lookback_minutes(), 60);
        assert_eq!(r.validate(), Ok(()));
        for (minutes, ok) in [(0, false), (1, true), (1440, true), (1441, false)] {
            let r = QueryLogsRequest {
                lookback_minutes: Some(minutes),
                ..r.clone()
            };
            assert_eq!(r.validate().is_ok(), ok, "{minutes}");
        }
        assert_eq!(
            QueryLogsRequest {
                query: " \t".into(),
                ..r
            }
            .validate(),
            Err(RequestError::Blank("query"))
        );
    }

    #[test]
    fn queries_are_bounded_in_characters() {
        let at = LookupKnowledgeRequest {
            query: "数".repeat(MAX_QUERY_CHARS),
        };
        assert_eq!(at.validate(), Ok(()));
        let over = LookupKnowledgeRequest {
            query: "a".repeat(MAX_QUERY_CHARS + 1),
        };
        assert_eq!(over.validate(), Err(RequestError::TooLong("query")));
        let logs = QueryLogsRequest {
            topic: LogTopic::Application,
            query: "x".repeat(MAX_QUERY_CHARS + 1),
            lookback_minutes: None,
        };
        assert_eq!(logs.validate(), Err(RequestError::TooLong("query")));
        let emoji = "😀".repeat(MAX_QUERY_CHARS);
        assert_eq!(
            serde_json::to_string(&emoji).unwrap().len(),
            MAX_QUERY_JSON_BYTES + 2
        );
        assert_eq!(LookupKnowledgeRequest { query: emoji }.validate(), Ok(()));
        for (query, ok) in [
            ("a\tb\nc\r", true),
            ("a\u{0}b", false),
            ("a\u{1b}[31m", false),
            ("a\u{85}", false),
        ] {
            let r = LookupKnowledgeRequest {
                query: query.into(),
            };
            assert_eq!(r.validate().is_ok(), ok, "{query:?}");
        }
    }

    #[test]
    fn mysql_params_are_scalars_or_null() {
        let r: QueryMysqlRequest = serde_json::from_value(json!({
            "data_source": "orders",
            "sql": "SELECT * FROM t WHERE a = ? AND b = ? AND c = ? AND d = ? AND e = ?",
            "params": [1, "x", null, true, 18446744073709551615u64]
        }))
        .unwrap();
        assert_eq!(
            r.params,
            vec![
                SqlValue::Int(1),
                SqlValue::Text("x".into()),
                SqlValue::Null,
                SqlValue::Bool(true),
                SqlValue::UInt(u64::MAX)
            ]
        );
        assert!(
            serde_json::from_value::<QueryMysqlRequest>(
                json!({"data_source": "d", "sql": "s", "params": [[1]]})
            )
            .is_err()
        );
        assert!(
            serde_json::from_value::<QueryMysqlRequest>(
                json!({"data_source": "d", "sql": "s", "params": [{"a": 1}]})
            )
            .is_err()
        );
        let no_params: QueryMysqlRequest =
            serde_json::from_value(json!({"data_source": "d", "sql": "s"})).unwrap();
        assert!(no_params.params.is_empty());
    }
}

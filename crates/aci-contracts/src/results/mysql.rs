use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

use super::{EvidenceResult, ValidationError, check_status_and_count};
use crate::{ReadyEvidenceStatus, ToolCallId};

/// A JSON scalar: a placeholder value in a request, or one cell of a row.
///
/// Cells keep their structure: integers (unsigned 64-bit too) and floats stay
/// numbers; decimals are exact strings, dates and times ISO 8601 strings, and
/// binary base64 strings; the column's [`ColumnType`] says which.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SqlValue {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer above `i64::MAX`.
    UInt(u64),
    /// A floating-point number.
    Float(f64),
    /// Text, or a decimal, temporal or base64 value written as text.
    Text(String),
}

impl JsonSchema for SqlValue {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("SqlValue")
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A string, number, boolean or null.",
            "type": ["string", "number", "boolean", "null"]
        })
    }
}

/// How to read the cells of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ColumnType {
    /// `true` or `false`.
    Boolean,
    /// Signed integer numbers.
    Integer,
    /// Unsigned integer numbers, up to 2^64 - 1.
    UnsignedInteger,
    /// Exact decimals written as strings, for example `"12.50"`.
    Decimal,
    /// Floating-point numbers.
    Float,
    /// Text.
    String,
    /// Bytes written as base64 strings.
    Binary,
    /// Calendar dates, `YYYY-MM-DD`.
    Date,
    /// Times of day or durations, `HH:MM:SS[.ffffff]`.
    Time,
    /// Date and time, `YYYY-MM-DDTHH:MM:SS[.ffffff]`.
    Datetime,
    /// JSON documents written as strings.
    Json,
}

/// One result column.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MysqlColumn {
    /// The column's name or alias.
    pub name: String,
    /// How to read its cells.
    #[serde(rename = "type")]
    pub column_type: ColumnType,
}

/// The bounded result of `query_mysql`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "query_mysql result")]
pub struct QueryMysqlResult {
    /// `EVIDENCE_FOUND` or `NO_EVIDENCE`.
    pub evidence_status: ReadyEvidenceStatus,
    /// The framework's id of this call; cite the evidence by it.
    pub tool_call_id: ToolCallId,
    /// The columns, in the statement's order.
    pub columns: Vec<MysqlColumn>,
    /// The rows, each with one cell per column, in column order.
    pub rows: Vec<Vec<SqlValue>>,
    /// Number of rows in `rows`.
    pub returned_count: u64,
    /// Whether rows were left out or cells shortened.
    pub truncated: bool,
}

/// What the model sees of a `query_mysql` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "query_mysql observation")]
pub struct QueryMysqlObservation {
    /// `EVIDENCE_FOUND` or `NO_EVIDENCE`.
    pub evidence_status: ReadyEvidenceStatus,
    /// The framework's id of this call; cite the evidence by it.
    pub tool_call_id: ToolCallId,
    /// The columns, in the statement's order.
    pub columns: Vec<MysqlColumn>,
    /// The rows, each with one cell per column, in column order.
    pub rows: Vec<Vec<SqlValue>>,
    /// Whether rows were left out or cells shortened.
    pub truncated: bool,
}

impl EvidenceResult for QueryMysqlResult {
    type Observation = QueryMysqlObservation;

    evidence_identity!();

    fn validate(&self) -> Result<(), ValidationError> {
        check_status_and_count(
            self.evidence_status,
            !self.rows.is_empty(),
            self.returned_count,
            self.rows.len(),
        )?;
        let columns = self.columns.len();
        for (row, cells) in self.rows.iter().enumerate() {
            if cells.len() != columns {
                return Err(ValidationError::RowWidthMismatch {
                    row,
                    cells: cells.len(),
                    columns,
                });
            }
        }
        Ok(())
    }

    fn observation(&self) -> QueryMysqlObservation {
        QueryMysqlObservation {
            evidence_status: self.evidence_status,
            tool_call_id: self.tool_call_id.clone(),
            columns: self.columns.clone(),
            rows: self.rows.clone(),
            truncated: self.truncated,
        }
    }
}

impl super::Counted for QueryMysqlResult {}

//! The pure projector: raw rows -> the bounded `query_mysql` result.

use std::borrow::Cow;

use aci_contracts::{
    ColumnType, MAX_ID_BYTES, MysqlColumn, QueryMysqlRequest, QueryMysqlResult,
    ReadyEvidenceStatus, SqlValue, ToolCallId,
};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use invocation_core::bounds::{self, InvalidBounds, ProjectionBounds};
use invocation_core::redact::{RedactionPass, Redactor};
use invocation_core::{ProjectionContext, ProjectionError, Projector};

use crate::{Error, RawCell, RawColumnKind, RawResultSet, Result};
use invocation_core::json_size::{escaped_prefix, quoted_len};

/// Default [`MysqlBounds::max_rows`].
pub const DEFAULT_MAX_ROWS: usize = 100;
/// Default [`MysqlBounds::max_columns`].
pub const DEFAULT_MAX_COLUMNS: usize = 32;
/// Default [`MysqlBounds::max_cell_bytes`].
pub const DEFAULT_MAX_CELL_BYTES: usize = 1024;
/// Default [`MysqlBounds::max_column_name_bytes`].
pub const DEFAULT_MAX_COLUMN_NAME_BYTES: usize = 64;
/// Default [`MysqlBounds::max_rows_bytes`].
pub const DEFAULT_MAX_ROWS_BYTES: usize = 12 * 1024;
/// The smallest cell budget the bounds must leave every cell: enough for any
/// number, boolean, date, time or `DECIMAL(65,30)` to be shown whole.
pub const MIN_CELL_BYTES: usize = 72;

/// The longest `type` of a column, quoted.
const LONGEST_COLUMN_TYPE: &str = "\"UNSIGNED_INTEGER\"";

/// How much of a raw result the agent gets. Every byte count is UTF-8 bytes
/// of the result's JSON text, quotes and escapes included, so the bounds hold
/// for any content (worst-case escaping too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MysqlBounds {
    /// Most rows returned.
    pub max_rows: usize,
    /// Most columns returned; further columns (and their cells) are dropped.
    pub max_columns: usize,
    /// Most bytes of one cell. Text and JSON are shortened at character
    /// boundaries, binary at byte boundaries before base64; a decimal or
    /// temporal value that does not fit becomes `null`.
    pub max_cell_bytes: usize,
    /// Most bytes of one column name, shortened at character boundaries.
    pub max_column_name_bytes: usize,
    /// Most bytes of the whole `rows` array; rows that would go beyond it are
    /// dropped. When there are many columns, each cell's budget shrinks to
    /// `(max_rows_bytes - 4) / columns - 1` so that the first row always fits.
    pub max_rows_bytes: usize,
}

impl Default for MysqlBounds {
    fn default() -> Self {
        Self {
            max_rows: DEFAULT_MAX_ROWS,
            max_columns: DEFAULT_MAX_COLUMNS,
            max_cell_bytes: DEFAULT_MAX_CELL_BYTES,
            max_column_name_bytes: DEFAULT_MAX_COLUMN_NAME_BYTES,
            max_rows_bytes: DEFAULT_MAX_ROWS_BYTES,
        }
    }
}

impl ProjectionBounds for MysqlBounds {
    /// Checks that these bounds always give a valid result: at least one row
    /// and one column, a name budget that fits `""`, and at least
    /// [`MIN_CELL_BYTES`] for every cell of a widest row.
    fn validate(&self) -> Result<(), InvalidBounds> {
        bounds::at_least("max_rows", self.max_rows, 1)?;
        bounds::at_least("max_columns", self.max_columns, 1)?;
        bounds::at_least("max_column_name_bytes", self.max_column_name_bytes, 2)?;
        bounds::at_least("max_cell_bytes", self.max_cell_bytes, MIN_CELL_BYTES)?;
        if self.cell_budget(self.max_columns) < MIN_CELL_BYTES {
            return Err(InvalidBounds::Inconsistent(
                "max_rows_bytes leaves less than MIN_CELL_BYTES per cell of a widest row",
            ));
        }
        Ok(())
    }
}

impl MysqlBounds {
    /// The budget of each cell in a row of `columns` cells: small enough that
    /// one such row always fits in `max_rows_bytes`.
    #[must_use]
    pub fn cell_budget(&self, columns: usize) -> usize {
        let per_cell = self.max_rows_bytes.saturating_sub(4) / columns.max(1);
        self.max_cell_bytes.min(per_cell.saturating_sub(1))
    }

    /// The largest result JSON these bounds allow, for a tool call id of the
    /// longest allowed length ([`MAX_ID_BYTES`]) and any raw input.
    #[must_use]
    pub fn worst_case_json_bytes(&self) -> usize {
        let head =
            r#"{"evidence_status":"EVIDENCE_FOUND","tool_call_id":"#.len() + MAX_ID_BYTES + 2;
        let column =
            r#"{"name":,"type":}"#.len() + self.max_column_name_bytes + LONGEST_COLUMN_TYPE.len();
        let columns = r#","columns":"#.len() + 2 + self.max_columns * (column + 1);
        let rows = r#","rows":"#.len() + self.max_rows_bytes;
        let tail = r#","returned_count":"#.len()
            + u64::MAX.to_string().len()
            + r#","truncated":false}"#.len();
        head + columns + rows + tail
    }
}

/// Projects raw rows into the bounded [`QueryMysqlResult`]. Pure and deterministic.
///
/// - Column order is kept; columns beyond `max_columns` are dropped.
/// - Values keep their structure: null, booleans, integers (unsigned 64-bit
///   above `i64::MAX` too), decimals as exact strings, floats (non-finite ->
///   `null`), dates and times in ISO 8601, text and JSON as strings, binary
///   as base64.
/// - Zero rows give `NO_EVIDENCE` (columns are still listed).
/// - `truncated` is true whenever a row, a column, a value or a name was
///   dropped or shortened, here or by the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MysqlProjector {
    bounds: MysqlBounds,
}

impl MysqlProjector {
    /// A projector with `bounds`.
    ///
    /// # Errors
    /// [`Error::InvalidBounds`] when the bounds cannot guarantee a valid result.
    pub fn new(bounds: MysqlBounds) -> Result<Self> {
        bounds.validate()?;
        Ok(Self { bounds })
    }

    /// A projector with bounds already validated.
    pub(crate) const fn from_valid(bounds: MysqlBounds) -> Self {
        Self { bounds }
    }

    /// The bounds.
    #[must_use]
    pub const fn bounds(&self) -> &MysqlBounds {
        &self.bounds
    }

    /// Projects `raw` for the call `tool_call_id`, redacting with the
    /// built-in rules ([`Redactor::builtin`]); the counts are dropped. The
    /// boundary calls [`project_redacting`](Self::project_redacting) with its
    /// own pass.
    ///
    /// # Errors
    /// As [`project_redacting`](Self::project_redacting).
    pub fn project_raw(
        &self,
        tool_call_id: &ToolCallId,
        raw: &RawResultSet,
    ) -> Result<QueryMysqlResult> {
        let redactor = Redactor::builtin();
        self.project_redacting(tool_call_id, raw, &RedactionPass::new(&redactor))
    }

    /// Projects `raw` for the call `tool_call_id`. Column names, text and
    /// JSON values, and binary values that are UTF-8 text go through
    /// `redaction` before they are bounded; a text or binary value of a
    /// column whose name names a secret (`password`, `api_key`, ...) is
    /// replaced whole. No row or column is dropped by redaction.
    ///
    /// # Errors
    /// [`Error::RowWidthMismatch`] when a raw row's width differs from the
    /// number of raw columns.
    pub fn project_redacting(
        &self,
        tool_call_id: &ToolCallId,
        raw: &RawResultSet,
        redaction: &RedactionPass<'_>,
    ) -> Result<QueryMysqlResult> {
        let bounds = &self.bounds;
        let width = raw.columns.len();
        let kept = width.min(bounds.max_columns);
        let mut truncated = kept < width || raw.more_rows || raw.values_shortened;

        let columns = raw.columns[..kept]
            .iter()
            .map(|column| {
                let name = redaction.redact(&column.name);
                let (name, cut) =
                    escaped_prefix(&name, bounds.max_column_name_bytes.saturating_sub(2));
                truncated |= cut;
                MysqlColumn {
                    name: name.to_owned(),
                    column_type: column_type(column.kind),
                }
            })
            .collect();

        // A malformed raw response is refused whole, not partly shown.
        if let Some((row, bad)) = raw
            .rows
            .iter()
            .enumerate()
            .find(|(_, row)| row.len() != width)
        {
            return Err(Error::RowWidthMismatch {
                row,
                values: bad.len(),
                columns: width,
            });
        }

        let cell_budget = bounds.cell_budget(kept);
        let secret_columns: Vec<bool> = raw.columns[..kept]
            .iter()
            .map(|column| redaction.names_secret(&column.name))
            .collect();
        let mut rows = Vec::new();
        let mut rows_bytes = 2; // `[` and `]`
        for raw_row in &raw.rows {
            if rows.len() == bounds.max_rows {
                truncated = true;
                break;
            }
            let mut row = Vec::with_capacity(kept);
            let mut row_bytes = 2 + kept.saturating_sub(1); // brackets and commas
            let mut row_cut = false;
            // Counted only if the row is kept.
            let row_redaction = redaction.fresh();
            for ((value, column), &secret) in raw_row[..kept]
                .iter()
                .zip(&raw.columns)
                .zip(&secret_columns)
            {
                let value = redact_value(value, &column.name, secret, &row_redaction);
                let (cell, cut) = project_value(&value, cell_budget);
                row_bytes += encoded_len(&cell);
                row_cut |= cut;
                row.push(cell);
            }
            let separator = usize::from(!rows.is_empty());
            if rows_bytes + separator + row_bytes > bounds.max_rows_bytes {
                truncated = true;
                break;
            }
            rows_bytes += separator + row_bytes;
            truncated |= row_cut;
            redaction.add(&row_redaction.into_redactions());
            rows.push(row);
        }

        let evidence_status = if rows.is_empty() {
            ReadyEvidenceStatus::NoEvidence
        } else {
            ReadyEvidenceStatus::EvidenceFound
        };
        Ok(QueryMysqlResult {
            evidence_status,
            tool_call_id: tool_call_id.clone(),
            columns,
            returned_count: rows.len() as u64,
            rows,
            truncated,
        })
    }
}

impl Projector for MysqlProjector {
    type Request = QueryMysqlRequest;
    type Raw = RawResultSet;
    type Output = QueryMysqlResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, QueryMysqlRequest>,
        raw: &RawResultSet,
    ) -> Result<QueryMysqlResult, ProjectionError> {
        self.project_redacting(context.tool_call_id, raw, context.redaction())
            .map_err(ProjectionError::new)
    }
}

/// The contract's column type of a raw column kind.
#[must_use]
pub const fn column_type(kind: RawColumnKind) -> ColumnType {
    match kind {
        RawColumnKind::Boolean => ColumnType::Boolean,
        RawColumnKind::Integer => ColumnType::Integer,
        RawColumnKind::UnsignedInteger => ColumnType::UnsignedInteger,
        RawColumnKind::Decimal => ColumnType::Decimal,
        RawColumnKind::Float | RawColumnKind::Double => ColumnType::Float,
        RawColumnKind::Text => ColumnType::String,
        RawColumnKind::Binary => ColumnType::Binary,
        RawColumnKind::Date => ColumnType::Date,
        RawColumnKind::Time => ColumnType::Time,
        RawColumnKind::DateTime => ColumnType::Datetime,
        RawColumnKind::Json => ColumnType::Json,
    }
}

/// A value with its secrets replaced by markers (borrowed when it has none):
/// text by the rules, or whole under a column that names a secret; JSON
/// member by member (re-serialized, compact, only when something was
/// replaced); binary that is UTF-8 text as that text, so that its base64
/// never carries a secret.
fn redact_value<'v>(
    value: &'v RawCell,
    column: &str,
    secret_column: bool,
    redaction: &RedactionPass<'_>,
) -> Cow<'v, RawCell> {
    // A whole value under a column that names a secret; else by the rules.
    let redact_text = |text: &'v str| {
        if secret_column {
            redaction.redact_field(column, text)
        } else {
            redaction.redact(text)
        }
    };
    match value {
        RawCell::Text(text) => match redact_text(text) {
            Cow::Borrowed(_) => Cow::Borrowed(value),
            Cow::Owned(text) => Cow::Owned(RawCell::Text(text)),
        },
        // Parsing is the cost: skipped when no rule could find anything.
        RawCell::Json(text) if !secret_column && !redaction.may_hold_secrets(text) => {
            Cow::Borrowed(value)
        }
        RawCell::Json(text) => {
            let redacted = match serde_json::from_str::<serde_json::Value>(text) {
                Ok(json) if secret_column && !(json.is_object() || json.is_array()) => {
                    redact_text(text)
                }
                Ok(mut json) => {
                    if redaction.redact_json(&mut json) {
                        Cow::Owned(json.to_string())
                    } else {
                        Cow::Borrowed(text.as_str())
                    }
                }
                // Not JSON after all (the executor reads JSON columns as text).
                Err(_) => redact_text(text),
            };
            match redacted {
                Cow::Borrowed(_) => Cow::Borrowed(value),
                Cow::Owned(text) => Cow::Owned(RawCell::Json(text)),
            }
        }
        RawCell::Bytes(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => match redact_text(text) {
                Cow::Borrowed(_) => Cow::Borrowed(value),
                Cow::Owned(text) => Cow::Owned(RawCell::Bytes(text.into_bytes())),
            },
            Err(_) => Cow::Borrowed(value),
        },
        _ => Cow::Borrowed(value),
    }
}

/// One cell within `budget` JSON bytes, and whether anything was lost.
fn project_value(value: &RawCell, budget: usize) -> (SqlValue, bool) {
    let exact = match value {
        RawCell::Null => SqlValue::Null,
        RawCell::Bool(b) => SqlValue::Bool(*b),
        RawCell::Int(i) => SqlValue::Int(*i),
        RawCell::UInt(u) => i64::try_from(*u).map_or(SqlValue::UInt(*u), SqlValue::Int),
        RawCell::Float(f) => float(f32_to_f64(*f)),
        RawCell::Double(f) => float(*f),
        RawCell::Decimal(text) => SqlValue::Text(text.clone()),
        RawCell::Date { year, month, day } => {
            SqlValue::Text(format!("{year:04}-{month:02}-{day:02}"))
        }
        RawCell::Time {
            negative,
            hours,
            minutes,
            seconds,
            micros,
        } => {
            let sign = if *negative { "-" } else { "" };
            SqlValue::Text(format!(
                "{sign}{hours:02}:{minutes:02}:{seconds:02}{}",
                fraction(*micros)
            ))
        }
        RawCell::DateTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            micros,
        } => SqlValue::Text(format!(
            "{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}{}",
            fraction(*micros)
        )),
        RawCell::Text(text) | RawCell::Json(text) => {
            let (kept, cut) = escaped_prefix(text, budget.saturating_sub(2));
            return (SqlValue::Text(kept.to_owned()), cut);
        }
        RawCell::Bytes(bytes) => {
            let max = budget.saturating_sub(2) / 4 * 3;
            let cut = bytes.len() > max;
            let kept = if cut { &bytes[..max] } else { &bytes[..] };
            return (SqlValue::Text(STANDARD.encode(kept)), cut);
        }
    };
    // Numbers, decimals and temporal values are never shortened: whole or null.
    if encoded_len(&exact) > budget {
        (SqlValue::Null, true)
    } else {
        (exact, false)
    }
}

fn fraction(micros: u32) -> String {
    if micros == 0 {
        String::new()
    } else {
        format!(".{micros:06}")
    }
}

/// JSON has no NaN or infinity: those become `null`.
fn float(f: f64) -> SqlValue {
    if f.is_finite() {
        SqlValue::Float(f)
    } else {
        SqlValue::Null
    }
}

/// Widens through the shortest decimal text, so `0.1f32` reads `0.1`, not
/// `0.10000000149011612`.
fn f32_to_f64(f: f32) -> f64 {
    if f.is_finite() {
        f.to_string().parse().unwrap_or(f64::from(f))
    } else {
        f64::from(f)
    }
}

/// The length of `value` in the result JSON.
fn encoded_len(value: &SqlValue) -> usize {
    match value {
        SqlValue::Null | SqlValue::Bool(true) => 4,
        SqlValue::Bool(false) => 5,
        SqlValue::Int(i) => i.to_string().len(),
        SqlValue::UInt(u) => u.to_string().len(),
        SqlValue::Float(f) => serde_json::to_string(f).map_or(usize::MAX, |s| s.len()),
        SqlValue::Text(text) => quoted_len(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_fit_the_default_agent_result_limit() {
        let bounds = MysqlBounds::default();
        bounds.validate().unwrap();
        assert!(bounds.worst_case_json_bytes() <= invocation_core::DEFAULT_MAX_AGENT_RESULT_BYTES);
        assert!(bounds.cell_budget(bounds.max_columns) >= MIN_CELL_BYTES);
        assert_eq!(bounds.cell_budget(1), DEFAULT_MAX_CELL_BYTES);
    }

    #[test]
    fn longest_column_type_is_longest() {
        for kind in [
            RawColumnKind::Boolean,
            RawColumnKind::Integer,
            RawColumnKind::UnsignedInteger,
            RawColumnKind::Decimal,
            RawColumnKind::Float,
            RawColumnKind::Double,
            RawColumnKind::Text,
            RawColumnKind::Binary,
            RawColumnKind::Date,
            RawColumnKind::Time,
            RawColumnKind::DateTime,
            RawColumnKind::Json,
        ] {
            let json = serde_json::to_string(&column_type(kind)).unwrap();
            assert!(json.len() <= LONGEST_COLUMN_TYPE.len(), "{json}");
        }
    }

    #[test]
    fn bad_bounds_are_refused() {
        let ok = MysqlBounds::default();
        for bad in [
            MysqlBounds { max_rows: 0, ..ok },
            MysqlBounds {
                max_columns: 0,
                ..ok
            },
            MysqlBounds {
                max_column_name_bytes: 1,
                ..ok
            },
            MysqlBounds {
                max_cell_bytes: MIN_CELL_BYTES - 1,
                ..ok
            },
            MysqlBounds {
                max_rows_bytes: 1000,
                ..ok
            },
        ] {
            assert!(
                matches!(MysqlProjector::new(bad), Err(Error::InvalidBounds(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn encoded_lengths_match_serde_json() {
        for value in [
            SqlValue::Null,
            SqlValue::Bool(true),
            SqlValue::Bool(false),
            SqlValue::Int(i64::MIN),
            SqlValue::UInt(u64::MAX),
            SqlValue::Float(-1.797_693_134_862_315_7e308),
            SqlValue::Float(0.1),
            SqlValue::Text("a\"\u{1}😀".into()),
        ] {
            assert_eq!(
                encoded_len(&value),
                serde_json::to_string(&value).unwrap().len()
            );
        }
    }

    #[test]
    fn values_map_to_structured_cells() {
        let big = 1024;
        let cases = [
            (RawCell::UInt(u64::MAX), SqlValue::UInt(u64::MAX)),
            (RawCell::UInt(7), SqlValue::Int(7)),
            (RawCell::Float(0.1), SqlValue::Float(0.1)),
            (RawCell::Double(f64::NAN), SqlValue::Null),
            (RawCell::Double(f64::NEG_INFINITY), SqlValue::Null),
            (
                RawCell::Decimal("-12.500000".into()),
                SqlValue::Text("-12.500000".into()),
            ),
            (
                RawCell::Date {
                    year: 2024,
                    month: 2,
                    day: 29,
                },
                SqlValue::Text("2024-02-29".into()),
            ),
            (
                RawCell::Time {
                    negative: true,
                    hours: 838,
                    minutes: 59,
                    seconds: 59,
                    micros: 0,
                },
                SqlValue::Text("-838:59:59".into()),
            ),
            (
                RawCell::DateTime {
                    year: 2024,
                    month: 1,
                    day: 2,
                    hour: 3,
                    minute: 4,
                    second: 5,
                    micros: 60,
                },
                SqlValue::Text("2024-01-02T03:04:05.000060".into()),
            ),
            (
                RawCell::Bytes(vec![0, 255, 1]),
                SqlValue::Text("AP8B".into()),
            ),
        ];
        for (raw, expected) in cases {
            assert_eq!(project_value(&raw, big), (expected, false), "{raw:?}");
        }
        // Shortening.
        let (cell, cut) = project_value(&RawCell::Text("é".repeat(100)), 10);
        assert_eq!((cell, cut), (SqlValue::Text("éééé".into()), true));
        let (cell, cut) = project_value(&RawCell::Bytes(vec![1; 100]), 10);
        assert_eq!((cell, cut), (SqlValue::Text("AQEBAQEB".into()), true));
        let (cell, cut) = project_value(&RawCell::Decimal("1".repeat(100)), 72);
        assert_eq!((cell, cut), (SqlValue::Null, true));
    }
}

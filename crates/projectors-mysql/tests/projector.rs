//! Projector: golden JSON for evidence found, no evidence and truncated, and
//! property tests over arbitrary raw input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aci_contracts::{
    EvidenceResult, EvidenceStatus, MAX_ID_BYTES, QueryMysqlRequest, QueryMysqlResult, SqlValue,
    ToolCallId,
};
use invocation_core::DEFAULT_MAX_AGENT_RESULT_BYTES;
use invocation_core::bounds::ProjectionBounds;
use invocation_core::conformance::ProjectorHarness;
use projectors_mysql::{
    Error, MysqlBounds, MysqlProjector, RawCell, RawColumn, RawColumnKind, RawResultSet,
};
use proptest::prelude::*;

fn id(text: &str) -> ToolCallId {
    ToolCallId::new(text).unwrap()
}

fn every_type() -> RawResultSet {
    use RawColumnKind as K;
    RawResultSet {
        columns: vec![
            RawColumn::new("id", K::UnsignedInteger),
            RawColumn::new("delta", K::Integer),
            RawColumn::new("amount", K::Decimal),
            RawColumn::new("ratio", K::Double),
            RawColumn::new("weight", K::Float),
            RawColumn::new("day", K::Date),
            RawColumn::new("at", K::Time),
            RawColumn::new("created", K::DateTime),
            RawColumn::new("note", K::Text),
            RawColumn::new("payload", K::Binary),
            RawColumn::new("doc", K::Json),
            RawColumn::new("active", K::Boolean),
        ],
        rows: vec![
            vec![
                RawCell::UInt(u64::MAX),
                RawCell::Int(-42),
                RawCell::Decimal("12345678901234.123456".into()),
                RawCell::Double(0.25),
                RawCell::Float(0.1),
                RawCell::Date {
                    year: 2024,
                    month: 2,
                    day: 29,
                },
                RawCell::Time {
                    negative: true,
                    hours: 838,
                    minutes: 59,
                    seconds: 59,
                    micros: 0,
                },
                RawCell::DateTime {
                    year: 2024,
                    month: 5,
                    day: 6,
                    hour: 7,
                    minute: 8,
                    second: 9,
                    micros: 123_456,
                },
                RawCell::Text("订单超时 ⏱️ \"quoted\"".into()),
                RawCell::Bytes(vec![0, 1, 2, 253, 254, 255]),
                RawCell::Json(r#"{"a": [1, 2]}"#.into()),
                RawCell::Bool(true),
            ],
            vec![
                RawCell::UInt(7),
                RawCell::Null,
                RawCell::Null,
                RawCell::Double(f64::NAN),
                RawCell::Null,
                RawCell::Null,
                RawCell::Null,
                RawCell::Null,
                RawCell::Null,
                RawCell::Null,
                RawCell::Null,
                RawCell::Bool(false),
            ],
        ],
        more_rows: false,
        values_shortened: false,
    }
}

fn project(projector: &MysqlProjector, call: &str, raw: &RawResultSet) -> QueryMysqlResult {
    let result = projector.project_raw(&id(call), raw).unwrap();
    result.validate().unwrap();
    result
}

#[test]
fn golden_evidence_found() {
    let result = project(&MysqlProjector::default(), "call_found", &every_type());
    let expected = concat!(
        r#"{"evidence_status":"EVIDENCE_FOUND","tool_call_id":"call_found","columns":["#,
        r#"{"name":"id","type":"UNSIGNED_INTEGER"},{"name":"delta","type":"INTEGER"},"#,
        r#"{"name":"amount","type":"DECIMAL"},{"name":"ratio","type":"FLOAT"},"#,
        r#"{"name":"weight","type":"FLOAT"},{"name":"day","type":"DATE"},"#,
        r#"{"name":"at","type":"TIME"},{"name":"created","type":"DATETIME"},"#,
        r#"{"name":"note","type":"STRING"},{"name":"payload","type":"BINARY"},"#,
        r#"{"name":"doc","type":"JSON"},{"name":"active","type":"BOOLEAN"}],"#,
        r#""rows":[[18446744073709551615,-42,"12345678901234.123456",0.25,0.1,"2024-02-29","-838:59:59","#,
        r#""2024-05-06T07:08:09.123456","订单超时 ⏱️ \"quoted\"","AAEC/f7/","{\"a\": [1, 2]}",true],"#,
        r#"[7,null,null,null,null,null,null,null,null,null,null,false]],"#,
        r#""returned_count":2,"truncated":false}"#
    );
    assert_eq!(serde_json::to_string(&result).unwrap(), expected);
}

#[test]
fn golden_no_evidence() {
    let raw = RawResultSet {
        columns: vec![
            RawColumn::new("id", RawColumnKind::Integer),
            RawColumn::new("state", RawColumnKind::Text),
        ],
        ..RawResultSet::default()
    };
    let result = project(&MysqlProjector::default(), "call_empty", &raw);
    assert_eq!(result.evidence_status, EvidenceStatus::NoEvidence);
    assert_eq!(
        serde_json::to_string(&result).unwrap(),
        concat!(
            r#"{"evidence_status":"NO_EVIDENCE","tool_call_id":"call_empty","columns":["#,
            r#"{"name":"id","type":"INTEGER"},{"name":"state","type":"STRING"}],"#,
            r#""rows":[],"returned_count":0,"truncated":false}"#
        )
    );
}

#[test]
fn golden_truncated() {
    let bounds = MysqlBounds {
        max_rows: 2,
        max_columns: 2,
        max_cell_bytes: 72,
        max_column_name_bytes: 8,
        max_rows_bytes: 1024,
    };
    let projector = MysqlProjector::new(bounds).unwrap();
    let raw = RawResultSet {
        columns: vec![
            RawColumn::new("message_text", RawColumnKind::Text),
            RawColumn::new("blob", RawColumnKind::Binary),
            RawColumn::new("dropped", RawColumnKind::Integer),
        ],
        rows: (0..3)
            .map(|i| {
                vec![
                    RawCell::Text(format!("{i}: {}", "连接池耗尽😀".repeat(10))),
                    RawCell::Bytes(vec![0xAB; 100]),
                    RawCell::Int(i),
                ]
            })
            .collect(),
        more_rows: false,
        values_shortened: false,
    };
    let result = project(&projector, "call_cut", &raw);
    assert!(result.truncated);
    assert_eq!(
        serde_json::to_string(&result).unwrap(),
        concat!(
            r#"{"evidence_status":"EVIDENCE_FOUND","tool_call_id":"call_cut","columns":["#,
            r#"{"name":"messag","type":"STRING"},{"name":"blob","type":"BINARY"}],"#,
            r#""rows":[["0: 连接池耗尽😀连接池耗尽😀连接池耗尽😀连接池","#,
            r#""q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6ur"],"#,
            r#"["1: 连接池耗尽😀连接池耗尽😀连接池耗尽😀连接池","#,
            r#""q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6ur"]],"#,
            r#""returned_count":2,"truncated":true}"#
        )
    );
}

#[test]
fn executor_side_cuts_are_reported() {
    let mut raw = every_type();
    raw.more_rows = true;
    assert!(project(&MysqlProjector::default(), "c", &raw).truncated);
    let mut raw = every_type();
    raw.values_shortened = true;
    assert!(project(&MysqlProjector::default(), "c", &raw).truncated);
}

#[test]
fn malformed_rows_are_a_projection_error() {
    let mut raw = every_type();
    raw.rows[1].pop();
    assert!(matches!(
        MysqlProjector::default().project_raw(&id("c"), &raw),
        Err(Error::RowWidthMismatch {
            row: 1,
            values: 11,
            columns: 12
        })
    ));
}

#[test]
fn the_widest_most_escaped_input_fits_the_default_limit() {
    // Every name and cell made of characters that escape to 6 bytes each.
    let nasty = "\u{1}".repeat(5000);
    let columns = 64;
    let raw = RawResultSet {
        columns: (0..columns)
            .map(|_| RawColumn::new(nasty.clone(), RawColumnKind::UnsignedInteger))
            .collect(),
        rows: (0..500)
            .map(|_| (0..columns).map(|_| RawCell::Text(nasty.clone())).collect())
            .collect(),
        more_rows: true,
        values_shortened: true,
    };
    let projector = MysqlProjector::default();
    let long_id = "x".repeat(MAX_ID_BYTES);
    let result = project(&projector, &long_id, &raw);
    let json = serde_json::to_string(&result).unwrap();
    assert!(json.len() <= projector.bounds().worst_case_json_bytes());
    assert!(
        json.len() <= DEFAULT_MAX_AGENT_RESULT_BYTES,
        "{}",
        json.len()
    );
    assert!(result.truncated);
    assert_eq!(result.evidence_status, EvidenceStatus::EvidenceFound);
}

// ---------------------------------------------------------------------------
// Properties over arbitrary raw input.

/// Mostly short text; sometimes arbitrary characters; rarely long runs of
/// characters that escape badly or are multi-byte (the worst cases for bounds).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => proptest::collection::vec(proptest::char::range('a', 'z'), 0..12).prop_map(String::from_iter),
        2 => proptest::collection::vec(any::<char>(), 0..64).prop_map(String::from_iter),
        1 => (prop_oneof![Just("\u{1}"), Just("\""), Just("😀"), Just("中"), Just("ab")], 0usize..1500)
            .prop_map(|(unit, count)| unit.repeat(count)),
    ]
}

fn kind() -> impl Strategy<Value = RawColumnKind> {
    use RawColumnKind as K;
    prop_oneof![
        Just(K::Boolean),
        Just(K::Integer),
        Just(K::UnsignedInteger),
        Just(K::Decimal),
        Just(K::Float),
        Just(K::Double),
        Just(K::Text),
        Just(K::Binary),
        Just(K::Date),
        Just(K::Time),
        Just(K::DateTime),
        Just(K::Json),
    ]
}

fn value() -> impl Strategy<Value = RawCell> {
    prop_oneof![
        Just(RawCell::Null),
        any::<bool>().prop_map(RawCell::Bool),
        any::<i64>().prop_map(RawCell::Int),
        any::<u64>().prop_map(RawCell::UInt),
        any::<f32>().prop_map(RawCell::Float),
        any::<f64>().prop_map(RawCell::Double),
        prop_oneof![
            (any::<i64>(), any::<u64>())
                .prop_map(|(whole, fraction)| format!("{whole}.{fraction:030}")),
            (0usize..200).prop_map(|digits| "9".repeat(digits)),
        ]
        .prop_map(RawCell::Decimal),
        (any::<u16>(), any::<u8>(), any::<u8>()).prop_map(|(year, month, day)| RawCell::Date {
            year,
            month,
            day
        }),
        (
            any::<bool>(),
            any::<u32>(),
            any::<u8>(),
            any::<u8>(),
            any::<u32>()
        )
            .prop_map(
                |(negative, hours, minutes, seconds, micros)| RawCell::Time {
                    negative,
                    hours,
                    minutes,
                    seconds,
                    micros
                }
            ),
        (
            any::<u16>(),
            any::<u8>(),
            any::<u8>(),
            any::<u8>(),
            any::<u32>()
        )
            .prop_map(|(year, month, day, hour, micros)| RawCell::DateTime {
                year,
                month,
                day,
                hour,
                minute: 59,
                second: 59,
                micros
            }),
        text().prop_map(RawCell::Text),
        text().prop_map(RawCell::Json),
        (any::<u8>(), 0usize..2000).prop_map(|(byte, len)| RawCell::Bytes(vec![byte; len])),
    ]
}

/// Arbitrary columns and rows. Rows cycle through a few generated ones, so
/// that row counts beyond the bounds stay cheap to generate.
fn raw_result() -> impl Strategy<Value = RawResultSet> {
    (
        proptest::collection::vec((text(), kind()), 0..40),
        0usize..130,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_flat_map(|(columns, count, more_rows, values_shortened)| {
            let width = columns.len();
            proptest::collection::vec(proptest::collection::vec(value(), width), 1..5).prop_map(
                move |distinct| RawResultSet {
                    columns: columns
                        .iter()
                        .map(|(name, kind)| RawColumn::new(name.clone(), *kind))
                        .collect(),
                    rows: (0..count)
                        .map(|i| distinct[i % distinct.len()].clone())
                        .collect(),
                    more_rows,
                    values_shortened,
                },
            )
        })
}

fn bounds() -> impl Strategy<Value = MysqlBounds> {
    (
        1usize..50,
        1usize..40,
        72usize..2000,
        2usize..100,
        0usize..20_000,
    )
        .prop_filter_map(
            "bounds must be valid",
            |(max_rows, max_columns, max_cell_bytes, max_column_name_bytes, max_rows_bytes)| {
                let bounds = MysqlBounds {
                    max_rows,
                    max_columns,
                    max_cell_bytes,
                    max_column_name_bytes,
                    max_rows_bytes,
                };
                bounds.validate().is_ok().then_some(bounds)
            },
        )
}

fn check_properties(projector: &MysqlProjector, raw: &RawResultSet) {
    let bounds = projector.bounds();
    let long_id = "c".repeat(MAX_ID_BYTES);
    let result = project(projector, &long_id, raw);
    let json = serde_json::to_string(&result).unwrap();

    // Bounded.
    assert!(json.len() <= bounds.worst_case_json_bytes());
    if *bounds == MysqlBounds::default() {
        assert!(json.len() <= DEFAULT_MAX_AGENT_RESULT_BYTES);
    }
    assert!(result.rows.len() <= bounds.max_rows);
    assert!(result.columns.len() <= bounds.max_columns);
    let rows_json = serde_json::to_string(&result.rows).unwrap();
    assert!(rows_json.len() <= bounds.max_rows_bytes);
    let cell_budget = bounds.cell_budget(result.columns.len());
    for column in &result.columns {
        assert!(serde_json::to_string(&column.name).unwrap().len() <= bounds.max_column_name_bytes);
    }

    // Counts consistent with lists; rows as wide as the columns.
    assert_eq!(result.returned_count, result.rows.len() as u64);
    assert_eq!(
        result.columns.len(),
        raw.columns.len().min(bounds.max_columns)
    );
    for (row, raw_row) in result.rows.iter().zip(&raw.rows) {
        assert_eq!(row.len(), result.columns.len());
        for ((cell, raw_value), column) in row.iter().zip(raw_row).zip(&raw.columns) {
            assert!(serde_json::to_string(cell).unwrap().len() <= cell_budget);
            // Text is an exact prefix of its source, or (under a column
            // whose name names a secret, as a random `rnhpwd` does) the
            // marker that replaced it whole.
            if let (SqlValue::Text(shown), RawCell::Text(source) | RawCell::Json(source)) =
                (cell, raw_value)
            {
                let secret_column =
                    invocation_core::redact::Redactor::builtin().names_secret(&column.name);
                assert!(
                    source.starts_with(shown.as_str())
                        || (secret_column && shown.starts_with("<redacted:")),
                    "{shown:?} under {:?}",
                    column.name
                );
            }
        }
    }

    // Status follows rows: raw rows are never reported as no evidence.
    assert_eq!(
        result.evidence_status,
        if raw.rows.is_empty() {
            EvidenceStatus::NoEvidence
        } else {
            EvidenceStatus::EvidenceFound
        }
    );

    // Truncation is never silent.
    if !result.truncated {
        assert_eq!(result.rows.len(), raw.rows.len());
        assert_eq!(result.columns.len(), raw.columns.len());
        assert!(!raw.more_rows && !raw.values_shortened);
        for (column, raw_column) in result.columns.iter().zip(&raw.columns) {
            assert_eq!(column.name, raw_column.name);
        }
        for (row, raw_row) in result.rows.iter().zip(&raw.rows) {
            for (cell, raw_value) in row.iter().zip(raw_row) {
                if let (SqlValue::Text(shown), RawCell::Text(source) | RawCell::Json(source)) =
                    (cell, raw_value)
                {
                    assert_eq!(shown, source);
                }
            }
        }
    }

    let observation = serde_json::to_value(result.observation()).unwrap();
    assert!(observation.get("returned_count").is_none());

    // Stable through a store round trip (replay).
    let reparsed: QueryMysqlResult = serde_json::from_str(&json).unwrap();
    assert_eq!(serde_json::to_string(&reparsed).unwrap(), json);
}

/// The projector conformance suite of invocation-core.
struct Mysql;

impl ProjectorHarness for Mysql {
    type Projector = MysqlProjector;

    fn projector(&self) -> MysqlProjector {
        MysqlProjector::default()
    }

    fn request(&self, _raw: &RawResultSet) -> QueryMysqlRequest {
        QueryMysqlRequest {
            data_source: "shop".into(),
            sql: "SELECT 1".into(),
            params: Vec::new(),
        }
    }

    /// Cut: rows, columns or names left out or shortened, text shortened,
    /// or the executor's own cuts. Other values (binary as base64, decimals,
    /// times) may be shortened in ways not told from outside: `None` for a
    /// raw response that has any.
    fn was_cut(&self, raw: &RawResultSet, result: &QueryMysqlResult) -> Option<bool> {
        let names_cut = result
            .columns
            .iter()
            .zip(&raw.columns)
            .any(|(column, raw_column)| column.name != raw_column.name);
        let text_cut = result.rows.iter().zip(&raw.rows).any(|(row, raw_row)| {
            row.iter().zip(raw_row).any(|(cell, raw_value)| {
                matches!(
                    (cell, raw_value),
                    (SqlValue::Text(shown), RawCell::Text(source) | RawCell::Json(source))
                        if shown != source
                )
            })
        });
        let cut = raw.more_rows
            || raw.values_shortened
            || result.rows.len() < raw.rows.len()
            || result.columns.len() < raw.columns.len()
            || names_cut
            || text_cut;
        let told = raw.rows.iter().flatten().all(|value| {
            matches!(
                value,
                RawCell::Null
                    | RawCell::Bool(_)
                    | RawCell::Int(_)
                    | RawCell::UInt(_)
                    | RawCell::Text(_)
                    | RawCell::Json(_)
            )
        });
        (cut || told).then_some(cut)
    }

    fn result_keys(&self) -> &'static [&'static str] {
        &[
            "columns",
            "evidence_status",
            "returned_count",
            "rows",
            "tool_call_id",
            "truncated",
            "name",
            "type",
        ]
    }
}

invocation_core::projector_conformance_tests!(Mysql, raw_result());

proptest! {
    #![proptest_config(testkit::proptest_config())]

    #[test]
    fn default_bounds_hold_for_arbitrary_raw_input(raw in raw_result()) {
        check_properties(&MysqlProjector::default(), &raw);
    }

    #[test]
    fn any_valid_bounds_hold_for_arbitrary_raw_input(bounds in bounds(), raw in raw_result()) {
        check_properties(&MysqlProjector::new(bounds).unwrap(), &raw);
    }
}

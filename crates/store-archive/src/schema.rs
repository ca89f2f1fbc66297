//! Versioned migrations, applied in order, each once, in one transaction
//! each, under an advisory lock so that archivers starting together apply
//! them once.
//!
//! | table | holds |
//! | --- | --- |
//! | `aci_archive_schema` | applied migration versions |
//! | `aci_runs` | one row per run: owner, first call, deadline (inserted once) |
//! | `aci_calls` | one row per call, partitioned by month of `finished_at_ms` (`aci_calls_YYYYMM`) |
//! | `aci_seals` | a sealed run's count and head hash, and its checkpoint |
//! | `aci_checkpoints` | signed checkpoints over batches of sealed runs |
//!
//! Every table is written with `INSERT` only: the archiver role needs
//! `SELECT, INSERT` on them (and `USAGE` on the checkpoint sequence); the
//! owner role creates partitions, migrates and drops old partitions.

use tokio_postgres::Client;

use crate::{ArchiveError, Result};

/// The advisory lock key of migrations and partition creation.
pub(crate) const DDL_LOCK: i64 = 0x0ac1_a7c4_1e00_0001;

/// Migrations, version = position + 1.
const MIGRATIONS: &[&str] = &[
    // 1: runs, calls (partitioned by month), seals, checkpoints.
    r"
CREATE TABLE aci_runs (
    run_id text PRIMARY KEY,
    owner text,
    started_at_ms bigint,
    deadline_ms bigint,
    first_archived_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE aci_calls (
    run_id text NOT NULL,
    tool_call_id text NOT NULL,
    seq bigint NOT NULL,
    finished_at_ms bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    tool_name text NOT NULL,
    status text NOT NULL,
    evidence_status text,
    error_code text,
    retryable boolean,
    scope_fp text NOT NULL,
    replayed_from text,
    redactions text NOT NULL,
    request text,
    scope text,
    result text,
    raw text,
    raw_sha256 text,
    raw_mode text NOT NULL,
    request_bytes bigint NOT NULL,
    raw_bytes bigint,
    result_bytes bigint,
    timings_us text,
    leaf_hash bytea NOT NULL,
    chain_hash bytea NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, tool_call_id, finished_at_ms)
) PARTITION BY RANGE (finished_at_ms);
CREATE INDEX aci_calls_run_seq ON aci_calls (run_id, seq);
CREATE INDEX aci_calls_run_call ON aci_calls (run_id, tool_call_id);
CREATE TABLE aci_checkpoints (
    id bigserial PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    size integer NOT NULL,
    root bytea NOT NULL,
    note text NOT NULL
);
CREATE TABLE aci_seals (
    run_id text PRIMARY KEY,
    count bigint NOT NULL,
    head bytea NOT NULL,
    sealed_at timestamptz NOT NULL DEFAULT now(),
    checkpoint_id bigint REFERENCES aci_checkpoints (id),
    checkpoint_index integer
);
",
    // 2: the payload columns compressed with lz4 instead of pglz when the
    // server has it (several times less CPU per archived call); the month
    // partitions made since inherit it. A server built without lz4 keeps
    // pglz.
    r"
DO $$
DECLARE
  part record;
  alter_columns constant text := 'ALTER COLUMN request SET COMPRESSION lz4, '
    'ALTER COLUMN scope SET COMPRESSION lz4, ALTER COLUMN result SET COMPRESSION lz4, '
    'ALTER COLUMN raw SET COMPRESSION lz4';
BEGIN
  EXECUTE 'ALTER TABLE aci_calls ' || alter_columns;
  FOR part IN
    SELECT c.relname FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN pg_class p ON p.oid = i.inhparent
    WHERE p.relname = 'aci_calls'
  LOOP
    EXECUTE format('ALTER TABLE %I ', part.relname) || alter_columns;
  END LOOP;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
  RAISE NOTICE 'lz4 compression is not available: the payload columns keep pglz';
END $$;
",
    // 3: no second index on (run_id, tool_call_id): the primary key
    // (run_id, tool_call_id, finished_at_ms) starts with those columns and
    // serves every lookup of a call, so the other only cost an index insert
    // per archived call.
    r"
DROP INDEX IF EXISTS aci_calls_run_call;
",
];

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i32 = 3;

/// Applies the migrations the database lacks.
pub(crate) async fn migrate(client: &mut Client) -> Result<()> {
    let tx = client
        .transaction()
        .await
        .map_err(ArchiveError::unavailable("migrate"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&DDL_LOCK])
        .await
        .map_err(ArchiveError::unavailable("migrate"))?;
    // Only DDL needs more than SELECT and INSERT: a role without CREATE (the
    // archiver's) gets through when the owner migrated already.
    let exists: bool = tx
        .query_one("SELECT to_regclass('aci_archive_schema') IS NOT NULL", &[])
        .await
        .map_err(ArchiveError::unavailable("migrate"))?
        .get(0);
    if !exists {
        tx.batch_execute(
            "CREATE TABLE aci_archive_schema (
                version integer PRIMARY KEY,
                applied_at timestamptz NOT NULL DEFAULT now())",
        )
        .await
        .map_err(ArchiveError::unavailable("migrate"))?;
    }
    let row = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM aci_archive_schema",
            &[],
        )
        .await
        .map_err(ArchiveError::unavailable("migrate"))?;
    let current: i32 = row.get(0);
    if current > SCHEMA_VERSION {
        return Err(ArchiveError::SchemaTooNew {
            found: current,
            known: SCHEMA_VERSION,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate() {
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        if version <= current {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(ArchiveError::unavailable("migrate"))?;
        tx.execute(
            "INSERT INTO aci_archive_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(ArchiveError::unavailable("migrate"))?;
        tracing::info!(version, "archive schema migrated");
    }
    tx.commit()
        .await
        .map_err(ArchiveError::unavailable("migrate"))
}

/// The start (Unix ms) of the month after the one holding `millis`.
pub(crate) fn next_month(millis: i64) -> i64 {
    partition_of(millis).2
}

/// The month partition holding `millis`: its name and `[from, to)` bounds.
pub(crate) fn partition_of(millis: i64) -> (String, i64, i64) {
    let days = millis.div_euclid(86_400_000);
    let (year, month) = civil_from_days(days);
    let from = days_from_civil(year, month) * 86_400_000;
    let (next_year, next_month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    let to = days_from_civil(next_year, next_month) * 86_400_000;
    (format!("aci_calls_{year:04}{month:02}"), from, to)
}

/// The exclusive upper bound (ms) of a partition, from its name.
pub(crate) fn partition_end(name: &str) -> Option<i64> {
    let digits = name.strip_prefix("aci_calls_")?;
    if digits.len() != 6 {
        return None;
    }
    let year: i64 = digits[..4].parse().ok()?;
    let month: u32 = digits[4..].parse().ok()?;
    if !(1..=12).contains(&month) {
        return None;
    }
    Some(partition_of(days_from_civil(year, month) * 86_400_000).2)
}

/// Days since 1970-01-01 of the first day of `year`-`month` (Howard
/// Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32) -> i64 {
    let month = i64::from(month);
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The year and month of a day since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, u32::try_from(month).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_and_their_bounds() {
        // 2026-12-03T07:00:00Z
        let (name, from, to) = partition_of(1_796_281_200_000);
        assert_eq!(name, "aci_calls_202612");
        assert_eq!(from, 1_796_083_200_000); // 2026-12-01
        assert_eq!(to, 1_798_761_600_000); // 2027-01-01
        assert_eq!(partition_end("aci_calls_202612"), Some(to));
        assert_eq!(partition_of(0).0, "aci_calls_197001");
        assert_eq!(partition_of(-1).0, "aci_calls_196912");
        assert_eq!(partition_end("aci_calls_2026"), None);
        assert_eq!(partition_end("aci_calls_202613"), None);
    }
}

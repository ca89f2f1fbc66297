//! The archive against a real PostgreSQL: a database of its own per test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use aci_contracts::{ErrorCode, InvocationStatus, Timestamp};
use invocation_core::conformance::{fresh_run_id, new_invocation};
use invocation_core::redact::Redactor;
use invocation_core::{Finalization, InvocationRecord, ManualClock, ReadyEvidence, RunState};
use store_archive::testing::TestDatabase;
use store_archive::{Archive, ArchiveInput, ArchivedCall, Problem, RawPolicy, Verdict};

fn final_record(run: &aci_contracts::RunId, id: &str, at_ms: i64) -> InvocationRecord {
    let clock = ManualClock::at_default_start();
    let mut record = InvocationRecord::from_new(new_invocation(&clock, run, id, "tool_a", id));
    record.apply(Finalization::Ready {
        evidence: ReadyEvidence::Found,
        raw_json: r#"{"rows":[{"token":"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}]}"#.into(),
        agent_result_json: format!(r#"{{"answer":"{id}"}}"#),
        redactions: Default::default(),
        replayed_from: None,
        finished_at: Timestamp::from_unix_millis(at_ms),
        timings: Some(invocation_core::PhaseTimings {
            preflight: std::time::Duration::from_micros(12),
            execution: Some(std::time::Duration::from_micros(3400)),
            projection: None,
        }),
    });
    record
}

fn input(record: &InvocationRecord, raw: RawPolicy) -> ArchiveInput {
    ArchiveInput {
        call: ArchivedCall::from_record(record.clone(), raw, &Redactor::builtin()).unwrap(),
        run: Some(RunState {
            started_at: record.created_at,
            deadline: None,
            owner: Some("alice".into()),
        }),
    }
}

async fn archive(db: &TestDatabase) -> Archive {
    let archive = Archive::connect(db.url()).await.expect("connect");
    archive.migrate().await.expect("migrate");
    archive
}

const NOW: i64 = 1_796_281_200_000;

#[tokio::test]
async fn redelivered_calls_are_archived_once_and_chained() {
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    archive
        .migrate()
        .await
        .expect("migrating again changes nothing");
    let run = fresh_run_id();
    let records: Vec<_> = (0..5)
        .map(|n| final_record(&run, &format!("c{n}"), NOW + n))
        .collect();
    let batch: Vec<_> = records.iter().map(|r| input(r, RawPolicy::Full)).collect();
    let first = archive.insert(&batch[..3]).await.unwrap();
    assert_eq!((first.inserted, first.duplicates), (3, 0));
    let again = archive.insert(&batch).await.unwrap();
    assert_eq!((again.inserted, again.duplicates), (2, 3));
    let stored = archive.calls(run.as_str()).await.unwrap();
    let order: Vec<_> = stored
        .iter()
        .map(|s| (s.seq, s.call.tool_call_id.as_str()))
        .collect();
    assert_eq!(
        order,
        [(1, "c0"), (2, "c1"), (3, "c2"), (4, "c3"), (5, "c4")]
    );
    assert_eq!(
        archive.verify_run(run.as_str(), None).await.unwrap(),
        Verdict::Intact {
            records: 5,
            sealed: false
        }
    );
    assert_eq!(
        archive.verify_run("no-such-run", None).await.unwrap(),
        Verdict::NotFound
    );
}

/// The insert's statements are prepared once per connection. A migration
/// that changes what one of them returns (here the type of `run_id`) makes
/// PostgreSQL refuse it as prepared ("cached plan must not change result
/// type"): the insert prepares them again and goes on, the chain unbroken.
#[tokio::test]
async fn an_insert_prepares_again_when_a_migration_changed_a_table_under_it() {
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    let run = fresh_run_id();
    let records: Vec<_> = (0..3)
        .map(|n| final_record(&run, &format!("c{n}"), NOW + n))
        .collect();
    let first = archive
        .insert(&[input(&records[0], RawPolicy::None)])
        .await
        .unwrap();
    assert_eq!(first.inserted, 1);
    db.client()
        .await
        .batch_execute("ALTER TABLE aci_calls ALTER COLUMN run_id TYPE varchar(200)")
        .await
        .unwrap();
    for record in &records[1..] {
        let done = archive
            .insert(&[input(record, RawPolicy::None)])
            .await
            .expect("the statements are prepared again");
        assert_eq!((done.inserted, done.duplicates), (1, 0));
    }
    let order: Vec<_> = archive
        .calls(run.as_str())
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.seq, s.call.tool_call_id))
        .collect();
    assert_eq!(
        order,
        [
            (1, "c0".to_owned()),
            (2, "c1".to_owned()),
            (3, "c2".to_owned())
        ]
    );
    assert_eq!(
        archive.verify_run(run.as_str(), None).await.unwrap(),
        Verdict::Intact {
            records: 3,
            sealed: false
        }
    );
}

#[tokio::test]
async fn the_raw_policy_decides_what_of_the_raw_is_kept() {
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    let run = fresh_run_id();
    let record = final_record(&run, "c1", NOW);
    let raw = record.raw_json.clone().unwrap();
    for (policy, id) in [
        (RawPolicy::None, "none"),
        (RawPolicy::Redacted, "redacted"),
        (RawPolicy::Full, "full"),
    ] {
        let mut record = final_record(&run, id, NOW);
        record.raw_json = Some(raw.clone());
        archive.insert(&[input(&record, policy)]).await.unwrap();
    }
    let stored: BTreeMap<String, ArchivedCall> = archive
        .calls(run.as_str())
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.call.tool_call_id.clone(), s.call))
        .collect();
    assert_eq!(stored["none"].raw, None);
    assert_eq!(stored["full"].raw.as_deref(), Some(raw.as_str()));
    let redacted = stored["redacted"].raw.as_deref().unwrap();
    assert!(!redacted.contains("ghp_abcdefghijklmnopqrstuvwxyz0123456789"));
    assert!(redacted.contains("rows"));
    for call in stored.values() {
        assert_eq!(
            call.timings_us.as_deref(),
            Some(r#"{"execution":3400,"preflight":12,"projection":null}"#)
        );
        assert_eq!(call.raw_sha256, stored["full"].raw_sha256);
        assert!(call.raw_sha256.is_some());
    }
}

#[tokio::test]
async fn an_error_record_is_archived_and_a_projecting_one_refused() {
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    let run = fresh_run_id();
    let clock = ManualClock::at_default_start();
    let mut record = InvocationRecord::from_new(new_invocation(&clock, &run, "e", "tool_a", "e"));
    assert!(
        ArchivedCall::from_record(record.clone(), RawPolicy::Full, &Redactor::builtin()).is_err()
    );
    record.apply(Finalization::Error {
        error_code: ErrorCode::ExecutionTimeout,
        retryable: false,
        raw_json: None,
        finished_at: Timestamp::from_unix_millis(NOW),
        timings: None,
    });
    archive
        .insert(&[input(&record, RawPolicy::Full)])
        .await
        .unwrap();
    let stored = archive.calls(run.as_str()).await.unwrap();
    assert_eq!(stored[0].call.status, InvocationStatus::Error.as_str());
    assert_eq!(
        stored[0].call.error_code.as_deref(),
        Some("EXECUTION_TIMEOUT")
    );
}

/// Two archivers (two connections) insert overlapping batches of the same
/// runs at once: one row per call, and every chain without gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_archivers_never_fork_a_chain() {
    let db = TestDatabase::create().await;
    let first = archive(&db).await;
    let second = archive(&db).await;
    let runs: Vec<_> = (0..4).map(|_| fresh_run_id()).collect();
    let mut inputs = Vec::new();
    for n in 0..40 {
        let run = &runs[n % runs.len()];
        inputs.push(input(
            &final_record(run, &format!("c{n}"), NOW + n as i64),
            RawPolicy::None,
        ));
    }
    let reversed: Vec<_> = inputs.iter().rev().cloned().collect();
    let mut tasks = Vec::new();
    for (archive, batch) in [(first.clone(), inputs.clone()), (second.clone(), reversed)] {
        tasks.push(tokio::spawn(async move {
            for chunk in batch.chunks(5) {
                archive.insert(chunk).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for run in &runs {
        let stored = first.calls(run.as_str()).await.unwrap();
        assert_eq!(stored.len(), 10);
        assert_eq!(
            first.verify_run(run.as_str(), None).await.unwrap(),
            Verdict::Intact {
                records: 10,
                sealed: false
            }
        );
    }
}

/// UPDATE of a result, DELETE of a middle row, an INSERTed forged row: each
/// named by verify.
#[tokio::test]
async fn tampering_is_detected_and_named() {
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    let sql = db.client().await;
    let setup = |run: &aci_contracts::RunId| {
        (0..4)
            .map(|n| {
                input(
                    &final_record(run, &format!("c{n}"), NOW + n),
                    RawPolicy::None,
                )
            })
            .collect::<Vec<_>>()
    };

    let updated = fresh_run_id();
    archive.insert(&setup(&updated)).await.unwrap();
    sql.execute(
        "UPDATE aci_calls SET result = '{\"answer\":\"forged\"}' WHERE run_id = $1 AND tool_call_id = 'c2'",
        &[&updated.as_str()],
    )
    .await
    .unwrap();
    assert_eq!(
        archive.verify_run(updated.as_str(), None).await.unwrap(),
        Verdict::Broken {
            problem: Problem::Altered,
            seq: 3,
            tool_call_id: Some("c2".into())
        }
    );

    let deleted = fresh_run_id();
    archive.insert(&setup(&deleted)).await.unwrap();
    sql.execute(
        "DELETE FROM aci_calls WHERE run_id = $1 AND tool_call_id = 'c1'",
        &[&deleted.as_str()],
    )
    .await
    .unwrap();
    assert_eq!(
        archive.verify_run(deleted.as_str(), None).await.unwrap(),
        Verdict::Broken {
            problem: Problem::Missing,
            seq: 2,
            tool_call_id: None
        }
    );

    let forged = fresh_run_id();
    archive.insert(&setup(&forged)).await.unwrap();
    sql.execute(
        "INSERT INTO aci_calls SELECT run_id, 'zz', seq, finished_at_ms, created_at_ms,
           tool_name, status, evidence_status, error_code, retryable, scope_fp,
           replayed_from, redactions, request, scope, result, raw, raw_sha256,
           raw_mode, request_bytes, raw_bytes, result_bytes, timings_us, leaf_hash,
           chain_hash, archived_at
         FROM aci_calls WHERE run_id = $1 AND tool_call_id = 'c1'",
        &[&forged.as_str()],
    )
    .await
    .unwrap();
    assert!(matches!(
        archive.verify_run(forged.as_str(), None).await.unwrap(),
        Verdict::Broken {
            seq: 2,
            tool_call_id: Some(ref id),
            ..
        } if id == "zz"
    ));
}

/// Retention drops whole months that ended before the cutoff, and keeps the
/// rest.
#[tokio::test]
async fn retention_drops_old_partitions_only() {
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    let run = fresh_run_id();
    let day = 86_400_000;
    let old = final_record(&run, "old", NOW - 120 * day);
    let new = final_record(&run, "new", NOW);
    archive
        .insert(&[input(&old, RawPolicy::None), input(&new, RawPolicy::None)])
        .await
        .unwrap();
    let dropped = archive
        .drop_partitions_before(NOW - 90 * day)
        .await
        .unwrap();
    assert_eq!(dropped, ["aci_calls_202608"]);
    let left: Vec<_> = archive
        .calls(run.as_str())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.call.tool_call_id)
        .collect();
    assert_eq!(left, ["new"]);
    // The next insert into that month makes its partition again.
    let late = final_record(&run, "late", NOW - 120 * day);
    archive
        .insert(&[input(&late, RawPolicy::None)])
        .await
        .unwrap();
}

/// A sealed run: DELETE of its last row, a forged row appended with
/// recomputed hashes, and a seal rewritten to match are each detected with
/// the checkpoint key.
#[tokio::test]
async fn sealed_runs_detect_deleted_and_appended_rows() {
    use store_archive::{CheckpointKey, chain};
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    let sql = db.client().await;
    let key = CheckpointKey::from_bytes(&[9; 32]);
    let public = key.verifying_key();
    let sealed_run = |run: &aci_contracts::RunId| {
        (0..4)
            .map(|n| {
                input(
                    &final_record(run, &format!("c{n}"), NOW + n),
                    RawPolicy::None,
                )
            })
            .collect::<Vec<_>>()
    };
    let (a, b, c) = (fresh_run_id(), fresh_run_id(), fresh_run_id());
    // Two checkpoints: `a` alone, then `b` and `c`.
    archive.insert(&sealed_run(&a)).await.unwrap();
    let sealed = archive
        .seal_idle_runs(&key, std::time::Duration::ZERO, NOW)
        .await
        .unwrap();
    assert_eq!(sealed, 1);
    for run in [&b, &c] {
        archive.insert(&sealed_run(run)).await.unwrap();
    }
    let sealed = archive
        .seal_idle_runs(&key, std::time::Duration::ZERO, NOW)
        .await
        .unwrap();
    assert_eq!(sealed, 2);
    assert_eq!(
        archive
            .seal_idle_runs(&key, std::time::Duration::ZERO, NOW)
            .await
            .unwrap(),
        0,
        "a run is sealed once"
    );
    assert_eq!(
        archive.verify_run(a.as_str(), Some(&public)).await.unwrap(),
        Verdict::Intact {
            records: 4,
            sealed: true
        }
    );

    // DELETE the last row of a sealed run.
    sql.execute(
        "DELETE FROM aci_calls WHERE run_id = $1 AND seq = 4",
        &[&a.as_str()],
    )
    .await
    .unwrap();
    assert_eq!(
        archive.verify_run(a.as_str(), Some(&public)).await.unwrap(),
        Verdict::Broken {
            problem: Problem::Missing,
            seq: 4,
            tool_call_id: None
        }
    );
    // ... and rewrite its seal to match: the signed checkpoint tells.
    sql.execute(
        "UPDATE aci_seals SET count = 3, head = (SELECT chain_hash FROM aci_calls
           WHERE run_id = $1 AND seq = 3) WHERE run_id = $1",
        &[&a.as_str()],
    )
    .await
    .unwrap();
    assert!(matches!(
        archive.verify_run(a.as_str(), None).await.unwrap(),
        Verdict::Intact { .. }
    ));
    assert!(matches!(
        archive.verify_run(a.as_str(), Some(&public)).await.unwrap(),
        Verdict::Broken {
            problem: Problem::Checkpoint,
            ..
        }
    ));

    // A forged row appended to a sealed run, its hashes recomputed.
    let stored = archive.calls(b.as_str()).await.unwrap();
    let mut forged = stored[3].call.clone();
    forged.tool_call_id = "forged".into();
    let leaf = forged.leaf_hash();
    let previous: [u8; 32] = stored[3].chain_hash.clone().try_into().unwrap();
    let linked = chain(&previous, &leaf);
    sql.execute(
        "INSERT INTO aci_calls SELECT run_id, 'forged', 5, finished_at_ms, created_at_ms,
           tool_name, status, evidence_status, error_code, retryable, scope_fp,
           replayed_from, redactions, request, scope, result, raw, raw_sha256,
           raw_mode, request_bytes, raw_bytes, result_bytes, timings_us, $2, $3, archived_at
         FROM aci_calls WHERE run_id = $1 AND seq = 4",
        &[&b.as_str(), &leaf.as_slice(), &linked.as_slice()],
    )
    .await
    .unwrap();
    assert_eq!(
        archive.verify_run(b.as_str(), Some(&public)).await.unwrap(),
        Verdict::Broken {
            problem: Problem::Added,
            seq: 5,
            tool_call_id: Some("forged".into())
        }
    );
    // The untouched run of the same checkpoint stays intact (the forged row
    // changed no seal).
    assert!(matches!(
        archive.verify_run(c.as_str(), Some(&public)).await.unwrap(),
        Verdict::Intact { sealed: true, .. }
    ));
}

/// Migration 2: the payload columns of the calls and of a month partition
/// made after it are compressed with lz4 where the server has it;
/// migrating again changes nothing.
#[tokio::test]
async fn payload_columns_are_compressed_with_lz4_where_the_server_has_it() {
    let db = TestDatabase::create().await;
    let archive = archive(&db).await;
    let run = fresh_run_id();
    archive
        .insert(&[input(&final_record(&run, "a", NOW), RawPolicy::Full)])
        .await
        .unwrap();
    archive.migrate().await.unwrap();
    let sql = db.client().await;
    let has_lz4: bool = sql
        .query_one(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let rows = sql
        .query(
            "SELECT a.attrelid::regclass::text, a.attname, a.attcompression::text
             FROM pg_attribute a
             WHERE a.attrelid IN ('aci_calls'::regclass, 'aci_calls_202612'::regclass)
               AND a.attname IN ('request', 'scope', 'result', 'raw')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 8);
    for row in &rows {
        let (table, column, method): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        let expected = if has_lz4 { "l" } else { "" };
        assert_eq!(method, expected, "{table}.{column}");
    }
    assert_eq!(archive.calls(run.as_str()).await.unwrap().len(), 1);
}

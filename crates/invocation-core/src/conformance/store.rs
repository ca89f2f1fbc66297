//! Scenarios for the store port itself.

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus};

use super::{StoreHarness, call_id, fresh_run_id, new_invocation};
use crate::redact::Redactions;
use crate::{
    Budgets, Finalization, InvocationKey, InvocationStore, PhaseTimings, ReadyEvidence,
    RecordFields, SameScope, StoreError,
};

fn ready(clock: &dyn crate::Clock, result: &str) -> Finalization {
    Finalization::Ready {
        evidence: ReadyEvidence::Found,
        raw_json: format!("{{\"raw\":\"{result}\"}}"),
        agent_result_json: format!("{{\"result\":\"{result}\"}}"),
        redactions: Redactions::new(),
        replayed_from: None,
        finished_at: clock.now(),
        timings: None,
    }
}

fn error(clock: &dyn crate::Clock, code: ErrorCode) -> Finalization {
    Finalization::Error {
        error_code: code,
        retryable: code.is_transient(),
        raw_json: None,
        finished_at: clock.now(),
        timings: None,
    }
}

/// Create stores exactly what it was given, in PROJECTING, with no result.
pub async fn create_stores_the_exact_projecting_record(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let new = new_invocation(
        &*clock,
        &run,
        "Call_01-a.b:Z",
        "tool_a",
        "数据库 timeout 😱",
    );
    let created = store.create(new.clone()).await.expect("create");
    assert_eq!(created.duplicate_of, None);
    assert_eq!(created.same_scope, None);

    let record = store
        .get(&new.key, RecordFields::All)
        .await
        .expect("get")
        .expect("record exists");
    assert_eq!(record.key, new.key);
    assert_eq!(
        record.key.tool_call_id.as_str(),
        "Call_01-a.b:Z",
        "exact id kept"
    );
    assert_eq!(record.tool_name, "tool_a");
    assert_eq!(record.status, InvocationStatus::Projecting);
    assert_eq!(record.evidence_status, None);
    assert_eq!(record.error_code, None);
    assert_eq!(
        record.request_json.as_deref(),
        Some(new.request_json.as_str())
    );
    assert_eq!(record.scope_json.as_deref(), Some(new.scope_json.as_str()));
    assert_eq!(record.scope_fingerprint, new.scope_fingerprint);
    assert_eq!(record.created_at, new.created_at);
    assert_eq!(record.request_bytes, new.request_json.len() as u64);
    assert_eq!(record.agent_result_json, None, "no agent result yet");
    assert_eq!(record.raw_json, None);
    assert_eq!(record.finished_at, None);
}

/// `get_many` answers each key as `get` does, in the order asked, over
/// several runs, with `None` for a key never created, and the same key
/// asked twice answered twice.
pub async fn get_many_reads_each_key_in_order(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let (first, second) = (fresh_run_id(), fresh_run_id());
    let mut keys = Vec::new();
    for (run, id) in [(&first, "a"), (&second, "b"), (&first, "c")] {
        let new = new_invocation(&*clock, run, id, "tool_a", id);
        store.create(new.clone()).await.expect("create");
        keys.push(new.key);
    }
    store
        .finalize(&keys[1], ready(&*clock, "rb"))
        .await
        .expect("finalize");
    let missing = InvocationKey::new(second.clone(), call_id("never"));
    let asked = vec![
        keys[2].clone(),
        missing,
        keys[1].clone(),
        keys[0].clone(),
        keys[1].clone(),
    ];
    assert!(
        store
            .get_many(&[], RecordFields::All)
            .await
            .expect("get_many")
            .is_empty()
    );
    for fields in [RecordFields::Metadata, RecordFields::All] {
        let many = store.get_many(&asked, fields).await.expect("get_many");
        assert_eq!(many.len(), asked.len());
        for (key, got) in asked.iter().zip(&many) {
            let one = store.get(key, fields).await.expect("get");
            assert_eq!(got, &one, "{key:?}");
        }
        assert!(many[1].is_none());
        assert_eq!(
            many[2].as_ref().map(|r| r.status),
            Some(InvocationStatus::Ready)
        );
    }
}

/// Metadata reads carry no payloads; WithoutRaw carries no raw.
pub async fn metadata_reads_carry_no_payloads(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let new = new_invocation(&*clock, &run, "c1", "tool_a", "q");
    store.create(new.clone()).await.expect("create");
    store
        .finalize(&new.key, ready(&*clock, "r1"))
        .await
        .expect("finalize");

    let meta = store
        .get(&new.key, RecordFields::Metadata)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(meta.status, InvocationStatus::Ready);
    assert_eq!(meta.evidence_status, Some(EvidenceStatus::EvidenceFound));
    assert_eq!(
        (
            &meta.request_json,
            &meta.scope_json,
            &meta.agent_result_json,
            &meta.raw_json
        ),
        (&None, &None, &None, &None)
    );
    assert_eq!(
        meta.raw_bytes,
        Some("{\"raw\":\"r1\"}".len() as u64),
        "sizes are metadata"
    );

    let without_raw = store
        .get(&new.key, RecordFields::WithoutRaw)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        without_raw.agent_result_json.as_deref(),
        Some("{\"result\":\"r1\"}")
    );
    assert!(without_raw.request_json.is_some());
    assert_eq!(without_raw.raw_json, None);

    let all = store
        .get(&new.key, RecordFields::All)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(all.raw_json.as_deref(), Some("{\"raw\":\"r1\"}"));
}

/// A duplicate key overwrites nothing and counts nothing.
pub async fn duplicate_overwrites_nothing_and_counts_nothing(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let budgets = Budgets {
        run: Some(2),
        tool: Some(2),
    };
    let mut first = new_invocation(&*clock, &run, "dup", "tool_a", "first");
    first.budgets = budgets;
    store.create(first.clone()).await.expect("first create");

    let mut second = new_invocation(&*clock, &run, "dup", "tool_a", "second");
    second.budgets = budgets;
    assert!(matches!(
        store.create(second).await,
        Err(StoreError::Duplicate)
    ));

    let record = store
        .get(&first.key, RecordFields::WithoutRaw)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        record.request_json.as_deref(),
        Some(first.request_json.as_str()),
        "not overwritten"
    );

    let mut other = new_invocation(&*clock, &run, "other", "tool_a", "other");
    other.budgets = budgets;
    store
        .create(other)
        .await
        .expect("the duplicate did not count against the budget of 2");
    let mut third = new_invocation(&*clock, &run, "third", "tool_a", "third");
    third.budgets = budgets;
    assert!(matches!(
        store.create(third).await,
        Err(StoreError::ToolBudgetExhausted | StoreError::RunBudgetExhausted)
    ));
    assert_eq!(
        store
            .list(&run, RecordFields::Metadata)
            .await
            .expect("list")
            .len(),
        2
    );
}

/// A finished record's key stays taken.
pub async fn duplicate_of_a_finished_record_is_refused(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let new = new_invocation(&*clock, &run, "done", "tool_a", "q");
    store.create(new.clone()).await.expect("create");
    store
        .finalize(&new.key, ready(&*clock, "kept"))
        .await
        .expect("finalize");
    assert!(matches!(
        store.create(new.clone()).await,
        Err(StoreError::Duplicate)
    ));
    let record = store
        .get(&new.key, RecordFields::WithoutRaw)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.status, InvocationStatus::Ready);
    assert_eq!(
        record.agent_result_json.as_deref(),
        Some("{\"result\":\"kept\"}")
    );
}

/// An exhausted budget creates nothing and counts nothing.
pub async fn exhausted_budgets_create_and_count_nothing(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let with = |id: &str, tool: &str, budgets: Budgets| {
        let mut n = new_invocation(&*clock, &run, id, tool, id);
        n.budgets = budgets;
        n
    };
    let tool_one = Budgets {
        run: Some(3),
        tool: Some(1),
    };
    store
        .create(with("a1", "tool_a", tool_one))
        .await
        .expect("a1");
    let refused = with("a2", "tool_a", tool_one);
    assert!(matches!(
        store.create(refused.clone()).await,
        Err(StoreError::ToolBudgetExhausted)
    ));
    assert!(
        store
            .get(&refused.key, RecordFields::All)
            .await
            .expect("get")
            .is_none()
    );

    let run_three = Budgets {
        run: Some(3),
        tool: None,
    };
    store
        .create(with("b1", "tool_b", run_three))
        .await
        .expect("b1: a2 was not counted");
    store
        .create(with("b2", "tool_b", run_three))
        .await
        .expect("b2");
    let refused = with("b3", "tool_b", run_three);
    assert!(matches!(
        store.create(refused.clone()).await,
        Err(StoreError::RunBudgetExhausted)
    ));
    assert!(
        store
            .get(&refused.key, RecordFields::All)
            .await
            .expect("get")
            .is_none()
    );
    // A refused create counted nothing: raising the budget by one admits exactly one.
    let run_four = Budgets {
        run: Some(4),
        tool: None,
    };
    store
        .create(with("b4", "tool_b", run_four))
        .await
        .expect("b4");
    assert!(matches!(
        store.create(with("b5", "tool_b", run_four)).await,
        Err(StoreError::RunBudgetExhausted)
    ));
    let ids: Vec<String> = store
        .list(&run, RecordFields::Metadata)
        .await
        .expect("list")
        .into_iter()
        .map(|r| r.key.tool_call_id.into_string())
        .collect();
    assert_eq!(ids, ["a1", "b1", "b2", "b4"]);
}

/// When both budgets are exhausted, the tool budget is reported.
pub async fn tool_budget_is_checked_before_run_budget(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let budgets = Budgets {
        run: Some(1),
        tool: Some(1),
    };
    let mut first = new_invocation(&*clock, &run, "x1", "tool_a", "1");
    first.budgets = budgets;
    store.create(first).await.expect("x1");
    let mut second = new_invocation(&*clock, &run, "x2", "tool_a", "2");
    second.budgets = budgets;
    assert!(matches!(
        store.create(second).await,
        Err(StoreError::ToolBudgetExhausted)
    ));
}

/// Budgets count per run.
pub async fn budgets_are_per_run(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let budgets = Budgets {
        run: Some(1),
        tool: Some(1),
    };
    for run in [fresh_run_id(), fresh_run_id()] {
        let mut n = new_invocation(&*clock, &run, "only", "tool_a", "q");
        n.budgets = budgets;
        store.create(n).await.expect("each run has its own budget");
    }
}

/// Only PROJECTING -> READY and PROJECTING -> ERROR, exactly once.
pub async fn finalize_moves_projecting_exactly_once(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let a = new_invocation(&*clock, &run, "a", "tool_a", "a");
    store.create(a.clone()).await.expect("create a");
    store
        .finalize(&a.key, ready(&*clock, "first"))
        .await
        .expect("PROJECTING -> READY");
    for again in [
        ready(&*clock, "second"),
        error(&*clock, ErrorCode::ExecutionFailed),
    ] {
        match store.finalize(&a.key, again).await {
            Err(StoreError::NotProjecting { current }) => {
                assert_eq!(current, InvocationStatus::Ready)
            }
            other => panic!("READY must not move again, got {other:?}"),
        }
    }
    let record = store
        .get(&a.key, RecordFields::WithoutRaw)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.status, InvocationStatus::Ready);
    assert_eq!(
        record.agent_result_json.as_deref(),
        Some("{\"result\":\"first\"}")
    );

    let b = new_invocation(&*clock, &run, "b", "tool_a", "b");
    store.create(b.clone()).await.expect("create b");
    store
        .finalize(&b.key, error(&*clock, ErrorCode::ExecutionTimeout))
        .await
        .expect("PROJECTING -> ERROR");
    for again in [
        ready(&*clock, "late"),
        error(&*clock, ErrorCode::ExecutionFailed),
    ] {
        match store.finalize(&b.key, again).await {
            Err(StoreError::NotProjecting { current }) => {
                assert_eq!(current, InvocationStatus::Error)
            }
            other => panic!("ERROR must not move again, got {other:?}"),
        }
    }
    let record = store
        .get(&b.key, RecordFields::All)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.error_code, Some(ErrorCode::ExecutionTimeout));
    assert_eq!(record.agent_result_json, None);
}

/// READY stores evidence status, raw, result, sizes, finish time, replay
/// source and redaction counts (read with the metadata too).
pub async fn finalize_ready_stores_the_outcome(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let a = new_invocation(&*clock, &run, "a", "tool_a", "a");
    store.create(a.clone()).await.expect("create");
    let finished_at = clock.now();
    let raw = "{\"rows\":[\"数据\",\"😀\"]}".to_owned();
    let result = "{\"evidence_status\":\"NO_EVIDENCE\"}".to_owned();
    let mut redactions = Redactions::new();
    redactions.add("url_password", 2);
    redactions.add("kv_secret", 1);
    // Whole microseconds: what a store keeps of a duration.
    let timings = PhaseTimings {
        preflight: Duration::from_micros(1_234),
        execution: Some(Duration::from_micros(2_345_678)),
        projection: Some(Duration::from_micros(0)),
    };
    store
        .finalize(
            &a.key,
            Finalization::Ready {
                evidence: ReadyEvidence::NoEvidence,
                raw_json: raw.clone(),
                agent_result_json: result.clone(),
                redactions: redactions.clone(),
                replayed_from: Some(call_id("src-1")),
                finished_at,
                timings: Some(timings),
            },
        )
        .await
        .expect("finalize");
    let record = store
        .get(&a.key, RecordFields::All)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(record.status, InvocationStatus::Ready);
    assert_eq!(record.evidence_status, Some(EvidenceStatus::NoEvidence));
    assert_eq!(record.raw_json.as_deref(), Some(raw.as_str()));
    assert_eq!(record.agent_result_json.as_deref(), Some(result.as_str()));
    assert_eq!(record.raw_bytes, Some(raw.len() as u64));
    assert_eq!(record.agent_result_bytes, Some(result.len() as u64));
    assert_eq!(record.finished_at, Some(finished_at));
    assert_eq!(record.replayed_from, Some(call_id("src-1")));
    assert_eq!(record.error_code, None);
    assert_eq!(record.redactions, redactions);
    let metadata = store
        .get(&a.key, RecordFields::Metadata)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(metadata.redactions, redactions);
    assert_eq!(record.timings, Some(timings));
    assert_eq!(metadata.timings, Some(timings), "timings are metadata");
}

/// ERROR stores the code, evidence status ERROR, whether it is retryable as
/// given (not derived from the code), and raw only when given.
pub async fn finalize_error_stores_code_and_optional_raw(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let with_raw = new_invocation(&*clock, &run, "with", "tool_a", "with");
    let without = new_invocation(&*clock, &run, "without", "tool_a", "without");
    store.create(with_raw.clone()).await.expect("create");
    store.create(without.clone()).await.expect("create");
    store
        .finalize(
            &with_raw.key,
            Finalization::Error {
                error_code: ErrorCode::ProjectionFailed,
                // Against the code's own verdict: the store keeps what it is given.
                retryable: !ErrorCode::ProjectionFailed.is_transient(),
                raw_json: Some("{\"kept\":true}".to_owned()),
                finished_at: clock.now(),
                // A phase not reached stays unknown.
                timings: Some(PhaseTimings {
                    preflight: Duration::from_micros(7),
                    execution: None,
                    projection: None,
                }),
            },
        )
        .await
        .expect("finalize");
    store
        .finalize(&without.key, error(&*clock, ErrorCode::ResultTooLarge))
        .await
        .expect("finalize");
    let a = store
        .get(&with_raw.key, RecordFields::All)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(a.status, InvocationStatus::Error);
    assert_eq!(a.evidence_status, Some(EvidenceStatus::Error));
    assert_eq!(a.error_code, Some(ErrorCode::ProjectionFailed));
    assert_eq!(
        a.retryable,
        Some(!ErrorCode::ProjectionFailed.is_transient())
    );
    assert_eq!(a.raw_json.as_deref(), Some("{\"kept\":true}"));
    assert_eq!(
        a.timings.map(|t| (t.preflight, t.execution, t.projection)),
        Some((Duration::from_micros(7), None, None))
    );
    assert_eq!(a.agent_result_json, None);
    let b = store
        .get(&without.key, RecordFields::All)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(b.error_code, Some(ErrorCode::ResultTooLarge));
    assert_eq!(b.retryable, Some(ErrorCode::ResultTooLarge.is_transient()));
    let metadata = store
        .get(&without.key, RecordFields::Metadata)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(metadata.retryable, b.retryable, "retryable is metadata");
    assert_eq!(b.raw_json, None);
    assert_eq!(b.raw_bytes, None);
    assert_eq!(b.timings, None, "no timings when none were given");
}

/// Finalizing a record that never existed fails and creates nothing.
pub async fn finalize_of_a_missing_record_is_not_found_and_creates_nothing(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let key = InvocationKey::new(run.clone(), call_id("ghost"));
    assert!(matches!(
        store.finalize(&key, ready(&*clock, "x")).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .finalize(&key, error(&*clock, ErrorCode::ExecutionFailed))
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(
        store
            .get(&key, RecordFields::All)
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        store
            .list(&run, RecordFields::All)
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(store.remaining_ttl(&key).await.expect("ttl"), None);
}

/// The TTL given at creation is what the record has.
pub async fn ttl_is_set_at_create(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let mut new = new_invocation(&*clock, &run, "ttl", "tool_a", "q");
    new.ttl = Duration::from_secs(7200);
    // The TTL runs from the write on: what it has lost by the read is at most
    // the time the write and the read took (long on a loaded machine).
    let started = std::time::Instant::now();
    store.create(new.clone()).await.expect("create");
    let remaining = store
        .remaining_ttl(&new.key)
        .await
        .expect("ttl")
        .expect("live");
    let elapsed = started.elapsed();
    assert!(remaining <= new.ttl, "{remaining:?} > {:?}", new.ttl);
    assert!(
        remaining + elapsed + h.ttl_tolerance() >= new.ttl,
        "{remaining:?} ({elapsed:?} after the create) is not the configured {:?}",
        new.ttl
    );
}

async fn read_everything(store: &Arc<dyn InvocationStore>, new: &crate::NewInvocation) {
    for fields in [
        RecordFields::Metadata,
        RecordFields::WithoutRaw,
        RecordFields::All,
    ] {
        store.get(&new.key, fields).await.expect("get");
        store.list(&new.key.run_id, fields).await.expect("list");
    }
    store
        .scope_index(&new.key.run_id, &new.scope_fingerprint)
        .await
        .expect("scope index");
    store.remaining_ttl(&new.key).await.expect("ttl");
}

/// No read extends a record's life.
pub async fn reads_never_refresh_ttl(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let ttl = h.short_ttl();
    let mut new = new_invocation(&*clock, &run, "read", "tool_a", "q");
    new.ttl = ttl;
    store.create(new.clone()).await.expect("create");
    h.advance(ttl / 2).await;
    for _ in 0..20 {
        read_everything(&store, &new).await;
    }
    let remaining = store
        .remaining_ttl(&new.key)
        .await
        .expect("ttl")
        .expect("still live");
    assert!(
        remaining <= ttl / 2,
        "reads refreshed the TTL: {remaining:?} > {:?}",
        ttl / 2
    );
    h.advance(ttl / 2 + ttl / 4).await;
    assert!(
        store
            .get(&new.key, RecordFields::Metadata)
            .await
            .expect("get")
            .is_none(),
        "the record outlived its TTL"
    );
}

/// Finalization keeps what remains of the TTL: never more, never reset.
pub async fn finalize_keeps_what_remains_of_the_ttl(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let ttl = h.short_ttl();
    let mut new = new_invocation(&*clock, &run, "fin", "tool_a", "q");
    new.ttl = ttl;
    store.create(new.clone()).await.expect("create");
    h.advance(ttl / 2).await;
    let before = store
        .remaining_ttl(&new.key)
        .await
        .expect("ttl")
        .expect("live");
    store
        .finalize(&new.key, ready(&*clock, "r"))
        .await
        .expect("finalize");
    let after = store
        .remaining_ttl(&new.key)
        .await
        .expect("ttl")
        .expect("still live");
    assert!(
        after <= before,
        "finalize extended the TTL: {after:?} > {before:?}"
    );
    assert!(after > Duration::ZERO);
    h.advance(ttl / 2 + ttl / 4).await;
    assert!(
        store
            .get(&new.key, RecordFields::Metadata)
            .await
            .expect("get")
            .is_none(),
        "finalize reset the TTL"
    );
}

/// An expired record is gone for every read and is never recreated.
pub async fn expired_records_are_never_recreated(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let ttl = h.short_ttl();
    let mut new = new_invocation(&*clock, &run, "exp", "tool_a", "q");
    new.ttl = ttl;
    store.create(new.clone()).await.expect("create");
    h.advance(ttl + ttl / 4).await;
    assert!(matches!(
        store.finalize(&new.key, ready(&*clock, "late")).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .finalize(&new.key, error(&*clock, ErrorCode::ExecutionFailed))
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(
        store
            .get(&new.key, RecordFields::All)
            .await
            .expect("get")
            .is_none()
    );
    assert!(
        store
            .list(&run, RecordFields::All)
            .await
            .expect("list")
            .is_empty()
    );
    assert_eq!(store.remaining_ttl(&new.key).await.expect("ttl"), None);
}

/// A key whose record expired may be created again; it then lists once, at its
/// new place in the creation order.
pub async fn recreated_expired_key_lists_once_at_its_new_place(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let ttl = h.short_ttl();
    let mut first = new_invocation(&*clock, &run, "again", "tool_a", "q");
    first.ttl = ttl;
    store.create(first).await.expect("create");
    h.advance(ttl + ttl / 4).await;
    let other = new_invocation(&*clock, &run, "other", "tool_a", "q");
    store.create(other).await.expect("other");
    let again = new_invocation(&*clock, &run, "again", "tool_a", "q2");
    store
        .create(again.clone())
        .await
        .expect("an expired key is free again");
    let listed = store
        .list(&run, RecordFields::WithoutRaw)
        .await
        .expect("list");
    let order: Vec<&str> = listed.iter().map(|r| r.key.tool_call_id.as_str()).collect();
    assert_eq!(order, ["other", "again"]);
    assert_eq!(
        listed[1].request_json.as_deref(),
        Some(again.request_json.as_str())
    );
}

/// A run's records list in creation order, with the selected payloads.
pub async fn list_is_in_creation_order(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let ids = ["zeta", "alpha", "Mid", "b-2", "b-10", "_x"];
    for id in ids {
        store
            .create(new_invocation(&*clock, &run, id, "tool_a", id))
            .await
            .expect("create");
    }
    let key = InvocationKey::new(run.clone(), call_id("alpha"));
    store
        .finalize(&key, ready(&*clock, "alpha"))
        .await
        .expect("finalize");

    let listed = store
        .list(&run, RecordFields::Metadata)
        .await
        .expect("list");
    let order: Vec<&str> = listed.iter().map(|r| r.key.tool_call_id.as_str()).collect();
    assert_eq!(order, ids);
    assert!(
        listed
            .iter()
            .all(|r| r.raw_json.is_none() && r.request_json.is_none())
    );
    assert_eq!(listed[1].status, InvocationStatus::Ready);

    let full = store.list(&run, RecordFields::All).await.expect("list");
    assert_eq!(full[1].raw_json.as_deref(), Some("{\"raw\":\"alpha\"}"));
    let no_raw = store
        .list(&run, RecordFields::WithoutRaw)
        .await
        .expect("list");
    assert_eq!(no_raw[1].raw_json, None);
    assert!(no_raw[1].agent_result_json.is_some());
    assert!(
        store
            .list(&fresh_run_id(), RecordFields::All)
            .await
            .expect("list")
            .is_empty(),
        "an unknown run lists nothing"
    );
}

/// The same tool call id in two runs names two records.
pub async fn runs_are_isolated(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let (run_a, run_b) = (fresh_run_id(), fresh_run_id());
    let a = new_invocation(&*clock, &run_a, "same", "tool_a", "in a");
    let b = new_invocation(&*clock, &run_b, "same", "tool_a", "in b");
    store.create(a.clone()).await.expect("a");
    store.create(b.clone()).await.expect("b");
    store
        .finalize(&a.key, ready(&*clock, "a"))
        .await
        .expect("finalize a");
    let rb = store
        .get(&b.key, RecordFields::WithoutRaw)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(rb.status, InvocationStatus::Projecting);
    assert_eq!(rb.request_json.as_deref(), Some(b.request_json.as_str()));
    assert_eq!(
        store
            .list(&run_a, RecordFields::Metadata)
            .await
            .expect("list")
            .len(),
        1
    );
    let index = store
        .scope_index(&run_b, &a.scope_fingerprint)
        .await
        .expect("index");
    assert_eq!(index.first, None, "fingerprints are per run");
}

/// The scope index knows the first record and the first READY record of a scope.
pub async fn scope_index_tracks_first_and_first_ready(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let a = new_invocation(&*clock, &run, "a", "tool_a", "same");
    let b = new_invocation(&*clock, &run, "b", "tool_a", "same");
    let c = new_invocation(&*clock, &run, "c", "tool_a", "other");
    let d = new_invocation(&*clock, &run, "d", "tool_b", "same");
    assert_eq!(store.create(a.clone()).await.expect("a").duplicate_of, None);
    assert_eq!(
        store.create(b.clone()).await.expect("b").duplicate_of,
        Some(call_id("a"))
    );
    assert_eq!(store.create(c.clone()).await.expect("c").duplicate_of, None);
    assert_eq!(
        store.create(d).await.expect("d").duplicate_of,
        None,
        "the tool name is part of the scope"
    );

    let index = store
        .scope_index(&run, &a.scope_fingerprint)
        .await
        .expect("index");
    assert_eq!(index.first, Some(call_id("a")));
    assert_eq!(index.first_ready, None);

    store
        .finalize(&a.key, error(&*clock, ErrorCode::ExecutionFailed))
        .await
        .expect("a fails");
    let index = store
        .scope_index(&run, &a.scope_fingerprint)
        .await
        .expect("index");
    assert_eq!(index.first_ready, None, "ERROR is never a READY scope");

    store
        .finalize(&b.key, ready(&*clock, "b"))
        .await
        .expect("b ready");
    let e = new_invocation(&*clock, &run, "e", "tool_a", "same");
    store.create(e.clone()).await.expect("e");
    store
        .finalize(&e.key, ready(&*clock, "e"))
        .await
        .expect("e ready");
    let index = store
        .scope_index(&run, &a.scope_fingerprint)
        .await
        .expect("index");
    assert_eq!(index.first, Some(call_id("a")));
    assert_eq!(index.first_ready, Some(call_id("b")));
    let other = store
        .scope_index(&run, &c.scope_fingerprint)
        .await
        .expect("index");
    assert_eq!(other.first, Some(call_id("c")));
}

/// A claiming create reports READY or in-flight records of its scope; a claim
/// lasts until its record is finalized.
pub async fn scope_claims_have_one_holder_until_finalized(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let claiming = |id: &str, scope: &str| {
        let mut n = new_invocation(&*clock, &run, id, "tool_a", scope);
        n.claim_scope = true;
        n
    };
    let a = claiming("a", "s");
    assert_eq!(
        store.create(a.clone()).await.expect("a").same_scope,
        None,
        "a claims"
    );
    assert_eq!(
        store
            .create(claiming("b", "s"))
            .await
            .expect("b")
            .same_scope,
        Some(SameScope::InFlight(call_id("a")))
    );
    store
        .finalize(&a.key, error(&*clock, ErrorCode::ExecutionFailed))
        .await
        .expect("a fails");
    let c = claiming("c", "s");
    assert_eq!(
        store.create(c.clone()).await.expect("c").same_scope,
        None,
        "a failed claim is released; c claims"
    );
    store
        .finalize(&c.key, ready(&*clock, "c"))
        .await
        .expect("c ready");
    assert_eq!(
        store
            .create(claiming("d", "s"))
            .await
            .expect("d")
            .same_scope,
        Some(SameScope::Ready(call_id("c")))
    );

    let not_claiming = new_invocation(&*clock, &run, "e", "tool_a", "t");
    assert_eq!(
        store.create(not_claiming).await.expect("e").same_scope,
        None
    );
    assert_eq!(
        store
            .create(claiming("f", "t"))
            .await
            .expect("f")
            .same_scope,
        None,
        "a create without claim_scope holds no claim"
    );
}

/// 64 concurrent creates of one key: one succeeds, one record exists.
pub async fn concurrent_creates_of_one_key_succeed_once(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = h.store();
        let new = new_invocation(
            &*clock,
            &run,
            "contended",
            "tool_a",
            &format!("variant {i}"),
        );
        tasks.push(tokio::spawn(async move { store.create(new).await }));
    }
    let (mut ok, mut duplicate) = (0, 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(_) => ok += 1,
            Err(StoreError::Duplicate) => duplicate += 1,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((ok, duplicate), (1, 63));
    assert_eq!(
        store
            .list(&run, RecordFields::Metadata)
            .await
            .expect("list")
            .len(),
        1
    );
}

/// N concurrent distinct creates against budget B create exactly min(N, B).
pub async fn concurrent_distinct_creates_respect_budgets(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    for (budgets, expected_error) in [
        (
            Budgets {
                run: Some(10),
                tool: None,
            },
            "run",
        ),
        (
            Budgets {
                run: None,
                tool: Some(7),
            },
            "tool",
        ),
    ] {
        let run = fresh_run_id();
        let limit = budgets.run.or(budgets.tool).unwrap_or(0) as usize;
        let mut tasks = Vec::new();
        for i in 0..64 {
            let store = h.store();
            let mut new = new_invocation(&*clock, &run, &format!("c{i}"), "tool_a", "q");
            new.budgets = budgets;
            tasks.push(tokio::spawn(async move { store.create(new).await }));
        }
        let mut ok = 0;
        for task in tasks {
            match task.await.expect("task") {
                Ok(_) => ok += 1,
                Err(StoreError::RunBudgetExhausted) if expected_error == "run" => {}
                Err(StoreError::ToolBudgetExhausted) if expected_error == "tool" => {}
                Err(other) => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(ok, limit, "{expected_error} budget");
        assert_eq!(
            store
                .list(&run, RecordFields::Metadata)
                .await
                .expect("list")
                .len(),
            limit
        );
    }
}

/// Concurrent finalizations of one record: exactly one wins.
pub async fn concurrent_finalizes_succeed_once(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let new = new_invocation(&*clock, &run, "race", "tool_a", "q");
    store.create(new.clone()).await.expect("create");
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = h.store();
        let key = new.key.clone();
        let finalization = if i % 2 == 0 {
            ready(&*clock, &format!("r{i}"))
        } else {
            error(&*clock, ErrorCode::ExecutionFailed)
        };
        tasks.push(tokio::spawn(async move {
            store.finalize(&key, finalization).await
        }));
    }
    let mut ok = 0;
    for task in tasks {
        match task.await.expect("task") {
            Ok(()) => ok += 1,
            Err(StoreError::NotProjecting { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ok, 1);
}

/// Concurrent claiming creates of one scope: one holds the claim, the others
/// see it in flight.
pub async fn concurrent_claims_have_one_leader(h: &dyn StoreHarness) {
    let clock = h.clock();
    let run = fresh_run_id();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let store = h.store();
        let mut new = new_invocation(&*clock, &run, &format!("c{i}"), "tool_a", "one scope");
        new.claim_scope = true;
        tasks.push(tokio::spawn(async move {
            (new.key.tool_call_id.clone(), store.create(new).await)
        }));
    }
    let mut leaders = Vec::new();
    let mut seen = Vec::new();
    for task in tasks {
        let (id, created) = task.await.expect("task");
        match created.expect("create").same_scope {
            None => leaders.push(id),
            Some(SameScope::InFlight(leader)) => seen.push(leader),
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(leaders.len(), 1, "exactly one claim holder");
    assert!(
        seen.iter().all(|l| *l == leaders[0]),
        "everyone else sees the holder"
    );
}

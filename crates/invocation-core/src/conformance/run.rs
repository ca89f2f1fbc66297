//! Scenarios for run state held in the store, settling calls whose writes got
//! no answer, and calls abandoned by their caller.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus};

use super::{StoreHarness, call_id, fresh_run_id, new_invocation};
use crate::clock::add;
use crate::testing::fake::{FakeExecutor, fake_tool, words};
use crate::{
    CitationVerdict, Finalization, InvocationKey, ManualClock, NotCitable, RecordFields,
    RunContext, RunState, Settled, StoreError, ToolBoundary, ToolEnvelope, Unsettled,
};

/// How long an abandoned record may take to be finalized.
const ABANDON_BOUND: Duration = Duration::from_secs(10);

fn error(code: ErrorCode, h: &dyn StoreHarness) -> Finalization {
    Finalization::Error {
        error_code: code,
        retryable: code.is_transient(),
        raw_json: None,
        finished_at: h.clock().now(),
        timings: None,
    }
}

/// The run's first create stores its start, deadline and owner; later
/// creates report the same and never change it.
pub async fn first_create_sets_the_run_state(h: &dyn StoreHarness) {
    let store = h.store();
    let clock = h.clock();
    let run = fresh_run_id();
    assert_eq!(store.run_state(&run).await.unwrap(), None);
    let mut first = new_invocation(clock.as_ref(), &run, "c1", "tool_a", "one");
    let t0 = first.created_at;
    first.run.max_duration = Some(Duration::from_secs(60));
    first.run.owner = Some("alice".to_owned());
    let created = store.create(first).await.unwrap();
    let expected = RunState {
        started_at: t0,
        deadline: Some(add(t0, Duration::from_secs(60))),
        owner: Some("alice".to_owned()),
    };
    assert_eq!(created.run, expected);
    assert_eq!(store.run_state(&run).await.unwrap(), Some(expected.clone()));

    let mut later = new_invocation(clock.as_ref(), &run, "c2", "tool_a", "two");
    later.created_at = add(t0, Duration::from_secs(5));
    later.run.max_duration = Some(Duration::from_secs(3600));
    later.run.owner = Some("alice".to_owned());
    let created = store.create(later).await.unwrap();
    assert_eq!(
        created.run, expected,
        "a later create never moves the deadline"
    );

    let other = fresh_run_id();
    let created = store
        .create(new_invocation(
            clock.as_ref(),
            &other,
            "c1",
            "tool_a",
            "one",
        ))
        .await
        .unwrap();
    assert_eq!(created.run.deadline, None);
    assert_eq!(created.run.owner, None);
}

/// Creates at or after the run's stored deadline are refused and write nothing.
pub async fn run_deadline_refuses_later_creates(h: &dyn StoreHarness) {
    let store = h.store();
    let clock = h.clock();
    let run = fresh_run_id();
    let mut first = new_invocation(clock.as_ref(), &run, "c1", "tool_a", "one");
    let t0 = first.created_at;
    first.run.max_duration = Some(Duration::from_secs(10));
    store.create(first).await.unwrap();

    let mut inside = new_invocation(clock.as_ref(), &run, "c2", "tool_a", "two");
    inside.created_at = add(t0, Duration::from_millis(9_999));
    inside.budgets.run = Some(3);
    store.create(inside).await.unwrap();

    for (id, after) in [("c3", 10_000), ("c4", 3_600_000)] {
        let mut late = new_invocation(clock.as_ref(), &run, id, "tool_a", id);
        late.created_at = add(t0, Duration::from_millis(after));
        late.budgets.run = Some(3);
        assert!(matches!(
            store.create(late).await,
            Err(StoreError::RunDeadlineExceeded)
        ));
        let key = InvocationKey::new(run.clone(), call_id(id));
        assert_eq!(store.get(&key, RecordFields::Metadata).await.unwrap(), None);
    }
    assert_eq!(
        store
            .list(&run, RecordFields::Metadata)
            .await
            .unwrap()
            .len(),
        2
    );
    // The refusals counted nothing: one more fits the budget of 3.
    let mut third = new_invocation(clock.as_ref(), &run, "c5", "tool_a", "five");
    third.created_at = add(t0, Duration::from_millis(9_999));
    third.budgets.run = Some(3);
    store.create(third).await.unwrap();
}

/// A run belongs to the principal of its first create.
pub async fn run_owner_refuses_other_principals(h: &dyn StoreHarness) {
    let store = h.store();
    let clock = h.clock();
    let owned = fresh_run_id();
    let mut first = new_invocation(clock.as_ref(), &owned, "c1", "tool_a", "one");
    first.run.owner = Some("alice".to_owned());
    store.create(first).await.unwrap();
    for (id, owner) in [("c2", Some("bob")), ("c3", None)] {
        let mut other = new_invocation(clock.as_ref(), &owned, id, "tool_a", id);
        other.run.owner = owner.map(str::to_owned);
        assert!(matches!(
            store.create(other).await,
            Err(StoreError::RunOwnedByOther)
        ));
    }
    let mut again = new_invocation(clock.as_ref(), &owned, "c4", "tool_a", "four");
    again.run.owner = Some("alice".to_owned());
    store.create(again).await.unwrap();
    assert_eq!(
        store
            .list(&owned, RecordFields::Metadata)
            .await
            .unwrap()
            .len(),
        2
    );

    let unowned = fresh_run_id();
    store
        .create(new_invocation(
            clock.as_ref(),
            &unowned,
            "c1",
            "tool_a",
            "one",
        ))
        .await
        .unwrap();
    let mut claim = new_invocation(clock.as_ref(), &unowned, "c2", "tool_a", "two");
    claim.run.owner = Some("alice".to_owned());
    assert!(matches!(
        store.create(claim).await,
        Err(StoreError::RunOwnedByOther)
    ));
}

/// Refusals are noted in order, kept up to the cap (the oldest dropped),
/// dropped when the run belongs to another principal, and expire with their
/// TTL; noting one changes nothing else of the run.
pub async fn refusals_are_noted_for_the_runs_owner_only(h: &dyn StoreHarness) {
    use crate::{MAX_REFUSALS, Refusal};
    use aci_contracts::{ErrorCode, ToolCallId};
    let store = h.store();
    let clock = h.clock();
    let ttl = Duration::from_secs(3600);
    let at = clock.now();
    let refusal = |n: usize, code: ErrorCode| Refusal {
        tool_call_id: Some(ToolCallId::new(format!("r{n}")).unwrap()),
        tool_name: n.is_multiple_of(2).then(|| "tool_a".to_owned()),
        error_code: code,
        at,
    };

    // A run nobody created yet: noted, and the run still has no state.
    let fresh = fresh_run_id();
    store
        .note_refusal(
            &fresh,
            Some("alice"),
            &refusal(0, ErrorCode::InvalidInput),
            ttl,
        )
        .await
        .unwrap();
    assert_eq!(store.run_state(&fresh).await.unwrap(), None);
    assert_eq!(
        store.refusals(&fresh).await.unwrap(),
        [refusal(0, ErrorCode::InvalidInput)]
    );

    // An owned run: its owner's notes are kept in order; another
    // principal's, or one without a principal, are dropped.
    let owned = fresh_run_id();
    let mut first = new_invocation(clock.as_ref(), &owned, "c1", "tool_a", "one");
    first.run.owner = Some("alice".to_owned());
    store.create(first).await.unwrap();
    let noted = [
        refusal(1, ErrorCode::DuplicateToolCall),
        refusal(2, ErrorCode::RunBudgetExhausted),
    ];
    for one in &noted {
        store
            .note_refusal(&owned, Some("alice"), one, ttl)
            .await
            .unwrap();
    }
    for principal in [Some("bob"), None] {
        store
            .note_refusal(&owned, principal, &refusal(9, ErrorCode::InvalidInput), ttl)
            .await
            .unwrap();
    }
    assert_eq!(store.refusals(&owned).await.unwrap(), noted);
    assert_eq!(
        store
            .list(&owned, RecordFields::Metadata)
            .await
            .unwrap()
            .len(),
        1,
        "no record was made"
    );

    // The cap: the newest MAX_REFUSALS stay.
    let capped = fresh_run_id();
    for n in 0..MAX_REFUSALS + 3 {
        store
            .note_refusal(&capped, None, &refusal(n, ErrorCode::InvalidInput), ttl)
            .await
            .unwrap();
    }
    let kept = store.refusals(&capped).await.unwrap();
    assert_eq!(kept.len(), MAX_REFUSALS);
    assert_eq!(kept[0], refusal(3, ErrorCode::InvalidInput));

    // They expire with their TTL.
    let short = fresh_run_id();
    store
        .note_refusal(
            &short,
            None,
            &refusal(0, ErrorCode::InvalidInput),
            h.short_ttl(),
        )
        .await
        .unwrap();
    h.advance(h.short_ttl() + Duration::from_millis(50)).await;
    assert!(store.refusals(&short).await.unwrap().is_empty());
}

/// A zero TTL is refused: it would delete the record as it is written.
pub async fn zero_ttl_is_refused(h: &dyn StoreHarness) {
    let store = h.store();
    let clock = h.clock();
    let run = fresh_run_id();
    let mut new = new_invocation(clock.as_ref(), &run, "c1", "tool_a", "one");
    new.ttl = Duration::ZERO;
    let unsettled = Unsettled::of(&new);
    assert!(matches!(
        store.create(new).await,
        Err(StoreError::InvalidTtl)
    ));
    assert_eq!(store.run_state(&run).await.unwrap(), None);
    assert!(
        store
            .list(&run, RecordFields::Metadata)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store
            .settle(&unsettled, ErrorCode::StoreUnavailable, clock.now())
            .await,
        Err(StoreError::InvalidTtl)
    ));
}

/// Settling touches only the record of its own create attempt.
pub async fn settle_finalizes_only_its_own_attempt(h: &dyn StoreHarness) {
    let store = h.store();
    let clock = h.clock();
    let run = fresh_run_id();
    let mut new = new_invocation(clock.as_ref(), &run, "c1", "tool_a", "one");
    new.attempt = 7;
    let mine = Unsettled::of(&new);
    store.create(new).await.unwrap();
    let key = mine.key.clone();

    let other = Unsettled {
        attempt: 8,
        ..mine.clone()
    };
    assert_eq!(
        store
            .settle(&other, ErrorCode::StoreUnavailable, clock.now())
            .await
            .unwrap(),
        Settled::OtherAttempt
    );
    let record = store.get(&key, RecordFields::All).await.unwrap().unwrap();
    assert_eq!(record.status, InvocationStatus::Projecting);

    assert_eq!(
        store
            .settle(&mine, ErrorCode::ExecutionAbandoned, clock.now())
            .await
            .unwrap(),
        Settled::Finalized
    );
    let record = store.get(&key, RecordFields::All).await.unwrap().unwrap();
    assert_eq!(record.status, InvocationStatus::Error);
    assert_eq!(record.evidence_status, Some(EvidenceStatus::Error));
    assert_eq!(record.error_code, Some(ErrorCode::ExecutionAbandoned));
    assert!(record.request_json.is_some(), "the request is kept");
    assert_eq!(
        store
            .settle(&mine, ErrorCode::StoreUnavailable, clock.now())
            .await
            .unwrap(),
        Settled::AlreadyFinal(InvocationStatus::Error)
    );
    assert!(matches!(
        store
            .finalize(&key, error(ErrorCode::ExecutionFailed, h))
            .await,
        Err(StoreError::NotProjecting { .. })
    ));
}

/// Settling a call whose create never applied leaves a tombstone: the key is
/// ERROR, a late create of it is a duplicate, and nothing is listed or counted.
pub async fn settle_of_a_missing_record_leaves_a_tombstone(h: &dyn StoreHarness) {
    let store = h.store();
    let clock = h.clock();
    let run = fresh_run_id();
    let started = Instant::now();
    let mut lost = new_invocation(clock.as_ref(), &run, "c1", "tool_a", "one");
    lost.attempt = 11;
    lost.budgets.run = Some(1);
    let unsettled = Unsettled::of(&lost);
    assert_eq!(
        store
            .settle(&unsettled, ErrorCode::StoreUnavailable, clock.now())
            .await
            .unwrap(),
        Settled::Tombstoned
    );
    let record = store
        .get(&unsettled.key, RecordFields::All)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, InvocationStatus::Error);
    assert_eq!(record.error_code, Some(ErrorCode::StoreUnavailable));
    assert_eq!(record.request_json, None);
    assert_eq!(record.raw_json, None);
    let ttl = store.remaining_ttl(&unsettled.key).await.unwrap().unwrap();
    // The call's TTL, from its creation: at most what the settle and the
    // read took is gone.
    let elapsed = started.elapsed();
    assert!(
        ttl <= unsettled.ttl && ttl + elapsed + h.ttl_tolerance() >= unsettled.ttl,
        "{ttl:?} ({elapsed:?} after the settle) is not the call's {:?}",
        unsettled.ttl
    );

    // The create that was still on its way arrives: refused, nothing counted.
    assert!(matches!(
        store.create(lost).await,
        Err(StoreError::Duplicate)
    ));
    assert!(
        store
            .list(&run, RecordFields::Metadata)
            .await
            .unwrap()
            .is_empty()
    );
    let mut next = new_invocation(clock.as_ref(), &run, "c2", "tool_a", "two");
    next.budgets.run = Some(1);
    store.create(next).await.unwrap();
    assert_eq!(
        store
            .settle(&unsettled, ErrorCode::StoreUnavailable, clock.now())
            .await
            .unwrap(),
        Settled::AlreadyFinal(InvocationStatus::Error)
    );
}

/// Settling releases the record's scope claim, as a finalization does.
pub async fn settle_releases_the_scope_claim(h: &dyn StoreHarness) {
    let store = h.store();
    let clock = h.clock();
    let run = fresh_run_id();
    let mut leader = new_invocation(clock.as_ref(), &run, "c1", "tool_a", "same");
    leader.claim_scope = true;
    leader.attempt = 3;
    let unsettled = Unsettled::of(&leader);
    assert_eq!(store.create(leader).await.unwrap().same_scope, None);
    store
        .settle(&unsettled, ErrorCode::ExecutionAbandoned, clock.now())
        .await
        .unwrap();
    let mut next = new_invocation(clock.as_ref(), &run, "c2", "tool_a", "same");
    next.claim_scope = true;
    assert_eq!(
        store.create(next).await.unwrap().same_scope,
        None,
        "the settled record no longer holds the claim"
    );
}

fn slow_boundary(h: &dyn StoreHarness, executor: &FakeExecutor) -> ToolBoundary {
    ToolBoundary::builder(h.store())
        .clock(h.clock())
        .tool(fake_tool("fake", executor.clone()))
        .build()
        .unwrap()
}

async fn wait_for_status(
    h: &dyn StoreHarness,
    key: &InvocationKey,
    status: InvocationStatus,
) -> crate::InvocationRecord {
    let started = Instant::now();
    loop {
        if let Some(record) = h.store().get(key, RecordFields::All).await.unwrap()
            && record.status == status
        {
            return record;
        }
        assert!(
            started.elapsed() < ABANDON_BOUND,
            "record did not become {status:?} within {ABANDON_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A caller that drops `invoke` mid-execution leaves no PROJECTING record:
/// the guard finalizes it `ERROR / EXECUTION_ABANDONED`, the id stays burned
/// (a retry is a duplicate and runs nothing), and it is not citable.
pub async fn dropped_invoke_is_abandoned(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new().with_delay(Duration::from_secs(600));
    let boundary = slow_boundary(h, &executor);
    let run = fresh_run_id();
    let ctx = RunContext::new(run.clone(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    let call = ToolEnvelope::new("slow-1", run.as_str(), "fake", words("slow"));
    let key = InvocationKey::new(run.clone(), call_id("slow-1"));

    let task = tokio::spawn({
        let boundary = boundary.clone();
        let ctx = ctx.clone();
        let call = call.clone();
        async move { boundary.invoke(&ctx, call).await }
    });
    wait_for_status(h, &key, InvocationStatus::Projecting).await;
    while executor.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    tokio::time::timeout(ABANDON_BOUND, boundary.drain_abandoned())
        .await
        .expect("abandonment finalized in time");
    let record = wait_for_status(h, &key, InvocationStatus::Error).await;
    assert_eq!(record.error_code, Some(ErrorCode::ExecutionAbandoned));
    assert_eq!(record.evidence_status, Some(EvidenceStatus::Error));

    let retry = boundary.invoke(&ctx, call).await;
    assert_eq!(retry.control.error_code, Some(ErrorCode::DuplicateToolCall));
    assert_eq!(executor.calls(), 1, "at most once");
    let checks = boundary.journal().verify_citations(&run, &["slow-1"]).await;
    assert_eq!(
        checks[0].verdict,
        CitationVerdict::NotCitable {
            reason: NotCitable::Failed(ErrorCode::ExecutionAbandoned)
        }
    );
}

/// Dropping `invoke` futures with `select!` at random points never leaves a
/// record PROJECTING once the boundary has drained.
pub async fn calls_dropped_anywhere_are_settled(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(3));
    let boundary = slow_boundary(h, &executor);
    let run = fresh_run_id();
    let ctx = RunContext::new(run.clone(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    for i in 0..40_u64 {
        let call = ToolEnvelope::new(
            format!("c{i}"),
            run.as_str(),
            "fake",
            words(&format!("q{i}")),
        );
        let cut = Duration::from_micros(fastrand::u64(0..6_000));
        tokio::select! {
            _ = boundary.invoke(&ctx, call) => {}
            () = tokio::time::sleep(cut) => {}
        }
    }
    tokio::time::timeout(ABANDON_BOUND, boundary.drain_abandoned())
        .await
        .expect("abandonments finalized in time");
    for record in h.store().list(&run, RecordFields::Metadata).await.unwrap() {
        assert_ne!(
            record.status,
            InvocationStatus::Projecting,
            "{:?}",
            record.key
        );
    }
    assert!(executor.calls() <= 40);
}

/// The run's deadline, held in the store, binds every boundary of the run:
/// one whose clock is past it is refused, whatever its own settings say.
pub async fn run_deadline_holds_across_boundaries(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new();
    let first = slow_boundary(h, &executor);
    let run = fresh_run_id();
    let ctx = RunContext::new(run.clone(), crate::CallPolicy::AUTHORIZED_READ_ONLY)
        .with_max_duration(Duration::from_secs(30));
    let ready = first
        .invoke(
            &ctx,
            ToolEnvelope::new("c1", run.as_str(), "fake", words("a")),
        )
        .await;
    assert_eq!(ready.control.status, InvocationStatus::Ready);
    let started = h.store().run_state(&run).await.unwrap().unwrap().started_at;

    // A second process whose clock is 31 s later, with a longer deadline of its own.
    let later = Arc::new(ManualClock::new(add(started, Duration::from_secs(31))));
    let second = ToolBoundary::builder(h.store())
        .clock(later)
        .tool(fake_tool("fake", executor.clone()))
        .build()
        .unwrap();
    let ctx = RunContext::new(run.clone(), crate::CallPolicy::AUTHORIZED_READ_ONLY)
        .with_max_duration(Duration::from_secs(3600));
    let refused = second
        .invoke(
            &ctx,
            ToolEnvelope::new("c2", run.as_str(), "fake", words("b")),
        )
        .await;
    assert_eq!(
        refused.control.error_code,
        Some(ErrorCode::RunDeadlineExceeded)
    );
    assert_eq!(executor.calls(), 1);
    let key = InvocationKey::new(run.clone(), call_id("c2"));
    assert_eq!(
        h.store().get(&key, RecordFields::Metadata).await.unwrap(),
        None
    );
}

/// A run belongs to its first caller's principal, on every boundary.
pub async fn run_owner_holds_across_boundaries(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new();
    let boundary = slow_boundary(h, &executor);
    let other = slow_boundary(h, &executor);
    let run = fresh_run_id();
    let alice = RunContext::new(run.clone(), crate::CallPolicy::AUTHORIZED_READ_ONLY)
        .with_principal("alice");
    let bob =
        RunContext::new(run.clone(), crate::CallPolicy::AUTHORIZED_READ_ONLY).with_principal("bob");
    let call = |id: &str| ToolEnvelope::new(id, run.as_str(), "fake", words("a"));
    assert_eq!(
        boundary.invoke(&alice, call("c1")).await.control.status,
        InvocationStatus::Ready
    );
    for (b, id) in [(&boundary, "c2"), (&other, "c3")] {
        let refused = b.invoke(&bob, call(id)).await;
        assert_eq!(refused.control.error_code, Some(ErrorCode::Unauthorized));
    }
    assert_eq!(
        other.invoke(&alice, call("c4")).await.control.status,
        InvocationStatus::Ready
    );
    assert_eq!(executor.calls(), 2);
    let state = h.store().run_state(&run).await.unwrap().unwrap();
    assert_eq!(state.owner.as_deref(), Some("alice"));
}

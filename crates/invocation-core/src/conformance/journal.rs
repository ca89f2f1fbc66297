//! Scenarios for the journal, replay and recovery, through the boundary.

use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId, Timestamp};
use serde_json::json;

use super::{StoreHarness, call_id, fresh_run_id, new_invocation};
use crate::testing::fake::{self, FakeExecutor, FakeRequest, SENTINEL, fake_tool};
use crate::{
    BoundaryOutcome, CitationVerdict, Finalization, InvocationKey, NotCitable, ReadyEvidence,
    RecordFields, ReplayPolicy, RunContext, ScopeFingerprint, ToolBoundary, ToolEnvelope,
};

const TOOL: &str = "fake_lookup";

fn boundary(h: &dyn StoreHarness, executor: FakeExecutor, policy: ReplayPolicy) -> ToolBoundary {
    ToolBoundary::builder(h.store())
        .clock(h.clock())
        .tool(fake_tool(TOOL, executor).replay(policy))
        .build()
        .expect("boundary")
}

fn envelope(run: &RunId, id: &str, query: &str) -> ToolEnvelope {
    ToolEnvelope::new(id, run.as_str(), TOOL, fake::words(query))
}

async fn call(b: &ToolBoundary, ctx: &RunContext, id: &str, query: &str) -> BoundaryOutcome {
    let outcome = b.invoke(ctx, envelope(&ctx.run_id, id, query)).await;
    let text = serde_json::to_string(&outcome).expect("outcome serializes");
    assert!(
        !text.contains(SENTINEL),
        "raw data or a failure leaked: {text}"
    );
    outcome
}

fn fingerprint(outcome: &BoundaryOutcome) -> ScopeFingerprint {
    outcome
        .control
        .scope_fingerprint
        .as_deref()
        .expect("fingerprint")
        .parse()
        .expect("hex fingerprint")
}

/// `entries` lists in creation order (raw only on request); `lookup` finds the
/// first READY record of a scope; citations get their verdicts.
pub async fn journal_entries_and_lookup(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new();
    let b = boundary(h, executor.clone(), ReplayPolicy::Never);
    let ctx = RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    let c1 = call(&b, &ctx, "c1", "alpha").await;
    let c2 = call(&b, &ctx, "c2", "fail x").await;
    let c3 = call(&b, &ctx, "c3", "alpha").await;
    let c4 = call(&b, &ctx, "c4", "none y").await;
    assert_eq!(c1.control.status, InvocationStatus::Ready);
    assert_eq!(c2.control.error_code, Some(ErrorCode::ExecutionFailed));
    assert_eq!(c3.control.duplicate_of, Some(call_id("c1")));
    assert_eq!(c4.control.evidence_status, EvidenceStatus::NoEvidence);
    assert_eq!(executor.calls(), 4, "without replay every call executes");

    let journal = b.journal();
    let entries = journal
        .entries(&ctx.run_id, RecordFields::Metadata)
        .await
        .expect("entries");
    let ids: Vec<&str> = entries
        .iter()
        .map(|r| r.key.tool_call_id.as_str())
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"]);
    assert!(
        entries.iter().all(|r| r.raw_json.is_none()),
        "no raw unless asked"
    );
    let full = journal
        .entries(&ctx.run_id, RecordFields::All)
        .await
        .expect("entries");
    assert!(
        full[0]
            .raw_json
            .as_deref()
            .is_some_and(|raw| raw.contains(SENTINEL)),
        "raw is kept for the harness"
    );

    let found = journal
        .lookup(&ctx.run_id, &fingerprint(&c1), RecordFields::WithoutRaw)
        .await
        .expect("lookup")
        .expect("a READY record of that scope");
    assert_eq!(found.key.tool_call_id, call_id("c1"));
    assert!(
        journal
            .lookup(&ctx.run_id, &fingerprint(&c2), RecordFields::Metadata)
            .await
            .expect("lookup")
            .is_none(),
        "ERROR records are never found"
    );
    assert!(
        journal
            .lookup(&fresh_run_id(), &fingerprint(&c1), RecordFields::Metadata)
            .await
            .expect("lookup")
            .is_none(),
        "lookup is per run"
    );

    let other_run = format!("{}/c1", fresh_run_id());
    let own_run = format!("{}/c1", ctx.run_id);
    let checks = b
        .verify_citations(
            &ctx,
            &[
                "c1",
                "c2",
                "c4",
                "nope",
                "bad id!",
                other_run.as_str(),
                own_run.as_str(),
            ],
        )
        .await;
    let verdicts: Vec<&CitationVerdict> = checks.iter().map(|c| &c.verdict).collect();
    assert_eq!(
        verdicts[0],
        &CitationVerdict::Evidence {
            tool_name: TOOL.into()
        }
    );
    assert_eq!(
        verdicts[1],
        &CitationVerdict::NotCitable {
            reason: NotCitable::Failed(ErrorCode::ExecutionFailed)
        }
    );
    assert_eq!(
        verdicts[2],
        &CitationVerdict::NegativeObservation {
            tool_name: TOOL.into(),
            scope: FakeRequest::from_words("none y").to_value()
        }
    );
    assert_eq!(
        verdicts[3],
        &CitationVerdict::NotCitable {
            reason: NotCitable::UnknownOrExpired
        }
    );
    assert_eq!(
        verdicts[4],
        &CitationVerdict::NotCitable {
            reason: NotCitable::InvalidId
        }
    );
    assert_eq!(
        verdicts[5],
        &CitationVerdict::NotCitable {
            reason: NotCitable::OtherRun
        }
    );
    assert_eq!(
        verdicts[6],
        &CitationVerdict::Evidence {
            tool_name: TOOL.into()
        }
    );

    let recalled = b.recall(&ctx.run_id, "c1").await.expect("recall");
    assert_eq!(recalled, c1.observation.to_json());
    assert_eq!(
        b.recall(&ctx.run_id, "c2").await,
        Err(NotCitable::Failed(ErrorCode::ExecutionFailed))
    );
}

/// `recover` moves stale PROJECTING records to ERROR/EXECUTION_ABANDONED with
/// the usual compare-and-set, and touches nothing else.
pub async fn journal_recover_abandons_stale_projecting_records(h: &dyn StoreHarness) {
    let (store, clock) = (h.store(), h.clock());
    let run = fresh_run_id();
    let now = clock.now();
    let old = Timestamp::from_unix_millis(now.unix_millis() - 600_000);
    let mut stale = new_invocation(&*clock, &run, "stale", "tool_a", "a");
    stale.created_at = old;
    let mut done = new_invocation(&*clock, &run, "done", "tool_a", "b");
    done.created_at = old;
    let fresh = new_invocation(&*clock, &run, "fresh", "tool_a", "c");
    for n in [&stale, &done, &fresh] {
        store.create(n.clone()).await.expect("create");
    }
    store
        .finalize(
            &done.key,
            Finalization::Ready {
                evidence: ReadyEvidence::Found,
                raw_json: "{}".into(),
                agent_result_json: "{}".into(),
                redactions: Default::default(),
                replayed_from: None,
                finished_at: now,
                timings: None,
            },
        )
        .await
        .expect("finalize");

    let journal = crate::Journal::new(Arc::clone(&store), Arc::clone(&clock));
    let cutoff = Timestamp::from_unix_millis(now.unix_millis() - 300_000);
    let recovered = journal.recover(&run, cutoff).await.expect("recover");
    assert_eq!(recovered, vec![call_id("stale")]);
    let get = |id: &str| {
        let store = Arc::clone(&store);
        let key = InvocationKey::new(run.clone(), call_id(id));
        async move {
            store
                .get(&key, RecordFields::Metadata)
                .await
                .expect("get")
                .expect("exists")
        }
    };
    let stale_now = get("stale").await;
    assert_eq!(stale_now.status, InvocationStatus::Error);
    assert_eq!(stale_now.error_code, Some(ErrorCode::ExecutionAbandoned));
    assert_eq!(get("done").await.status, InvocationStatus::Ready);
    assert_eq!(get("fresh").await.status, InvocationStatus::Projecting);
    assert!(
        journal
            .recover(&run, cutoff)
            .await
            .expect("recover")
            .is_empty(),
        "idempotent"
    );

    let checks = journal
        .verify_citations(&run, &["stale", "fresh", "done"])
        .await;
    assert_eq!(
        checks[0].verdict,
        CitationVerdict::NotCitable {
            reason: NotCitable::Failed(ErrorCode::ExecutionAbandoned)
        }
    );
    assert_eq!(
        checks[1].verdict,
        CitationVerdict::NotCitable {
            reason: NotCitable::StillProjecting
        },
        "a PROJECTING record is never citable"
    );

    // A call whose harness was killed mid-execution (no guard could run: a
    // dropped call in a live process is settled by the boundary itself, see
    // `dropped_invoke_is_abandoned`) stays PROJECTING until recovered;
    // recovery never re-executes it.
    let executor = FakeExecutor::new();
    let b = boundary(h, executor.clone(), ReplayPolicy::Never);
    let ctx = RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    store
        .create(new_invocation(
            clock.as_ref(),
            &ctx.run_id,
            "crashed",
            TOOL,
            "alpha",
        ))
        .await
        .expect("the killed process's create");
    let key = InvocationKey::new(ctx.run_id.clone(), call_id("crashed"));
    assert_eq!(
        store
            .get(&key, RecordFields::Metadata)
            .await
            .expect("get")
            .expect("exists")
            .status,
        InvocationStatus::Projecting
    );
    let later = Timestamp::from_unix_millis(clock.now().unix_millis() + 1);
    assert_eq!(
        b.journal()
            .recover(&ctx.run_id, later)
            .await
            .expect("recover"),
        vec![call_id("crashed")]
    );
    assert_eq!(executor.calls(), 0, "recovery executes nothing");
}

/// Under `SameScope`, a new call of a READY scope replays it under its own id.
pub async fn replay_same_scope_reuses_ready_results(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new();
    let b = boundary(h, executor.clone(), ReplayPolicy::SameScope);
    let ctx = RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY);

    let first = call(&b, &ctx, "c1", "alpha").await;
    assert_eq!(first.control.status, InvocationStatus::Ready);
    assert_eq!(first.control.replayed_from, None);
    let second = call(&b, &ctx, "c2", "alpha").await;
    assert_eq!(executor.calls(), 1, "the replay did not execute");
    assert_eq!(second.control.status, InvocationStatus::Ready);
    assert_eq!(second.control.replayed_from, Some(call_id("c1")));
    assert_eq!(second.control.duplicate_of, Some(call_id("c1")));
    assert_eq!(second.control.tool_call_id, Some(call_id("c2")));
    let mut expected = first.observation.to_json();
    expected["tool_call_id"] = json!("c2");
    assert_eq!(
        second.observation.to_json(),
        expected,
        "re-stamped with the new id"
    );

    let store = h.store();
    let key = |id: &str| InvocationKey::new(ctx.run_id.clone(), call_id(id));
    let r1 = store
        .get(&key("c1"), RecordFields::All)
        .await
        .expect("get")
        .expect("c1");
    let r2 = store
        .get(&key("c2"), RecordFields::All)
        .await
        .expect("get")
        .expect("c2");
    assert_eq!(r2.status, InvocationStatus::Ready);
    assert_eq!(r2.replayed_from, Some(call_id("c1")));
    assert_eq!(r2.raw_json, r1.raw_json, "the replay holds the stored raw");
    assert!(
        r2.agent_result_json
            .as_deref()
            .is_some_and(|j| j.contains("\"c2\""))
    );

    let none1 = call(&b, &ctx, "n1", "none zeta").await;
    let none2 = call(&b, &ctx, "n2", "none zeta").await;
    assert_eq!(executor.calls(), 2);
    assert_eq!(none2.control.replayed_from, Some(call_id("n1")));
    assert_eq!(none1.control.evidence_status, EvidenceStatus::NoEvidence);
    assert_eq!(
        none2.control.evidence_status,
        EvidenceStatus::NoEvidence,
        "NO_EVIDENCE stays NO_EVIDENCE"
    );

    let other = call(&b, &ctx, "o1", "beta").await;
    assert_eq!(other.control.replayed_from, None);
    assert_eq!(executor.calls(), 3, "another scope executes");

    let checks = b.verify_citations(&ctx, &["c1", "c2", "n2"]).await;
    assert!(matches!(
        checks[0].verdict,
        CitationVerdict::Evidence { .. }
    ));
    assert!(matches!(
        checks[1].verdict,
        CitationVerdict::Evidence { .. }
    ));
    assert!(matches!(
        checks[2].verdict,
        CitationVerdict::NegativeObservation { .. }
    ));
}

/// ERROR records are never replayed: a transient failure does not stick.
pub async fn replay_never_reuses_errors(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new();
    let b = boundary(h, executor.clone(), ReplayPolicy::SameScope);
    let ctx = RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    let first = call(&b, &ctx, "f1", "fail once").await;
    assert_eq!(first.control.error_code, Some(ErrorCode::ExecutionFailed));
    let second = call(&b, &ctx, "f2", "fail once").await;
    assert_eq!(executor.calls(), 2, "the failed scope executed again");
    assert_eq!(second.control.replayed_from, None);
}

/// A replay passes the whole preflight first and counts against budgets.
pub async fn replay_passes_preflight_and_counts_budgets(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new();
    let b = boundary(h, executor.clone(), ReplayPolicy::SameScope);
    let ctx =
        RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY).with_run_budget(3);
    let store = h.store();
    call(&b, &ctx, "c1", "alpha").await;

    let unauthorized = b
        .invoke(
            &ctx.clone().with_policy(crate::CallPolicy::UNAUTHORIZED),
            envelope(&ctx.run_id, "c2", "alpha"),
        )
        .await;
    assert_eq!(
        unauthorized.control.error_code,
        Some(ErrorCode::Unauthorized)
    );
    let writable = b
        .invoke(
            &ctx.clone().with_policy(crate::CallPolicy::new(true, false)),
            envelope(&ctx.run_id, "c3", "alpha"),
        )
        .await;
    assert_eq!(writable.control.error_code, Some(ErrorCode::NotReadOnly));
    for id in ["c2", "c3"] {
        let key = InvocationKey::new(ctx.run_id.clone(), call_id(id));
        assert!(
            store
                .get(&key, RecordFields::Metadata)
                .await
                .expect("get")
                .is_none()
        );
    }
    let duplicate = call(&b, &ctx, "c1", "alpha").await;
    assert_eq!(
        duplicate.control.error_code,
        Some(ErrorCode::DuplicateToolCall)
    );

    assert_eq!(
        call(&b, &ctx, "c4", "alpha").await.control.replayed_from,
        Some(call_id("c1"))
    );
    assert_eq!(
        call(&b, &ctx, "c5", "alpha").await.control.replayed_from,
        Some(call_id("c1"))
    );
    let over = call(&b, &ctx, "c6", "alpha").await;
    assert_eq!(
        over.control.error_code,
        Some(ErrorCode::RunBudgetExhausted),
        "replays count"
    );
    assert_eq!(executor.calls(), 1);
}

async fn concurrent(
    b: &ToolBoundary,
    ctx: &RunContext,
    n: usize,
    query: &str,
) -> Vec<BoundaryOutcome> {
    let mut tasks = Vec::new();
    for i in 0..n {
        let (b, ctx, query) = (b.clone(), ctx.clone(), query.to_owned());
        tasks.push(tokio::spawn(async move {
            b.invoke(&ctx, envelope(&ctx.run_id, &format!("k{i}"), &query))
                .await
        }));
    }
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("task"));
    }
    outcomes
}

/// 32 concurrent calls of one scope under `SameScope` execute the tool once.
pub async fn concurrent_same_scope_calls_execute_once(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(100));
    let b = boundary(h, executor.clone(), ReplayPolicy::SameScope);
    let ctx = RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    let outcomes = concurrent(&b, &ctx, 32, "alpha").await;
    assert_eq!(executor.calls(), 1);
    assert!(
        outcomes
            .iter()
            .all(|o| o.control.status == InvocationStatus::Ready)
    );
    let leaders: Vec<_> = outcomes
        .iter()
        .filter(|o| o.control.replayed_from.is_none())
        .collect();
    assert_eq!(leaders.len(), 1);
    let leader = leaders[0].control.tool_call_id.clone();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| o.control.replayed_from == leader)
            .count(),
        31
    );
}

/// Under `Never`, concurrent calls of one scope each execute.
pub async fn concurrent_calls_without_replay_each_execute(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(20));
    let b = boundary(h, executor.clone(), ReplayPolicy::Never);
    let ctx = RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    let outcomes = concurrent(&b, &ctx, 32, "alpha").await;
    assert_eq!(executor.calls(), 32);
    assert!(
        outcomes
            .iter()
            .all(|o| o.control.status == InvocationStatus::Ready)
    );
    assert!(outcomes.iter().all(|o| o.control.replayed_from.is_none()));
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| o.control.duplicate_of.is_some())
            .count(),
        31
    );
}

/// When the executing call of a scope fails, the calls waiting for it fail too,
/// and a later call of that scope executes again.
pub async fn failed_leader_fails_waiting_calls(h: &dyn StoreHarness) {
    let executor = FakeExecutor::new().with_delay(Duration::from_millis(100));
    let b = boundary(h, executor.clone(), ReplayPolicy::SameScope);
    let ctx = RunContext::new(fresh_run_id(), crate::CallPolicy::AUTHORIZED_READ_ONLY);
    let outcomes = concurrent(&b, &ctx, 8, "fail together").await;
    assert_eq!(executor.calls(), 1);
    assert!(
        outcomes
            .iter()
            .all(|o| o.control.error_code == Some(ErrorCode::ExecutionFailed))
    );
    let later = call(&b, &ctx, "later", "fail together").await;
    assert_eq!(later.control.error_code, Some(ErrorCode::ExecutionFailed));
    assert_eq!(executor.calls(), 2, "a failure is not replayed");
}

//! Fake tools for the boundary tests. Each behaviour is picked by the request's
//! `mode`; counters prove whether the executor and the projector ran.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aci_contracts::{EvidenceStatus, KnowledgeEvidence, LookupKnowledgeResult, ToolCallId};
use async_trait::async_trait;
use invocation_core::{
    Clock, ExecutionContext, ExecutionError, Executor, Limits, ManualClock, ProjectionContext,
    ProjectionError, Projector, ToolBoundary, ToolSpec,
};
use serde::{Deserialize, Serialize};
use store_memory::MemoryStore;

/// Planted in raw data and in every executor and projector failure.
pub const SENTINEL: &str = "SENTINEL-b00b-secret-payload";

pub const TOOL: &str = "probe";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Found,
    NoEvidence,
    ExecError,
    ExecPanic,
    Sleep,
    AdvanceClock,
    ProjError,
    ProjPanic,
    ErrorStatus,
    Inconsistent,
    WrongId,
    Sized,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeRequest {
    pub mode: Mode,
    #[serde(default)]
    pub text: String,
    /// Exact size of the raw JSON (mode `sized`).
    #[serde(default)]
    pub raw_bytes: usize,
    /// Exact size of the agent result JSON (mode `sized`).
    #[serde(default)]
    pub result_bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRaw {
    pub secret: String,
    pub fill: String,
}

#[derive(Debug, Clone, Default)]
pub struct Counters {
    pub executed: Arc<AtomicUsize>,
    pub projected: Arc<AtomicUsize>,
}

impl Counters {
    pub fn executed(&self) -> usize {
        self.executed.load(Ordering::SeqCst)
    }
    pub fn projected(&self) -> usize {
        self.projected.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone)]
pub struct ProbeExecutor {
    pub counters: Counters,
    pub clock: ManualClock,
    pub advance_by: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("upstream said {0}")]
struct Upstream(String);

/// `n` bytes of text mixing 3-byte and 1-byte UTF-8 characters, no JSON escapes.
pub fn utf8_fill(n: usize) -> String {
    let mut s = "数".repeat(n / 3);
    s.push_str(&"a".repeat(n % 3));
    s
}

fn raw_of_size(target: usize) -> ProbeRaw {
    let base = serde_json::to_string(&ProbeRaw {
        secret: SENTINEL.into(),
        fill: String::new(),
    })
    .unwrap()
    .len();
    ProbeRaw {
        secret: SENTINEL.into(),
        fill: utf8_fill(target.saturating_sub(base)),
    }
}

#[async_trait]
impl Executor for ProbeExecutor {
    type Request = ProbeRequest;
    type Raw = ProbeRaw;

    async fn execute(
        &self,
        request: &ProbeRequest,
        _context: &ExecutionContext,
    ) -> Result<ProbeRaw, ExecutionError> {
        self.counters.executed.fetch_add(1, Ordering::SeqCst);
        match request.mode {
            Mode::ExecError => Err(ExecutionError::failed(Upstream(SENTINEL.into()))),
            Mode::ExecPanic => panic!("executor exploded: {SENTINEL}"),
            Mode::Sleep => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(raw_of_size(0))
            }
            Mode::AdvanceClock => {
                self.clock.advance(self.advance_by);
                Ok(raw_of_size(0))
            }
            Mode::Sized => Ok(raw_of_size(request.raw_bytes)),
            _ => Ok(raw_of_size(0)),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProbeProjector {
    pub counters: Counters,
}

fn result(id: &ToolCallId, query: &str, excerpt: &str) -> LookupKnowledgeResult {
    LookupKnowledgeResult {
        evidence_status: EvidenceStatus::EvidenceFound,
        tool_call_id: id.clone(),
        query: query.into(),
        evidence: vec![KnowledgeEvidence {
            document_id: "d1".into(),
            source: "probe".into(),
            title: "Probe".into(),
            breadcrumb: "Probe".into(),
            excerpt: excerpt.into(),
        }],
        returned_count: 1,
        relevance_level: None,
        truncated: false,
    }
}

impl Projector for ProbeProjector {
    type Request = ProbeRequest;
    type Raw = ProbeRaw;
    type Output = LookupKnowledgeResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, ProbeRequest>,
        raw: &ProbeRaw,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        self.counters.projected.fetch_add(1, Ordering::SeqCst);
        let id = context.tool_call_id;
        let text = &context.request.text;
        match context.request.mode {
            Mode::ProjError => Err(ProjectionError::new(Upstream(format!(
                "{SENTINEL} {}",
                raw.secret
            )))),
            Mode::ProjPanic => panic!("projector exploded: {}", raw.secret),
            Mode::NoEvidence => Ok(LookupKnowledgeResult {
                evidence_status: EvidenceStatus::NoEvidence,
                evidence: Vec::new(),
                returned_count: 0,
                ..result(id, text, "x")
            }),
            Mode::ErrorStatus => Ok(LookupKnowledgeResult {
                evidence_status: EvidenceStatus::Error,
                ..result(id, text, "x")
            }),
            Mode::Inconsistent => Ok(LookupKnowledgeResult {
                returned_count: 7,
                ..result(id, text, "x")
            }),
            Mode::WrongId => Ok(result(&ToolCallId::new("someone-else").unwrap(), text, "x")),
            Mode::Sized if context.request.result_bytes == 0 => Ok(result(id, text, "x")),
            Mode::Sized => {
                let base = serde_json::to_string(&result(id, text, "")).unwrap().len();
                let excerpt = utf8_fill(context.request.result_bytes.saturating_sub(base));
                Ok(result(id, text, &excerpt))
            }
            _ => Ok(result(id, text, &format!("evidence about {text}"))),
        }
    }
}

pub struct Fixture {
    pub boundary: ToolBoundary,
    pub store: MemoryStore,
    pub clock: ManualClock,
    pub counters: Counters,
}

pub fn fixture(limits: Limits) -> Fixture {
    fixture_with(limits, |spec| spec)
}

pub fn fixture_with(
    limits: Limits,
    customize: impl FnOnce(
        ToolSpec<ProbeExecutor, ProbeProjector>,
    ) -> ToolSpec<ProbeExecutor, ProbeProjector>,
) -> Fixture {
    let clock = ManualClock::at_default_start();
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let counters = Counters::default();
    let executor = ProbeExecutor {
        counters: counters.clone(),
        clock: clock.clone(),
        advance_by: Duration::ZERO,
    };
    let projector = ProbeProjector {
        counters: counters.clone(),
    };
    let spec = customize(
        ToolSpec::new(TOOL, "A probe tool.", executor, projector)
            .read_only(true)
            .validate_with(|r: &ProbeRequest| r.text != "invalid"),
    );
    let boundary = ToolBoundary::builder(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()) as Arc<dyn Clock>)
        .limits(limits)
        .tool(spec)
        .build()
        .unwrap();
    Fixture {
        boundary,
        store,
        clock,
        counters,
    }
}

pub fn args(mode: Mode, text: &str) -> String {
    serde_json::to_string(&ProbeRequest {
        mode,
        text: text.into(),
        raw_bytes: 0,
        result_bytes: 0,
    })
    .unwrap()
}

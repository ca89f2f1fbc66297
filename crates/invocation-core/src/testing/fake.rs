//! The fake tool: a counting executor and projector for tests, examples and
//! benchmarks.
//!
//! The request's [`Mode`] picks the behaviour. Raw data, every failure and
//! every panic message carry [`SENTINEL`], which must never reach an outcome.
//! [`Counters`] prove whether the executor and the projector ran.
//!
//! ```
//! use invocation_core::testing::fake::{self, FakeExecutor, Mode};
//! let tool = fake::fake_tool("probe", FakeExecutor::new());
//! let arguments = fake::args(Mode::NoEvidence, "pool timeout");
//! # let _ = (tool, arguments);
//! ```

// Test code: a failed expectation is a failed test.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aci_contracts::{KnowledgeEvidence, LookupKnowledgeResult, ReadyEvidenceStatus, ToolCallId};
use async_trait::async_trait;
use serde::{Deserialize, Serialize, Serializer};

use crate::{
    ExecutionContext, ExecutionError, Executor, ManualClock, ProjectionContext, ProjectionError,
    Projector, ToolSpec,
};

/// Planted in raw data, executor and projector errors and panic messages.
pub const SENTINEL: &str = "SENTINEL-7f3a-raw-secret";

/// What a call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One evidence item, `"evidence about <text>"`.
    #[default]
    Found,
    /// No evidence.
    NoEvidence,
    /// The executor fails (`EXECUTION_FAILED`, retryable).
    ExecError,
    /// The executor fails for good (`EXECUTION_FAILED`, not retryable: the
    /// source says the same request will never succeed).
    ExecRefused,
    /// The executor panics.
    ExecPanic,
    /// The executor sleeps 30 s (for timeouts and drops).
    Sleep,
    /// The executor advances its manual clock (see
    /// [`FakeExecutor::advancing`]) and then finds evidence.
    AdvanceClock,
    /// The projector fails.
    ProjError,
    /// The projector panics.
    ProjPanic,
    /// The projector returns evidence whose `returned_count` disagrees with it.
    Inconsistent,
    /// The projector returns a result for another tool call id.
    WrongId,
    /// Raw JSON of exactly `raw_bytes` and, when `result_bytes > 0`, a result
    /// of exactly `result_bytes`.
    Sized,
}

/// The fake tool's request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeRequest {
    /// The behaviour.
    pub mode: Mode,
    /// Echoed as the result's query and in its excerpt.
    #[serde(default)]
    pub text: String,
    /// Exact size of the raw JSON (mode `sized`).
    #[serde(default)]
    pub raw_bytes: usize,
    /// Exact size of the agent result JSON (mode `sized`, when not 0).
    #[serde(default)]
    pub result_bytes: usize,
}

impl FakeRequest {
    /// A request of `mode` about `text`.
    #[must_use]
    pub fn new(mode: Mode, text: &str) -> Self {
        Self {
            mode,
            text: text.to_owned(),
            raw_bytes: 0,
            result_bytes: 0,
        }
    }

    /// A request whose first word picks the mode: `fail` (executor error),
    /// `panic` (executor panic), `none` (no evidence), anything else finds
    /// evidence. The whole text is kept.
    #[must_use]
    pub fn from_words(text: &str) -> Self {
        let mode = match text.split_whitespace().next().unwrap_or_default() {
            "fail" => Mode::ExecError,
            "panic" => Mode::ExecPanic,
            "none" => Mode::NoEvidence,
            _ => Mode::Found,
        };
        Self::new(mode, text)
    }

    /// A `sized` request.
    #[must_use]
    pub fn sized(raw_bytes: usize, result_bytes: usize) -> Self {
        Self {
            raw_bytes,
            result_bytes,
            ..Self::new(Mode::Sized, "")
        }
    }

    /// The request as tool call arguments (JSON text).
    #[must_use]
    pub fn to_arguments(&self) -> String {
        serde_json::to_string(self).expect("a fake request serializes")
    }

    /// The request as JSON, which is also its default scope.
    #[must_use]
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a fake request serializes")
    }
}

/// Arguments of a request of `mode` about `text`.
#[must_use]
pub fn args(mode: Mode, text: &str) -> String {
    FakeRequest::new(mode, text).to_arguments()
}

/// Arguments of [`FakeRequest::from_words`]`(text)`.
#[must_use]
pub fn words(text: &str) -> String {
    FakeRequest::from_words(text).to_arguments()
}

/// The fake tool's raw response: `{"secret": SENTINEL, "fill": ...}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeRaw {
    /// Harness-only data that must never reach the model.
    pub secret: String,
    /// Padding (shared, so a large raw response costs no copy per call).
    pub fill: Arc<str>,
}

impl Serialize for FakeRaw {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut raw = serializer.serialize_struct("FakeRaw", 2)?;
        raw.serialize_field("secret", &self.secret)?;
        raw.serialize_field("fill", &*self.fill)?;
        raw.end()
    }
}

/// `n` bytes of text mixing 3-byte and 1-byte UTF-8 characters, no JSON escapes.
#[must_use]
pub fn utf8_fill(n: usize) -> String {
    let mut fill = "数".repeat(n / 3);
    fill.push_str(&"a".repeat(n % 3));
    fill
}

fn raw_of_size(target: usize) -> FakeRaw {
    let base = serde_json::to_string(&FakeRaw {
        secret: SENTINEL.into(),
        fill: Arc::from(""),
    })
    .expect("raw serializes")
    .len();
    FakeRaw {
        secret: SENTINEL.into(),
        fill: Arc::from(utf8_fill(target.saturating_sub(base))),
    }
}

/// How often the executor and the projector ran (panics and failures included).
#[derive(Debug, Clone, Default)]
pub struct Counters {
    executed: Arc<AtomicUsize>,
    projected: Arc<AtomicUsize>,
}

impl Counters {
    /// Executions so far.
    #[must_use]
    pub fn executed(&self) -> usize {
        self.executed.load(Ordering::SeqCst)
    }

    /// Projections so far.
    #[must_use]
    pub fn projected(&self) -> usize {
        self.projected.load(Ordering::SeqCst)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("upstream said {0}")]
struct Upstream(String);

/// The fake executor. Clones share their counters.
#[derive(Debug, Clone, Default)]
pub struct FakeExecutor {
    counters: Counters,
    delay: Duration,
    clock: Option<(ManualClock, Duration)>,
    fill: Option<Arc<str>>,
}

impl FakeExecutor {
    /// A fresh executor: zero counts, no delay.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleeps `delay` before every answer.
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Mode `advance_clock` advances `clock` by `by`.
    #[must_use]
    pub fn advancing(mut self, clock: ManualClock, by: Duration) -> Self {
        self.clock = Some((clock, by));
        self
    }

    /// Mode `found` returns `fill` (shared, not copied) as the raw padding.
    #[must_use]
    pub fn with_fill(mut self, fill: Arc<str>) -> Self {
        self.fill = Some(fill);
        self
    }

    /// How many times it ran (panics and failures included).
    #[must_use]
    pub fn calls(&self) -> usize {
        self.counters.executed()
    }

    /// The counters it shares with its projector.
    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The projector counting into the same [`Counters`].
    #[must_use]
    pub fn projector(&self) -> FakeProjector {
        FakeProjector {
            counters: self.counters.clone(),
        }
    }
}

#[async_trait]
impl Executor for FakeExecutor {
    type Request = FakeRequest;
    type Raw = FakeRaw;

    async fn execute(
        &self,
        request: &FakeRequest,
        _context: &ExecutionContext,
    ) -> Result<FakeRaw, ExecutionError> {
        self.counters.executed.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        match request.mode {
            Mode::ExecError => Err(ExecutionError::failed(Upstream(SENTINEL.into()))),
            Mode::ExecRefused => {
                Err(ExecutionError::failed(Upstream(SENTINEL.into())).with_retryable(false))
            }
            Mode::ExecPanic => panic!("executor exploded: {SENTINEL}"),
            Mode::Sleep => {
                tokio::time::sleep(Duration::from_secs(30)).await;
                Ok(raw_of_size(0))
            }
            Mode::AdvanceClock => {
                if let Some((clock, by)) = &self.clock {
                    clock.advance(*by);
                }
                Ok(raw_of_size(0))
            }
            Mode::Sized => Ok(raw_of_size(request.raw_bytes)),
            Mode::Found if self.fill.is_some() => Ok(FakeRaw {
                secret: SENTINEL.into(),
                fill: self.fill.clone().unwrap_or_else(|| Arc::from("")),
            }),
            _ => Ok(raw_of_size(0)),
        }
    }
}

/// The fake projector: a `lookup_knowledge` result per [`Mode`].
#[derive(Debug, Clone, Default)]
pub struct FakeProjector {
    counters: Counters,
}

/// The one-item result the fake projector finds: document `d1` from
/// `probe`, titled `Probe`, with `excerpt`.
#[must_use]
pub fn found_result(id: &ToolCallId, query: &str, excerpt: &str) -> LookupKnowledgeResult {
    LookupKnowledgeResult {
        evidence_status: ReadyEvidenceStatus::EvidenceFound,
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
        retrieval_legs: Vec::new(),
        retrieval_fallback: None,
    }
}

impl Projector for FakeProjector {
    type Request = FakeRequest;
    type Raw = FakeRaw;
    type Output = LookupKnowledgeResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, FakeRequest>,
        raw: &FakeRaw,
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
                evidence_status: ReadyEvidenceStatus::NoEvidence,
                evidence: Vec::new(),
                returned_count: 0,
                ..found_result(id, text, "x")
            }),
            Mode::Inconsistent => Ok(LookupKnowledgeResult {
                returned_count: 7,
                ..found_result(id, text, "x")
            }),
            Mode::WrongId => Ok(found_result(
                &ToolCallId::new("someone-else").expect("valid id"),
                text,
                "x",
            )),
            Mode::Sized if context.request.result_bytes == 0 => Ok(found_result(id, text, "x")),
            Mode::Sized => {
                let base = serde_json::to_string(&found_result(id, text, ""))
                    .expect("result serializes")
                    .len();
                let excerpt = utf8_fill(context.request.result_bytes.saturating_sub(base));
                Ok(found_result(id, text, &excerpt))
            }
            // The excerpt goes through the redaction pass, as a real
            // projector's evidence does.
            _ => Ok(found_result(
                id,
                text,
                &context.redact(&format!("evidence about {text}")),
            )),
        }
    }
}

/// The fake tool named `name`, read-only, around `executor` and its projector.
#[must_use]
pub fn fake_tool(name: &str, executor: FakeExecutor) -> ToolSpec<FakeExecutor, FakeProjector> {
    let projector = executor.projector();
    ToolSpec::new(name, "A fake evidence tool for tests.", executor, projector).read_only(true)
}

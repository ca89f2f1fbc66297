//! The canonical invocation record and what the store port exchanges.

use std::time::Duration;

use aci_contracts::{
    ErrorCode, EvidenceStatus, InvocationStatus, ReadyEvidenceStatus, RunId, Timestamp, ToolCallId,
};

use crate::ScopeFingerprint;
use crate::redact::Redactions;

/// The canonical key: one record per (run, framework tool call id).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InvocationKey {
    /// The run that owns the call.
    pub run_id: RunId,
    /// The framework's exact id of the call.
    pub tool_call_id: ToolCallId,
}

impl InvocationKey {
    /// The key of `tool_call_id` in `run_id`.
    #[must_use]
    pub const fn new(run_id: RunId, tool_call_id: ToolCallId) -> Self {
        Self {
            run_id,
            tool_call_id,
        }
    }
}

/// Optional per-run and per-tool call budgets checked atomically at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Budgets {
    /// Most records the run may create, all tools together.
    pub run: Option<u32>,
    /// Most records the run may create for this record's tool.
    pub tool: Option<u32>,
}

/// A record to create in `PROJECTING`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInvocation {
    /// Its key.
    pub key: InvocationKey,
    /// The tool's registered name.
    pub tool_name: String,
    /// The complete request: the arguments text exactly as the framework sent it.
    pub request_json: String,
    /// The tool's normalized scope, canonical JSON.
    pub scope_json: String,
    /// Fingerprint of tool name and normalized scope.
    pub scope_fingerprint: ScopeFingerprint,
    /// When the boundary created it (the boundary's clock).
    pub created_at: Timestamp,
    /// How long the record lives. Set here and only here.
    pub ttl: Duration,
    /// Budgets to check and count.
    pub budgets: Budgets,
    /// Whether to report (and, when free, claim) the scope for same-scope replay.
    pub claim_scope: bool,
    /// The run's terms, fixed by the run's first create.
    pub run: RunTerms,
    /// A random token of this create attempt, kept with the record, so that
    /// settling a call whose create got no answer can only ever touch the
    /// record this attempt created ([`InvocationStore::settle`](crate::InvocationStore::settle)).
    pub attempt: u64,
}

/// What the first create of a run fixes for the whole run, in the store, for
/// every process and replica: the run's owner and how long it may last.
///
/// Later creates compare against what the first one stored; what they pass
/// here is used only when they are the first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunTerms {
    /// How long the run may last from its first create (its start).
    /// `None`: no store-held deadline.
    pub max_duration: Option<Duration>,
    /// The principal the run belongs to. `None`: a run without owner, which
    /// only calls without a principal may use.
    pub owner: Option<String>,
}

/// A call refused before it had a record (by preflight, or by the store at
/// create: a duplicate id, an exhausted budget), as kept for people
/// reviewing the run ([`InvocationStore::note_refusal`]): what was asked and
/// why it was refused, never its arguments.
///
/// [`InvocationStore::note_refusal`]: crate::InvocationStore::note_refusal
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The framework's id, when it was a valid one.
    pub tool_call_id: Option<ToolCallId>,
    /// The tool, when it is one the boundary has.
    pub tool_name: Option<String>,
    /// Why.
    pub error_code: ErrorCode,
    /// When (the refusing boundary's clock).
    pub at: Timestamp,
}

/// At most this many refusals are kept per run (the oldest go first).
pub const MAX_REFUSALS: usize = 256;

impl Refusal {
    /// Its compact JSON form, as the stores keep it.
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "tool_call_id": self.tool_call_id.as_ref().map(ToolCallId::as_str),
            "tool_name": self.tool_name,
            "error_code": self.error_code.as_str(),
            "at_ms": self.at.unix_millis(),
        })
        .to_string()
    }

    /// Reads [`to_json`](Self::to_json)'s form back; `None` for anything
    /// else.
    #[must_use]
    pub fn from_json(text: &str) -> Option<Self> {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(Self {
            tool_call_id: match value.get("tool_call_id")? {
                serde_json::Value::Null => None,
                id => Some(ToolCallId::new(id.as_str()?).ok()?),
            },
            tool_name: match value.get("tool_name")? {
                serde_json::Value::Null => None,
                name => Some(name.as_str()?.to_owned()),
            },
            error_code: ErrorCode::parse(value.get("error_code")?.as_str()?)?,
            at: Timestamp::from_unix_millis(value.get("at_ms")?.as_i64()?),
        })
    }
}

/// A run's state as the store holds it: set atomically by the run's first
/// create, with the record TTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunState {
    /// When the run's first record was created (the creating boundary's clock).
    pub started_at: Timestamp,
    /// `started_at + max_duration` of the first create, if it had one.
    pub deadline: Option<Timestamp>,
    /// The run's owner, if the first create named one.
    pub owner: Option<String>,
}

/// Another record of the run with the same scope, as seen at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SameScope {
    /// The first record of the run with this scope that became READY.
    Ready(ToolCallId),
    /// A record with this scope that claimed it and is still PROJECTING.
    InFlight(ToolCallId),
}

/// What creation reports besides success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    /// The first earlier record of this run with the same scope fingerprint.
    pub duplicate_of: Option<ToolCallId>,
    /// For a claiming create: a READY or in-flight record of the same scope.
    /// `None` means this record now holds the claim.
    pub same_scope: Option<SameScope>,
    /// The run's state after this create (set by it when it was the run's first).
    pub run: RunState,
}

/// The two evidence statuses a READY record may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadyEvidence {
    /// `EVIDENCE_FOUND`.
    Found,
    /// `NO_EVIDENCE`.
    NoEvidence,
}

impl From<ReadyEvidenceStatus> for ReadyEvidence {
    fn from(status: ReadyEvidenceStatus) -> Self {
        match status {
            ReadyEvidenceStatus::EvidenceFound => Self::Found,
            ReadyEvidenceStatus::NoEvidence => Self::NoEvidence,
        }
    }
}

impl ReadyEvidence {
    /// From an evidence status; `None` for `ERROR`.
    #[must_use]
    pub const fn from_status(status: EvidenceStatus) -> Option<Self> {
        match status {
            EvidenceStatus::EvidenceFound => Some(Self::Found),
            EvidenceStatus::NoEvidence => Some(Self::NoEvidence),
            EvidenceStatus::Error => None,
        }
    }

    /// As an evidence status.
    #[must_use]
    pub const fn status(self) -> EvidenceStatus {
        match self {
            Self::Found => EvidenceStatus::EvidenceFound,
            Self::NoEvidence => EvidenceStatus::NoEvidence,
        }
    }
}

/// Where the boundary spent a call's time, phase by phase, measured with a
/// monotonic clock (not the boundary's [`Clock`](crate::Clock)). A phase the
/// call never reached is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PhaseTimings {
    /// Preflight: the checks before the record is created.
    pub preflight: Duration,
    /// The executor, under its timeout (`None`: it never ran, as for a
    /// replayed result or a refused create).
    pub execution: Option<Duration>,
    /// Serializing the raw response, projecting it and checking the result
    /// (`None`: not reached).
    pub projection: Option<Duration>,
}

/// The one transition out of `PROJECTING`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalization {
    /// `PROJECTING -> READY`.
    Ready {
        /// `EVIDENCE_FOUND` or `NO_EVIDENCE`.
        evidence: ReadyEvidence,
        /// The raw response, harness-only.
        raw_json: String,
        /// The bounded agent result.
        agent_result_json: String,
        /// What the projection redacted from the agent result, per rule
        /// (never the values; the raw response is not redacted).
        redactions: Redactions,
        /// The READY record whose result this one replays.
        replayed_from: Option<ToolCallId>,
        /// When the call finished.
        finished_at: Timestamp,
        /// Where the boundary spent the call's time (`None` when it is not
        /// the boundary's own conclusion).
        timings: Option<PhaseTimings>,
    },
    /// `PROJECTING -> ERROR` (evidence status `ERROR`).
    Error {
        /// The safe error code.
        error_code: ErrorCode,
        /// Whether calling again later, unchanged, may succeed (the
        /// executor's own verdict when it failed, else the code's);
        /// harness-only.
        retryable: bool,
        /// The raw response when it was obtained and fits; harness-only.
        raw_json: Option<String>,
        /// When the call finished.
        finished_at: Timestamp,
        /// Where the boundary spent the call's time (`None` for an abandoned,
        /// settled or recovered call).
        timings: Option<PhaseTimings>,
    },
}

impl Finalization {
    /// The status this finalization moves to.
    #[must_use]
    pub const fn status(&self) -> InvocationStatus {
        match self {
            Self::Ready { .. } => InvocationStatus::Ready,
            Self::Error { .. } => InvocationStatus::Error,
        }
    }

    /// What it writes, field by field: the one mapping of a finalization to
    /// a record's fields, which every store writes as it is.
    #[must_use]
    pub fn fields(&self) -> FinalFields<'_> {
        match self {
            Self::Ready {
                evidence,
                raw_json,
                agent_result_json,
                redactions,
                replayed_from,
                finished_at,
                timings,
            } => FinalFields {
                status: InvocationStatus::Ready,
                evidence_status: evidence.status(),
                error_code: None,
                retryable: None,
                finished_at: *finished_at,
                raw_json: Some(raw_json),
                agent_result_json: Some(agent_result_json),
                replayed_from: replayed_from.as_ref(),
                redactions: (!redactions.is_empty()).then_some(redactions),
                timings: *timings,
            },
            Self::Error {
                error_code,
                retryable,
                raw_json,
                finished_at,
                timings,
            } => FinalFields {
                status: InvocationStatus::Error,
                evidence_status: EvidenceStatus::Error,
                error_code: Some(*error_code),
                retryable: Some(*retryable),
                finished_at: *finished_at,
                raw_json: raw_json.as_deref(),
                agent_result_json: None,
                replayed_from: None,
                redactions: None,
                timings: *timings,
            },
        }
    }

    /// Its payloads, raw response and agent result, moved out.
    fn into_payloads(self) -> (Option<String>, Option<String>) {
        match self {
            Self::Ready {
                raw_json,
                agent_result_json,
                ..
            } => (Some(raw_json), Some(agent_result_json)),
            Self::Error { raw_json, .. } => (raw_json, None),
        }
    }
}

/// The fields a [`Finalization`] sets on its record
/// ([`Finalization::fields`]); a field that is `None` is not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinalFields<'a> {
    /// `READY` or `ERROR`.
    pub status: InvocationStatus,
    /// `EVIDENCE_FOUND` or `NO_EVIDENCE` when READY, `ERROR` when ERROR.
    pub evidence_status: EvidenceStatus,
    /// The safe error code (ERROR).
    pub error_code: Option<ErrorCode>,
    /// Whether calling again may succeed (ERROR).
    pub retryable: Option<bool>,
    /// When the call finished.
    pub finished_at: Timestamp,
    /// The raw response, when kept.
    pub raw_json: Option<&'a str>,
    /// The bounded agent result (READY).
    pub agent_result_json: Option<&'a str>,
    /// The READY record whose result it replays.
    pub replayed_from: Option<&'a ToolCallId>,
    /// What the projection redacted, per rule (READY, when anything was).
    pub redactions: Option<&'a Redactions>,
    /// Where the boundary spent the call's time, when it concluded the call.
    pub timings: Option<PhaseTimings>,
}

/// Which parts of a record a read returns. Metadata is always returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordFields {
    /// Ids, statuses, timestamps, sizes: no payloads.
    Metadata,
    /// Metadata, the request, the scope and the agent result; no raw response.
    WithoutRaw,
    /// Everything, including the harness-only raw response.
    All,
}

/// One canonical record, as read from a store.
///
/// Payload fields are `Some` only when the read asked for them and the record
/// has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvocationRecord {
    /// Its key.
    pub key: InvocationKey,
    /// The tool's registered name.
    pub tool_name: String,
    /// Lifecycle status.
    pub status: InvocationStatus,
    /// `None` while PROJECTING; `EVIDENCE_FOUND`/`NO_EVIDENCE` when READY; `ERROR` when ERROR.
    pub evidence_status: Option<EvidenceStatus>,
    /// The safe error code of an ERROR record.
    pub error_code: Option<ErrorCode>,
    /// Whether calling again later, unchanged, may succeed: for an ERROR
    /// record, as recorded with its error; `None` otherwise, and for an
    /// ERROR record written without it.
    pub retryable: Option<bool>,
    /// Fingerprint of tool name and normalized scope.
    pub scope_fingerprint: ScopeFingerprint,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it left PROJECTING.
    pub finished_at: Option<Timestamp>,
    /// The READY record whose result it replays.
    pub replayed_from: Option<ToolCallId>,
    /// What the projection redacted from the agent result, per rule name
    /// (never the values; empty when nothing was, and for ERROR records).
    /// A metadata field: read with every [`RecordFields`].
    pub redactions: Redactions,
    /// Where the boundary spent the call's time, when it concluded the call
    /// itself (a metadata field).
    pub timings: Option<PhaseTimings>,
    /// Size of the request text in bytes.
    pub request_bytes: u64,
    /// Size of the stored raw response in bytes, when stored.
    pub raw_bytes: Option<u64>,
    /// Size of the agent result in bytes, when stored.
    pub agent_result_bytes: Option<u64>,
    /// The request text ([`RecordFields::WithoutRaw`] and up).
    pub request_json: Option<String>,
    /// The normalized scope, canonical JSON ([`RecordFields::WithoutRaw`] and up).
    pub scope_json: Option<String>,
    /// The agent result ([`RecordFields::WithoutRaw`] and up).
    pub agent_result_json: Option<String>,
    /// The raw response ([`RecordFields::All`] only).
    pub raw_json: Option<String>,
}

impl InvocationRecord {
    /// The record as created, before any finalization, with all its fields.
    #[must_use]
    pub fn from_new(new: NewInvocation) -> Self {
        Self {
            request_bytes: new.request_json.len() as u64,
            key: new.key,
            tool_name: new.tool_name,
            status: InvocationStatus::Projecting,
            evidence_status: None,
            error_code: None,
            retryable: None,
            scope_fingerprint: new.scope_fingerprint,
            created_at: new.created_at,
            finished_at: None,
            replayed_from: None,
            redactions: Redactions::new(),
            timings: None,
            raw_bytes: None,
            agent_result_bytes: None,
            request_json: Some(new.request_json),
            scope_json: Some(new.scope_json),
            agent_result_json: None,
            raw_json: None,
        }
    }

    /// Applies `finalization` (the caller has checked the record is PROJECTING).
    pub fn apply(&mut self, finalization: Finalization) {
        let fields = finalization.fields();
        self.status = fields.status;
        self.evidence_status = Some(fields.evidence_status);
        self.error_code = fields.error_code;
        self.retryable = fields.retryable;
        self.finished_at = Some(fields.finished_at);
        self.replayed_from = fields.replayed_from.cloned();
        self.redactions = fields.redactions.cloned().unwrap_or_default();
        self.timings = fields.timings;
        self.raw_bytes = fields.raw_json.map(|raw| raw.len() as u64);
        self.agent_result_bytes = fields.agent_result_json.map(|result| result.len() as u64);
        (self.raw_json, self.agent_result_json) = finalization.into_payloads();
    }

    /// A copy holding only the payloads `fields` asks for.
    #[must_use]
    pub fn select(&self, fields: RecordFields) -> Self {
        let with_payloads = fields >= RecordFields::WithoutRaw;
        Self {
            key: self.key.clone(),
            tool_name: self.tool_name.clone(),
            status: self.status,
            evidence_status: self.evidence_status,
            error_code: self.error_code,
            retryable: self.retryable,
            scope_fingerprint: self.scope_fingerprint,
            created_at: self.created_at,
            finished_at: self.finished_at,
            replayed_from: self.replayed_from.clone(),
            redactions: self.redactions.clone(),
            timings: self.timings,
            request_bytes: self.request_bytes,
            raw_bytes: self.raw_bytes,
            agent_result_bytes: self.agent_result_bytes,
            request_json: self
                .request_json
                .as_ref()
                .filter(|_| with_payloads)
                .cloned(),
            scope_json: self.scope_json.as_ref().filter(|_| with_payloads).cloned(),
            agent_result_json: self
                .agent_result_json
                .as_ref()
                .filter(|_| with_payloads)
                .cloned(),
            raw_json: self
                .raw_json
                .as_ref()
                .filter(|_| fields == RecordFields::All)
                .cloned(),
        }
    }

    /// Time from creation to finalization.
    #[must_use]
    pub fn duration(&self) -> Option<Duration> {
        self.finished_at
            .map(|end| crate::clock::between(self.created_at, end))
    }
}

//! The tool boundary that agent tools run through.
//!
//! [`ToolBoundary::invoke`] takes a [`RunContext`] (the harness's run) and a
//! [`ToolEnvelope`] (the framework's call, untrusted) and:
//!
//! 1. runs **preflight** in a fixed order — tool call id, run ownership, run
//!    active, deadline, known tool, authorization, read-only, arguments,
//!    request size — before any record exists or any tool runs;
//! 2. creates **one canonical record** per (run id, tool call id) in
//!    `PROJECTING`, atomically with the duplicate and budget checks
//!    ([`InvocationStore::create`]);
//! 3. **executes** the tool under the tool timeout and the run deadline,
//!    catching errors and panics;
//! 4. serializes the raw response once, **projects** it into a bounded
//!    [`EvidenceResult`](aci_contracts::EvidenceResult), validates and bounds
//!    it, all in UTF-8 bytes and failing closed;
//! 5. **finalizes** the record `READY` or `ERROR` exactly once; the agent gets a
//!    result only if it was recorded.
//!
//! It returns a [`BoundaryOutcome`]: the [`ModelObservation`] (all the model
//! gets) and the [`HarnessControlView`](aci_contracts::HarnessControlView).
//!
//! The [`Journal`] lists, looks up, recovers and verifies citations over the
//! same records; [`ReplayPolicy::SameScope`] replays READY results of the same
//! scope instead of executing again.
//!
//! This crate does no I/O of its own: stores and tools are ports
//! ([`InvocationStore`], [`Executor`], [`Projector`], [`Clock`]).
#![cfg_attr(
    feature = "testing",
    doc = "The `testing` feature adds the store conformance suite ([`conformance`])."
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "The `testing` feature adds the store conformance suite (`conformance`)."
)]

mod boundary;
pub mod clock;
mod context;
pub mod fingerprint;
mod journal;
mod limits;
mod outbox;
mod port;
mod port_error;
mod recall;
mod record;
mod store;
mod tool;

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod testing;

pub mod bounds;
pub mod json_size;
pub mod redact;
pub mod whitespace;

pub use boundary::{BuildError, ToolBoundary, ToolBoundaryBuilder};
pub use clock::{Clock, ManualClock, SystemClock};
pub use context::{BoundaryOutcome, CallPolicy, ModelObservation, RunContext, ToolEnvelope};
pub use fingerprint::ScopeFingerprint;
pub use journal::{CitationCheck, CitationVerdict, Journal, NotCitable};
pub use limits::{
    DEFAULT_MAX_AGENT_RESULT_BYTES, DEFAULT_MAX_RAW_BYTES, DEFAULT_MAX_RECORD_BYTES,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_RECORD_TTL, DEFAULT_TIMEOUT, InvalidLimit, LimitOverrides,
    Limits, LimitsConfig,
};
pub use outbox::{Backlog, Outbox, OutboxEntry};
pub use port::{PortCall, PortExecutor};
pub use port_error::PortError;
pub use record::{
    Budgets, Created, FinalFields, Finalization, InvocationKey, InvocationRecord, MAX_REFUSALS,
    NewInvocation, PhaseTimings, ReadyEvidence, RecordFields, Refusal, RunState, RunTerms,
    SameScope,
};
pub use store::{BoxError, InvocationStore, ScopeIndex, Settled, StoreError, Unsettled};
pub use tool::SourceError;
pub use tool::{
    ExecutionContext, ExecutionError, ExecutionErrorKind, Executor, ProjectionContext,
    ProjectionError, Projector, ReplayPolicy, ToolSpec,
};

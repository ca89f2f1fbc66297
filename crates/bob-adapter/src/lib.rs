//! The tool boundary for the [bob](https://github.com/longcipher/bob) agent
//! framework, tested against bob-core `>=0.3.2, <0.4`.
//!
//! - [`BoundaryToolPort`] is bob-core's `ToolPort` (and so `ToolCatalogPort`
//!   and `ToolExecutorPort`) over a [`ToolBoundary`](invocation_core::ToolBoundary):
//!   every bob tool call gets preflight, one canonical record under bob's own
//!   `call_id`, bounded projection, and the Model Observation as its output.
//! - [`StoreToolJournal`] is bob-core's `ToolJournalPort` on any
//!   [`InvocationStore`](invocation_core::InvocationStore) (memory, Redis,
//!   Redis Cluster: the store is the user's choice; this crate depends on none).
//!
//! # Example
//!
//! ```
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use bob_adapter::{BoundaryToolPort, StoreToolJournal};
//! use bob_core::{JournalEntry, ToolCall, ToolJournalPort, ToolPort};
//! use invocation_core::{CallPolicy, ToolBoundary};
//! use projectors_logs::{MockLogSource, query_logs_tool};
//! use store_memory::MemoryStore;
//!
//! let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
//!     .tool(query_logs_tool(MockLogSource::new()))
//!     .build()?;
//! let tools = BoundaryToolPort::new(
//!     boundary.clone(),
//!     &"incident-42".to_owned(),
//!     CallPolicy::AUTHORIZED_READ_ONLY,
//! )?;
//! let args = serde_json::json!({"topic": "APPLICATION", "query": "timeout"});
//! let call = ToolCall::new("query_logs", args.clone()).with_call_id("toolu_01");
//!
//! let outcome = tools.call(call.clone()).await; // bob's result and the control view
//! assert!(!outcome.result.is_error);
//! assert_eq!(outcome.result.output["tool_call_id"], "toolu_01");
//! assert_eq!(outcome.control.run_id.as_str(), "incident-42");
//! // What bob's scheduler gets through the port:
//! let again = tools.call_tool(call).await?; // the same id again: recorded, not re-run
//! assert_eq!(again.output, outcome.result.output);
//! let no_id = tools.call_tool(ToolCall::new("query_logs", args.clone())).await?;
//! assert_eq!(no_id.output["error_code"], "INVALID_TOOL_CALL_ID");
//!
//! // A journal for bob's scheduler, on the same store.
//! let journal = StoreToolJournal::for_boundary(&boundary);
//! let fingerprint = JournalEntry::fingerprint("query_logs", &args);
//! assert!(journal.lookup(&"incident-42".to_owned(), &fingerprint).await?.is_none());
//! # Ok(())
//! # }
//! # tokio::runtime::Runtime::new().unwrap().block_on(demo()).unwrap();
//! ```
//!
//! # Sessions and runs
//!
//! A bob session is the run of the same id ([`run_id_for_session`]): validated,
//! never hashed or replaced.
//!
//! # How [`StoreToolJournal`] differs from bob's in-memory journal
//!
//! bob-core's journal module (0.2.2, unchanged in 0.3.2: same `JournalEntry`
//! fields, same three `ToolJournalPort` methods, same `StoreError`; `ToolPort`,
//! `ToolCall`, `ToolResult` and `ToolDescriptor` are unchanged too) defines the
//! port; bob's own in-memory journal implements it. Where its semantics are
//! sound this journal keeps them (append, lookup by session and fingerprint,
//! entries in order, `None` for an unknown session). Where they are not:
//!
//! | bob's in-memory journal | [`StoreToolJournal`] |
//! |---|---|
//! | memory only: lost with the process | any [`InvocationStore`](invocation_core::InvocationStore); on Redis entries survive a restart of the harness and are shared by replicas |
//! | fingerprint is the text `name:` + `serde_json::to_string(args)`: key order follows serde features, `1` and `1.0` differ, unbounded length | SHA-256 of canonical JSON ([`fingerprint`]); bob's text is accepted everywhere a fingerprint is and mapped to it, so key order and `1`/`1.0` give one entry |
//! | every error is journaled and replayed for the rest of the session, timeouts included | only failures that follow from the request alone replay (`INVALID_INPUT`, `REQUEST_TOO_LARGE`, `NOT_READ_ONLY`, `QUERY_REJECTED`); transient and run-state failures, and bob's own `{"error": …}` outputs, are kept as attempts and never replayed |
//! | lookup, then execute, then append: two concurrent duplicates both run | a lookup that finds nothing claims the call; concurrent lookups wait for the claimant and replay its result; concurrent appends of one call give one entry |
//! | an entry appended twice is listed twice | one entry per call (plus one per transient attempt) |
//! | nothing expires, no size limit | entries expire with the record TTL; arguments, results and the entry are bounded by [`Limits`](invocation_core::Limits), over a limit is an error and nothing is written |
//! | `entries` returns what was appended verbatim | `arguments` and `result` are equal JSON values; `call_fingerprint` is rebuilt in bob's form; `timestamp_ms` is the journal clock's time of the append |
//! | replay skips policy | unchanged for bob's scheduler, which looks up before its policy check; calls through [`BoundaryToolPort`] replay only through the boundary, after the full preflight |
//!
//! # bob-runtime 0.3.2's scheduler and tool call ids
//!
//! bob-runtime's turn loop (`run_turn`, `AgentRuntime`) passes tools a
//! `ToolCall::new(name, arguments)`: the model's native `call_id` is dropped
//! before `call_tool`. The boundary never invents an id, so under that loop
//! every [`BoundaryToolPort`] call is an `INVALID_TOOL_CALL_ID` error result
//! and nothing runs (a test pins this). bob-runtime's typestate
//! `AgentRunner` keeps the ids and works end to end; the scheduler's journal
//! path works with [`StoreToolJournal`].

mod error;
pub mod fingerprint;
mod journal;
mod session;
mod tool_port;

pub use error::{Error, Result};
pub use journal::{ENTRY_ID_PREFIX, MAX_ATTEMPTS, StoreToolJournal};
pub use session::run_id_for_session;
pub use tool_port::{BobCallOutcome, BoundaryToolPort, ControlObserver};

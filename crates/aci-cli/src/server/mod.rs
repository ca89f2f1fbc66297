//! `aci serve`: one MCP service, with its transports beside it.
//!
//! Everything a transport does not decide lives here, once:
//!
//! - [`service`]: the rmcp `ServerHandler` ([`McpService`](service::McpService)) of `tools/list`
//!   and `tools/call`: what a call means, in order (ids, run, admission, run
//!   context, envelope, boundary, abandonment, result, metrics);
//! - [`ids`]: the one id resolver over the facts a transport supplies, and
//!   the one session-name rule;
//! - [`gate`]: the one call gate: calls in flight (per process and per
//!   principal) and the phases of a stop, as events;
//! - [`lifecycle`]: the one lifecycle ([`Server`]): recovery of the server's
//!   run, the knowledge watcher, serve, drain, abandon, settle, exit.
//!
//! The transports ([`crate::stdio`], [`crate::http`]) supply their framing
//! and facts ([`RequestFacts`]) and their part of each lifecycle step
//! ([`Transport`]), nothing else.
//!
//! The server speaks the newest MCP revision rmcp knows
//! ([`ProtocolVersion::LATEST`](rmcp::model::ProtocolVersion::LATEST)) and
//! every older one rmcp supports, names itself `aci` with this crate's
//! version, and offers tools only. Logs go to stderr through `tracing`
//! (`RUST_LOG`; rmcp's, the HTTP stack's and the drivers' events never below
//! `warn`, since they would carry payloads); no log line carries a payload,
//! a token or an id.

pub(crate) mod gate;
pub(crate) mod ids;
pub(crate) mod lifecycle;
pub(crate) mod service;

pub(crate) use self::gate::{CallGate, CallTicket, GateLimits, Phase};
pub(crate) use self::ids::McpSession;
pub(crate) use self::lifecycle::{ServeOptions, Server, Transport};
pub(crate) use self::service::{
    CallObserver, Principal, RequestFacts, ServiceSetup, TransportFacts,
};

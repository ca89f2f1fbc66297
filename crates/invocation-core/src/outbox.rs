//! The outbox port: finalized records waiting for the archive.
//!
//! Every transition of a record to `READY` or `ERROR` (finalize, settle,
//! recover, abandon, a settle's tombstone) enqueues the record's key in the
//! same atomic step as the transition itself, inside the store. An archiver
//! takes entries, copies the records somewhere durable, and only then
//! acknowledges them. So delivery is at least once, and the archive's insert
//! must be idempotent on `(run_id, tool_call_id)`.
//!
//! **The invariant:** a finalized record is archived or still pending in its
//! outbox; it is never dropped before its TTL while an archiver runs at least
//! once per TTL. Nothing pending is ever trimmed: only
//! [`ack`](Outbox::ack) removes an entry.

use std::fmt::Debug;
use std::time::Duration;

use aci_contracts::Timestamp;
use async_trait::async_trait;

use crate::{InvocationKey, StoreError};

/// One finalized record waiting for the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The record's key.
    pub key: InvocationKey,
    /// When the store enqueued it (its clock), for the lag metric.
    pub enqueued_at: Timestamp,
    /// What [`Outbox::ack`] needs to remove exactly this entry; opaque.
    pub receipt: String,
}

/// What is waiting in an outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Backlog {
    /// Entries not yet acknowledged (taken or not).
    pub pending: u64,
    /// When the oldest of them was enqueued.
    pub oldest: Option<Timestamp>,
}

/// The archive side of a store: finalized records, each delivered at least
/// once to some consumer, until acknowledged.
#[async_trait]
pub trait Outbox: Send + Sync + Debug + 'static {
    /// Takes up to `max` entries for `consumer`.
    ///
    /// # Behavior
    /// - First entries another consumer took and left unacknowledged for at
    ///   least `reclaim_after` (a consumer that was killed), then entries no
    ///   consumer took yet. An entry is handed to one consumer at a time
    ///   unless it is reclaimed.
    /// - Entries of one run come in the order their records were finalized
    ///   (reclaimed entries aside).
    /// - Never removes an entry: an entry taken and never acknowledged is
    ///   taken again after `reclaim_after`.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn take(
        &self,
        consumer: &str,
        max: usize,
        reclaim_after: Duration,
    ) -> Result<Vec<OutboxEntry>, StoreError>;

    /// Removes entries whose records are archived.
    ///
    /// # Behavior
    /// - Idempotent: acknowledging an entry again, or one another consumer
    ///   already acknowledged, changes nothing.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`].
    async fn ack(&self, entries: &[OutboxEntry]) -> Result<(), StoreError>;

    /// How many entries wait, and since when.
    ///
    /// # Errors
    /// - [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    async fn backlog(&self) -> Result<Backlog, StoreError>;
}

//! The archiver: outbox to archive, acknowledging only what committed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aci_contracts::{InvocationStatus, RunId};
use invocation_core::redact::Redactor;
use invocation_core::{InvocationStore, Outbox, OutboxEntry, RecordFields, RunState};

use crate::{Archive, ArchiveError, ArchiveInput, ArchivedCall, RawPolicy, Result};

/// Moves finalized records from a store's outbox into the archive.
///
/// One [`step`](Self::step) takes a batch from the outbox, reads each
/// record from the store, inserts the batch in one transaction, and only
/// then acknowledges the entries. A crash anywhere before the
/// acknowledgement leaves the entries pending: this or another archiver
/// takes them again after the reclaim time, and the idempotent insert makes
/// the second delivery a no-op.
#[derive(Debug, Clone)]
pub struct Archiver {
    store: Arc<dyn InvocationStore>,
    outbox: Arc<dyn Outbox>,
    archive: Archive,
    consumer: String,
    raw: RawPolicy,
    redactor: Arc<Redactor>,
    batch: usize,
    reclaim_after: Duration,
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// Outbox entries taken.
    pub taken: u64,
    /// Calls inserted.
    pub archived: u64,
    /// Calls that were already archived (redeliveries).
    pub duplicates: u64,
    /// Entries whose record had expired from the store before it could be
    /// archived: lost to the archive (the archiver ran less often than once
    /// per record TTL).
    pub expired: u64,
    /// Entries naming a record that is not final any more (its key expired
    /// and was created again; the new record has an entry of its own).
    pub stale: u64,
}

impl Archiver {
    /// An archiver named `consumer` (unique per process) over `store`'s
    /// `outbox`.
    #[must_use]
    pub fn new(
        store: Arc<dyn InvocationStore>,
        outbox: Arc<dyn Outbox>,
        archive: Archive,
        consumer: impl Into<String>,
    ) -> Self {
        Self {
            store,
            outbox,
            archive,
            consumer: consumer.into(),
            raw: RawPolicy::default(),
            redactor: Redactor::builtin(),
            batch: crate::settings::DEFAULT_BATCH_SIZE,
            reclaim_after: crate::settings::DEFAULT_RECLAIM_AFTER,
        }
    }

    /// What of the raw response to keep, and the redactor for `redacted`.
    #[must_use]
    pub fn raw(mut self, raw: RawPolicy, redactor: Arc<Redactor>) -> Self {
        self.raw = raw;
        self.redactor = redactor;
        self
    }

    /// Entries per batch, and the reclaim time of other consumers' entries.
    #[must_use]
    pub fn batching(mut self, batch: usize, reclaim_after: Duration) -> Self {
        self.batch = batch.max(1);
        self.reclaim_after = reclaim_after;
        self
    }

    /// The outbox (for its backlog).
    #[must_use]
    pub fn outbox(&self) -> &Arc<dyn Outbox> {
        &self.outbox
    }

    /// One batch. `taken == 0` means the outbox had nothing for this
    /// archiver.
    ///
    /// # Errors
    /// [`ArchiveError::Store`] or [`ArchiveError::Unavailable`]: nothing of
    /// the batch was acknowledged.
    pub async fn step(&self) -> Result<Step> {
        let entries = self
            .outbox
            .take(&self.consumer, self.batch, self.reclaim_after)
            .await
            .map_err(ArchiveError::store)?;
        let mut step = Step {
            taken: entries.len() as u64,
            ..Step::default()
        };
        if entries.is_empty() {
            return Ok(step);
        }
        // The records in one batch (a pipeline on Redis) and their runs'
        // states, all read at once.
        let keys: Vec<_> = entries.iter().map(|entry| entry.key.clone()).collect();
        let run_ids: Vec<&RunId> = {
            let mut ids: Vec<&RunId> = entries.iter().map(|e| &e.key.run_id).collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        let (records, states) = futures::try_join!(
            self.store.get_many(&keys, RecordFields::All),
            futures::future::try_join_all(run_ids.iter().map(|run| self.store.run_state(run))),
        )
        .map_err(ArchiveError::store)?;
        let runs: HashMap<&RunId, Option<RunState>> = run_ids.into_iter().zip(states).collect();
        let mut inputs = Vec::with_capacity(entries.len());
        for (entry, record) in entries.iter().zip(records) {
            let Some(record) = record else {
                step.expired += 1;
                continue;
            };
            if record.status == InvocationStatus::Projecting {
                step.stale += 1;
                continue;
            }
            inputs.push(ArchiveInput {
                call: ArchivedCall::from_record(record, self.raw, &self.redactor)?,
                run: runs.get(&entry.key.run_id).cloned().flatten(),
            });
        }
        let inserted = self.archive.insert(&inputs).await?;
        step.archived = inserted.inserted;
        step.duplicates = inserted.duplicates;
        self.ack(&entries).await?;
        if step.expired > 0 {
            tracing::warn!(
                code = "ARCHIVE_RECORD_EXPIRED",
                count = step.expired,
                "records expired from the store before they were archived"
            );
        }
        Ok(step)
    }

    async fn ack(&self, entries: &[OutboxEntry]) -> Result<()> {
        self.outbox.ack(entries).await.map_err(ArchiveError::store)
    }
}

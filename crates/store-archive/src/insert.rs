//! The idempotent, chained insert.

use invocation_core::RunState;
use sha2::{Digest, Sha256};

use crate::record::{GENESIS, Hash, chain};
use crate::{Archive, ArchiveError, ArchivedCall, Result};

/// One call to archive, with what the store knows about its run.
#[derive(Debug, Clone)]
pub struct ArchiveInput {
    /// The call.
    pub call: ArchivedCall,
    /// The run's state, if the store still has it (owner, start, deadline);
    /// kept from the first call of the run archived.
    pub run: Option<RunState>,
}

/// What an insert did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Inserted {
    /// Calls inserted now.
    pub inserted: u64,
    /// Calls that were already archived (a redelivery); nothing changed.
    pub duplicates: u64,
}

/// The advisory lock key of a run: the first 8 bytes of SHA-256 of its id.
pub(crate) fn run_lock(run_id: &str) -> i64 {
    let digest = Sha256::digest(run_id.as_bytes());
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

fn hash_of(bytes: &[u8]) -> Result<Hash> {
    bytes
        .try_into()
        .map_err(|_| ArchiveError::Corrupt { what: "chain hash" })
}

impl Archive {
    /// Archives `batch` in one transaction: each call not archived yet gets
    /// the next `seq` of its run and its leaf and chain hashes; a call
    /// already archived is counted as a duplicate and left as it is. Calls
    /// of one run are chained in the order given.
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`] (nothing of the batch is committed: the
    /// caller must not acknowledge it), [`ArchiveError::Corrupt`].
    pub async fn insert(&self, batch: &[ArchiveInput]) -> Result<Inserted> {
        if batch.is_empty() {
            return Ok(Inserted::default());
        }
        let mut client = self.client().await?;
        let months: Vec<i64> = batch.iter().map(|i| i.call.finished_at_ms).collect();
        self.ensure_partitions(&client, &months).await?;
        let unavailable = ArchiveError::unavailable("insert");
        let tx = client.transaction().await.map_err(&unavailable)?;
        // Every run's lock, in key order: two archivers never wait on each
        // other in a cycle.
        let mut locks: Vec<i64> = batch.iter().map(|i| run_lock(&i.call.run_id)).collect();
        locks.sort_unstable();
        locks.dedup();
        for lock in &locks {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[lock])
                .await
                .map_err(&unavailable)?;
        }
        let mut done = Inserted::default();
        for input in batch {
            let call = &input.call;
            let run = input.run.as_ref();
            tx.execute(
                "INSERT INTO aci_runs (run_id, owner, started_at_ms, deadline_ms)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (run_id) DO NOTHING",
                &[
                    &call.run_id,
                    &run.and_then(|r| r.owner.as_deref()),
                    &run.map(|r| r.started_at.unix_millis()),
                    &run.and_then(|r| r.deadline).map(|d| d.unix_millis()),
                ],
            )
            .await
            .map_err(&unavailable)?;
            let existing = tx
                .query_opt(
                    "SELECT 1 FROM aci_calls WHERE run_id = $1 AND tool_call_id = $2",
                    &[&call.run_id, &call.tool_call_id],
                )
                .await
                .map_err(&unavailable)?;
            if existing.is_some() {
                done.duplicates += 1;
                continue;
            }
            let head = tx
                .query_opt(
                    "SELECT seq, chain_hash FROM aci_calls WHERE run_id = $1
                     ORDER BY seq DESC LIMIT 1",
                    &[&call.run_id],
                )
                .await
                .map_err(&unavailable)?;
            let (previous_seq, previous) = match head {
                Some(row) => (row.get::<_, i64>(0), hash_of(row.get::<_, &[u8]>(1))?),
                None => (0, GENESIS),
            };
            let leaf = call.leaf_hash();
            let linked = chain(&previous, &leaf);
            tx.execute(
                "INSERT INTO aci_calls (run_id, tool_call_id, seq, finished_at_ms,
                   created_at_ms, tool_name, status, evidence_status, error_code,
                   retryable, scope_fp, replayed_from, redactions, request, scope,
                   result, raw, raw_sha256, raw_mode, request_bytes, raw_bytes,
                   result_bytes, timings_us, leaf_hash, chain_hash)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
                   $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)
                 ON CONFLICT DO NOTHING",
                &[
                    &call.run_id,
                    &call.tool_call_id,
                    &(previous_seq + 1),
                    &call.finished_at_ms,
                    &call.created_at_ms,
                    &call.tool_name,
                    &call.status,
                    &call.evidence_status,
                    &call.error_code,
                    &call.retryable,
                    &call.scope_fp,
                    &call.replayed_from,
                    &call.redactions,
                    &call.request,
                    &call.scope,
                    &call.result,
                    &call.raw,
                    &call.raw_sha256,
                    &call.raw_mode,
                    &call.request_bytes,
                    &call.raw_bytes,
                    &call.result_bytes,
                    &call.timings_us,
                    &leaf.as_slice(),
                    &linked.as_slice(),
                ],
            )
            .await
            .map_err(&unavailable)?;
            done.inserted += 1;
        }
        tx.commit().await.map_err(&unavailable)?;
        Ok(done)
    }
}

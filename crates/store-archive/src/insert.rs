//! The idempotent, chained insert.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use invocation_core::RunState;
use sha2::{Digest, Sha256};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

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
        let mut conn = self.client().await?;
        let months: Vec<i64> = batch.iter().map(|i| i.call.finished_at_ms).collect();
        self.ensure_partitions(&conn, &months).await?;
        let unavailable = ArchiveError::unavailable("insert");
        let mut fresh = false;
        loop {
            let statements = match &conn.insert {
                Some(statements) => Arc::clone(statements),
                None => {
                    let statements =
                        Arc::new(Statements::prepare(&conn).await.map_err(&unavailable)?);
                    conn.insert = Some(Arc::clone(&statements));
                    fresh = true;
                    statements
                }
            };
            match insert_in(&mut conn, &statements, batch).await {
                Err(error) => {
                    conn.insert = None;
                    // A statement an earlier batch prepared, that the server
                    // no longer runs as prepared (a migration changed a
                    // column under it): once more, on statements prepared
                    // now. Nothing of the failed transaction was committed.
                    if !fresh && stale_plan(&error) {
                        continue;
                    }
                    return Err(error);
                }
                done => return done,
            }
        }
    }
}

/// Whether PostgreSQL refused a prepared statement because what it returns
/// changed since it was prepared ("cached plan must not change result
/// type", SQLSTATE 0A000).
fn stale_plan(error: &ArchiveError) -> bool {
    matches!(error, ArchiveError::Unavailable { source, .. }
        if source.code() == Some(&tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED))
}

/// The statements of an insert, prepared once per connection: a batch then
/// costs no parse or plan, and one round trip per step instead of two.
pub(crate) struct Statements {
    lock: Statement,
    runs: Statement,
    existing: Statement,
    heads: Statement,
    calls: Statement,
}

impl Statements {
    /// Prepares them all in one round trip (the requests are pipelined).
    async fn prepare(client: &Client) -> std::result::Result<Self, tokio_postgres::Error> {
        let (lock, runs, existing, heads, calls) = futures::try_join!(
            client.prepare(LOCK),
            client.prepare(RUNS),
            client.prepare(EXISTING),
            client.prepare(HEADS),
            client.prepare(CALLS),
        )?;
        Ok(Self {
            lock,
            runs,
            existing,
            heads,
            calls,
        })
    }
}

/// Every run's lock, in key order (unnest keeps the array's order): two
/// archivers never wait on each other in a cycle.
const LOCK: &str = "SELECT pg_advisory_xact_lock(l) FROM unnest($1::bigint[]) AS l";

/// The runs, inserted unless known.
const RUNS: &str = "INSERT INTO aci_runs (run_id, owner, started_at_ms, deadline_ms)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
     ON CONFLICT (run_id) DO NOTHING";

/// Which calls of the batch are archived already.
const EXISTING: &str = "SELECT c.run_id, c.tool_call_id FROM aci_calls c
     JOIN unnest($1::text[], $2::text[]) AS k(run_id, tool_call_id)
       ON c.run_id = k.run_id AND c.tool_call_id = k.tool_call_id";

/// Each run's head: its last `seq` and chain hash.
const HEADS: &str = "SELECT DISTINCT ON (run_id) run_id, seq, chain_hash FROM aci_calls
     WHERE run_id = ANY($1::text[]) ORDER BY run_id, seq DESC";

/// The new calls, column by column (see [`Rows`]).
const CALLS: &str = "INSERT INTO aci_calls (run_id, tool_call_id, seq, finished_at_ms,
       created_at_ms, tool_name, status, evidence_status, error_code,
       retryable, scope_fp, replayed_from, redactions, request, scope,
       result, raw, raw_sha256, raw_mode, request_bytes, raw_bytes,
       result_bytes, timings_us, leaf_hash, chain_hash)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[],
       $5::bigint[], $6::text[], $7::text[], $8::text[], $9::text[],
       $10::boolean[], $11::text[], $12::text[], $13::text[], $14::text[],
       $15::text[], $16::text[], $17::text[], $18::text[], $19::text[],
       $20::bigint[], $21::bigint[], $22::bigint[], $23::text[],
       $24::bytea[], $25::bytea[])
     ON CONFLICT DO NOTHING";

/// [`Archive::insert`]'s transaction.
async fn insert_in(
    client: &mut Client,
    statements: &Statements,
    batch: &[ArchiveInput],
) -> Result<Inserted> {
    let unavailable = ArchiveError::unavailable("insert");
    let tx = client.transaction().await.map_err(&unavailable)?;
    let mut locks: Vec<i64> = batch.iter().map(|i| run_lock(&i.call.run_id)).collect();
    locks.sort_unstable();
    locks.dedup();
    // The locks first, on their own: every later statement of the
    // transaction runs while they are held, and a run row inserted before
    // them could make two archivers wait on each other.
    tx.execute(&statements.lock, &[&locks])
        .await
        .map_err(&unavailable)?;

    // The runs, each once (its first input's state).
    let mut runs: BTreeMap<&str, Option<&RunState>> = BTreeMap::new();
    for input in batch {
        runs.entry(input.call.run_id.as_str())
            .or_insert(input.run.as_ref());
    }
    let run_ids: Vec<&str> = runs.keys().copied().collect();
    let owners: Vec<Option<&str>> = runs
        .values()
        .map(|r| r.and_then(|r| r.owner.as_deref()))
        .collect();
    let starts: Vec<Option<i64>> = runs
        .values()
        .map(|r| r.map(|r| r.started_at.unix_millis()))
        .collect();
    let deadlines: Vec<Option<i64>> = runs
        .values()
        .map(|r| r.and_then(|r| r.deadline).map(|d| d.unix_millis()))
        .collect();
    let batch_runs: Vec<&str> = batch.iter().map(|i| i.call.run_id.as_str()).collect();
    let batch_ids: Vec<&str> = batch.iter().map(|i| i.call.tool_call_id.as_str()).collect();
    // Then the runs' insert and the two reads, pipelined: none needs what
    // another returns, and the server runs them in the order sent, all
    // under the locks.
    let run_params: [&(dyn ToSql + Sync); 4] = [&run_ids, &owners, &starts, &deadlines];
    let existing_params: [&(dyn ToSql + Sync); 2] = [&batch_runs, &batch_ids];
    let head_params: [&(dyn ToSql + Sync); 1] = [&run_ids];
    let (_, existing, head_rows) = futures::try_join!(
        tx.execute(&statements.runs, &run_params),
        tx.query(&statements.existing, &existing_params),
        tx.query(&statements.heads, &head_params),
    )
    .map_err(&unavailable)?;
    let existing: HashSet<(&str, &str)> = existing
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut heads: HashMap<String, (i64, Hash)> = HashMap::new();
    for row in &head_rows {
        heads.insert(row.get(0), (row.get(1), hash_of(row.get::<_, &[u8]>(2))?));
    }

    // The new rows, chained in the order given.
    let mut done = Inserted::default();
    let mut rows = Rows::default();
    let mut seen: HashSet<(&str, &str)> = HashSet::new();
    for input in batch {
        let call = &input.call;
        let key = (call.run_id.as_str(), call.tool_call_id.as_str());
        if !seen.insert(key) || existing.contains(&key) {
            done.duplicates += 1;
            continue;
        }
        let head = heads.entry(call.run_id.clone()).or_insert((0, GENESIS));
        let leaf = call.leaf_hash();
        let linked = chain(&head.1, &leaf);
        *head = (head.0 + 1, linked);
        rows.push(call, head.0, &leaf, &linked);
        done.inserted += 1;
    }
    if done.inserted > 0 {
        rows.insert(&tx, &statements.calls)
            .await
            .map_err(&unavailable)?;
    }
    tx.commit().await.map_err(&unavailable)?;
    Ok(done)
}

/// The new rows of a batch, column by column, for one `INSERT … SELECT *
/// FROM unnest(…)`.
#[derive(Default)]
struct Rows<'a> {
    run_id: Vec<&'a str>,
    tool_call_id: Vec<&'a str>,
    seq: Vec<i64>,
    finished_at_ms: Vec<i64>,
    created_at_ms: Vec<i64>,
    tool_name: Vec<&'a str>,
    status: Vec<&'a str>,
    evidence_status: Vec<Option<&'a str>>,
    error_code: Vec<Option<&'a str>>,
    retryable: Vec<Option<bool>>,
    scope_fp: Vec<&'a str>,
    replayed_from: Vec<Option<&'a str>>,
    redactions: Vec<&'a str>,
    request: Vec<Option<&'a str>>,
    scope: Vec<Option<&'a str>>,
    result: Vec<Option<&'a str>>,
    raw: Vec<Option<&'a str>>,
    raw_sha256: Vec<Option<&'a str>>,
    raw_mode: Vec<&'a str>,
    request_bytes: Vec<i64>,
    raw_bytes: Vec<Option<i64>>,
    result_bytes: Vec<Option<i64>>,
    timings_us: Vec<Option<&'a str>>,
    leaf_hash: Vec<Vec<u8>>,
    chain_hash: Vec<Vec<u8>>,
}

impl<'a> Rows<'a> {
    fn push(&mut self, call: &'a ArchivedCall, seq: i64, leaf: &Hash, linked: &Hash) {
        self.run_id.push(&call.run_id);
        self.tool_call_id.push(&call.tool_call_id);
        self.seq.push(seq);
        self.finished_at_ms.push(call.finished_at_ms);
        self.created_at_ms.push(call.created_at_ms);
        self.tool_name.push(&call.tool_name);
        self.status.push(&call.status);
        self.evidence_status.push(call.evidence_status.as_deref());
        self.error_code.push(call.error_code.as_deref());
        self.retryable.push(call.retryable);
        self.scope_fp.push(&call.scope_fp);
        self.replayed_from.push(call.replayed_from.as_deref());
        self.redactions.push(&call.redactions);
        self.request.push(call.request.as_deref());
        self.scope.push(call.scope.as_deref());
        self.result.push(call.result.as_deref());
        self.raw.push(call.raw.as_deref());
        self.raw_sha256.push(call.raw_sha256.as_deref());
        self.raw_mode.push(&call.raw_mode);
        self.request_bytes.push(call.request_bytes);
        self.raw_bytes.push(call.raw_bytes);
        self.result_bytes.push(call.result_bytes);
        self.timings_us.push(call.timings_us.as_deref());
        self.leaf_hash.push(leaf.to_vec());
        self.chain_hash.push(linked.to_vec());
    }

    async fn insert(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        statement: &Statement,
    ) -> std::result::Result<u64, tokio_postgres::Error> {
        tx.execute(
            statement,
            &[
                &self.run_id,
                &self.tool_call_id,
                &self.seq,
                &self.finished_at_ms,
                &self.created_at_ms,
                &self.tool_name,
                &self.status,
                &self.evidence_status,
                &self.error_code,
                &self.retryable,
                &self.scope_fp,
                &self.replayed_from,
                &self.redactions,
                &self.request,
                &self.scope,
                &self.result,
                &self.raw,
                &self.raw_sha256,
                &self.raw_mode,
                &self.request_bytes,
                &self.raw_bytes,
                &self.result_bytes,
                &self.timings_us,
                &self.leaf_hash,
                &self.chain_hash,
            ],
        )
        .await
    }
}

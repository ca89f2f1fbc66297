//! The outbox: finalized records waiting for the archive, in Redis Streams.
//!
//! The finalize and settle scripts append `run`, `call` to the stream
//! `<prefix>:outbox:{<tag>}` of the run's hash slot in the same script that
//! makes the record `READY` or `ERROR` (see `scripts.rs` and `keys.rs`), so
//! on Redis Cluster the append is never a cross-slot write and a record
//! cannot become final without its entry.
//!
//! Archivers read the streams through one consumer group, [`GROUP`]:
//!
//! - **find** the streams holding entries. On a single node, the finalize
//!   and settle scripts that append to a stream also add it to the set
//!   `<prefix>:outbox-busy` in the same atomic step, and the `busy` script
//!   reads every member's length and removes the members that are empty in
//!   one atomic step of its own: a stream holding entries is always in the
//!   set, and a look costs one round trip whose work grows with the streams
//!   that held entries since the last look, whatever else the node holds.
//!   Every take (and every backlog) looks afresh. Besides, a store looks for
//!   every stream on its first take and then every [`SWEEP_EVERY`] (5
//!   minutes), adding to the set those holding entries that it lacks: the
//!   streams of a writer that does not mark them busy (an `aci` from before
//!   the set, during an upgrade) are found that way. Looking for every
//!   stream ([`RedisOutbox::streams`]) is `SCAN MATCH <prefix>:outbox:* TYPE
//!   stream` on the node (on a cluster, on every primary, found with
//!   `CLUSTER SLOTS`), then pipelined `XLEN`s to keep only those holding
//!   entries (a drained stream stays, empty, with its group). The scan's
//!   cost grows with every key the node holds, so a single node holding
//!   more than 16,384 keys is not scanned: there is one stream per hash
//!   slot, whose names are known, and pipelined `XLEN`s of all 16,384 names
//!   find those holding entries. On a cluster the set would be a cross-slot
//!   write, so the streams are always looked for: a take reuses the streams
//!   of a scan younger than a second while they hold entries, and the
//!   lengths of every stream are read at most every quarter second (in
//!   between, a take reads only the lengths of the streams that held entries
//!   then); an empty take (and every backlog) is answered only after a scan
//!   and a reading of every length made then, so `--once` and the metrics
//!   never miss a stream that appeared or filled since;
//! - **take**: the streams holding entries, from where the process's last
//!   take stopped among them, each counted at its length until the lengths
//!   make the batch (the position then moves past them: every stream has
//!   its turn, and loops taking at once start on different streams). For
//!   those streams only, all at once: `XGROUP CREATE … 0 MKSTREAM` once (an
//!   existing group is fine), `XAUTOCLAIM` of at most the stream's count of
//!   entries another consumer left pending past the reclaim time (a killed
//!   archiver; each stream at most every quarter of the reclaim time, and
//!   at least every 5 s), then `XREADGROUP … >`: on a single node one
//!   pipeline for them all, each asked for at most its length, together at
//!   most the batch; on a cluster one stream (slot) at a time;
//! - **ack**, only after the archive committed: `XDEL` then `XACK` (on a
//!   single node all the batch's streams in one pipeline). Once
//!   deleted, an entry left in the pending list by a crash between the two is
//!   cleared by the next `XAUTOCLAIM`, which reports it as deleted and never
//!   hands it out.
//!
//! Nothing trims a stream (`XTRIM`, `MAXLEN`): only an acknowledgement
//! removes an entry, so a pending entry cannot be lost. Streams carry no
//! TTL; an empty stream stays, with its group, for the next entries.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use aci_contracts::{RunId, Timestamp, ToolCallId};
use async_trait::async_trait;
use invocation_core::{Backlog, InvocationKey, Outbox, OutboxEntry, StoreError};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, Value};

use crate::codec::corrupt;
use crate::pool::Link;
use crate::scripts::BUSY;
use crate::{Inner, RedisStore, calls, keys};

/// The consumer group every archiver reads through.
pub const GROUP: &str = "aci-archive";

/// Keys returned per `SCAN` step.
const SCAN_COUNT: u64 = 1000;

/// On a cluster, how long the list of streams found by a scan is used
/// before the keyspace is scanned again: a stream that appears (the first
/// finalized record of a hash slot) waits at most this long to be seen; the
/// scan's cost grows with everything the node holds.
const STREAMS_REFRESH: Duration = Duration::from_secs(1);

/// On a cluster, how long the streams found holding entries by a reading of
/// every stream's length are the only ones a take reads the lengths of.
const LENGTHS_REFRESH: Duration = Duration::from_millis(250);

/// On a single node, how often one store looks for every outbox stream
/// besides reading the set of busy streams (its first take looks at once):
/// the streams of a writer that does not mark them busy (an `aci` from
/// before the set, during an upgrade) wait at most this long to be found.
const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// The longest time between two reclaims of a stream's pending entries
/// (they become claimable only after the reclaim time anyway).
const RECLAIM_EVERY_MAX: Duration = Duration::from_secs(5);

/// The streams a scan found, and when.
type Scanned = Option<(Instant, Vec<String>)>;

/// The result of the last scan, shared by one process's concurrent callers
/// (the archivers of one `aci archive` share one outbox).
///
/// A caller that wants a fresh scan names an instant (when its operation
/// began): a scan started after it is one made now for that caller, whether
/// it is running or done. Callers that want one at about the same moment
/// (every archiver finding the outbox empty) share one such scan instead of
/// each making its own. Whatever existed at that instant existed for the
/// whole of such a scan, which the scan returns.
struct SharedScan<T> {
    /// The last scan's result, and when that scan started.
    last: Mutex<Option<(Instant, T)>>,
    /// Held while scanning.
    scanning: tokio::sync::Mutex<()>,
}

impl<T> Default for SharedScan<T> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
            scanning: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T: Clone> SharedScan<T> {
    /// The last scan's result while it is younger than `refresh`, unless
    /// `fresh_since` asks for a scan started after that instant: then that
    /// of such a scan (running `scan` unless another caller's, running or
    /// done, is one). True when the result comes from a scan started after
    /// `fresh_since`.
    async fn get<E>(
        &self,
        fresh_since: Option<Instant>,
        refresh: Duration,
        scan: impl Future<Output = Result<T, E>>,
    ) -> Result<(T, bool), E> {
        let fresh = fresh_since.is_some();
        let asked = fresh_since.unwrap_or_else(Instant::now);
        let cached = |fresh: bool| {
            let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            last.as_ref().and_then(|(started, found)| {
                let usable = if fresh {
                    *started > asked
                } else {
                    started.elapsed() < refresh
                };
                usable.then(|| found.clone())
            })
        };
        if !fresh && let Some(found) = cached(false) {
            return Ok((found, false));
        }
        let _scanning = self.scanning.lock().await;
        if let Some(found) = cached(true) {
            return Ok((found, true));
        }
        let started = Instant::now();
        let found = scan.await?;
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some((started, found.clone()));
        Ok((found, true))
    }
}

/// The outbox of a [`RedisStore`]: see the module docs.
#[derive(Clone)]
pub struct RedisOutbox {
    inner: Arc<Inner>,
    /// Streams whose group this process created (or found).
    groups: Arc<Mutex<HashSet<String>>>,
    /// Where the next take starts in the list of streams (moved past the
    /// streams each take reads), so that one busy stream does not starve
    /// the others. Shared by the clones: loops of one process sharing an
    /// outbox take from different streams.
    rotation: Arc<AtomicUsize>,
    /// The streams found by the last scan.
    known: Arc<SharedScan<Vec<String>>>,
    /// The streams that held entries when every stream's length was last
    /// read, and when that reading started.
    filled: Arc<Mutex<Scanned>>,
    /// When each stream's pending entries were last reclaimed.
    reclaimed: Arc<Mutex<HashMap<String, Instant>>>,
}

impl std::fmt::Debug for RedisOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOutbox")
            .field("key_prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// The outbox of finalized records, for archivers.
    #[must_use]
    pub fn outbox(&self) -> RedisOutbox {
        RedisOutbox {
            inner: Arc::clone(&self.inner),
            groups: Arc::default(),
            rotation: Arc::default(),
            known: Arc::default(),
            filled: Arc::default(),
            reclaimed: Arc::default(),
        }
    }
}

/// A stream entry's id, `<ms>-<seq>`, as the time it was added.
fn entry_time(id: &str) -> Option<Timestamp> {
    let (millis, _) = id.split_once('-')?;
    millis.parse().ok().map(Timestamp::from_unix_millis)
}

fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}

/// `[id, [field, value, …]]` as an entry; `None` for a deleted entry
/// (`[id, nil]`).
fn entry(stream: &str, value: &Value) -> Result<Option<OutboxEntry>, StoreError> {
    let malformed = || corrupt("outbox entry");
    let Value::Array(parts) = value else {
        return Err(malformed());
    };
    let [id, fields] = parts.as_slice() else {
        return Err(malformed());
    };
    let id = text(id).ok_or_else(malformed)?;
    let Value::Array(fields) = fields else {
        return Ok(None);
    };
    let (mut run, mut call) = (None, None);
    for pair in fields.chunks(2) {
        if let [field, value] = pair {
            match text(field) {
                Some("run") => run = text(value),
                Some("call") => call = text(value),
                _ => {}
            }
        }
    }
    let run_id = run.and_then(|r| RunId::new(r).ok()).ok_or_else(malformed)?;
    let tool_call_id = call
        .and_then(|c| ToolCallId::new(c).ok())
        .ok_or_else(malformed)?;
    Ok(Some(OutboxEntry {
        key: InvocationKey::new(run_id, tool_call_id),
        enqueued_at: entry_time(id).ok_or_else(malformed)?,
        receipt: format!("{stream} {id}"),
    }))
}

/// The entries of an `XREADGROUP` reply for `stream` (nil: none).
fn stream_entries(stream: &str, reply: &Value) -> Result<Vec<OutboxEntry>, StoreError> {
    let mut entries = Vec::new();
    if let Value::Array(streams) = reply {
        for one in streams {
            let Value::Array(parts) = one else {
                return Err(corrupt("outbox reply"));
            };
            if let Some(Value::Array(items)) = parts.get(1) {
                for value in items {
                    entries.extend(entry(stream, value)?);
                }
            }
        }
    }
    Ok(entries)
}

/// The stream and entry id of a receipt.
fn receipt(entry: &OutboxEntry) -> Result<(&str, &str), StoreError> {
    entry
        .receipt
        .rsplit_once(' ')
        .ok_or_else(|| corrupt("outbox receipt"))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl RedisOutbox {
    /// Every outbox stream of this prefix, on every primary.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    pub async fn streams(&self) -> Result<Vec<String>, StoreError> {
        let mut streams = Vec::new();
        if self.inner.cluster {
            for slot in self.primary_slots().await? {
                streams.extend(self.scan(Some(slot)).await?);
            }
        } else {
            streams = if self.looks_by_name().await? {
                self.streams_by_name().await?
            } else {
                self.scan(None).await?
            };
        }
        streams.sort_unstable();
        streams.dedup();
        Ok(streams)
    }

    /// On a single node: the outbox streams that hold entries, found by
    /// name (there is one per hash slot, so at most [`keys::SLOTS`] names,
    /// whatever else the node holds): pipelined `XLEN`s of every name.
    /// What [`streams`](Self::streams) gives on a node holding more than
    /// [`BY_NAME_ABOVE`] keys, less the streams that are empty.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`], [`StoreError::Corrupt`].
    #[doc(hidden)]
    pub async fn streams_by_name(&self) -> Result<Vec<String>, StoreError> {
        let mut streams: Vec<String> = self
            .lengths(&self.all_names())
            .await?
            .into_iter()
            .map(|(stream, _)| stream)
            .collect();
        streams.sort_unstable();
        Ok(streams)
    }

    /// One slot served by each primary (`CLUSTER SLOTS`).
    async fn primary_slots(&self) -> Result<Vec<u16>, StoreError> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply: Value = self.inner.query("outbox", &cmd).await?;
        let Value::Array(ranges) = reply else {
            return Err(corrupt("cluster slots"));
        };
        let mut by_primary: BTreeMap<String, u16> = BTreeMap::new();
        for range in &ranges {
            let Value::Array(parts) = range else {
                return Err(corrupt("cluster slots"));
            };
            let (Some(Value::Int(start)), Some(Value::Array(primary))) =
                (parts.first(), parts.get(2))
            else {
                return Err(corrupt("cluster slots"));
            };
            let start = u16::try_from(*start).map_err(|_| corrupt("cluster slots"))?;
            let address = format!("{primary:?}");
            by_primary.entry(address).or_insert(start);
        }
        Ok(by_primary.into_values().collect())
    }

    /// `SCAN … MATCH <prefix>:outbox:* TYPE stream` over one node: the
    /// primary of `slot` on a cluster.
    async fn scan(&self, slot: Option<u16>) -> Result<Vec<String>, StoreError> {
        let pattern = self.inner.keys.outbox_pattern();
        let mut keys = Vec::new();
        let mut cursor = String::from("0");
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(&cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .arg("TYPE")
                .arg("stream");
            let (next, found): (String, Vec<String>) = self.routed(&cmd, slot).await?;
            keys.extend(found);
            if next == "0" {
                return Ok(keys);
            }
            cursor = next;
        }
    }

    /// `cmd` on the single node, or on a cluster to the primary of `slot`.
    async fn routed<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        slot: Option<u16>,
    ) -> Result<T, StoreError> {
        let inner = &self.inner;
        let value = inner
            .with_conn("outbox", async |link: &mut Link| {
                let reply = match (link, slot) {
                    (Link::Cluster(conn), Some(slot)) => {
                        let route = Route::new(slot, SlotAddr::Master);
                        conn.route_command(
                            cmd.clone(),
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                        )
                        .await
                    }
                    (link, _) => cmd.query_async::<Value>(link).await,
                };
                reply.map_err(|error| inner.driver_failure("outbox", &error))
            })
            .await?;
        redis::from_redis_value(value).map_err(|_| StoreError::from(corrupt_reply()))
    }

    /// Creates the group on `stream` from its first entry, unless this
    /// process already did; an existing group is fine.
    async fn ensure_group(&self, stream: &str) -> Result<(), StoreError> {
        if self.groups().contains(stream) {
            return Ok(());
        }
        let mut cmd = redis::cmd("XGROUP");
        cmd.arg("CREATE")
            .arg(stream)
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM");
        let inner = &self.inner;
        inner
            .with_conn("outbox", async |link: &mut Link| {
                match cmd.query_async::<Value>(link).await {
                    Ok(_) => Ok(()),
                    Err(error) if error.code() == Some("BUSYGROUP") => Ok(()),
                    Err(error) => Err(inner.driver_failure("outbox", &error)),
                }
            })
            .await?;
        self.groups().insert(stream.to_owned());
        Ok(())
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.groups.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Entries of `stream` pending past `reclaim_after`, now `consumer`'s.
    async fn reclaim(
        &self,
        stream: &str,
        consumer: &str,
        max: usize,
        reclaim_after: Duration,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let mut cmd = redis::cmd("XAUTOCLAIM");
        cmd.arg(stream)
            .arg(GROUP)
            .arg(consumer)
            .arg(millis(reclaim_after))
            .arg("0-0")
            .arg("COUNT")
            .arg(max);
        let reply: Value = self.query(&cmd).await?;
        let Value::Array(parts) = reply else {
            return Err(corrupt("outbox reply"));
        };
        let Some(Value::Array(claimed)) = parts.get(1) else {
            return Err(corrupt("outbox reply"));
        };
        let mut entries = Vec::with_capacity(claimed.len());
        for value in claimed {
            entries.extend(entry(stream, value)?);
        }
        Ok(entries)
    }

    /// Entries of `stream` no consumer took yet, now `consumer`'s.
    async fn read_new(
        &self,
        stream: &str,
        consumer: &str,
        max: usize,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(consumer)
            .arg("COUNT")
            .arg(max)
            .arg("STREAMS")
            .arg(stream)
            .arg(">");
        let reply = match self.query::<Value>(&cmd).await {
            Ok(reply) => reply,
            Err(error) => {
                // The stream was deleted and written again: make the group
                // again on the next take.
                self.groups().remove(stream);
                return Err(error);
            }
        };
        stream_entries(stream, &reply)
    }

    async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, StoreError> {
        Ok(self.inner.query("outbox", cmd).await?)
    }
}

/// The `busy` script's reply, `{stream, length, …}`, as pairs.
fn busy_reply(reply: &Value) -> Result<Vec<(String, u64)>, StoreError> {
    let malformed = || corrupt("outbox busy streams");
    let Value::Array(items) = reply else {
        return Err(malformed());
    };
    items
        .chunks(2)
        .map(|pair| match pair {
            [stream, length] => {
                let stream = text(stream).ok_or_else(malformed)?;
                let length = text(length)
                    .and_then(|l| l.parse().ok())
                    .ok_or_else(malformed)?;
                Ok((stream.to_owned(), length))
            }
            _ => Err(malformed()),
        })
        .collect()
}

fn corrupt_reply() -> crate::RedisStoreError {
    crate::RedisStoreError::unavailable("outbox", crate::Failure::Protocol)
}

/// Streams whose length is asked in one pipelined round trip.
const LENGTH_BATCH: usize = 1024;

/// Such round trips (on a cluster, single `XLEN`s) in flight at once.
const LENGTHS_IN_FLIGHT: usize = 16;

/// Above this many keys on a single node, the outbox streams are found by
/// name ([`RedisOutbox::streams_by_name`]: one `XLEN` for each of the
/// 16,384 possible streams) instead of by `SCAN`, which costs about as much
/// per key the node holds: discovery then costs the same whatever the
/// keyspace holds. (On a cluster, where a pipeline stays in one slot, the
/// streams are always scanned for.)
const BY_NAME_ABOVE: u64 = keys::SLOTS as u64;

impl RedisOutbox {
    /// The streams of the last scan, unless it is older than
    /// [`STREAMS_REFRESH`] or `fresh_since` asks for a scan started after
    /// that instant; and whether they come from such a scan (see
    /// [`SharedScan`]).
    async fn known_streams(
        &self,
        fresh_since: Option<Instant>,
    ) -> Result<(Vec<String>, bool), StoreError> {
        self.known
            .get(fresh_since, STREAMS_REFRESH, self.streams())
            .await
    }

    /// Whether `stream`'s pending entries are due for a reclaim (and notes
    /// that they are being reclaimed now).
    fn reclaim_due(&self, stream: &str, reclaim_after: Duration) -> bool {
        let every = (reclaim_after / 4).min(RECLAIM_EVERY_MAX);
        let mut reclaimed = self
            .reclaimed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        match reclaimed.get(stream) {
            Some(at) if now.duration_since(*at) < every => false,
            _ => {
                reclaimed.insert(stream.to_owned(), now);
                true
            }
        }
    }

    /// On a single node: entries no consumer took yet, from each of
    /// `streams` up to its count, in one pipelined round trip.
    async fn read_new_pipelined(
        &self,
        streams: &[(String, usize)],
        consumer: &str,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let mut pipe = redis::pipe();
        for (stream, count) in streams {
            pipe.cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(consumer)
                .arg("COUNT")
                .arg(*count)
                .arg("STREAMS")
                .arg(stream)
                .arg(">");
        }
        let replies: Vec<Value> = match self.inner.pipeline("outbox", &pipe).await {
            Ok(replies) => replies,
            Err(error) => {
                // A stream deleted and written again lost its group: make
                // the groups again on the next take.
                self.groups().clear();
                return Err(error.into());
            }
        };
        let mut entries = Vec::new();
        for ((stream, _), reply) in streams.iter().zip(&replies) {
            entries.extend(stream_entries(stream, reply)?);
        }
        Ok(entries)
    }

    /// The outbox streams that hold entries (an acknowledged entry is
    /// deleted, so an empty stream has nothing pending either), with their
    /// lengths. On a single node, those of the set of busy streams, as of
    /// now ([`busy_on_single_node`](Self::busy_on_single_node)). On a
    /// cluster, where a pipeline stays in one slot, one `XLEN` per stream:
    /// every known stream's length is read after a scan and at most every
    /// [`LENGTHS_REFRESH`]; in between, only the lengths of the streams that
    /// held entries at the last such reading.
    async fn busy_streams(
        &self,
        fresh_since: Option<Instant>,
    ) -> Result<(Vec<(String, u64)>, bool), StoreError> {
        if !self.inner.cluster {
            return Ok((self.busy_on_single_node().await?, true));
        }
        let (streams, scanned) = self.known_streams(fresh_since).await?;
        if !scanned {
            let recent = {
                let filled = self.filled.lock().unwrap_or_else(PoisonError::into_inner);
                filled
                    .as_ref()
                    .filter(|(at, _)| at.elapsed() < LENGTHS_REFRESH)
                    .map(|(_, streams)| streams.clone())
            };
            if let Some(filled) = recent {
                return Ok((self.lengths(&filled).await?, false));
            }
        }
        let started = Instant::now();
        let busy = self.lengths(&streams).await?;
        *self.filled.lock().unwrap_or_else(PoisonError::into_inner) = Some((
            started,
            busy.iter().map(|(stream, _)| stream.clone()).collect(),
        ));
        Ok((busy, scanned))
    }

    /// On a single node: the streams holding entries, with their lengths,
    /// as of now. Those in the set of busy streams (the `busy` script: one
    /// round trip, a cost that grows with the streams that held entries
    /// since the last look, not with the keyspace), and, when this store
    /// last looked for every stream more than [`SWEEP_EVERY`] ago, those
    /// found by looking for every stream ([`streams`](Self::streams)), which
    /// are added to the set.
    async fn busy_on_single_node(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let set = self.inner.keys.outbox_busy();
        let reply = self
            .inner
            .eval("outbox", |invoke| calls::busy(&BUSY, invoke, &set))
            .await?;
        let mut busy = busy_reply(&reply)?;
        if let Some(last) = self.sweep_due() {
            match self.sweep(&set, &busy).await {
                Ok(found) => busy.extend(found),
                Err(error) => {
                    *self.swept() = last;
                    return Err(error);
                }
            }
        }
        busy.sort_unstable();
        Ok(busy)
    }

    /// Whether this store's streams are due to be all looked for; if so,
    /// notes that they are being looked for now and returns the time of the
    /// last look (to put back should this one fail).
    fn sweep_due(&self) -> Option<Option<Instant>> {
        let mut swept = self.swept();
        let last = *swept;
        if last.is_some_and(|at| at.elapsed() < SWEEP_EVERY) {
            return None;
        }
        *swept = Some(Instant::now());
        Some(last)
    }

    fn swept(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.inner
            .outbox_swept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Every stream holding entries that `known` (the busy set's) does not
    /// name, added to the set `set`: a writer that does not mark its streams
    /// busy (an `aci` from before the set) is found this way.
    async fn sweep(
        &self,
        set: &str,
        known: &[(String, u64)],
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let known: HashSet<&str> = known.iter().map(|(stream, _)| stream.as_str()).collect();
        let missing: Vec<(String, u64)> = self
            .single_node_lengths()
            .await?
            .into_iter()
            .filter(|(stream, _)| !known.contains(stream.as_str()))
            .collect();
        if !missing.is_empty() {
            let mut cmd = redis::cmd("SADD");
            cmd.arg(set);
            for (stream, _) in &missing {
                cmd.arg(stream);
            }
            let _: u64 = self.query(&cmd).await?;
        }
        Ok(missing)
    }

    /// On a single node: the outbox streams that hold entries, with their
    /// lengths, each stream's `XLEN` read once (by name over a keyspace of
    /// more than [`BY_NAME_ABOVE`] keys, else those `SCAN` finds).
    async fn single_node_lengths(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let names = if self.looks_by_name().await? {
            self.all_names()
        } else {
            let mut found = self.scan(None).await?;
            found.sort_unstable();
            found.dedup();
            found
        };
        self.lengths(&names).await
    }

    /// On a single node: whether its streams are looked for by name (it
    /// holds more than [`BY_NAME_ABOVE`] keys) rather than by `SCAN`.
    async fn looks_by_name(&self) -> Result<bool, StoreError> {
        let keys: u64 = self.inner.query("outbox", &redis::cmd("DBSIZE")).await?;
        Ok(keys > BY_NAME_ABOVE)
    }

    /// Every possible outbox stream name: one per hash slot.
    fn all_names(&self) -> Vec<String> {
        (0..keys::SLOTS)
            .map(|slot| self.inner.keys.outbox_of_slot(slot))
            .collect()
    }

    /// Those of `streams` that hold entries, with their lengths.
    async fn lengths(&self, streams: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
        use futures::{StreamExt, TryStreamExt};
        // A cluster pipeline must stay in one slot: there, one XLEN each.
        let batch_size = if self.inner.cluster { 1 } else { LENGTH_BATCH };
        // Several round trips in flight at once, their replies in order.
        let batches: Vec<_> = streams
            .chunks(batch_size)
            .map(|batch| self.lengths_of(batch))
            .collect();
        let busy: Vec<Vec<(String, u64)>> = futures::stream::iter(batches)
            .buffered(LENGTHS_IN_FLIGHT)
            .try_collect()
            .await?;
        Ok(busy.into_iter().flatten().collect())
    }

    /// Those of `batch` that hold entries, with their lengths: one
    /// pipelined round trip.
    async fn lengths_of(&self, batch: &[String]) -> Result<Vec<(String, u64)>, StoreError> {
        let mut pipe = redis::pipe();
        for stream in batch {
            pipe.cmd("XLEN").arg(stream);
        }
        let lengths: Vec<u64> = self.inner.pipeline("outbox", &pipe).await?;
        if lengths.len() != batch.len() {
            return Err(corrupt("outbox reply"));
        }
        Ok(batch
            .iter()
            .zip(lengths)
            .filter(|(_, len)| *len > 0)
            .map(|(stream, len)| (stream.clone(), len))
            .collect())
    }
}

#[async_trait]
impl Outbox for RedisOutbox {
    async fn take(
        &self,
        consumer: &str,
        max: usize,
        reclaim_after: Duration,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let began = Instant::now();
        // The streams of a recent scan while they hold entries; an empty
        // answer is given only after a scan started after this take began
        // (a stream may have appeared since the last one).
        let (streams, scanned) = self.busy_streams(None).await?;
        let taken = self
            .take_from(streams, consumer, max, reclaim_after)
            .await?;
        if !taken.is_empty() || scanned {
            return Ok(taken);
        }
        let (streams, _) = self.busy_streams(Some(began)).await?;
        self.take_from(streams, consumer, max, reclaim_after).await
    }

    async fn ack(&self, entries: &[OutboxEntry]) -> Result<(), StoreError> {
        let mut by_stream: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for entry in entries {
            let (stream, id) = receipt(entry)?;
            by_stream.entry(stream).or_default().push(id);
        }
        // XDEL first: a crash before the XACK leaves a pending id whose
        // entry is gone, which XAUTOCLAIM clears without handing it out. On
        // a single node every stream's pair goes in one pipeline; on a
        // cluster, one pipeline per stream (one slot each).
        let per_pipeline = if self.inner.cluster {
            1
        } else {
            by_stream.len().max(1)
        };
        let by_stream: Vec<(&str, Vec<&str>)> = by_stream.into_iter().collect();
        for chunk in by_stream.chunks(per_pipeline) {
            let mut pipe = redis::pipe();
            for (stream, ids) in chunk {
                pipe.cmd("XDEL").arg(*stream).arg(ids);
                pipe.cmd("XACK").arg(*stream).arg(GROUP).arg(ids);
            }
            let _: Vec<u64> = self.inner.pipeline("outbox", &pipe).await?;
        }
        Ok(())
    }

    async fn backlog(&self) -> Result<Backlog, StoreError> {
        let mut backlog = Backlog::default();
        let (busy, _) = self.busy_streams(Some(Instant::now())).await?;
        // A cluster pipeline must stay in one slot: there, one XRANGE each.
        let batch_size = if self.inner.cluster { 1 } else { LENGTH_BATCH };
        for batch in busy.chunks(batch_size) {
            let mut pipe = redis::pipe();
            for (stream, len) in batch {
                pipe.cmd("XRANGE")
                    .arg(stream)
                    .arg("-")
                    .arg("+")
                    .arg("COUNT")
                    .arg(1);
                backlog.pending += len;
            }
            let firsts: Vec<Vec<(String, Value)>> = self.inner.pipeline("outbox", &pipe).await?;
            for first in &firsts {
                if let Some((id, _)) = first.first() {
                    let at = entry_time(id).ok_or_else(|| corrupt("outbox entry"))?;
                    backlog.oldest = Some(backlog.oldest.map_or(at, |o| o.min(at)));
                }
            }
        }
        Ok(backlog)
    }
}

impl RedisOutbox {
    /// One take from `streams` (with their lengths).
    async fn take_from(
        &self,
        streams: Vec<(String, u64)>,
        consumer: &str,
        max: usize,
        reclaim_after: Duration,
    ) -> Result<Vec<OutboxEntry>, StoreError> {
        let chosen = self.choose(streams, max);
        // Only the chosen streams are prepared (their group) and reclaimed
        // from, all at once (their requests share round trips), each of at
        // most its count: a take costs round trips for the streams it
        // reads, not for every stream holding entries. The rotation gives
        // each its turn.
        let reclaimed =
            futures::future::try_join_all(chosen.iter().map(|(stream, count)| async move {
                self.ensure_group(stream).await?;
                if self.reclaim_due(stream, reclaim_after) {
                    self.reclaim(stream, consumer, *count, reclaim_after).await
                } else {
                    Ok(Vec::new())
                }
            }))
            .await?;
        let mut taken: Vec<OutboxEntry> = reclaimed.into_iter().flatten().collect();
        // Then new entries: each chosen stream up to its count, together at
        // most what is left of `max`.
        let mut left = max.saturating_sub(taken.len());
        let asks: Vec<(String, usize)> = chosen
            .into_iter()
            .map_while(|(stream, count)| {
                let count = count.min(left);
                left -= count;
                (count > 0).then_some((stream, count))
            })
            .collect();
        if self.inner.cluster {
            // A stream (slot) at a time.
            for (stream, count) in &asks {
                let fresh = self.read_new(stream, consumer, *count).await?;
                taken.extend(fresh);
            }
        } else if !asks.is_empty() {
            // One round trip for them all.
            taken.extend(self.read_new_pipelined(&asks, consumer).await?);
        }
        Ok(taken)
    }

    /// The streams a take reads, each with how many entries to ask of it:
    /// from where the last take of this process stopped in `streams`, each
    /// up to its length, the lengths adding up to `max`. The position then
    /// moves past them, so that one busy stream does not starve the others
    /// and loops taking at once start on different streams.
    fn choose(&self, mut streams: Vec<(String, u64)>, max: usize) -> Vec<(String, usize)> {
        if streams.is_empty() || max == 0 {
            return Vec::new();
        }
        let count = |len: u64| usize::try_from(len).unwrap_or(usize::MAX).max(1);
        let mut position = self.rotation.load(Ordering::Relaxed);
        let chosen = loop {
            let start = position % streams.len();
            let mut left = max;
            let mut chosen = 0;
            for at in 0..streams.len() {
                if left == 0 {
                    break;
                }
                left = left.saturating_sub(count(streams[(start + at) % streams.len()].1));
                chosen += 1;
            }
            match self.rotation.compare_exchange_weak(
                position,
                position.wrapping_add(chosen),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    streams.rotate_left(start);
                    streams.truncate(chosen);
                    break streams;
                }
                Err(now) => position = now,
            }
        };
        let mut left = max;
        chosen
            .into_iter()
            .map(|(stream, len)| {
                let ask = count(len).min(left);
                left -= ask;
                (stream, ask)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Four callers asking for a fresh scan while the first one scans: the
    /// first runs its scan, the second (which asked for one started after
    /// that scan started) runs one more, the last two share the second's. Each
    /// caller is polled until it waits, so the order is fixed.
    #[tokio::test]
    async fn fresh_asks_share_a_scan_started_after_them() {
        use std::sync::atomic::AtomicU32;
        let shared = SharedScan::<u32>::default();
        let scans = AtomicU32::new(0);
        let gate = tokio::sync::Semaphore::new(0);
        let scan = || async {
            let n = scans.fetch_add(1, Ordering::SeqCst) + 1;
            gate.acquire().await.unwrap().forget();
            Ok::<u32, ()>(n)
        };
        let refresh = Duration::from_secs(60);
        let mut first = std::pin::pin!(shared.get(Some(Instant::now()), refresh, scan()));
        assert!(futures::poll!(&mut first).is_pending());
        assert_eq!(scans.load(Ordering::SeqCst), 1, "the first scan runs");
        let mut later: Vec<_> = (0..3)
            .map(|_| Box::pin(shared.get(Some(Instant::now()), refresh, scan())))
            .collect();
        for waiting in &mut later {
            assert!(futures::poll!(waiting).is_pending());
        }
        assert_eq!(scans.load(Ordering::SeqCst), 1, "the others wait");
        gate.add_permits(8);
        let [a, b, c] = <[_; 3]>::try_from(later).ok().unwrap();
        let answers = tokio::join!(first, a, b, c);
        assert_eq!(
            (answers.0, answers.1, answers.2, answers.3),
            (Ok((1, true)), Ok((2, true)), Ok((2, true)), Ok((2, true)))
        );
        assert_eq!(scans.load(Ordering::SeqCst), 2);

        // A caller that does not need a fresh one takes the last while it
        // is younger than the refresh time; a fresh ask scans again.
        assert_eq!(shared.get(None, refresh, scan()).await, Ok((2, false)));
        assert_eq!(
            shared.get(Some(Instant::now()), refresh, scan()).await,
            Ok((3, true))
        );
        assert_eq!(
            shared.get(None, Duration::ZERO, scan()).await,
            Ok((4, true)),
            "an old result is scanned again"
        );
        // A failed scan keeps the last result and says so to its caller.
        let failing = async { Err::<u32, ()>(()) };
        assert_eq!(
            shared.get(Some(Instant::now()), refresh, failing).await,
            Err(())
        );
        assert_eq!(shared.get(None, refresh, scan()).await, Ok((4, false)));

        // A fresh ask for an instant before a scan that is done takes that
        // scan's result (an archiver's take that began before another's
        // scan, and finds nothing).
        let began = Instant::now();
        assert_eq!(
            shared.get(Some(Instant::now()), refresh, scan()).await,
            Ok((5, true))
        );
        assert_eq!(
            shared.get(Some(began), refresh, scan()).await,
            Ok((5, true))
        );
        assert_eq!(scans.load(Ordering::SeqCst), 5, "no scan more");
    }

    #[test]
    fn an_entry_id_is_its_time() {
        assert_eq!(
            entry_time("1700000000123-4"),
            Some(Timestamp::from_unix_millis(1_700_000_000_123))
        );
        assert_eq!(entry_time("x"), None);
    }

    #[test]
    fn entries_and_receipts_round_trip() {
        let value = Value::Array(vec![
            Value::BulkString(b"5-0".to_vec()),
            Value::Array(vec![
                Value::BulkString(b"run".to_vec()),
                Value::BulkString(b"r1".to_vec()),
                Value::BulkString(b"call".to_vec()),
                Value::BulkString(b"c1".to_vec()),
            ]),
        ]);
        let parsed = entry("p:outbox:{7}", &value).unwrap().unwrap();
        assert_eq!(parsed.key.run_id.as_str(), "r1");
        assert_eq!(parsed.key.tool_call_id.as_str(), "c1");
        assert_eq!(receipt(&parsed).unwrap(), ("p:outbox:{7}", "5-0"));
        let deleted = Value::Array(vec![Value::BulkString(b"6-0".to_vec()), Value::Nil]);
        assert_eq!(entry("s", &deleted).unwrap(), None);
    }
}

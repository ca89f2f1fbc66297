//! The canonical invocation store on Redis and Redis Cluster: two round trips
//! per invocation.
//!
//! [`RedisStore`] implements [`InvocationStore`] with the same semantics as
//! the embedded `store-memory` (both pass the conformance suite in
//! `invocation_core::conformance`), for harness replicas that share one Redis
//! or one Redis Cluster. No public signature names a Redis type; errors carry
//! no URL, host, password, key or payload.
//!
//! # Key layout
//!
//! Every key of a run carries the run id as its hash tag, so one script can
//! touch all of them on Redis Cluster (`<prefix>` defaults to `aci`):
//!
//! | key | type | holds | TTL |
//! | --- | --- | --- | --- |
//! | `<prefix>:{<run_id>}:inv:<tool_call_id>` | hash | one canonical record | the record TTL, set once at creation |
//! | `<prefix>:{<run_id>}:budget` | hash | `run` and `tool:<name>` counters | the record TTL, set at the run's first count |
//! | `<prefix>:{<run_id>}:index` | list | tool call ids in creation order | extended at each creation to at least the record TTL |
//! | `<prefix>:{<run_id>}:scopes` | hash | per scope fingerprint `<fp>:first`, `<fp>:first_ready`, `<fp>:claim` | as the index |
//!
//! A record hash holds small fields (`run_id`, `tool_call_id`, `tool_name`,
//! `status`, `evidence_status`, `error_code`, `scope_fp`, `created_at`,
//! `finished_at`, `replayed_from`, `request_bytes`, `raw_bytes`,
//! `result_bytes`) and one field per payload (`request`, `scope`, `result`,
//! `raw`); a metadata read is an `HMGET` of the small fields only.
//!
//! # Scripts and round trips
//!
//! - **create** is one Lua script (`EVALSHA`, all four keys in `KEYS`):
//!   record exists? → tool budget? → run budget? → `HSET` the record →
//!   `PEXPIRE` it → count both budgets (the counter hash gets a TTL only when
//!   it has none) → `RPUSH` the id to the run index and extend the index and
//!   scopes TTLs to at least the record TTL → `HSET` the fingerprint's
//!   `first` when absent → for a claiming create, report `first_ready` or the
//!   claim holder, or take the claim. It answers duplicate/budget refusals, or
//!   `duplicate_of` and `same_scope`.
//! - **finalize** is one Lua script: a missing record is `NotFound` and is
//!   never recreated; a status other than `PROJECTING` is refused with the
//!   current status; otherwise `HSET` the outcome fields, `HSETNX`
//!   `first_ready` on READY, and release the scope claim if this record holds
//!   it. It never sets a TTL: no `EXPIRE`/`PEXPIRE`, no `SET`, no `GETEX`.
//! - **reads** are `HMGET`, `LRANGE` and `PTTL` only, so they never refresh a
//!   TTL. `list` is `LRANGE` plus one pipelined `HMGET` per record (expired
//!   records are skipped; an id created again after its record expired is
//!   listed at its latest position).
//!
//! So a READY invocation costs exactly two round trips: create and finalize.
//! When Redis answers `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`) the call
//! is sent once more as `EVAL`, which also caches the script on that node.
//!
//! # Connections and failures
//!
//! Connections are multiplexed and shared: the store keeps
//! [`RedisConfig::pool_size`] of them and hands each operation a clone of
//! the next one (round robin), so calls in flight at the same time share a
//! socket and leave in one write; there is no checkout, no wait for a free
//! connection and no health-check round trip. Sockets use `TCP_NODELAY`. A
//! connection-level failure (refused, reset, closed) retires every
//! connection opened before it, so after a restart or failover the store
//! reconnects at once, and a connection on which a request timed out is
//! never handed out again. Every operation, connecting included, is bounded
//! by [`RedisConfig::operation_timeout`]; any failure becomes
//! [`StoreError::Unavailable`] whose source is a sanitized
//! [`RedisStoreError`] (a [`Failure`] category, no text from the driver).
//!
//! Script calls are built straight into one command buffer (no
//! intermediate `String` per argument; each payload copied once before the
//! driver packs it). `docs/benchmarks.md` has the benchmark.
//!
//! # Configuration
//!
//! [`RedisConfig`] is built in code, or from a configuration file:
//! [`RedisConfig::from_url`] parses a store URL (`redis://`, `rediss://`,
//! and `redis+cluster://`/`rediss+cluster://host:port,…` whose credentials
//! apply to every node), and [`RedisSettings`] is the serde `[redis]`
//! section (unknown keys refused) that [`RedisSettings::apply`] lays over
//! it, reading the TLS PEM files it names. Neither error echoes a URL or a
//! file's contents.
//!
//! # TLS (`rediss://`)
//!
//! `rediss://` URLs connect over TLS with rustls (ring provider; no system
//! OpenSSL), single node and Cluster alike (every discovered node with the
//! same certificates; a cluster's URLs must all use one scheme). The server
//! certificate must match the URL's host (DNS name or IP address) and chain
//! to the Mozilla roots compiled into the binary (`webpki-roots`), or, with
//! [`RedisConfig::tls_root_ca_pem`], to that CA bundle instead.
//! [`RedisConfig::tls_client_cert_pem`] adds a client certificate for mutual
//! TLS (`tls-auth-clients yes`). PEM material is checked when the store is
//! built ([`ConfigProblem::InvalidTlsRootCa`], …), is never printed, and
//! `#insecure` URLs are refused ([`ConfigProblem::InsecureTls`]). A failed
//! handshake (untrusted or mismatched certificate, refused client
//! certificate) is `STORE_UNAVAILABLE` with [`Failure::Tls`].
//!
//! redis-rs builds each TLS connection's rustls configuration with the
//! process-wide default `CryptoProvider`; unless the application installed
//! one, the store installs rustls's ring provider as that default the first
//! time a `rediss://` store is built.
//!
#![cfg_attr(
    feature = "testing",
    doc = "The `testing` feature adds [`testing`]: throwaway `redis-server`s (plain \
           or TLS-only, with a throwaway CA) and a 3-node cluster (plain or TLS) for \
           tests and benchmarks, and [`wire`]: the exact script calls the store \
           sends, for benchmarks that replay them with `redis-benchmark`."
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "The `testing` feature adds `testing`: throwaway `redis-server`s (plain \
           or TLS-only, with a throwaway CA) and a 3-node cluster (plain or TLS) for \
           tests and benchmarks, and `wire`: the exact script calls the store \
           sends, for benchmarks that replay them with `redis-benchmark`."
)]

mod calls;
mod codec;
mod config;
mod error;
mod keys;
mod outbox;
mod pool;
mod scripts;
#[cfg(feature = "testing")]
pub mod testing;
mod tls;
#[cfg(feature = "testing")]
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aci_contracts::{ErrorCode, InvocationStatus, RunId, Timestamp, ToolCallId};
use async_trait::async_trait;
use invocation_core::{
    Created, Finalization, InvocationKey, InvocationRecord, InvocationStore, MAX_REFUSALS,
    NewInvocation, RecordFields, Refusal, RunState, SameScope, ScopeFingerprint, ScopeIndex,
    Settled, StoreError, Unsettled,
};
use redis::cluster::ClusterClientBuilder;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, FromRedisValue, IntoConnectionInfo,
    ServerErrorKind, Value,
};

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEY_PREFIX, DEFAULT_OPERATION_TIMEOUT, DEFAULT_POOL_SIZE,
    MAX_KEY_PREFIX_BYTES, RedisConfig, RedisSettings,
};
pub use error::{ConfigProblem, Failure, RedisStoreError, Result};
pub use outbox::{GROUP as OUTBOX_GROUP, RedisOutbox};

use calls::Invoke;
use codec::corrupt;
use config::Nodes;
use keys::Keys;
use pool::{Link, Pool, Target};
use scripts::{CREATE, FINALIZE, NOTE_REFUSAL, SETTLE};

/// Longest TTL written, in milliseconds (about 285,000 years): keeps every
/// TTL exact as a Lua number and inside Redis's expiry range.
const MAX_TTL_MILLIS: u64 = (1 << 53) - 1;

/// Records fetched per pipelined round trip when listing a run.
const LIST_BATCH: usize = 256;

/// The canonical invocation store on Redis or Redis Cluster.
///
/// Cheap to clone; clones share the connection pool. Build it inside or
/// outside a Tokio runtime; use it inside one (connections belong to the
/// runtime that opened them).
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    keys: Keys,
    prefix: String,
    operation_timeout: Duration,
    cluster: bool,
    tls: bool,
    nodes: usize,
    pool_size: usize,
    /// Whether finalizations append to the outbox (see `outbox.rs`).
    outbox: bool,
    /// When this store's outbox streams were last all looked for (see
    /// `outbox.rs`: on a single node, the set of busy streams is read
    /// instead, and every stream looked for at most this often).
    outbox_swept: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Inner {
    /// The outbox keys the finalizing scripts get.
    const fn outbox_keys(&self) -> calls::OutboxKeys {
        match (self.outbox, self.cluster) {
            (false, _) => calls::OutboxKeys::Off,
            (true, true) => calls::OutboxKeys::Stream,
            (true, false) => calls::OutboxKeys::StreamAndBusy,
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("RedisStore")
            .field("mode", &if inner.cluster { "cluster" } else { "single" })
            .field("nodes", &inner.nodes)
            .field("tls", &inner.tls)
            .field("pool_size", &inner.pool_size)
            .field("key_prefix", &inner.prefix)
            .field("operation_timeout", &inner.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for `config`. Connects lazily: the first operation opens the
    /// first connection. Use [`ping`](Self::ping) to check reachability.
    ///
    /// # Errors
    /// [`RedisStoreError::Config`] when the configuration is invalid.
    pub fn new(config: RedisConfig) -> Result<Self> {
        config.validate()?;
        if config.uses_tls() {
            tls::ensure_crypto_provider();
        }
        let certificates = config.tls.certificates();
        let malformed = |_| RedisStoreError::Config(ConfigProblem::MalformedUrl);
        // Requests are small and answered at once: never hold one back
        // waiting for the previous one's acknowledgement (Nagle).
        let tcp = || TcpSettings::default().set_nodelay(true);
        let (target, nodes) = match &config.nodes {
            Nodes::Single(url) => {
                let info = url
                    .as_str()
                    .into_connection_info()
                    .map_err(malformed)?
                    .set_tcp_settings(tcp());
                let client = match certificates {
                    Some(certificates) => Client::build_with_tls(info, certificates),
                    None => Client::open(info),
                }
                .map_err(malformed)?;
                // No response timeout in the driver: every operation runs
                // under the store's own operation timeout (`with_conn`), and
                // a second timer per request would only cost time.
                let connection = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_response_timeout(None);
                (
                    Target::Single {
                        client,
                        config: connection,
                    },
                    1,
                )
            }
            Nodes::Cluster(urls) => {
                let mut builder = ClusterClientBuilder::new(urls.iter().map(String::as_str))
                    .tcp_settings(tcp())
                    .connection_timeout(config.connect_timeout)
                    .response_timeout(config.operation_timeout);
                if let Some(certificates) = certificates {
                    builder = builder.certs(certificates);
                }
                let client = builder.build().map_err(malformed)?;
                (Target::Cluster { client }, urls.len())
            }
        };
        let pool = Pool::new(target, config.pool_size);
        let prefix = config.effective_key_prefix().to_owned();
        Ok(Self {
            inner: Arc::new(Inner {
                pool,
                keys: Keys::new(&prefix),
                prefix,
                operation_timeout: config.operation_timeout,
                cluster: config.is_cluster(),
                tls: config.uses_tls(),
                nodes,
                pool_size: config.pool_size,
                outbox: config.outbox,
                outbox_swept: std::sync::Mutex::default(),
            }),
        })
    }

    /// Checks that Redis answers (one `PING`; on a cluster, every primary).
    ///
    /// # Errors
    /// [`RedisStoreError::Unavailable`] when it does not within the
    /// operation timeout.
    pub async fn ping(&self) -> Result<()> {
        self.inner
            .query::<redis::Value>("ping", &redis::cmd("PING"))
            .await
            .map(drop)
    }

    /// The key prefix in use.
    #[must_use]
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Whether this store talks to a Redis Cluster.
    #[must_use]
    pub fn is_cluster(&self) -> bool {
        self.inner.cluster
    }
}

impl Inner {
    fn driver_failure(
        &self,
        operation: &'static str,
        error: &redis::RedisError,
    ) -> RedisStoreError {
        let failure = Failure::of(error);
        if failure.retires_all_connections() {
            self.pool.retire_all();
        }
        tracing::debug!(operation, %failure, "redis operation failed");
        RedisStoreError::unavailable(operation, failure)
    }

    /// Takes a handle on a pooled connection and runs `work` on it, all
    /// within the operation timeout. A request that times out marks its
    /// connection broken, so it is not handed out again.
    async fn with_conn<T, W>(&self, operation: &'static str, work: W) -> Result<T>
    where
        W: AsyncFnOnce(&mut Link) -> Result<T>,
    {
        let in_flight: OnceLock<Arc<AtomicBool>> = OnceLock::new();
        let attempt = async {
            let mut conn = self
                .pool
                .get()
                .await
                .map_err(|error| self.driver_failure(operation, &error))?;
            let _ = in_flight.set(conn.broken_flag());
            let result = work(&mut conn.link).await;
            if let Err(error) = &result
                && error.failure().is_some_and(Failure::breaks_connection)
            {
                conn.mark_broken();
            }
            result
        };
        if let Ok(result) = tokio::time::timeout(self.operation_timeout, attempt).await {
            return result;
        }
        if let Some(broken) = in_flight.get() {
            broken.store(true, Ordering::Release);
        }
        tracing::debug!(operation, "redis operation timed out");
        Err(RedisStoreError::unavailable(operation, Failure::Timeout))
    }

    async fn query<T: FromRedisValue>(&self, operation: &'static str, cmd: &Cmd) -> Result<T> {
        self.with_conn(operation, async |link: &mut Link| {
            cmd.query_async::<T>(link)
                .await
                .map_err(|error| self.driver_failure(operation, &error))
        })
        .await
    }

    async fn pipeline<T: FromRedisValue>(
        &self,
        operation: &'static str,
        pipe: &redis::Pipeline,
    ) -> Result<T> {
        self.with_conn(operation, async |link: &mut Link| {
            pipe.query_async::<T>(link)
                .await
                .map_err(|error| self.driver_failure(operation, &error))
        })
        .await
    }

    /// The records of `keys`, in order (`None` where absent): one `HMGET`
    /// per key, pipelined, [`LIST_BATCH`] keys a round trip. On a cluster a
    /// pipeline stays in one slot, so the keys of each run (one slot) go
    /// together; the pipelines run concurrently.
    async fn read_records(
        &self,
        operation: &'static str,
        keys: &[InvocationKey],
        fields: RecordFields,
    ) -> Result<Vec<Option<InvocationRecord>>, StoreError> {
        let names = codec::field_names(fields);
        let read = async |batch: &[&InvocationKey]| -> Result<_, StoreError> {
            let mut pipe = redis::pipe();
            for key in batch {
                pipe.cmd("HMGET")
                    .arg(self.keys.record(&key.run_id, &key.tool_call_id))
                    .arg(&names);
            }
            let replies: Vec<Vec<Option<Vec<u8>>>> = self.pipeline(operation, &pipe).await?;
            if replies.len() != batch.len() {
                return Err(corrupt("record reply"));
            }
            batch
                .iter()
                .zip(replies)
                .map(|(key, values)| codec::decode(key, fields, values))
                .collect::<Result<Vec<_>, _>>()
        };
        // The positions of the keys in each pipeline.
        let groups: Vec<Vec<usize>> = if self.cluster {
            let mut by_run: HashMap<&RunId, Vec<usize>> = HashMap::new();
            for (at, key) in keys.iter().enumerate() {
                by_run.entry(&key.run_id).or_default().push(at);
            }
            by_run
                .into_values()
                .flat_map(|at| {
                    at.chunks(LIST_BATCH)
                        .map(<[usize]>::to_vec)
                        .collect::<Vec<_>>()
                })
                .collect()
        } else {
            (0..keys.len())
                .collect::<Vec<_>>()
                .chunks(LIST_BATCH)
                .map(<[usize]>::to_vec)
                .collect()
        };
        let answers = futures::future::try_join_all(groups.iter().map(|group| {
            let batch: Vec<&InvocationKey> = group.iter().map(|&at| &keys[at]).collect();
            async move { read(&batch).await }
        }))
        .await?;
        let mut records: Vec<Option<InvocationRecord>> = vec![None; keys.len()];
        for (group, answer) in groups.iter().zip(answers) {
            for (&at, record) in group.iter().zip(answer) {
                records[at] = record;
            }
        }
        Ok(records)
    }

    /// The script call `build(Invoke::Sha)` (`EVALSHA`); on `NOSCRIPT`,
    /// `build(Invoke::Source)` (`EVAL`) once. The reply, an array of bulk
    /// strings, as it came.
    async fn eval(&self, operation: &'static str, build: impl Fn(Invoke) -> Cmd) -> Result<Value> {
        self.with_conn(operation, async |link: &mut Link| {
            let first = build(Invoke::Sha).query_async::<Value>(&mut *link).await;
            match first {
                Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    tracing::debug!(
                        operation,
                        "script not cached on the server; sending it once"
                    );
                    build(Invoke::Source).query_async::<Value>(link).await
                }
                other => other,
            }
            .map_err(|error| self.driver_failure(operation, &error))
        })
        .await
    }
}

/// A script's reply (an array of bulk strings) as text, borrowed from it.
fn reply_words<'v>(reply: &'v Value, operation: &'static str) -> Result<Vec<&'v str>> {
    let protocol = || RedisStoreError::unavailable(operation, Failure::Protocol);
    let Value::Array(items) = reply else {
        return Err(protocol());
    };
    items
        .iter()
        .map(|item| match item {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).map_err(|_| protocol()),
            Value::SimpleString(text) => Ok(text.as_str()),
            _ => Err(protocol()),
        })
        .collect()
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis())
        .unwrap_or(u64::MAX)
        .min(MAX_TTL_MILLIS)
}

fn reply_id(text: &str, what: &'static str) -> Result<Option<ToolCallId>, StoreError> {
    if text.is_empty() {
        Ok(None)
    } else {
        ToolCallId::new(text).map(Some).map_err(|_| corrupt(what))
    }
}

/// A run state from the run hash's `started_at`, `deadline`, `owner` (empty
/// strings for none).
fn run_state(started_at: &str, deadline: &str, owner: &str) -> Result<RunState, StoreError> {
    let millis = |text: &str| {
        text.parse::<i64>()
            .map(Timestamp::from_unix_millis)
            .map_err(|_| corrupt("run state"))
    };
    Ok(RunState {
        started_at: millis(started_at)?,
        deadline: (!deadline.is_empty())
            .then(|| millis(deadline))
            .transpose()?,
        owner: (!owner.is_empty()).then(|| owner.to_owned()),
    })
}

/// Keeps the last position of every id: an id whose record expired and was
/// created again is listed where it was created last.
fn dedup_keep_last(ids: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut seen = HashSet::with_capacity(ids.len());
    let mut kept: Vec<Vec<u8>> = ids
        .into_iter()
        .rev()
        .filter(|id| seen.insert(id.clone()))
        .collect();
    kept.reverse();
    kept
}

#[async_trait]
impl InvocationStore for RedisStore {
    async fn create(&self, new: NewInvocation) -> Result<Created, StoreError> {
        let inner = &self.inner;
        let ttl = ttl_millis(new.ttl);
        let reply = inner
            .eval("create", |invoke| {
                calls::create(&CREATE, invoke, &inner.prefix, &new, ttl)
            })
            .await?;
        match reply_words(&reply, "create")?.as_slice() {
            [
                "CREATED",
                duplicate_of,
                kind,
                id,
                started_at,
                deadline,
                owner,
            ] => {
                let duplicate_of = reply_id(duplicate_of, "create reply")?;
                let same_scope = match (*kind, reply_id(id, "create reply")?) {
                    ("", None) => None,
                    ("READY", Some(id)) => Some(SameScope::Ready(id)),
                    ("IN_FLIGHT", Some(id)) => Some(SameScope::InFlight(id)),
                    _ => return Err(corrupt("create reply")),
                };
                Ok(Created {
                    duplicate_of,
                    same_scope,
                    run: run_state(started_at, deadline, owner)?,
                })
            }
            ["INVALID_TTL"] => Err(StoreError::InvalidTtl),
            ["RUN_OWNER"] => Err(StoreError::RunOwnedByOther),
            ["RUN_DEADLINE"] => Err(StoreError::RunDeadlineExceeded),
            ["DUPLICATE"] => Err(StoreError::Duplicate),
            ["TOOL_BUDGET"] => Err(StoreError::ToolBudgetExhausted),
            ["RUN_BUDGET"] => Err(StoreError::RunBudgetExhausted),
            _ => Err(corrupt("create reply")),
        }
    }

    async fn finalize(
        &self,
        key: &InvocationKey,
        finalization: Finalization,
    ) -> Result<(), StoreError> {
        let inner = &self.inner;
        let reply = inner
            .eval("finalize", |invoke| {
                calls::finalize(
                    &FINALIZE,
                    invoke,
                    &inner.prefix,
                    key,
                    &finalization,
                    inner.outbox_keys(),
                )
            })
            .await?;
        match reply_words(&reply, "finalize")?.as_slice() {
            ["FINALIZED"] => Ok(()),
            ["NOT_FOUND"] => Err(StoreError::NotFound),
            ["NOT_PROJECTING", current] => Err(StoreError::NotProjecting {
                current: InvocationStatus::parse(current).ok_or_else(|| corrupt("status"))?,
            }),
            ["CORRUPT"] => Err(corrupt("status")),
            _ => Err(corrupt("finalize reply")),
        }
    }

    async fn note_refusal(
        &self,
        run_id: &RunId,
        principal: Option<&str>,
        refusal: &Refusal,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let inner = &self.inner;
        let (run, list) = (inner.keys.budget(run_id), inner.keys.refusals(run_id));
        let json = refusal.to_json();
        let ttl = ttl_millis(ttl);
        inner
            .eval("note_refusal", |invoke| {
                calls::note_refusal(
                    &NOTE_REFUSAL,
                    invoke,
                    [&run, &list],
                    principal.unwrap_or(""),
                    &json,
                    ttl,
                    MAX_REFUSALS,
                )
            })
            .await?;
        Ok(())
    }

    async fn refusals(&self, run_id: &RunId) -> Result<Vec<Refusal>, StoreError> {
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(self.inner.keys.refusals(run_id)).arg(0).arg(-1);
        let items: Vec<String> = self.inner.query("refusals", &cmd).await?;
        items
            .iter()
            .map(|item| Refusal::from_json(item).ok_or_else(|| corrupt("refusal")))
            .collect()
    }

    async fn settle(
        &self,
        call: &Unsettled,
        error_code: ErrorCode,
        finished_at: Timestamp,
    ) -> Result<Settled, StoreError> {
        let inner = &self.inner;
        let ttl = ttl_millis(call.ttl);
        let reply = inner
            .eval("settle", |invoke| {
                calls::settle(
                    &SETTLE,
                    invoke,
                    &inner.prefix,
                    call,
                    error_code,
                    finished_at,
                    ttl,
                    inner.outbox_keys(),
                )
            })
            .await?;
        match reply_words(&reply, "settle")?.as_slice() {
            ["FINALIZED"] => Ok(Settled::Finalized),
            ["TOMBSTONED"] => Ok(Settled::Tombstoned),
            ["OTHER_ATTEMPT"] => Ok(Settled::OtherAttempt),
            ["ALREADY_FINAL", current] => Ok(Settled::AlreadyFinal(
                InvocationStatus::parse(current).ok_or_else(|| corrupt("status"))?,
            )),
            ["INVALID_TTL"] => Err(StoreError::InvalidTtl),
            ["CORRUPT"] => Err(corrupt("status")),
            _ => Err(corrupt("settle reply")),
        }
    }

    async fn run_state(&self, run_id: &RunId) -> Result<Option<RunState>, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.inner.keys.budget(run_id))
            .arg("started_at")
            .arg("deadline")
            .arg("owner");
        let values: Vec<Option<String>> = self.inner.query("run_state", &cmd).await?;
        match values.as_slice() {
            [None, ..] => Ok(None),
            [Some(started_at), deadline, owner] => run_state(
                started_at,
                deadline.as_deref().unwrap_or(""),
                owner.as_deref().unwrap_or(""),
            )
            .map(Some),
            _ => Err(corrupt("run state")),
        }
    }

    async fn get(
        &self,
        key: &InvocationKey,
        fields: RecordFields,
    ) -> Result<Option<InvocationRecord>, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.inner.keys.record(&key.run_id, &key.tool_call_id))
            .arg(codec::field_names(fields));
        let values: Vec<Option<Vec<u8>>> = self.inner.query("get", &cmd).await?;
        codec::decode(key, fields, values)
    }

    /// One `HMGET` per key, pipelined: on a single node 256 keys
    /// a round trip; on a cluster, where a pipeline stays in one slot, the
    /// keys of each run (one slot) together, the runs concurrently.
    async fn get_many(
        &self,
        keys: &[InvocationKey],
        fields: RecordFields,
    ) -> Result<Vec<Option<InvocationRecord>>, StoreError> {
        self.inner.read_records("get", keys, fields).await
    }

    async fn list(
        &self,
        run_id: &RunId,
        fields: RecordFields,
    ) -> Result<Vec<InvocationRecord>, StoreError> {
        let inner = &self.inner;
        let mut lrange = redis::cmd("LRANGE");
        lrange.arg(inner.keys.index(run_id)).arg(0).arg(-1);
        let ids: Vec<Vec<u8>> = inner.query("list", &lrange).await?;
        let keys = dedup_keep_last(ids)
            .into_iter()
            .map(|id| codec::index_entry(run_id, id))
            .collect::<Result<Vec<_>, _>>()?;
        let records = inner.read_records("list", &keys, fields).await?;
        Ok(records.into_iter().flatten().collect())
    }

    async fn scope_index(
        &self,
        run_id: &RunId,
        fingerprint: &ScopeFingerprint,
    ) -> Result<ScopeIndex, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.inner.keys.scopes(run_id))
            .arg(keys::first_field(fingerprint))
            .arg(keys::first_ready_field(fingerprint));
        let values: Vec<Option<String>> = self.inner.query("scope_index", &cmd).await?;
        let mut values = values.into_iter();
        let mut next = || {
            values
                .next()
                .flatten()
                .map(|id| ToolCallId::new(id).map_err(|_| corrupt("scope index")))
                .transpose()
        };
        Ok(ScopeIndex {
            first: next()?,
            first_ready: next()?,
        })
    }

    async fn remaining_ttl(&self, key: &InvocationKey) -> Result<Option<Duration>, StoreError> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(self.inner.keys.record(&key.run_id, &key.tool_call_id));
        let millis: i64 = self.inner.query("remaining_ttl", &cmd).await?;
        match millis {
            -2 => Ok(None),
            millis => u64::try_from(millis)
                .map(|m| Some(Duration::from_millis(m)))
                .map_err(|_| corrupt("record without TTL")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_keeps_the_latest_position() {
        let ids = ["a", "b", "a", "c", "b"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        let kept: Vec<Vec<u8>> = dedup_keep_last(ids);
        assert_eq!(kept, vec![b"a".to_vec(), b"c".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn ttl_is_capped_and_exact() {
        assert_eq!(ttl_millis(Duration::from_millis(1500)), 1500);
        assert_eq!(ttl_millis(Duration::MAX), MAX_TTL_MILLIS);
    }
}

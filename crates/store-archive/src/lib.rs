//! The durable archive of finalized invocation records, in PostgreSQL.
//!
//! A record lives in the invocation store until its TTL. `aci archive`
//! takes finalized records from the store's outbox
//! ([`invocation_core::Outbox`]) and inserts them here with
//! [`Archive::insert`]; only after the insert committed does it acknowledge
//! them. Delivery is at least once, the insert idempotent: exactly one row
//! per `(run_id, tool_call_id)`.
//!
//! # Tamper evidence
//!
//! Each run's calls form a hash chain in archive order (`seq` 1, 2, …):
//! every row holds its leaf hash (over the call's canonical JSON, see
//! [`ArchivedCall::leaf_hash`]) and the chain hash `H(previous || leaf)`.
//! The insert computes both inside its transaction while holding the run's
//! transaction-scoped advisory lock (`pg_advisory_xact_lock` on a key
//! derived from the run id), so archivers inserting the same run at once
//! take turns: the chain never forks and `seq` has no gap. Locks are taken
//! in key order within a batch, so two archivers never deadlock on them.
//! [`Archive::verify_run`] recomputes every hash and names the first record
//! that is missing, altered, reordered or added.
//!
//! A run that can take no more calls is sealed ([`Archive::seal_idle_runs`]):
//! its count and head go into `aci_seals`, and each batch of seals into a
//! checkpoint: a Merkle root over them in a note signed with Ed25519 (the
//! C2SP signed-note format, see `seal.rs`). With the key, verification then
//! also catches the last rows of a sealed run deleted, or forged rows
//! appended with recomputed hashes, even with the seal row rewritten.
//!
//! An insert is one transaction of four round trips after `BEGIN`: the
//! locks; the runs' insert and the reads of what is archived already and
//! of each run's head, pipelined; the calls' insert; `COMMIT`. Its
//! statements are prepared once per connection (again when the connection
//! is opened again, or when PostgreSQL refuses one as prepared because a
//! migration changed what it returns).
//!
//! The advisory lock (instead of `SELECT … FOR UPDATE` on the run row)
//! keeps every table insert-only, so the archiver role needs `SELECT,
//! INSERT` and nothing else on the data (see [`schema`](crate#schema)).
//!
//! # Schema
//!
//! Created and migrated by [`Archive::migrate`] (versioned migrations, see
//! `schema.rs`): `aci_runs`, `aci_calls` (range-partitioned by month of
//! `finished_at_ms`, partitions `aci_calls_YYYYMM` created on demand),
//! `aci_seals`, `aci_checkpoints`. Retention drops whole partitions
//! ([`Archive::drop_partitions_before`]), never rows.
//!
//! # TLS
//!
//! The connection uses rustls (ring provider, the compiled-in Mozilla roots)
//! as the URL's `sslmode` asks: `prefer` (the default) tries TLS first,
//! `require` insists on it, `disable` never uses it.

mod archiver;
mod error;
mod insert;
mod record;
mod schema;
mod seal;
mod settings;
#[cfg(feature = "testing")]
pub mod testing;
mod verify;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, MutexGuard as AsyncMutexGuard};
use tokio_postgres::Client;

pub use archiver::{Archiver, Step};
pub use error::{ArchiveError, Result};
pub use insert::{ArchiveInput, Inserted};
pub use record::{ArchivedCall, GENESIS, Hash, RawPolicy, chain, to_hex};
pub use schema::SCHEMA_VERSION;
pub use seal::{CheckpointKey, KEY_NAME, ORIGIN};
pub use settings::{
    ArchiveSettings, DEFAULT_BATCH_SIZE, DEFAULT_POLL_INTERVAL, DEFAULT_RECLAIM_AFTER,
    DEFAULT_SEAL_IDLE, DEFAULT_WORKERS,
};
pub use verify::{Problem, StoredCall, Verdict};

/// A connection to the archive database. Cheap to clone; clones share the
/// connection (statements run one at a time on it).
#[derive(Clone)]
pub struct Archive {
    /// Where to connect again when the connection closed.
    config: Arc<tokio_postgres::Config>,
    client: Arc<AsyncMutex<Conn>>,
    /// Partitions known to exist.
    partitions: Arc<Mutex<HashSet<String>>>,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive").finish_non_exhaustive()
    }
}

fn tls() -> tokio_postgres_rustls::MakeRustlsConnect {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_or_else(
        |_| {
            rustls::ClientConfig::builder()
                .with_root_certificates(roots.clone())
                .with_no_client_auth()
        },
        |builder| {
            builder
                .with_root_certificates(roots.clone())
                .with_no_client_auth()
        },
    );
    tokio_postgres_rustls::MakeRustlsConnect::new(config)
}

/// How long a connection attempt may take unless the URL says
/// (`connect_timeout`).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The connection, with the statements prepared on it: they live and die
/// with it, so a connection opened again prepares them again.
struct Conn {
    client: Client,
    /// [`Archive::insert`]'s statements, prepared by its first batch on this
    /// connection; `None` again after an insert failed, so that a statement
    /// the server no longer takes (a migration changed a table under it) is
    /// prepared anew by the next batch instead of failing every batch.
    insert: Option<Arc<insert::Statements>>,
}

impl Conn {
    fn new(client: Client) -> Self {
        Self {
            client,
            insert: None,
        }
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

async fn open(config: &tokio_postgres::Config) -> Result<Client> {
    let (client, connection) = config
        .connect(tls())
        .await
        .map_err(ArchiveError::unavailable("connect"))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(code = "ARCHIVE_UNAVAILABLE", kind = ?error.code(), "archive connection closed");
        }
    });
    Ok(client)
}

impl Archive {
    /// Connects to the archive at `url` (`postgres://user@host:port/db`).
    /// The connection runs on a task of the current runtime. When it closes
    /// (the server restarted, the network dropped it), the next operation
    /// connects again; the operation that met the closed connection fails
    /// with [`ArchiveError::Unavailable`] and may be retried.
    ///
    /// # Errors
    /// [`ArchiveError::InvalidUrl`], [`ArchiveError::Unavailable`].
    pub async fn connect(url: &str) -> Result<Self> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|_| ArchiveError::InvalidUrl)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let client = open(&config).await?;
        Ok(Self {
            config: Arc::new(config),
            client: Arc::new(AsyncMutex::new(Conn::new(client))),
            partitions: Arc::default(),
        })
    }

    /// The connection, opened again first when it closed.
    async fn client(&self) -> Result<AsyncMutexGuard<'_, Conn>> {
        let mut client = self.client.lock().await;
        if client.is_closed() {
            *client = Conn::new(open(&self.config).await?);
            tracing::info!("archive connection opened again");
        }
        Ok(client)
    }

    /// Drops the connection and opens a new one (after an operation timed
    /// out, say: the old one may be stuck on a dead peer).
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`]; the next operation tries again.
    pub async fn reconnect(&self) -> Result<()> {
        let mut client = self.client.lock().await;
        *client = Conn::new(open(&self.config).await?);
        Ok(())
    }

    /// Applies the schema migrations the database lacks (idempotent; safe
    /// from several archivers at once).
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`], [`ArchiveError::SchemaTooNew`].
    pub async fn migrate(&self) -> Result<()> {
        let mut client = self.client().await?;
        schema::migrate(&mut client).await
    }

    fn known_partitions(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.partitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates the month partition of each of `millis` that does not exist.
    async fn ensure_partitions(&self, client: &Client, millis: &[i64]) -> Result<()> {
        for &at in millis {
            let (name, from, to) = schema::partition_of(at);
            if self.known_partitions().contains(&name) {
                continue;
            }
            let sql = format!(
                "DO $$ BEGIN
                   PERFORM pg_advisory_xact_lock({lock});
                   IF to_regclass('{name}') IS NULL THEN
                     EXECUTE 'CREATE TABLE {name} PARTITION OF aci_calls FOR VALUES FROM ({from}) TO ({to})';
                   END IF;
                 END $$",
                lock = schema::DDL_LOCK,
            );
            client
                .batch_execute(&sql)
                .await
                .map_err(ArchiveError::unavailable("partition"))?;
            self.known_partitions().insert(name);
        }
        Ok(())
    }

    /// Creates the partitions of the month holding `now_millis` and of the
    /// `ahead` months after it, where missing: run by the owner role (the
    /// archiver role cannot create tables), at start and then regularly, so
    /// an archiver with only `SELECT, INSERT` never meets a missing month.
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`].
    pub async fn prepare_months(&self, now_millis: i64, ahead: u32) -> Result<()> {
        let mut months = vec![now_millis];
        for _ in 0..ahead {
            let last = months[months.len() - 1];
            months.push(schema::next_month(last));
        }
        let client = self.client().await?;
        self.ensure_partitions(&client, &months).await
    }

    /// Drops every month partition that ends at or before `cutoff_millis`
    /// (Unix ms): retention removes whole months, never rows. Returns the
    /// dropped partitions' names. Needs the owner role.
    ///
    /// # Errors
    /// [`ArchiveError::Unavailable`].
    pub async fn drop_partitions_before(&self, cutoff_millis: i64) -> Result<Vec<String>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT c.relname FROM pg_inherits i
                 JOIN pg_class c ON c.oid = i.inhrelid
                 JOIN pg_class p ON p.oid = i.inhparent
                 WHERE p.relname = 'aci_calls'",
                &[],
            )
            .await
            .map_err(ArchiveError::unavailable("retention"))?;
        let mut dropped = Vec::new();
        for row in rows {
            let name: String = row.get(0);
            if schema::partition_end(&name).is_some_and(|end| end <= cutoff_millis) {
                client
                    .batch_execute(&format!("DROP TABLE IF EXISTS {name}"))
                    .await
                    .map_err(ArchiveError::unavailable("retention"))?;
                self.known_partitions().remove(&name);
                tracing::info!(partition = %name, "archive partition dropped");
                dropped.push(name);
            }
        }
        Ok(dropped)
    }
}

//! Pooled connections that are recycled without a round trip.
//!
//! A redis-rs connection is multiplexed, so a pool of them spreads load over
//! several sockets. deadpool-redis's manager sends `UNWATCH` + `PING` on every
//! checkout, which would add a round trip to every store operation; this
//! manager instead recycles a connection unless
//! - a connection-level failure (refused, reset, closed) happened anywhere
//!   since it was opened: an *epoch* counter that every such failure bumps, so
//!   after a restart or failover all stale sockets are replaced at once; or
//! - a request on it timed out (it is marked *broken*), so a black-holed
//!   socket is never reused.
//!
//! The hot path stays one round trip per operation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisError, RedisFuture, Value};

/// Where connections go.
pub(crate) enum Target {
    Single {
        client: Client,
        config: AsyncConnectionConfig,
    },
    Cluster {
        client: ClusterClient,
    },
}

/// Opens connections to the target and recycles them by epoch.
pub(crate) struct Manager {
    target: Target,
    epoch: Arc<AtomicU64>,
}

impl Manager {
    pub(crate) const fn new(target: Target, epoch: Arc<AtomicU64>) -> Self {
        Self { target, epoch }
    }
}

/// One connection (single node or cluster), tagged with the epoch it was opened in.
pub(crate) struct Conn {
    link: Link,
    epoch: u64,
    broken: Arc<AtomicBool>,
}

impl Conn {
    pub(crate) const fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    /// Set it to keep this connection from being reused.
    pub(crate) fn broken_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.broken)
    }
}

/// A single-node or cluster connection.
pub(crate) enum Link {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}

impl managed::Manager for Manager {
    type Type = Conn;
    type Error = RedisError;

    async fn create(&self) -> Result<Conn, RedisError> {
        let epoch = self.epoch.load(Ordering::Acquire);
        let link = match &self.target {
            Target::Single { client, config } => Link::Single(
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?,
            ),
            Target::Cluster { client } => Link::Cluster(client.get_async_connection().await?),
        };
        Ok(Conn {
            link,
            epoch,
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    async fn recycle(&self, conn: &mut Conn, _: &Metrics) -> RecycleResult<RedisError> {
        if conn.broken.load(Ordering::Acquire) {
            Err(RecycleError::message("a request on it timed out; replaced"))
        } else if conn.epoch != self.epoch.load(Ordering::Acquire) {
            Err(RecycleError::message(
                "opened before a connection failure; replaced",
            ))
        } else {
            Ok(())
        }
    }
}

pub(crate) type Pool = managed::Pool<Manager>;

//! A few shared multiplexed connections, reused without a round trip.
//!
//! A redis-rs connection (single node or cluster) is multiplexed: clones of
//! it send over one socket, and requests that are in flight at the same time
//! leave in one write and come back in one read. So the store keeps a small
//! fixed set of slots (`pool_size`), each holding at most one live
//! connection, and hands every operation a clone of the next slot's
//! connection (round robin): no checkout, no waiting for a free connection,
//! no health-check round trip. A slot's connection is replaced, on the next
//! operation that picks the slot, when
//! - a connection-level failure (refused, reset, closed) happened anywhere
//!   since it was opened: an *epoch* counter that every such failure bumps,
//!   so after a restart or failover every stale socket is replaced at once;
//! - or a request on it timed out or broke the protocol (it is marked
//!   *broken*), so a black-holed socket is never reused.
//!
//! Sockets are opened with `TCP_NODELAY` (see `lib.rs`), so a small request
//! never waits for the previous one's acknowledgement.
//!
//! The hot path stays one round trip per operation, and costs a mutex
//! (uncontended in practice) and the clone of a connection handle.
//!
//! Slots belong to the tokio runtime that uses them: each runtime that
//! operates on the store gets its own `pool_size` slots, opened (and so
//! driven: a redis-rs connection's I/O runs in a task spawned where it was
//! opened) on that runtime. An application with one runtime sees one set;
//! one with a single-threaded runtime per core (as `aci serve --http`)
//! keeps each request's Redis traffic on the thread that serves it, instead
//! of waking another core's runtime for every reply, and never uses a
//! connection whose runtime has stopped. A group is kept for the store's
//! life (runtime ids are never reused, so a stopped runtime's group is just
//! never used again): an application that starts runtimes without end
//! should give each its own store.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

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

/// A single-node or cluster connection handle (cheap to clone; clones share
/// the socket).
#[derive(Clone)]
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

/// One operation's handle on a pooled connection.
pub(crate) struct Conn {
    pub(crate) link: Link,
    broken: Arc<AtomicBool>,
}

impl Conn {
    /// Keeps this connection from being handed out again.
    pub(crate) fn mark_broken(&self) {
        self.broken.store(true, Ordering::Release);
    }

    /// The flag [`mark_broken`](Self::mark_broken) sets, for a caller that
    /// must set it after the handle is gone (a timed-out operation).
    pub(crate) fn broken_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.broken)
    }
}

/// A connection as a slot holds it.
#[derive(Clone)]
struct Live {
    link: Link,
    epoch: u64,
    broken: Arc<AtomicBool>,
}

#[derive(Default)]
struct Slot {
    live: Mutex<Option<Live>>,
    /// Held while the slot connects, so concurrent operations on an empty
    /// slot open one connection, not one each.
    connecting: tokio::sync::Mutex<()>,
}

/// One runtime's slots, taken in turn.
struct Group {
    /// The runtime they belong to (`None`: operations outside any runtime,
    /// which the store does not make, kept for completeness).
    runtime: Option<tokio::runtime::Id>,
    slots: Box<[Slot]>,
    next: AtomicUsize,
}

/// The slot groups and the epoch that retires their connections.
pub(crate) struct Pool {
    target: Target,
    size: usize,
    /// One group per runtime that has used the store, in first-use order
    /// (a handful: a lookup is a read lock and a short scan).
    groups: RwLock<Vec<Arc<Group>>>,
    epoch: AtomicU64,
}

impl Pool {
    /// `size` slots (at least one) per runtime for `target`; connects
    /// lazily.
    pub(crate) fn new(target: Target, size: usize) -> Self {
        Self {
            target,
            size: size.max(1),
            groups: RwLock::new(Vec::new()),
            epoch: AtomicU64::new(0),
        }
    }

    /// The current runtime's group, made on its first use.
    fn group(&self) -> Arc<Group> {
        let runtime = tokio::runtime::Handle::try_current()
            .ok()
            .map(|handle| handle.id());
        let find = |groups: &[Arc<Group>]| {
            groups
                .iter()
                .find(|group| group.runtime == runtime)
                .map(Arc::clone)
        };
        if let Some(group) = find(&read(&self.groups)) {
            return group;
        }
        let mut groups = write(&self.groups);
        if let Some(group) = find(&groups) {
            return group;
        }
        let group = Arc::new(Group {
            runtime,
            slots: (0..self.size).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
        });
        groups.push(Arc::clone(&group));
        group
    }

    /// Retires every connection opened so far.
    pub(crate) fn retire_all(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// A handle on the next slot's connection, opening one when the slot is
    /// empty or its connection is retired or broken.
    ///
    /// # Errors
    /// The driver's error when a connection cannot be opened.
    pub(crate) async fn get(&self) -> Result<Conn, RedisError> {
        let group = self.group();
        let index = group.next.fetch_add(1, Ordering::Relaxed) % group.slots.len();
        let slot = &group.slots[index];
        if let Some(conn) = self.usable(slot) {
            return Ok(conn);
        }
        let _connecting = slot.connecting.lock().await;
        // Another operation may have connected while this one waited.
        if let Some(conn) = self.usable(slot) {
            return Ok(conn);
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let link = match &self.target {
            Target::Single { client, config } => Link::Single(
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?,
            ),
            Target::Cluster { client } => Link::Cluster(client.get_async_connection().await?),
        };
        let live = Live {
            link,
            epoch,
            broken: Arc::new(AtomicBool::new(false)),
        };
        let conn = Conn {
            link: live.link.clone(),
            broken: Arc::clone(&live.broken),
        };
        *lock(&slot.live) = Some(live);
        Ok(conn)
    }

    fn usable(&self, slot: &Slot) -> Option<Conn> {
        let live = lock(&slot.live);
        let live = live.as_ref()?;
        if live.broken.load(Ordering::Acquire) || live.epoch != self.epoch.load(Ordering::Acquire) {
            return None;
        }
        Some(Conn {
            link: live.link.clone(),
            broken: Arc::clone(&live.broken),
        })
    }
}

/// The slot's state is a plain value: a panic elsewhere cannot leave it
/// half-written, so a poisoned lock is still good.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The group list is only ever pushed to whole: a poisoned lock is still good.
fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn unreachable_pool(size: usize) -> Pool {
        // Port 1 on loopback: nothing listens, connecting fails at once.
        let client = Client::open("redis://127.0.0.1:1").unwrap();
        Pool::new(
            Target::Single {
                client,
                config: AsyncConnectionConfig::new(),
            },
            size,
        )
    }

    #[tokio::test]
    async fn a_failed_connect_leaves_the_slot_empty() {
        let pool = unreachable_pool(2);
        assert!(pool.get().await.is_err());
        let group = pool.group();
        assert!(group.slots.iter().all(|slot| lock(&slot.live).is_none()));
    }

    #[tokio::test]
    async fn a_zero_size_still_has_one_slot() {
        assert_eq!(unreachable_pool(0).group().slots.len(), 1);
    }

    #[test]
    fn each_runtime_has_its_own_slots() {
        let pool = Arc::new(unreachable_pool(3));
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
        };
        let (one, two) = (runtime(), runtime());
        let a = one.block_on(async { pool.group() });
        let again = one.block_on(async { pool.group() });
        let b = two.block_on(async { pool.group() });
        assert!(Arc::ptr_eq(&a, &again));
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!((a.slots.len(), b.slots.len()), (3, 3));
        // A runtime used from several threads is one runtime.
        let shared = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let groups: Vec<_> = (0..8)
            .map(|_| {
                let pool = Arc::clone(&pool);
                shared.spawn(async move { pool.group() })
            })
            .collect();
        let groups: Vec<_> = groups
            .into_iter()
            .map(|g| shared.block_on(g).unwrap())
            .collect();
        assert!(groups.iter().all(|g| Arc::ptr_eq(g, &groups[0])));
        assert_eq!(read(&pool.groups).len(), 3);
    }
}

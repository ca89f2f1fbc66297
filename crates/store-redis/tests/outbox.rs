//! The outbox conformance scenarios against a real Redis and a real 3-node
//! Redis Cluster, plus what only Redis has: one stream per hash slot, found
//! by `SCAN` on every primary, never trimmed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use invocation_core::conformance::{OutboxHarness, fresh_run_id, new_invocation};
use invocation_core::{Clock, Finalization, InvocationStore, Outbox, ReadyEvidence, SystemClock};
use store_redis::testing::{shared_cluster_urls, shared_url, unique_prefix};
use store_redis::{RedisConfig, RedisStore};

/// Redis keeps real time: the reclaim scenario sleeps past the idle time.
struct RedisOutboxHarness {
    cluster: bool,
}

impl RedisOutboxHarness {
    fn store(&self) -> RedisStore {
        let config = if self.cluster {
            RedisConfig::cluster(shared_cluster_urls())
        } else {
            RedisConfig::single(shared_url())
        };
        RedisStore::new(config.key_prefix(unique_prefix()).outbox(true)).expect("store")
    }
}

#[async_trait]
impl OutboxHarness for RedisOutboxHarness {
    async fn fresh(&self) -> (Arc<dyn InvocationStore>, Arc<dyn Outbox>) {
        let store = self.store();
        let outbox = store.outbox();
        (Arc::new(store), Arc::new(outbox))
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Arc::new(SystemClock)
    }

    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
}

mod single_node {
    use super::*;
    invocation_core::outbox_conformance_tests!(RedisOutboxHarness { cluster: false });
}

mod cluster {
    use super::*;
    invocation_core::outbox_conformance_tests!(RedisOutboxHarness { cluster: true });
}

fn ready() -> Finalization {
    Finalization::Ready {
        evidence: ReadyEvidence::NoEvidence,
        raw_json: "{}".into(),
        agent_result_json: "{}".into(),
        redactions: Default::default(),
        replayed_from: None,
        finished_at: SystemClock.now(),
        timings: None,
    }
}

/// Runs spread over every primary of the cluster: their entries are found
/// on all of them, and each run's stream is in the run's slot (the scripts
/// would fail with CROSSSLOT otherwise).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_streams_are_found_on_every_primary() {
    let store = RedisOutboxHarness { cluster: true }.store();
    let outbox = store.outbox();
    let clock = SystemClock;
    let mut expected = BTreeSet::new();
    for _ in 0..24 {
        let run = fresh_run_id();
        let new = new_invocation(&clock, &run, "c1", "tool_a", "x");
        store.create(new.clone()).await.unwrap();
        store.finalize(&new.key, ready()).await.unwrap();
        expected.insert(new.key);
    }
    let streams = outbox.streams().await.unwrap();
    assert!(streams.len() > 1, "24 runs land in more than one slot");
    assert_eq!(drain(&outbox, 7).await, expected);
    assert_eq!(outbox.backlog().await.unwrap().pending, 0);
}

/// A store with its outbox off (the default) writes no stream at all.
#[tokio::test]
async fn the_outbox_is_off_by_default() {
    let store =
        RedisStore::new(RedisConfig::single(shared_url()).key_prefix(unique_prefix())).unwrap();
    let run = fresh_run_id();
    let new = new_invocation(&SystemClock, &run, "c1", "tool_a", "x");
    store.create(new.clone()).await.unwrap();
    store.finalize(&new.key, ready()).await.unwrap();
    assert!(store.outbox().streams().await.unwrap().is_empty());
    assert_eq!(store.outbox().backlog().await.unwrap().pending, 0);
}

/// Concurrent takes of one process (the archivers of one `aci archive`
/// share an outbox, and its scans: see `SharedScan`'s test for the sharing)
/// find the outbox empty together, and then find a record finalized before
/// they asked, although the last scan is younger than the refresh time:
/// exactly one of them takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_takes_find_what_was_finalized_before_they_asked() {
    let store = RedisOutboxHarness { cluster: false }.store();
    let outbox = store.outbox();
    let takes = four_takes(&outbox).await;
    assert!(takes.iter().all(|t| t.as_ref().unwrap().is_empty()));

    let run = fresh_run_id();
    let new = new_invocation(&SystemClock, &run, "c1", "tool_a", "x");
    store.create(new.clone()).await.unwrap();
    store.finalize(&new.key, ready()).await.unwrap();
    let takes = four_takes(&outbox).await;
    let taken: Vec<_> = takes.into_iter().flat_map(Result::unwrap).collect();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].key, new.key);
}

/// Four takes at once (polled in turn on this task), as the four archivers
/// of one `aci archive` make them.
async fn four_takes(
    outbox: &store_redis::RedisOutbox,
) -> Vec<Result<Vec<invocation_core::OutboxEntry>, invocation_core::StoreError>> {
    let take = |consumer: &'static str| outbox.take(consumer, 10, Duration::from_secs(60));
    let (a, b, c, d) = tokio::join!(take("c0"), take("c1"), take("c2"), take("c3"));
    vec![a, b, c, d]
}

/// Takes of one process start where the last one stopped among the
/// streams: takes made before any acknowledgement (the loops of one `aci
/// archive` at once) each read streams the others did not, every take a
/// full batch, and together they take everything.
#[tokio::test]
async fn each_take_moves_past_the_streams_it_read() {
    const RUNS: usize = 8;
    // Runs whose streams are all different (two random runs share a slot
    // once in about 600 stores): another store when they are not.
    let (outbox, expected) = loop {
        let store = RedisOutboxHarness { cluster: false }.store();
        let mut expected = BTreeSet::new();
        for _ in 0..RUNS {
            let run = fresh_run_id();
            for call in ["c1", "c2", "c3"] {
                let new = new_invocation(&SystemClock, &run, call, "tool_a", "x");
                store.create(new.clone()).await.unwrap();
                store.finalize(&new.key, ready()).await.unwrap();
                expected.insert(new.key);
            }
        }
        let outbox = store.outbox();
        if outbox.streams().await.unwrap().len() == RUNS {
            break (outbox, expected);
        }
    };
    let mut got = BTreeSet::new();
    for take in 0..RUNS / 2 {
        let batch = outbox.take("w", 6, Duration::from_secs(60)).await.unwrap();
        assert_eq!(batch.len(), 6, "take {take} reads two streams no take read");
        for entry in batch {
            assert!(got.insert(entry.key), "taken twice");
        }
    }
    assert_eq!(got, expected);
}

/// On a node holding more than 16,384 keys the streams are found by their
/// names, not scanned for: the same streams while they hold entries, none
/// once drained (a scan would still list them, empty).
#[tokio::test]
async fn a_node_with_many_keys_finds_the_streams_by_name() {
    let server = store_redis::testing::RedisServer::spawn().unwrap();
    let store = RedisStore::new(
        RedisConfig::single(server.url())
            .key_prefix(unique_prefix())
            .outbox(true),
    )
    .unwrap();
    let outbox = store.outbox();
    for _ in 0..8 {
        let run = fresh_run_id();
        let new = new_invocation(&SystemClock, &run, "c1", "tool_a", "x");
        store.create(new.clone()).await.unwrap();
        store.finalize(&new.key, ready()).await.unwrap();
    }
    let scanned = outbox.streams().await.unwrap();
    assert!(!scanned.is_empty());
    assert_eq!(outbox.streams_by_name().await.unwrap(), scanned);

    // Other keys, enough to cross the line.
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    fill_keyspace(&mut conn).await;
    assert_eq!(outbox.streams().await.unwrap(), scanned, "found by name");

    assert_eq!(drain(&outbox, 3).await.len(), 8);
    assert!(outbox.streams().await.unwrap().is_empty(), "drained");
    assert_eq!(outbox.backlog().await.unwrap().pending, 0);
}

/// Sets 17,000 keys that are not the store's: more than the 16,384 possible
/// stream names, the line past which a single node's streams are looked
/// for by name.
async fn fill_keyspace(conn: &mut redis::aio::MultiplexedConnection) {
    let mut filler = redis::pipe();
    for i in 0..17_000 {
        filler
            .cmd("SET")
            .arg(format!("other:{i}"))
            .arg("x")
            .ignore();
    }
    let () = filler.query_async(conn).await.unwrap();
}

/// Takes `per_take` entries at a time and acknowledges them until a take
/// comes back empty; the keys taken.
async fn drain(
    outbox: &store_redis::RedisOutbox,
    per_take: usize,
) -> BTreeSet<invocation_core::InvocationKey> {
    let mut got = BTreeSet::new();
    loop {
        let batch = outbox
            .take("w", per_take, Duration::from_secs(60))
            .await
            .unwrap();
        if batch.is_empty() {
            return got;
        }
        outbox.ack(&batch).await.unwrap();
        got.extend(batch.into_iter().map(|e| e.key));
    }
}

/// Finalizes one READY record in a run of its own.
async fn finalize_one(store: &RedisStore) -> invocation_core::InvocationKey {
    let run = fresh_run_id();
    let new = new_invocation(&SystemClock, &run, "c1", "tool_a", "x");
    store.create(new.clone()).await.unwrap();
    store.finalize(&new.key, ready()).await.unwrap();
    new.key
}

/// `INFO commandstats`' count of `command` calls (0 when never called).
async fn calls_of(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let head = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&head))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// On a single node the finalizing scripts mark their stream busy, and a
/// take reads that set: over a keyspace of more than 16,384 keys, a take
/// after the store's first look costs a handful of `XLEN`s, not one per
/// possible stream, and a drained stream leaves the set (the set's key is
/// gone once every stream is empty).
#[tokio::test]
async fn a_single_node_reads_the_busy_set_not_the_keyspace() {
    let server = store_redis::testing::RedisServer::spawn().unwrap();
    let prefix = unique_prefix();
    let store = RedisStore::new(
        RedisConfig::single(server.url())
            .key_prefix(&prefix)
            .outbox(true),
    )
    .unwrap();
    let outbox = store.outbox();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    fill_keyspace(&mut conn).await;
    // The store's first look goes over every possible stream.
    assert!(
        outbox
            .take("w", 10, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );

    let mut expected = BTreeSet::new();
    for _ in 0..3 {
        expected.insert(finalize_one(&store).await);
    }
    let busy_key = format!("{prefix}:outbox-busy");
    let members: BTreeSet<String> = redis::cmd("SMEMBERS")
        .arg(&busy_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        members,
        outbox.streams().await.unwrap().into_iter().collect()
    );

    let () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(drain(&outbox, 2).await, expected);
    let xlens = calls_of(&mut conn, "xlen").await;
    assert!(xlens <= 12, "{xlens} XLENs for three streams");
    let exists: bool = redis::cmd("EXISTS")
        .arg(&busy_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!exists, "a drained stream leaves the busy set");
    assert_eq!(outbox.backlog().await.unwrap().pending, 0);
}

/// A record whose stream is not in the busy set (its writer did not mark
/// it: an `aci` from before the set) is found by a store's first look at
/// every stream, which adds the stream to the set; a store that looked less
/// than five minutes ago finds it only at its next such look.
#[tokio::test]
async fn a_stream_missing_from_the_busy_set_is_found_by_the_first_take() {
    let prefix = unique_prefix();
    let store_of = || {
        RedisStore::new(
            RedisConfig::single(shared_url())
                .key_prefix(&prefix)
                .outbox(true),
        )
        .unwrap()
    };
    let looked = store_of();
    assert!(
        looked
            .outbox()
            .take("w", 10, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    let key = finalize_one(&looked).await;
    let client = redis::Client::open(shared_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let busy_key = format!("{prefix}:outbox-busy");
    let () = redis::cmd("DEL")
        .arg(&busy_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        looked
            .outbox()
            .take("w", 10, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty(),
        "not marked busy, not looked for yet"
    );

    let outbox = store_of().outbox();
    let batch = outbox.take("w", 10, Duration::from_secs(60)).await.unwrap();
    assert_eq!(batch.iter().map(|e| &e.key).collect::<Vec<_>>(), [&key]);
    let members: Vec<String> = redis::cmd("SMEMBERS")
        .arg(&busy_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(members, outbox.streams().await.unwrap(), "marked busy now");
    outbox.ack(&batch).await.unwrap();
    assert_eq!(outbox.backlog().await.unwrap().pending, 0);
}

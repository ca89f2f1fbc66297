//! The servers of one test process: the single Redis and the 3-node
//! cluster named by the environment or spawned once on first use, the
//! TLS-only server, and stores on them with fresh key prefixes.
//!
//! They live in statics, which never drop: the watchdog of each spawned
//! server (see `server`) kills it when the process exits.

use std::sync::OnceLock;

use super::cluster::RedisCluster;
use super::keys::unique_prefix;
use super::server::RedisServer;
use super::{REDIS_CLUSTER_URLS_ENV, REDIS_URL_ENV};
use crate::{RedisConfig, RedisStore};

enum Shared<T> {
    Env(T),
    /// The value, and the servers behind it, held so they live as long as
    /// the process.
    Spawned(T, #[allow(dead_code)] Vec<RedisServer>),
    Failed(String),
}

impl<T: Clone> Shared<T> {
    fn get(&self, what: &str) -> T {
        match self {
            Self::Env(value) | Self::Spawned(value, _) => value.clone(),
            Self::Failed(why) => panic!("store-redis tests need {what}: {why}"),
        }
    }
}

/// The URL of this test binary's single Redis: `REDIS_URL`, or a throwaway
/// `redis-server` spawned on first use and killed when the process exits.
///
/// # Panics
/// With a clear message when `REDIS_URL` is unset and no `redis-server` can
/// be spawned.
#[must_use]
pub fn shared_url() -> String {
    static SHARED: OnceLock<Shared<String>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if let Some(url) = env_value(REDIS_URL_ENV) {
                return Shared::Env(url);
            }
            match RedisServer::builder().spawn() {
                Ok(server) => Shared::Spawned(server.url(), vec![server]),
                Err(error) => Shared::Failed(error.to_string()),
            }
        })
        .get("a Redis server")
}

/// The node URLs of this test binary's Redis Cluster: `REDIS_CLUSTER_URLS`,
/// or a throwaway 3-node cluster spawned on first use and killed when the
/// process exits.
///
/// # Panics
/// With a clear message when `REDIS_CLUSTER_URLS` is unset and no cluster can
/// be spawned.
#[must_use]
pub fn shared_cluster_urls() -> Vec<String> {
    static SHARED: OnceLock<Shared<Vec<String>>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            if let Some(urls) = env_value(REDIS_CLUSTER_URLS_ENV) {
                let urls: Vec<String> = urls
                    .split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .map(str::to_owned)
                    .collect();
                return Shared::Env(urls);
            }
            match RedisCluster::spawn(3) {
                Ok(cluster) => Shared::Spawned(cluster.urls(), cluster.into_nodes()),
                Err(error) => Shared::Failed(error.to_string()),
            }
        })
        .get("a Redis Cluster")
}

fn env_value(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// A store on the shared single Redis with a fresh random key prefix.
///
/// Build one per test: connections belong to the Tokio runtime that opened
/// them, and every `#[tokio::test]` has its own runtime.
///
/// # Panics
/// When no Redis can be had (see [`shared_url`]).
#[must_use]
pub fn shared_store() -> RedisStore {
    store_for(RedisConfig::single(shared_url()).key_prefix(unique_prefix()))
}

/// The per-process TLS-only server (`rediss://`, spawned on first use,
/// trusting [`TestPki::shared`](super::TestPki::shared)'s CA, clients not asked for certificates).
///
/// # Panics
/// When it cannot be spawned (there is no environment override for TLS).
#[must_use]
pub fn shared_tls_server() -> &'static RedisServer {
    static SHARED: OnceLock<Result<RedisServer, String>> = OnceLock::new();
    match SHARED.get_or_init(|| {
        RedisServer::builder()
            .tls()
            .spawn()
            .map_err(|error| error.to_string())
    }) {
        Ok(server) => server,
        Err(why) => panic!("store-redis TLS tests need a TLS redis-server: {why}"),
    }
}

/// A store on [`shared_tls_server`] over `rediss://`, trusting the test CA,
/// with a fresh random key prefix.
///
/// # Panics
/// When no TLS server can be had.
#[must_use]
pub fn shared_tls_store() -> RedisStore {
    store_for(shared_tls_server().config().key_prefix(unique_prefix()))
}

/// A store on the shared Redis Cluster with a fresh random key prefix.
///
/// # Panics
/// When no cluster can be had (see [`shared_cluster_urls`]).
#[must_use]
pub fn shared_cluster_store() -> RedisStore {
    store_for(RedisConfig::cluster(shared_cluster_urls()).key_prefix(unique_prefix()))
}

fn store_for(config: RedisConfig) -> RedisStore {
    match RedisStore::new(config) {
        Ok(store) => store,
        Err(error) => panic!("the test store could not be built: {error}"),
    }
}

//! Test support (feature `testing`): real Redis servers for tests and
//! benchmarks, never a mock.
//!
//! - [`shared_url`] / [`shared_cluster_urls`]: the Redis of this test binary.
//!   `REDIS_URL` (and `REDIS_CLUSTER_URLS`, comma-separated) when set;
//!   otherwise a throwaway `redis-server` (a 3-node cluster) spawned once per
//!   process on free 127.0.0.1 ports, `--save '' --appendonly no`, in a temp
//!   dir. With neither a URL nor a `redis-server` binary they panic with a
//!   clear message: Redis tests fail, they never skip.
//! - [`RedisServer`]: a dedicated server a test may stop, pause, restart on
//!   the same port, protect with a password, or serve over TLS only
//!   ([`RedisServerBuilder::tls`], [`RedisServerBuilder::tls_mutual`]).
//! - [`TestPki`]: a throwaway CA with a server certificate (`127.0.0.1`,
//!   `localhost`) and a client certificate, made in-process with `rcgen` (no
//!   `openssl` binary). TLS servers write it into their temp dir;
//!   [`RedisServer::config`] trusts it. [`shared_tls_store`] is a store on a
//!   per-process TLS server.
//! - [`Admin`]: a side connection for what tests inspect (`PTTL`, `EXISTS`,
//!   `SCRIPT FLUSH`, `INFO commandstats`, `MEMORY USAGE`).
//! - [`monitor_port`] and [`parse_command_calls`]: the commands a workload
//!   sent, by `MONITOR` or `INFO commandstats`.
//! - [`record_key`] / [`run_keys`]: the keys a test inspects, spelled by the
//!   store's own key layout.
//!
//! Every spawned server is killed by its PID: on drop, and, for the
//! per-process servers that live in statics (which never drop), by a watchdog
//! `sh` whose stdin is a pipe held by the test process. When the process
//! exits, however it exits, the pipe closes, the watchdog's `read` returns and
//! it kills the server and removes its directory. Tests isolate themselves
//! with random run ids and [`unique_prefix`]; nothing is ever flushed.
//!
//! One module per job, everything re-exported here, each using only those
//! before it: `pki` (certificates), `monitor` (command counting), `keys`
//! (prefixes, ids and key names), `admin` (the side connection), `server`
//! (the process supervisor), `cluster` (cluster bootstrap), `shared` (the
//! per-process servers and stores).

mod admin;
mod cluster;
mod keys;
mod monitor;
mod pki;
mod server;
mod shared;

pub use admin::Admin;
pub use cluster::RedisCluster;
pub use keys::{record_key, run_keys, unique_id, unique_prefix};
pub use monitor::{Monitor, MonitorCounts, monitor_port, parse_command_calls};
pub use pki::TestPki;
pub use server::{RedisServer, RedisServerBuilder, ServerTls, redis_server_binary};
pub use shared::{
    shared_cluster_store, shared_cluster_urls, shared_store, shared_tls_server, shared_tls_store,
    shared_url,
};

/// Environment variable naming an existing single Redis to test against.
pub const REDIS_URL_ENV: &str = "REDIS_URL";
/// Environment variable naming existing Redis Cluster nodes, comma-separated.
pub const REDIS_CLUSTER_URLS_ENV: &str = "REDIS_CLUSTER_URLS";

/// Commands the two scripts run inside Redis. `INFO commandstats` counts
/// these as well; they are not round trips.
pub const SCRIPT_INTERNAL_COMMANDS: &[&str] = crate::scripts::SCRIPT_INTERNAL_COMMANDS;

/// Why a server could not be provided.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TestSupportError(String);

impl TestSupportError {
    fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

type Outcome<T> = Result<T, TestSupportError>;

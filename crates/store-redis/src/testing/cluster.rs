//! Cluster bootstrap: spawns cluster nodes, joins them with
//! `redis-cli --cluster create` and waits until every node reports
//! `cluster_state:ok`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::admin::sync_query;
use super::pki::CA_CERT_FILE;
use super::server::{READY_TIMEOUT, RedisServer, find_on_path, with_test_tls};
use super::{Outcome, TestSupportError};
use crate::RedisConfig;

/// A throwaway Redis Cluster of primaries only.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Spawns `size` cluster nodes, joins them with `redis-cli --cluster
    /// create … --cluster-replicas 0 --cluster-yes`, and waits until every
    /// node reports `cluster_state:ok`.
    ///
    /// # Errors
    /// When a node does not start, `redis-cli` is missing, or the cluster
    /// does not become ok.
    pub fn spawn(size: usize) -> Outcome<Self> {
        Self::spawn_with(size, false)
    }

    /// As [`spawn`](Self::spawn), every node serving TLS only, on its client
    /// port and its cluster bus (see [`RedisServerBuilder::tls`](super::RedisServerBuilder::tls)).
    ///
    /// # Errors
    /// As [`spawn`](Self::spawn).
    pub fn spawn_tls(size: usize) -> Outcome<Self> {
        Self::spawn_with(size, true)
    }

    fn spawn_with(size: usize, tls: bool) -> Outcome<Self> {
        let mut nodes = Vec::with_capacity(size);
        for _ in 0..size {
            let builder = RedisServer::builder().cluster_node();
            let builder = if tls { builder.tls() } else { builder };
            nodes.push(builder.spawn()?);
        }
        let redis_cli = find_on_path("redis-cli").ok_or_else(|| {
            TestSupportError::new(
                "redis-cli is needed to form a cluster (apt-get install redis-tools)",
            )
        })?;
        let mut command = Command::new(redis_cli);
        if let Some(first) = nodes.first().filter(|_| tls) {
            command
                .arg("--tls")
                .arg("--cacert")
                .arg(first.dir().join(CA_CERT_FILE));
        }
        let output = command
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(RedisServer::node_address))
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| TestSupportError::new(format!("redis-cli did not run: {e}")))?;
        if !output.status.success() {
            return Err(TestSupportError::new(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .chain(String::from_utf8_lossy(&output.stderr).lines())
                    .filter(|l| l.contains("ERR") || l.contains("rror"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            )));
        }
        let cluster = Self { nodes };
        cluster.wait_ok()?;
        Ok(cluster)
    }

    fn wait_ok(&self) -> Outcome<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let all_ok = self.nodes.iter().all(|node| {
                sync_query::<String>(&node.url(), &["CLUSTER", "INFO"]).is_ok_and(|info| {
                    info.contains("cluster_state:ok")
                        && info.contains("cluster_slots_ok:16384")
                        && info.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
                })
            });
            if all_ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestSupportError::new(
                    "the cluster did not reach cluster_state:ok",
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The node URLs.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A store configuration for it (see [`RedisServer::config`]).
    ///
    /// # Panics
    /// When the test PKI cannot be made (it was, for the nodes to start).
    #[must_use]
    pub fn config(&self) -> RedisConfig {
        let tls = self.nodes.first().and_then(RedisServer::tls_mode);
        with_test_tls(RedisConfig::cluster(self.urls()), tls)
    }

    /// The nodes.
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Its nodes, which the caller now owns (they die when dropped).
    pub(super) fn into_nodes(self) -> Vec<RedisServer> {
        self.nodes
    }
}

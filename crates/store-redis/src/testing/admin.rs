//! The admin client: a side connection (single node or cluster, plain or
//! TLS) for what tests inspect, and [`sync_query`]'s blocking one-shot
//! queries the supervisor polls with.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::monitor::parse_command_calls;
use super::pki::TestPki;
use super::{Outcome, TestSupportError};
use crate::pool::Link;

/// A driver client for a test server: `rediss://` trusts the shared test CA
/// and presents its client certificate when asked.
fn test_client(url: &str) -> Outcome<redis::Client> {
    let client = if url.starts_with("rediss://") {
        crate::tls::ensure_crypto_provider();
        redis::Client::build_with_tls(url, TestPki::shared()?.client_certificates())
    } else {
        redis::Client::open(url)
    };
    client.map_err(|_| TestSupportError::new("bad test server URL"))
}

/// `args` as one command (`PING` when empty).
fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args.first().copied().unwrap_or("PING"));
    for arg in args.iter().skip(1) {
        cmd.arg(*arg);
    }
    cmd
}

/// One blocking query on a fresh connection (500 ms to connect).
pub(super) fn sync_query<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> Outcome<T> {
    let client = test_client(url)?;
    let mut connection = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .map_err(|e| TestSupportError::new(format!("connect: {:?}", e.kind())))?;
    command(args)
        .query::<T>(&mut connection)
        .map_err(|e| TestSupportError::new(format!("query: {:?}", e.kind())))
}

/// A side connection (single node or cluster) for what tests inspect.
pub struct Admin {
    link: Link,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

impl Admin {
    /// Connects to a single node. A `rediss://` URL trusts the test CA and
    /// presents the test client certificate when asked.
    ///
    /// # Errors
    /// When it cannot connect.
    pub async fn connect(url: &str) -> Outcome<Self> {
        let client = test_client(url)?;
        let connection = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| TestSupportError::new(format!("admin connect: {:?}", e.kind())))?;
        Ok(Self {
            link: Link::Single(connection),
        })
    }

    /// Connects to a cluster (`rediss://` as in [`connect`](Self::connect)).
    ///
    /// # Errors
    /// When it cannot connect.
    pub async fn connect_cluster(urls: &[String]) -> Outcome<Self> {
        let mut builder =
            redis::cluster::ClusterClientBuilder::new(urls.iter().map(String::as_str));
        if urls.iter().any(|url| url.starts_with("rediss://")) {
            crate::tls::ensure_crypto_provider();
            builder = builder.certs(TestPki::shared()?.client_certificates());
        }
        let client = builder
            .build()
            .map_err(|_| TestSupportError::new("bad admin URLs"))?;
        let connection = client
            .get_async_connection()
            .await
            .map_err(|e| TestSupportError::new(format!("admin connect: {:?}", e.kind())))?;
        Ok(Self {
            link: Link::Cluster(connection),
        })
    }

    async fn query<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> Outcome<T> {
        let value = self
            .link
            .req_packed_command(&command(args))
            .await
            .map_err(|e| TestSupportError::new(format!("admin query: {:?}", e.kind())))?;
        redis::from_redis_value(value)
            .map_err(|_| TestSupportError::new("admin query: unexpected reply"))
    }

    /// `PTTL key`: milliseconds left, -1 without TTL, -2 when missing.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn pttl(&mut self, key: &str) -> Outcome<i64> {
        self.query(&["PTTL", key]).await
    }

    /// Whether `key` exists.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn exists(&mut self, key: &str) -> Outcome<bool> {
        self.query::<i64>(&["EXISTS", key]).await.map(|n| n == 1)
    }

    /// `HGET key field`.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn hget(&mut self, key: &str, field: &str) -> Outcome<Option<String>> {
        self.query(&["HGET", key, field]).await
    }

    /// `SCRIPT FLUSH` (on every node of a cluster).
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn script_flush(&mut self) -> Outcome<()> {
        self.query::<redis::Value>(&["SCRIPT", "FLUSH"])
            .await
            .map(drop)
    }

    /// `MEMORY USAGE key SAMPLES 0`: bytes the key and its value take.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn memory_usage(&mut self, key: &str) -> Outcome<Option<u64>> {
        self.query(&["MEMORY", "USAGE", key, "SAMPLES", "0"]).await
    }

    /// `CONFIG RESETSTAT` (single node).
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn reset_stats(&mut self) -> Outcome<()> {
        self.query::<redis::Value>(&["CONFIG", "RESETSTAT"])
            .await
            .map(drop)
    }

    /// `used_memory` from `INFO memory` (single node), in bytes.
    ///
    /// # Errors
    /// When Redis cannot be reached or the reply lacks it.
    pub async fn used_memory(&mut self) -> Outcome<u64> {
        let info: String = self.query(&["INFO", "memory"]).await?;
        info.lines()
            .find_map(|line| line.strip_prefix("used_memory:"))
            .and_then(|value| value.trim().parse().ok())
            .ok_or_else(|| TestSupportError::new("INFO memory has no used_memory"))
    }

    /// The server's version, from `INFO server`.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn server_version(&mut self) -> Outcome<String> {
        let info: String = self.query(&["INFO", "server"]).await?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_owned())
    }

    /// Calls per command from `INFO commandstats` (single node), e.g.
    /// `evalsha -> 2000`.
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn command_calls(&mut self) -> Outcome<BTreeMap<String, u64>> {
        let info: String = self.query(&["INFO", "commandstats"]).await?;
        Ok(parse_command_calls(&info))
    }
}

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
//!
//! Every spawned server is killed by its PID: on drop, and, for the
//! per-process servers that live in statics (which never drop), by a watchdog
//! `sh` whose stdin is a pipe held by the test process. When the process
//! exits, however it exits, the pipe closes, the watchdog's `read` returns and
//! it kills the server and removes its directory. Tests isolate themselves
//! with random run ids and [`unique_prefix`]; nothing is ever flushed.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use crate::pool::Link;
use crate::{RedisConfig, RedisStore};

/// Environment variable naming an existing single Redis to test against.
pub const REDIS_URL_ENV: &str = "REDIS_URL";
/// Environment variable naming existing Redis Cluster nodes, comma-separated.
pub const REDIS_CLUSTER_URLS_ENV: &str = "REDIS_CLUSTER_URLS";

/// Commands the two scripts run inside Redis. `INFO commandstats` counts
/// these as well; they are not round trips.
pub const SCRIPT_INTERNAL_COMMANDS: &[&str] = crate::scripts::SCRIPT_INTERNAL_COMMANDS;

const READY_TIMEOUT: Duration = Duration::from_secs(15);
const SPAWN_ATTEMPTS: usize = 5;

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

// ---------------------------------------------------------------------------
// Per-process shared servers.

enum Shared<T> {
    Env(T),
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
                Ok(cluster) => Shared::Spawned(cluster.urls(), cluster.nodes),
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
/// trusting [`TestPki::shared`]'s CA, clients not asked for certificates).
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

/// A key prefix no other test (or process) uses: `acitest-<16 hex digits>`.
#[must_use]
pub fn unique_prefix() -> String {
    format!("acitest-{:016x}", fastrand::u64(..))
}

/// A random identifier with `tag` in front, valid as a run or tool call id.
#[must_use]
pub fn unique_id(tag: &str) -> String {
    format!("{tag}-{:016x}", fastrand::u64(..))
}

/// The key of a record, per the documented layout.
#[must_use]
pub fn record_key(prefix: &str, run_id: &str, tool_call_id: &str) -> String {
    format!("{prefix}:{{{run_id}}}:inv:{tool_call_id}")
}

/// The per-run keys besides records: budget counters, run index, scopes.
#[must_use]
pub fn run_keys(prefix: &str, run_id: &str) -> [String; 3] {
    ["budget", "index", "scopes"].map(|suffix| format!("{prefix}:{{{run_id}}}:{suffix}"))
}

// ---------------------------------------------------------------------------
// Spawned servers.

/// Where the `redis-server` binary is, if anywhere on `PATH`.
#[must_use]
pub fn redis_server_binary() -> Option<PathBuf> {
    find_on_path("redis-server")
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// How to spawn a [`RedisServer`].
#[derive(Debug, Clone, Default)]
pub struct RedisServerBuilder {
    password: Option<String>,
    cluster: bool,
    port: Option<u16>,
    tls: Option<ServerTls>,
}

/// How a TLS [`RedisServer`] treats client certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerTls {
    /// TLS only (`--port 0 --tls-port`); clients are not asked for a
    /// certificate (`--tls-auth-clients no`).
    ServerOnly,
    /// TLS only, and every client must present a certificate issued by the
    /// test CA (`--tls-auth-clients yes`).
    Mutual,
}

impl RedisServerBuilder {
    /// Requires `password` (`--requirepass`); [`RedisServer::url`] carries it.
    #[must_use]
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Starts the server as a cluster node (`--cluster-enabled yes`).
    #[must_use]
    pub const fn cluster_node(mut self) -> Self {
        self.cluster = true;
        self
    }

    /// Listens on `port` instead of a free one.
    #[must_use]
    pub const fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Serves TLS only (`--port 0 --tls-port <port>`), with a certificate
    /// from [`TestPki::shared`] (SAN `127.0.0.1`, `localhost`) written into
    /// its temp dir; clients are not asked for certificates. A cluster node
    /// also speaks TLS on its bus (`--tls-cluster yes`).
    #[must_use]
    pub const fn tls(mut self) -> Self {
        self.tls = Some(ServerTls::ServerOnly);
        self
    }

    /// As [`tls`](Self::tls), and requires a client certificate issued by
    /// the test CA (`--tls-auth-clients yes`): mutual TLS.
    #[must_use]
    pub const fn tls_mutual(mut self) -> Self {
        self.tls = Some(ServerTls::Mutual);
        self
    }

    /// Spawns the server and waits until it answers `PING`.
    ///
    /// # Errors
    /// When there is no `redis-server` binary or it does not come up.
    pub fn spawn(self) -> Outcome<RedisServer> {
        let binary = redis_server_binary().ok_or_else(|| {
            TestSupportError::new(format!(
                "set {REDIS_URL_ENV} (and {REDIS_CLUSTER_URLS_ENV}) to a Redis, or install \
                 redis-server (apt-get install redis-server redis-tools)"
            ))
        })?;
        let mut last_error = TestSupportError::new("no attempt made");
        for _ in 0..SPAWN_ATTEMPTS {
            let port = match self.port {
                Some(port) => port,
                None => free_port(self.cluster)?,
            };
            let dir = tempfile::Builder::new()
                .prefix("aci-redis-")
                .tempdir()
                .map_err(|e| TestSupportError::new(format!("no temp dir: {e}")))?;
            if self.tls.is_some() {
                TestPki::shared()?.write_server_files(dir.path())?;
            }
            let mut server = RedisServer {
                binary: binary.clone(),
                port,
                password: self.password.clone(),
                cluster: self.cluster,
                tls: self.tls,
                dir,
                process: None,
            };
            match server.start() {
                Ok(()) => return Ok(server),
                Err(error) => last_error = error,
            }
            if self.port.is_some() {
                break;
            }
        }
        Err(last_error)
    }
}

/// A throwaway `redis-server` on 127.0.0.1, killed by its PID when dropped
/// (and by a watchdog when the test process exits).
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    port: u16,
    password: Option<String>,
    cluster: bool,
    tls: Option<ServerTls>,
    dir: tempfile::TempDir,
    process: Option<Process>,
}

#[derive(Debug)]
struct Process {
    server: Child,
    watchdog: Child,
}

impl RedisServer {
    /// How to spawn one.
    #[must_use]
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// A plain server on a free port.
    ///
    /// # Errors
    /// See [`RedisServerBuilder::spawn`].
    pub fn spawn() -> Outcome<Self> {
        Self::builder().spawn()
    }

    /// Its port.
    #[must_use]
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// `redis://[:password@]127.0.0.1:<port>`, `rediss://…` for a TLS
    /// server.
    #[must_use]
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.password {
            Some(password) => format!("{scheme}://:{password}@127.0.0.1:{}", self.port),
            None => format!("{scheme}://127.0.0.1:{}", self.port),
        }
    }

    /// How it serves TLS, if it does.
    #[must_use]
    pub const fn tls_mode(&self) -> Option<ServerTls> {
        self.tls
    }

    /// A store configuration for it: [`url`](Self::url), and for a TLS
    /// server the test CA as root (plus the test client certificate for
    /// mutual TLS).
    ///
    /// # Panics
    /// When the test PKI cannot be made (it was, for the server to start).
    #[must_use]
    pub fn config(&self) -> RedisConfig {
        with_test_tls(RedisConfig::single(self.url()), self.tls)
    }

    /// The PID of the running server.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.server.id())
    }

    /// Kills the server (SIGKILL, by PID) and waits for it to exit: a crash,
    /// as seen by clients.
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            // The watchdog first, so it never kills a PID that was reused.
            let _ = process.watchdog.kill();
            let _ = process.watchdog.wait();
            let _ = process.server.kill();
            let _ = process.server.wait();
        }
    }

    /// Starts the server again on the same port.
    ///
    /// # Errors
    /// When it does not come up.
    pub fn restart(&mut self) -> Outcome<()> {
        self.stop();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match self.start() {
                Ok(()) => return Ok(()),
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    ///
    /// # Errors
    /// When the signal could not be sent.
    pub fn pause(&self) -> Outcome<()> {
        self.signal("-STOP")
    }

    /// Thaws a paused server (SIGCONT).
    ///
    /// # Errors
    /// When the signal could not be sent.
    pub fn resume(&self) -> Outcome<()> {
        self.signal("-CONT")
    }

    fn signal(&self, signal: &str) -> Outcome<()> {
        let pid = self
            .pid()
            .ok_or_else(|| TestSupportError::new("the server is not running"))?;
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .map_err(|e| TestSupportError::new(format!("kill {signal}: {e}")))?;
        if status.success() {
            Ok(())
        } else {
            Err(TestSupportError::new(format!("kill {signal} failed")))
        }
    }

    fn start(&mut self) -> Outcome<()> {
        let dir = self.dir.path().to_path_buf();
        let mut command = Command::new(&self.binary);
        let (plain_port, tls_port) = match self.tls {
            Some(_) => (0, Some(self.port)),
            None => (self.port, None),
        };
        command
            .arg("--port")
            .arg(plain_port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"));
        if let Some(password) = &self.password {
            command.arg("--requirepass").arg(password);
        }
        if let (Some(tls), Some(tls_port)) = (self.tls, tls_port) {
            command
                .arg("--tls-port")
                .arg(tls_port.to_string())
                .arg("--tls-cert-file")
                .arg(dir.join(SERVER_CERT_FILE))
                .arg("--tls-key-file")
                .arg(dir.join(SERVER_KEY_FILE))
                .arg("--tls-ca-cert-file")
                .arg(dir.join(CA_CERT_FILE))
                .arg("--tls-auth-clients")
                .arg(match tls {
                    ServerTls::ServerOnly => "no",
                    ServerTls::Mutual => "yes",
                });
        }
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .args(["--cluster-config-file", "nodes.conf"])
                .arg("--cluster-port")
                .arg((u32::from(self.port) + 10_000).to_string());
            if self.tls.is_some() {
                command.args(["--tls-cluster", "yes", "--tls-replication", "yes"]);
            }
        }
        let mut server = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| TestSupportError::new(format!("redis-server did not start: {e}")))?;
        let watchdog = match spawn_watchdog(server.id(), &dir) {
            Ok(watchdog) => watchdog,
            Err(error) => {
                let _ = server.kill();
                let _ = server.wait();
                return Err(error);
            }
        };
        self.process = Some(Process { server, watchdog });
        match self.wait_ready() {
            Ok(()) => Ok(()),
            Err(error) => {
                let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
                self.stop();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                Err(TestSupportError::new(format!(
                    "{error}; redis.log ends: {}",
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )))
            }
        }
    }

    fn wait_ready(&mut self) -> Outcome<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(process) = &mut self.process
                && let Ok(Some(status)) = process.server.try_wait()
            {
                return Err(TestSupportError::new(format!(
                    "redis-server exited at start ({status})"
                )));
            }
            if sync_query::<String>(&self.url(), &["PING"]).is_ok_and(|reply| reply == "PONG") {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestSupportError::new("redis-server did not answer PING"));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    fn node_address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Kills `pid` and removes `dir` when our end of its stdin closes, that is
/// when this process exits (or drops the watchdog).
fn spawn_watchdog(pid: u32, dir: &Path) -> Outcome<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(r#"read _ignored; kill -9 "$1" 2>/dev/null; rm -rf "$2""#)
        .arg("aci-redis-watchdog")
        .arg(pid.to_string())
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| TestSupportError::new(format!("the watchdog did not start: {e}")))
}

/// A free port on 127.0.0.1; for a cluster node, its bus port (+10000) too.
fn free_port(cluster: bool) -> Outcome<u16> {
    for _ in 0..200 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| TestSupportError::new(format!("no free port: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| TestSupportError::new(format!("no free port: {e}")))?
            .port();
        if !cluster {
            return Ok(port);
        }
        if let Some(bus) = port.checked_add(10_000)
            && TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok()
        {
            return Ok(port);
        }
    }
    Err(TestSupportError::new(
        "no free port pair for a cluster node",
    ))
}

fn sync_query<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> Outcome<T> {
    let client = test_client(url)?;
    let mut connection = client
        .get_connection_with_timeout(Duration::from_millis(500))
        .map_err(|e| TestSupportError::new(format!("connect: {:?}", e.kind())))?;
    let mut cmd = redis::cmd(args.first().copied().unwrap_or("PING"));
    for arg in args.iter().skip(1) {
        cmd.arg(*arg);
    }
    cmd.query::<T>(&mut connection)
        .map_err(|e| TestSupportError::new(format!("query: {:?}", e.kind())))
}

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
    /// port and its cluster bus (see [`RedisServerBuilder::tls`]).
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
                .arg(first.dir.path().join(CA_CERT_FILE));
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
}

// ---------------------------------------------------------------------------
// TLS: a throwaway PKI.

/// The CA certificate a TLS server's temp dir holds.
const CA_CERT_FILE: &str = "ca.crt";
/// The server certificate a TLS server's temp dir holds.
const SERVER_CERT_FILE: &str = "server.crt";
/// The server key a TLS server's temp dir holds.
const SERVER_KEY_FILE: &str = "server.key";

/// A throwaway certificate authority, a server certificate it issued for
/// `127.0.0.1` and `localhost`, and a client certificate it issued: ECDSA
/// P-256, made in-process with `rcgen`.
///
/// Debug shows no PEM.
pub struct TestPki {
    ca_cert_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl std::fmt::Debug for TestPki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestPki").finish_non_exhaustive()
    }
}

impl TestPki {
    /// A new, unrelated PKI (e.g. to show that its certificates are not
    /// trusted by a server or client of [`shared`](Self::shared)).
    ///
    /// # Errors
    /// When rcgen fails.
    pub fn generate() -> Outcome<Self> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let fail = |e: rcgen::Error| TestSupportError::new(format!("test PKI: {e}"));
        let ca_key = KeyPair::generate().map_err(fail)?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(
            DnType::CommonName,
            format!("aci test CA {:08x}", fastrand::u32(..)),
        );
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).map_err(fail)?;
        let issuer = Issuer::new(ca, ca_key);

        // The server certificate doubles as a cluster node's client
        // certificate on the TLS cluster bus.
        let server_key = KeyPair::generate().map_err(fail)?;
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(fail)?;
        server
            .distinguished_name
            .push(DnType::CommonName, "aci test redis-server");
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server_cert = server.signed_by(&server_key, &issuer).map_err(fail)?;

        let client_key = KeyPair::generate().map_err(fail)?;
        let mut client = CertificateParams::new(Vec::<String>::new()).map_err(fail)?;
        client
            .distinguished_name
            .push(DnType::CommonName, "aci test client");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client.signed_by(&client_key, &issuer).map_err(fail)?;

        Ok(Self {
            ca_cert_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }

    /// The PKI of this test process: every TLS server spawned here uses its
    /// server certificate.
    ///
    /// # Errors
    /// When it could not be made.
    pub fn shared() -> Outcome<&'static Self> {
        static SHARED: OnceLock<Result<TestPki, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::generate().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|why| TestSupportError::new(why.clone()))
    }

    /// The CA certificate, PEM.
    #[must_use]
    pub fn ca_cert_pem(&self) -> &str {
        &self.ca_cert_pem
    }

    /// The server certificate (SAN `127.0.0.1`, `localhost`), PEM.
    #[must_use]
    pub fn server_cert_pem(&self) -> &str {
        &self.server_cert_pem
    }

    /// The server's private key, PKCS#8 PEM.
    #[must_use]
    pub fn server_key_pem(&self) -> &str {
        &self.server_key_pem
    }

    /// The client certificate, PEM.
    #[must_use]
    pub fn client_cert_pem(&self) -> &str {
        &self.client_cert_pem
    }

    /// The client's private key, PKCS#8 PEM.
    #[must_use]
    pub fn client_key_pem(&self) -> &str {
        &self.client_key_pem
    }

    fn write_server_files(&self, dir: &Path) -> Outcome<()> {
        for (name, pem) in [
            (CA_CERT_FILE, &self.ca_cert_pem),
            (SERVER_CERT_FILE, &self.server_cert_pem),
            (SERVER_KEY_FILE, &self.server_key_pem),
        ] {
            std::fs::write(dir.join(name), pem)
                .map_err(|e| TestSupportError::new(format!("writing {name}: {e}")))?;
        }
        Ok(())
    }

    /// The CA as root and the client certificate, for a redis client.
    fn client_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert_pem.clone().into_bytes(),
                client_key: self.client_key_pem.clone().into_bytes(),
            }),
            root_cert: Some(self.ca_cert_pem.clone().into_bytes()),
        }
    }
}

/// `config` trusting the shared test CA when `tls` is set, presenting the
/// test client certificate for mutual TLS.
fn with_test_tls(config: RedisConfig, tls: Option<ServerTls>) -> RedisConfig {
    let Some(tls) = tls else { return config };
    let pki = match TestPki::shared() {
        Ok(pki) => pki,
        Err(error) => panic!("{error}"),
    };
    let config = config.tls_root_ca_pem(pki.ca_cert_pem());
    match tls {
        ServerTls::ServerOnly => config,
        ServerTls::Mutual => {
            config.tls_client_cert_pem(pki.client_cert_pem(), pki.client_key_pem())
        }
    }
}

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

// ---------------------------------------------------------------------------
// Admin side connection.

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
        let mut cmd = redis::cmd(args.first().copied().unwrap_or("PING"));
        for arg in args.iter().skip(1) {
            cmd.arg(*arg);
        }
        let value = self
            .link
            .req_packed_command(&cmd)
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

/// Parses `cmdstat_<name>:calls=<n>,…` lines.
#[must_use]
pub fn parse_command_calls(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Counts the commands clients sent while `work` ran, by `MONITOR` on a
/// single node: `(client commands by name, script-internal commands)`.
///
/// `MONITOR` shows script-internal commands as `[0 lua]`; anything else is
/// a command a client sent, that is a round trip (or part of a pipeline).
///
/// # Errors
/// When the monitor connection fails.
pub fn monitor_port(port: u16) -> Outcome<Monitor> {
    use std::io::Write as _;
    let mut stream = std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .map_err(|e| TestSupportError::new(format!("monitor connect: {e}")))?;
    stream
        .write_all(b"MONITOR\r\n")
        .map_err(|e| TestSupportError::new(format!("monitor: {e}")))?;
    let mut ok = [0_u8; 5];
    stream
        .read_exact(&mut ok)
        .map_err(|e| TestSupportError::new(format!("monitor: {e}")))?;
    let reader = stream
        .try_clone()
        .map_err(|e| TestSupportError::new(format!("monitor: {e}")))?;
    let handle = std::thread::spawn(move || count_monitor_lines(reader));
    Ok(Monitor {
        stream,
        handle: Some(handle),
    })
}

/// A running `MONITOR` (see [`monitor_port`]).
#[derive(Debug)]
pub struct Monitor {
    stream: std::net::TcpStream,
    handle: Option<std::thread::JoinHandle<MonitorCounts>>,
}

/// What a [`Monitor`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MonitorCounts {
    /// Commands sent by clients, by lowercase name.
    pub client: BTreeMap<String, u64>,
    /// Commands run inside scripts.
    pub script_internal: u64,
}

impl Monitor {
    /// Stops monitoring and returns the counts. Commands still in flight
    /// when it stops may be missed: wait for the work to finish first.
    #[must_use]
    pub fn finish(mut self) -> MonitorCounts {
        // Give the server a moment to flush the last monitor lines.
        std::thread::sleep(Duration::from_millis(200));
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

fn count_monitor_lines(mut stream: std::net::TcpStream) -> MonitorCounts {
    let mut counts = MonitorCounts::default();
    let mut buffer = Vec::new();
    let mut chunk = [0_u8; 64 * 1024];
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        buffer.extend_from_slice(&chunk[..n]);
        while let Some(end) = buffer.windows(2).position(|w| w == b"\r\n") {
            let line: Vec<u8> = buffer.drain(..end + 2).collect();
            count_monitor_line(&line[..end], &mut counts);
        }
    }
    counts
}

fn count_monitor_line(line: &[u8], counts: &mut MonitorCounts) {
    // +1700000000.123456 [0 127.0.0.1:5555] "evalsha" "…" …
    let text = String::from_utf8_lossy(line);
    let Some(open) = text.find('[') else { return };
    let Some(close) = text[open..].find(']').map(|c| open + c) else {
        return;
    };
    let source = &text[open + 1..close];
    let command = text[close + 1..]
        .trim_start()
        .trim_start_matches('"')
        .split('"')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if source.ends_with(" lua") {
        counts.script_internal += 1;
    } else {
        *counts.client.entry(command).or_insert(0) += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_and_monitor_lines_parse() {
        let calls = parse_command_calls(
            "# Commandstats\r\ncmdstat_evalsha:calls=20,usec=1,usec_per_call=0.05\r\ncmdstat_config|resetstat:calls=1,usec=3\r\n",
        );
        assert_eq!(calls.get("evalsha"), Some(&20));
        assert_eq!(calls.get("config|resetstat"), Some(&1));
        let mut counts = MonitorCounts::default();
        count_monitor_line(
            br#"+1700000000.1 [0 127.0.0.1:5555] "EVALSHA" "abc" "4""#,
            &mut counts,
        );
        count_monitor_line(br#"1700000000.2 [0 lua] "hset" "k" "f""#, &mut counts);
        assert_eq!(counts.client.get("evalsha"), Some(&1));
        assert_eq!(counts.script_internal, 1);
    }
}

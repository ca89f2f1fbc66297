//! The process supervisor: spawns a throwaway `redis-server` on a free
//! 127.0.0.1 port (plain, password, cluster node, TLS, mutual TLS), waits
//! until it answers, stops, pauses and restarts it, and kills it by its PID:
//! on drop, and by a watchdog `sh` when the test process exits.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::admin::sync_query;
use super::pki::{CA_CERT_FILE, SERVER_CERT_FILE, SERVER_KEY_FILE, TestPki};
use super::{Outcome, REDIS_CLUSTER_URLS_ENV, REDIS_URL_ENV, TestSupportError};
use crate::RedisConfig;

/// How long a spawned server (or a cluster) may take to come up.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(15);
const SPAWN_ATTEMPTS: usize = 5;

/// Where the `redis-server` binary is, if anywhere on `PATH`.
#[must_use]
pub fn redis_server_binary() -> Option<PathBuf> {
    find_on_path("redis-server")
}

pub(super) fn find_on_path(name: &str) -> Option<PathBuf> {
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

    /// Its temp dir (TLS files, `redis.log`, `nodes.conf`).
    pub(super) fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub(super) fn node_address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `config` trusting the shared test CA when `tls` is set, presenting the
/// test client certificate for mutual TLS.
pub(super) fn with_test_tls(config: RedisConfig, tls: Option<ServerTls>) -> RedisConfig {
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

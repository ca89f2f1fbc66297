//! Test support (feature `testing`): a throwaway database on a real
//! PostgreSQL server, never a fake.
//!
//! The server is `ARCHIVE_URL`, else `DATABASE_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres` (trust authentication on
//! the development machines and CI). Each [`TestDatabase`] creates a
//! database with a random name and drops it when dropped; its URL says
//! `sslmode=disable` unless the server URL names an `sslmode`. Without a server
//! the tests fail with a clear message: they never skip.

use std::time::Duration;

/// The server's administrative URL (see the module docs).
#[must_use]
pub fn server_url() -> String {
    std::env::var("ARCHIVE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database of its own on the test server, dropped with this value.
#[derive(Debug)]
pub struct TestDatabase {
    name: String,
    url: String,
    /// The server's URL (its maintenance database), for the drop.
    server: String,
    /// Roles made by [`archiver_role`](Self::archiver_role), dropped with
    /// the database.
    roles: std::sync::Mutex<Vec<String>>,
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let connected = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_postgres::connect(url, tokio_postgres::NoTls),
    )
    .await;
    match connected {
        Ok(Ok((client, connection))) => {
            tokio::spawn(connection);
            client
        }
        _ => panic!(
            "archive tests need a PostgreSQL server: set ARCHIVE_URL or DATABASE_URL, \
             or run one at 127.0.0.1:5432 with trust authentication"
        ),
    }
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |scheme| {
        scheme
            + 3
            + base[scheme + 3..]
                .find('/')
                .unwrap_or(base.len() - scheme - 3)
    });
    let mut out = format!("{}/{database}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// `url` with its user and password replaced.
fn with_user(url: &str, user: &str, password: &str) -> String {
    let Some(scheme) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme..];
    let host_start = rest
        .find('@')
        .filter(|at| rest[..*at].find('/').is_none())
        .map_or(0, |at| at + 1);
    format!(
        "{}{user}:{password}@{}",
        &url[..scheme],
        &rest[host_start..]
    )
}

impl TestDatabase {
    /// Creates a fresh database.
    ///
    /// # Panics
    /// When no server can be reached, or the database cannot be created.
    pub async fn create() -> Self {
        Self::create_on(&server_url()).await
    }

    /// Creates a fresh database on the server at `server` (a URL naming its
    /// maintenance database, e.g. a [`PostgresServer`]'s).
    ///
    /// # Panics
    /// When the server cannot be reached, or the database cannot be created.
    pub async fn create_on(server: &str) -> Self {
        let server = server.to_owned();
        let name = format!("aci_test_{:016x}", fastrand::u64(..));
        let client = admin(&server).await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|error| panic!("creating the test database failed: {error}"));
        let mut url = with_database(&server, &name);
        // The local server's certificate is self-signed (Debian's default):
        // tests talk plain TCP unless the URL says otherwise.
        if !url.contains("sslmode=") {
            url.push_str(if url.contains('?') { "&" } else { "?" });
            url.push_str("sslmode=disable");
        }
        Self {
            url,
            name,
            server,
            roles: std::sync::Mutex::default(),
        }
    }

    /// A login role with only the grants README gives the archiver role
    /// (`SELECT, INSERT` on the tables, `USAGE` on the checkpoint sequence),
    /// on a database the owner migrated already; its URL. Dropped with the
    /// database.
    ///
    /// # Panics
    /// When the role cannot be made (the schema is not migrated yet).
    pub async fn archiver_role(&self) -> String {
        let role = format!("aci_archiver_{:016x}", fastrand::u64(..));
        let password = format!("{:016x}", fastrand::u64(..));
        let client = self.client().await;
        client
            .batch_execute(&format!(
                "CREATE ROLE {role} LOGIN PASSWORD '{password}';
                 GRANT SELECT, INSERT ON aci_runs, aci_calls, aci_seals, aci_checkpoints TO {role};
                 GRANT USAGE ON SEQUENCE aci_checkpoints_id_seq TO {role};"
            ))
            .await
            .unwrap_or_else(|error| panic!("creating the archiver role failed: {error}"));
        self.roles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(role.clone());
        with_user(&self.url, &role, &password)
    }

    /// Its URL.
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A side connection for what tests inspect or tamper with.
    pub async fn client(&self) -> tokio_postgres::Client {
        admin(&self.url).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let server = self.server.clone();
        let roles = std::mem::take(
            &mut *self
                .roles
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        // A runtime of its own: the test's may be shutting down.
        let _ = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok(Ok((client, connection))) = tokio::time::timeout(
                    Duration::from_secs(10),
                    tokio_postgres::connect(&server, tokio_postgres::NoTls),
                )
                .await
                {
                    tokio::spawn(connection);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                    for role in roles {
                        let _ = client
                            .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
                            .await;
                    }
                }
            });
        })
        .join();
    }
}

/// A PostgreSQL server of the test's own (`initdb`, `pg_ctl`), on a free
/// loopback port, that the test may stop and start again: for faults the
/// shared server must not see. Runs as the `postgres` account when the
/// tests run as root (the server refuses root). Stopped (immediate) and
/// removed on drop.
#[derive(Debug)]
pub struct PostgresServer {
    dir: std::path::PathBuf,
    bin: std::path::PathBuf,
    port: u16,
    user: Option<(u32, u32)>,
}

impl PostgresServer {
    /// Makes a cluster with trust authentication and starts it; returns
    /// once it accepts connections (`pg_ctl -w`).
    ///
    /// # Panics
    /// When the server binaries are missing (`apt-get install postgresql`;
    /// `.ci/run` installs it) or the server does not start.
    #[must_use]
    pub fn start() -> Self {
        let bin = postgres_bin();
        let user = service_user();
        let dir = std::env::temp_dir().join(format!("aci-archive-pg-{:016x}", fastrand::u64(..)));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("a temporary directory: {e}"));
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown the cluster dir: {e}"));
        }
        let port = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| panic!("a free port: {e}"));
        let server = Self {
            dir,
            bin,
            port,
            user,
        };
        server.run(
            "initdb",
            &[
                "-D",
                &server.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "--no-instructions",
            ],
        );
        server.start_again();
        server
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run(&self, program: &str, args: &[&str]) {
        use std::os::unix::process::CommandExt as _;
        let mut command = std::process::Command::new(self.bin.join(program));
        command
            .args(args)
            .env("LC_ALL", "C.UTF-8")
            .stdin(std::process::Stdio::null());
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        let out = command
            .output()
            .unwrap_or_else(|e| panic!("{program} did not run: {e}"));
        assert!(
            out.status.success(),
            "{program} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Its URL (the `postgres` database, as the `postgres` superuser).
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// Stops it (fast shutdown: connections are closed); returns once it is
    /// down.
    pub fn stop(&self) {
        self.run("pg_ctl", &["stop", "-D", &self.data(), "-m", "fast", "-w"]);
    }

    /// Starts it again on the same port and data; returns once it accepts
    /// connections.
    pub fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "start",
                "-D",
                &self.data(),
                "-l",
                &log,
                "-w",
                "-t",
                "60",
                "-o",
                &options,
            ],
        );
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        use std::os::unix::process::CommandExt as _;
        let mut command = std::process::Command::new(self.bin.join("pg_ctl"));
        command
            .args(["stop", "-D", &self.data(), "-m", "immediate", "-w"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some((uid, gid)) = self.user {
            command.uid(uid).gid(gid);
        }
        let _ = command.status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin`.
fn postgres_bin() -> std::path::PathBuf {
    let mut versions: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql; .ci/run installs it)")
    })
}

/// When this process is root: the uid and gid of `postgres`.
fn service_user() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> String {
        let out = std::process::Command::new("id")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("id runs: {e}"));
        assert!(
            out.status.success(),
            "id {args:?} failed (apt-get install postgresql creates the postgres account)"
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    (id(&["-u"]) == "0").then(|| {
        let number = |text: String| text.parse().unwrap_or_else(|e| panic!("a number: {e}"));
        (
            number(id(&["-u", "postgres"])),
            number(id(&["-g", "postgres"])),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_is_replaced() {
        assert_eq!(
            with_user("postgres://postgres@h:5432/db?sslmode=disable", "r", "p"),
            "postgres://r:p@h:5432/db?sslmode=disable"
        );
        assert_eq!(
            with_user("postgres://u:secret@h/db", "r", "p"),
            "postgres://r:p@h/db"
        );
        assert_eq!(
            with_user("postgres://h/db", "r", "p"),
            "postgres://r:p@h/db"
        );
    }

    #[test]
    fn the_database_name_is_replaced() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:5432", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h/db?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
    }
}

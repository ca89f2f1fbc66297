//! Test support (feature `testing`): a throwaway database and a
//! least-privilege account on a real MySQL/MariaDB server.
//!
//! The server is `MYSQL_URL` when set (an account that may create databases
//! and users), otherwise root without password at 127.0.0.1:3306. No server
//! reachable is a panic with a clear message, never a skip.
//!
//! ```no_run
//! # async fn demo() {
//! use projectors_mysql::testing::TestDatabase;
//! let db = TestDatabase::create(&["CREATE TABLE t (id INT PRIMARY KEY)"]).await;
//! let url = db.reader_url(); // SELECT on this database only
//! // ... run the code under test ...
//! db.drop().await;
//! # }
//! ```

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};

use invocation_core::redact::connection_url as redact_url;

/// The admin account used when `MYSQL_URL` is not set.
pub const DEFAULT_ADMIN_URL: &str = "mysql://root@127.0.0.1:3306/?prefer_socket=false";

/// One test's database (random name) with a SELECT-only account on it.
///
/// Drop it with [`TestDatabase::drop`]; a test that panics first leaves the
/// database and account behind (their names start with `aci_test_` and
/// `aci_ro_`).
#[derive(Debug, Clone)]
pub struct TestDatabase {
    admin_url: String,
    host: String,
    port: u16,
    database: String,
    reader: String,
    reader_password: String,
    mariadb: bool,
}

fn random_hex() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

fn encode(part: &str) -> String {
    part.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

async fn connect(url: &str) -> Conn {
    let opts = Opts::from_url(url)
        .unwrap_or_else(|_| panic!("not a valid MySQL URL: {}", redact_url(url)));
    match tokio::time::timeout(Duration::from_secs(10), Conn::new(opts)).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(error)) => panic!(
            "no MySQL/MariaDB server usable at {} ({error}). Start one (for example \
             `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- \
             --user=mysql`, as .ci/run does) or set MYSQL_URL to an account that may create \
             databases and users.",
            redact_url(url)
        ),
        Err(_) => panic!(
            "no MySQL/MariaDB server answered within 10 s at {}. Start one or set MYSQL_URL.",
            redact_url(url)
        ),
    }
}

async fn run(conn: &mut Conn, sql: &str) {
    if let Err(error) = conn.query_drop(sql).await {
        panic!("test database set-up failed: {error} (statement: {sql})");
    }
}

impl TestDatabase {
    /// Creates a database, runs `setup` in it as the admin account, then
    /// creates the SELECT-only account.
    ///
    /// # Panics
    /// When no server is reachable or a statement fails.
    pub async fn create(setup: &[&str]) -> Self {
        let admin_url = std::env::var("MYSQL_URL").unwrap_or_else(|_| DEFAULT_ADMIN_URL.to_owned());
        let mut conn = connect(&admin_url).await;
        let version: Option<String> = conn.query_first("SELECT VERSION()").await.ok().flatten();
        let opts = conn.opts().clone();
        let suffix = random_hex();
        let db = Self {
            host: opts.ip_or_hostname().to_owned(),
            port: opts.tcp_port(),
            database: format!("aci_test_{suffix}"),
            reader: format!("aci_ro_{}", &suffix[..12]),
            reader_password: random_hex(),
            mariadb: version.is_some_and(|v| v.contains("MariaDB")),
            admin_url,
        };
        run(&mut conn, &format!("CREATE DATABASE `{}`", db.database)).await;
        run(&mut conn, &format!("USE `{}`", db.database)).await;
        for statement in setup {
            run(&mut conn, statement).await;
        }
        for host in ["%", "localhost"] {
            run(
                &mut conn,
                &format!(
                    "CREATE USER '{}'@'{host}' IDENTIFIED BY '{}'",
                    db.reader, db.reader_password
                ),
            )
            .await;
            run(
                &mut conn,
                &format!(
                    "GRANT SELECT ON `{}`.* TO '{}'@'{host}'",
                    db.database, db.reader
                ),
            )
            .await;
        }
        let _ = conn.disconnect().await;
        db
    }

    /// The database's name.
    #[must_use]
    pub fn database(&self) -> &str {
        &self.database
    }

    /// The SELECT-only account's user name.
    #[must_use]
    pub fn reader(&self) -> &str {
        &self.reader
    }

    /// The SELECT-only account's password.
    #[must_use]
    pub fn reader_password(&self) -> &str {
        &self.reader_password
    }

    /// The server's host name or address.
    #[must_use]
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the server is MariaDB (else MySQL).
    #[must_use]
    pub const fn is_mariadb(&self) -> bool {
        self.mariadb
    }

    /// The SELECT-only account on this database.
    #[must_use]
    pub fn reader_url(&self) -> String {
        format!(
            "mysql://{}:{}@{}:{}/{}?prefer_socket=false",
            self.reader, self.reader_password, self.host, self.port, self.database
        )
    }

    /// The admin account on this database (an account that may write).
    #[must_use]
    pub fn admin_db_url(&self) -> String {
        let opts = Opts::from_url(&self.admin_url).unwrap_or_else(|_| unreachable_url());
        let user = encode(opts.user().unwrap_or(""));
        let password = opts
            .pass()
            .map(|p| format!(":{}", encode(p)))
            .unwrap_or_default();
        format!(
            "mysql://{user}{password}@{}:{}/{}?prefer_socket=false",
            self.host, self.port, self.database
        )
    }

    /// A new admin connection with this database as its default.
    pub async fn admin(&self) -> Conn {
        connect(&self.admin_db_url()).await
    }

    /// Every table of the database (sorted) with its `CHECKSUM TABLE ...
    /// EXTENDED`, read by the admin account: equal before and after means no
    /// table was added, dropped or changed.
    pub async fn checksums(&self) -> BTreeMap<String, Option<u64>> {
        let mut conn = self.admin().await;
        let tables: Vec<String> = conn
            .exec(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = ? \
                 ORDER BY table_name",
                (self.database.as_str(),),
            )
            .await
            .unwrap_or_else(|e| panic!("listing tables failed: {e}"));
        let mut sums = BTreeMap::new();
        for table in tables {
            let row: Option<(String, Option<u64>)> = conn
                .query_first(format!(
                    "CHECKSUM TABLE `{}`.`{}` EXTENDED",
                    self.database,
                    table.replace('`', "``")
                ))
                .await
                .unwrap_or_else(|e| panic!("CHECKSUM TABLE failed: {e}"));
            sums.insert(table, row.and_then(|(_, sum)| sum));
        }
        let _ = conn.disconnect().await;
        sums
    }

    /// Ends every connection of the account (so that nothing it still runs
    /// holds a lock), then drops the database and the account.
    ///
    /// # Panics
    /// When the server refuses.
    pub async fn drop(self) {
        let mut conn = connect(&self.admin_url).await;
        let sessions: Vec<u64> = conn
            .exec(
                "SELECT id FROM information_schema.processlist WHERE user = ?",
                (self.reader.as_str(),),
            )
            .await
            .unwrap_or_default();
        for id in sessions {
            // It may have ended on its own meanwhile.
            let _ = conn.query_drop(format!("KILL {id}")).await;
        }
        run(
            &mut conn,
            &format!("DROP DATABASE IF EXISTS `{}`", self.database),
        )
        .await;
        for host in ["%", "localhost"] {
            run(
                &mut conn,
                &format!("DROP USER IF EXISTS '{}'@'{host}'", self.reader),
            )
            .await;
        }
        let _ = conn.disconnect().await;
    }
}

fn unreachable_url() -> ! {
    panic!("the admin URL was valid when the database was created")
}

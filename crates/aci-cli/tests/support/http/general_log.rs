//! Counting the statements a MariaDB server executed: its general query log,
//! written to a file of the test's own, searched for a marker literal.
//!
//! The general log records each statement as the server receives it
//! (`Query` for text statements, `Execute` for each execution of a prepared
//! one), so the number of `Query`/`Execute` lines that carry a marker is the
//! number of times the server ran a statement with it, whoever sent it.
//!
//! Only `general_log` and `general_log_file` are changed (and `log_output`
//! gets `FILE` added when it lacks it), never the slow log's settings; the
//! previous values come back when the last [`GeneralLog`] of the test
//! process is dropped, also when a test panics. Tests of one binary run in
//! parallel, so the log is switched on once and shared (each test counts its
//! own marker). The server must run on this machine (it writes the file the
//! test reads), as for the slow log test of `projectors-logs`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use mysql_async::prelude::Queryable as _;
use mysql_async::{Conn, Opts};

/// The server's general log settings before the first test switched it on.
#[derive(Debug, Clone)]
struct Previous {
    enabled: i64,
    file: String,
    output: String,
    /// Whether `log_output` was changed (it lacked `FILE`).
    output_changed: bool,
}

/// The log while at least one test uses it.
#[derive(Debug)]
struct Enabled {
    users: usize,
    previous: Previous,
    dir: PathBuf,
    file: PathBuf,
}

static STATE: Mutex<Option<Enabled>> = Mutex::new(None);

/// One test's use of the general log; dropping the last restores the server.
#[derive(Debug)]
pub(crate) struct GeneralLog {
    file: PathBuf,
}

fn admin_url() -> String {
    std::env::var("MYSQL_URL")
        .unwrap_or_else(|_| projectors_mysql::testing::DEFAULT_ADMIN_URL.to_owned())
}

/// Runs `work` on a runtime of its own on a thread of its own: `Drop` cannot
/// await, and the caller's runtime may be unwinding.
fn blocking<T: Send + 'static>(
    work: impl Future<Output = Result<T, mysql_async::Error>> + Send + 'static,
) -> Result<T, mysql_async::Error> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(work)
    })
    .join()
    .unwrap()
}

async fn connect() -> Result<Conn, mysql_async::Error> {
    Conn::new(Opts::from_url(&admin_url()).unwrap()).await
}

impl GeneralLog {
    /// Switches the general log on (or joins the tests that did).
    ///
    /// # Panics
    /// When no MariaDB is reachable or the account may not `SET GLOBAL`.
    pub(crate) async fn enable() -> Self {
        tokio::task::spawn_blocking(Self::enable_blocking)
            .await
            .unwrap()
    }

    fn enable_blocking() -> Self {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(enabled) = state.as_mut() {
            enabled.users += 1;
            return Self {
                file: enabled.file.clone(),
            };
        }
        let dir = std::env::temp_dir().join(format!(
            "aci-http-general-log-{}-{}",
            std::process::id(),
            crate::support::files::unique_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // mariadbd runs as its own user: it may write here, and the test
        // (maybe not root) may read what it wrote.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let file = dir.join("general.log");
        std::fs::write(&file, "").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let path = file.to_str().unwrap().to_owned();
        let previous = blocking(async move {
            let mut conn = connect().await?;
            let (enabled, file, output): (i64, String, String) = conn
                .query_first(
                    "SELECT @@global.general_log, @@global.general_log_file, @@global.log_output",
                )
                .await?
                .unwrap_or_default();
            let output_changed = !output.to_ascii_uppercase().contains("FILE");
            let previous = Previous {
                enabled,
                file,
                output,
                output_changed,
            };
            conn.query_drop("SET GLOBAL general_log = 0").await?;
            conn.exec_drop("SET GLOBAL general_log_file = ?", (path,))
                .await?;
            if previous.output_changed {
                let output = if previous.output.eq_ignore_ascii_case("NONE") {
                    "FILE".to_owned()
                } else {
                    format!("{},FILE", previous.output)
                };
                conn.exec_drop("SET GLOBAL log_output = ?", (output,))
                    .await?;
            }
            conn.query_drop("SET GLOBAL general_log = 1").await?;
            conn.disconnect().await?;
            Ok(previous)
        })
        .unwrap_or_else(|e| {
            panic!("cannot switch MariaDB's general log on ({e}): the account must SET GLOBAL")
        });
        *state = Some(Enabled {
            users: 1,
            previous,
            dir,
            file: file.clone(),
        });
        Self { file }
    }

    /// How many statements carrying `marker` the server executed so far.
    pub(crate) fn executions(&self, marker: &str) -> usize {
        let bytes = std::fs::read(&self.file).unwrap();
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|line| line.contains(marker))
            .filter(|line| line.contains("Execute\t") || line.contains("Query\t"))
            .count()
    }
}

impl Drop for GeneralLog {
    fn drop(&mut self) {
        let mut state = STATE.lock().unwrap_or_else(PoisonError::into_inner);
        let last = match state.as_mut() {
            Some(enabled) if enabled.users > 1 => {
                enabled.users -= 1;
                false
            }
            Some(_) => true,
            None => false,
        };
        if !last {
            return;
        }
        let Some(enabled) = state.take() else {
            return;
        };
        let previous = enabled.previous;
        let restored = blocking(async move {
            let mut conn = connect().await?;
            conn.query_drop("SET GLOBAL general_log = 0").await?;
            conn.exec_drop("SET GLOBAL general_log_file = ?", (previous.file,))
                .await?;
            if previous.output_changed {
                conn.exec_drop("SET GLOBAL log_output = ?", (previous.output,))
                    .await?;
            }
            conn.exec_drop("SET GLOBAL general_log = ?", (previous.enabled,))
                .await?;
            conn.disconnect().await
        });
        if let Err(e) = restored {
            eprintln!("could not restore MariaDB's general log settings: {e}");
        }
        let _ = std::fs::remove_dir_all(&enabled.dir);
    }
}

//! `postgresql`: a throwaway cluster (`initdb`, then the server with its
//! stderr appended to a log file, as `pg_ctl -l` does, as the `postgres`
//! account when the tests run as root), errors with DETAIL, HINT and
//! multi-line STATEMENT lines provoked through `psql`.

use std::fs::OpenOptions;
use std::process::{Command, Stdio};

use projectors_logs::LogFormat;

use super::check::{copytruncate, count_level, matches, parsed, topic};
use super::process::{
    Spawned, as_user, free_port, next_second_after, now_ms, postgres_bin, program, run,
    service_user, wait_for_log,
};

/// The statements of one batch: 3 errors (one with DETAIL, one with HINT,
/// one with a two-line statement) and a warning; each ERROR is followed by
/// its STATEMENT line.
const BATCH: &str = "INSERT INTO orders VALUES (1);
SELECT nosuchfunc(1);
SELECT 1 +
  'abc'::int;
ROLLBACK;
";

struct Cluster {
    dir: tempfile::TempDir,
    port: u16,
    server: Spawned,
}

impl Cluster {
    fn start() -> Self {
        let bin = postgres_bin();
        let user = service_user("postgres");
        let dir = tempfile::Builder::new()
            .prefix("aci-pg-")
            .tempdir()
            .unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
        }
        let data = dir.path().join("data");
        run(as_user(
            Command::new(bin.join("initdb"))
                .arg("-D")
                .arg(&data)
                .args([
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--no-sync",
                    "--no-instructions",
                ])
                .env("LC_ALL", "C.UTF-8"),
            user,
        ));
        let log_dir = dir.path().join("log");
        std::fs::create_dir(&log_dir).unwrap();
        // Appended to, as `pg_ctl -l` opens it: rotation by copytruncate works.
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_dir.join("postgresql.log"))
            .unwrap();
        let port = free_port();
        let server = Spawned::spawn(
            "postgres",
            as_user(
                Command::new(bin.join("postgres"))
                    .arg("-D")
                    .arg(&data)
                    .arg("-k")
                    .arg(dir.path())
                    .arg("-p")
                    .arg(port.to_string())
                    .args(["-c", "listen_addresses=", "-c", "log_timezone=UTC"])
                    .args(["-c", "lc_messages=C", "-c", "fsync=off"])
                    .stdout(Stdio::from(log.try_clone().unwrap()))
                    .stderr(Stdio::from(log)),
                user,
            ),
        );
        let mut cluster = Self { dir, port, server };
        wait_for_log(
            &cluster.log(),
            "database system is ready to accept connections",
            1,
        );
        cluster.server.assert_running();
        cluster
    }

    fn log(&self) -> std::path::PathBuf {
        self.dir.path().join("log").join("postgresql.log")
    }

    /// Runs `sql` through `psql` (errors are expected: not fatal to psql).
    fn psql(&self, database: &str, sql: &str) {
        let psql = program(
            "psql",
            &[postgres_bin().to_str().unwrap()],
            "postgresql-client",
        );
        let out = Command::new(psql)
            .arg("-h")
            .arg(self.dir.path())
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres", "-X", "-q", "-d", database, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        // Only a connection that never happened is not the test's doing.
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("No such file"), "{stderr}");
    }

    fn batch(&self) {
        for statement in BATCH.split(";\n").filter(|s| !s.trim().is_empty()) {
            self.psql("postgres", &format!("{statement};"));
        }
        // FATAL, logged by the backend that refuses the connection.
        self.psql("nosuchdb", "SELECT 1");
    }
}

#[test]
fn postgresql_reports_are_one_event_each() {
    let cluster = Cluster::start();
    let log = cluster.log();
    let section = topic(
        log.parent().unwrap(),
        "postgresql.log*",
        LogFormat::Postgresql,
    );
    let started = now_ms() - 60_000;
    cluster.psql(
        "postgres",
        "CREATE TABLE orders(id int primary key); INSERT INTO orders VALUES (1);",
    );
    cluster.batch();
    wait_for_log(&log, "database \"nosuchdb\" does not exist", 1);
    let text = std::fs::read_to_string(&log).unwrap();
    // What the writer wrote, counted in its own text.
    let written_errors = text.matches("] ERROR:  ").count();
    assert_eq!(written_errors, 3, "{text}");
    assert_eq!(text.matches("] STATEMENT:  ").count(), 3);

    let all = parsed(&section, &log);
    assert_eq!(all.unparsed + all.orphan_lines, 0, "{text}");
    assert_eq!(count_level(&all.events, "error"), written_errors);
    assert_eq!(count_level(&all.events, "warning"), 1);
    assert_eq!(count_level(&all.events, "fatal"), 1);
    // No secondary line is an event of its own.
    for event in &all.events {
        for secondary in ["DETAIL:", "HINT:", "STATEMENT:"] {
            assert!(!event.message.starts_with(secondary), "{event:?}");
        }
    }
    let end = now_ms() + 60_000;
    // Words only on a DETAIL, a HINT, a STATEMENT's second line.
    for (words, level, contains) in [
        (
            "already exists",
            "error",
            "duplicate key value violates unique constraint \"orders_pkey\"\nDETAIL:  Key (id)=(1) already exists.\nSTATEMENT:  INSERT INTO orders VALUES (1);",
        ),
        (
            "explicit type casts",
            "error",
            "function nosuchfunc(integer) does not exist at character 8\nHINT:  No function matches",
        ),
        (
            "'abc'::int",
            "error",
            "STATEMENT:  SELECT 1 +\n\t  'abc'::int;",
        ),
        (
            "no transaction in progress",
            "warning",
            "there is no transaction in progress",
        ),
    ] {
        let (found, _) = matches(&section, words, started, end);
        assert_eq!(found.len(), 1, "{words}");
        assert_eq!(found[0].level, level);
        assert!(
            found[0].message.contains(contains),
            "{words}: {:?}",
            found[0].message
        );
        assert!(found[0].fields.contains_key("pid"));
    }

    // Rotation (copytruncate, compressed), then a second batch: the window
    // before the rotation sees the first batch only, the last one the
    // second only, a window over both sees both.
    copytruncate(&log, &log.with_file_name("postgresql.log.1.gz"));
    let rotated_at = now_ms();
    next_second_after(rotated_at);
    cluster.batch();
    wait_for_log(&log, "database \"nosuchdb\" does not exist", 1);
    let (first, _) = matches(&section, "already exists", started, rotated_at);
    let (second, _) = matches(
        &section,
        "already exists",
        (rotated_at / 1000 + 1) * 1000,
        now_ms() + 60_000,
    );
    let (both, stats) = matches(&section, "already exists", started, now_ms() + 60_000);
    assert_eq!((first.len(), second.len(), both.len()), (1, 1, 2));
    assert_eq!(stats.files_searched, 2);
    assert!(first[0].timestamp < second[0].timestamp);
}

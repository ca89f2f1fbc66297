//! `mariadb_error`: a throwaway `mariadbd` with its own datadir
//! (`mariadb-install-db`), socket and free port, its error log in a temp
//! dir: an `[ERROR]` at start (a plugin that does not exist), the
//! `ready for connections` line with its unprefixed `Version:` line, and
//! `[Warning] Access denied` for failed logins (`log_warnings = 4`).

use std::process::{Command, Stdio};

use projectors_logs::LogFormat;

use super::check::{copytruncate, count_level, matches, parsed, topic};
use super::process::{
    Spawned, free_port, next_second_after, now_ms, program, run, service_user, wait_for_log,
};

fn failed_login(client: &std::path::Path, port: u16, user: &str) {
    let out = Command::new(client)
        .args(["--no-defaults", "--protocol=tcp", "-h", "127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--user={user}"))
        .args(["--password=wrong", "-e", "SELECT 1"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "the login must fail");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Access denied"));
}

#[test]
fn mariadb_error_log() {
    let install = program("mariadb-install-db", &["/usr/bin"], "mariadb-server");
    let server = program("mariadbd", &["/usr/sbin"], "mariadb-server");
    let client = program("mariadb", &[], "mariadb-client");
    let root = service_user("root").is_some();
    let dir = tempfile::Builder::new()
        .prefix("aci-mariadb-")
        .tempdir()
        .unwrap();
    let d = dir.path();
    let data = d.join("data");
    let as_root = |command: &mut Command| {
        if root {
            command.arg("--user=root");
        }
    };
    let mut init = Command::new(install);
    init.arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
    as_root(&mut init);
    run(&mut init);
    std::fs::create_dir(d.join("log")).unwrap();
    let log = d.join("log").join("error.log");
    let mut spawned = None;
    let mut port = 0;
    for _ in 0..5 {
        port = free_port();
        let mut command = Command::new(&server);
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", d.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", d.join("mariadbd.pid").display()))
            .arg(format!("--log-error={}", log.display()))
            .arg(format!("--port={port}"))
            .args([
                "--bind-address=127.0.0.1",
                "--log-warnings=4",
                "--skip-log-bin",
            ])
            .args([
                "--innodb-buffer-pool-size=16M",
                "--plugin-load-add=aci_no_such_plugin.so",
            ])
            .env("TZ", "UTC")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_root(&mut command);
        let mut child = Spawned::spawn("mariadbd", &mut command);
        let text = {
            let mut text = String::new();
            super::process::wait_for("mariadbd ready or failing", || {
                text = std::fs::read_to_string(&log).unwrap_or_default();
                text.contains("ready for connections")
                    || text.contains("Do you already have another")
            });
            text
        };
        if text.contains("ready for connections") {
            child.assert_running();
            spawned = Some(child);
            break;
        }
        drop(child);
        std::fs::remove_file(&log).unwrap();
    }
    let _server = spawned.expect("mariadbd came up on a free port");
    let section = topic(&d.join("log"), "error.log*", LogFormat::MariadbError);
    let started = now_ms() - 60_000;
    for user in ["app", "reporting", "app"] {
        failed_login(&client, port, user);
    }
    let text = wait_for_log(&log, "Access denied for user", 3);

    let all = parsed(&section, &log);
    assert_eq!(all.unparsed + all.orphan_lines, 0, "{text}");
    let written_errors = text.lines().filter(|l| l.contains(" [ERROR] ")).count();
    assert!(
        written_errors >= 1,
        "the plugin that does not exist: {text}"
    );
    assert_eq!(count_level(&all.events, "error"), written_errors);
    let end = now_ms() + 60_000;
    let (denied, _) = matches(&section, "access denied", started, end);
    assert_eq!(denied.len(), 3);
    assert_eq!(count_level(&denied, "warning"), 3);
    assert!(denied[0].fields.contains_key("thread"));
    // The line after "ready for connections." has no prefix: continuation.
    let (ready, _) = matches(&section, "ready for connections socket port", started, end);
    assert_eq!(ready.len(), 1);
    assert!(
        ready[0].message.contains("\nVersion: '"),
        "{:?}",
        ready[0].message
    );
    let (plugin, _) = matches(&section, "aci_no_such_plugin", started, end);
    assert!(!plugin.is_empty() && plugin.iter().all(|e| e.level == "error"));

    copytruncate(&log, &log.with_file_name("error.log.1.gz"));
    let rotated_at = now_ms();
    next_second_after(rotated_at);
    failed_login(&client, port, "late");
    wait_for_log(&log, "Access denied for user 'late'", 1);
    let (first, _) = matches(&section, "access denied", started, rotated_at);
    let (second, _) = matches(
        &section,
        "access denied",
        (rotated_at / 1000 + 1) * 1000,
        now_ms() + 60_000,
    );
    let (both, _) = matches(&section, "access denied", started, now_ms() + 60_000);
    assert_eq!((first.len(), second.len(), both.len()), (3, 1, 4));
}

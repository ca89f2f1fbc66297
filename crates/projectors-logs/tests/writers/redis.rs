//! `redis`: a spawned `redis-server --logfile`, warnings written through
//! `DEBUG LOG`, a background save (whose child logs with role `C`), the
//! ASCII logo (lines without a prefix: continuation).

use std::process::{Command, Stdio};

use projectors_logs::LogFormat;

use super::check::{copytruncate, count_level, matches, parsed, topic};
use super::process::{Spawned, free_port, next_second_after, now_ms, program, run, wait_for_log};

fn cli(port: u16, args: &[&str]) -> String {
    let cli = program("redis-cli", &[], "redis-tools");
    let out = run(Command::new(cli).arg("-p").arg(port.to_string()).args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn redis_log_marks_are_levels() {
    let server = program("redis-server", &[], "redis-server");
    let dir = tempfile::Builder::new()
        .prefix("aci-redis-log-")
        .tempdir()
        .unwrap();
    let log = dir.path().join("redis.log");
    let mut spawned = None;
    let mut port = 0;
    for _ in 0..5 {
        port = free_port();
        let mut child = Spawned::spawn(
            "redis-server",
            Command::new(&server)
                .arg("--port")
                .arg(port.to_string())
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--daemonize", "no", "--loglevel", "verbose"])
                .args([
                    "--always-show-logo",
                    "yes",
                    "--enable-debug-command",
                    "local",
                ])
                .arg("--dir")
                .arg(dir.path())
                .arg("--logfile")
                .arg(&log)
                .env("TZ", "UTC")
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        );
        let text = wait_for_log(&log, " * ", 1);
        if text.contains("Address already in use") {
            drop(child);
            std::fs::remove_file(&log).unwrap();
            continue;
        }
        wait_for_log(&log, "Ready to accept connections", 1);
        child.assert_running();
        spawned = Some(child);
        break;
    }
    let _server = spawned.expect("redis-server came up on a free port");
    let section = topic(dir.path(), "redis.log*", LogFormat::Redis);
    let started = now_ms() - 60_000;
    let batch = |n: usize, from: usize| {
        for i in from..from + n {
            cli(
                port,
                &[
                    "DEBUG",
                    "LOG",
                    &format!("pool timeout while draining queue {i}"),
                ],
            );
        }
    };
    batch(5, 0);
    assert_eq!(cli(port, &["BGSAVE"]).trim(), "Background saving started");
    let text = wait_for_log(&log, "Background saving terminated", 1);
    wait_for_log(&log, "pool timeout while draining queue 4", 1);
    assert!(
        text.contains(":C "),
        "the save's child logs with role C: {text}"
    );

    let all = parsed(&section, &log);
    assert_eq!(all.unparsed + all.orphan_lines, 0);
    // The logo, written without a prefix, joins the event before it.
    let logo = all
        .events
        .iter()
        .find(|e| e.message.contains("Running in standalone mode"))
        .expect("the logo is in an event");
    assert!(logo.message.lines().count() > 10, "{text}");
    let end = now_ms() + 60_000;
    let (found, _) = matches(&section, "POOL timeout draining", started, end);
    assert_eq!(found.len(), 5, "one event per DEBUG LOG");
    assert_eq!(count_level(&found, "warning"), 5, "{found:?}");
    assert_eq!(found[0].fields["role"], "M");
    let (saved, _) = matches(&section, "DB saved on disk", started, end);
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].fields["role"], "C");
    assert_eq!(saved[0].level, "notice");

    copytruncate(&log, &log.with_file_name("redis.log.1.gz"));
    let rotated_at = now_ms();
    next_second_after(rotated_at);
    batch(3, 5);
    wait_for_log(&log, "pool timeout while draining queue 7", 1);
    let (first, _) = matches(&section, "pool timeout", started, rotated_at);
    let (second, _) = matches(
        &section,
        "pool timeout",
        (rotated_at / 1000 + 1) * 1000,
        now_ms() + 60_000,
    );
    let (both, _) = matches(&section, "pool timeout", started, now_ms() + 60_000);
    assert_eq!((first.len(), second.len(), both.len()), (5, 3, 8));
}

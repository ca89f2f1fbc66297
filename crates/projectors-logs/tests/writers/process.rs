//! Programs the tests run: found or a clear failure (never a skip), spawned
//! children killed by their PID on drop and by a watchdog if the test
//! process dies, and waits for events (a file's content, a port) with a
//! deadline instead of fixed sleeps.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long a writer may take to come up or to write what was asked.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

/// `name` on `PATH` or in one of `extra` directories; fails with what to
/// install when missing.
pub(crate) fn program(name: &str, extra: &[&str], install: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("`{name}` is not installed: this test runs the real program (apt-get install {install}; .ci/run installs it)")
        })
}

/// The newest `/usr/lib/postgresql/<version>/bin`.
pub(crate) fn postgres_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql; .ci/run installs it)")
    })
}

/// When this process is root: the uid and gid of `user`, for a server that
/// refuses to run as root (PostgreSQL). `None` when not root.
pub(crate) fn service_user(user: &str) -> Option<(u32, u32)> {
    let id = |flag: &str| -> u32 {
        let out = Command::new("id")
            .arg(flag)
            .arg(user)
            .output()
            .expect("id runs");
        assert!(
            out.status.success(),
            "no `{user}` account to run the server as (apt-get install postgresql creates it)"
        );
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a number")
    };
    let me = Command::new("id").arg("-u").output().expect("id runs");
    (String::from_utf8_lossy(&me.stdout).trim() == "0").then(|| (id("-u"), id("-g")))
}

/// Runs `command` to its end; fails with its output unless it succeeded.
pub(crate) fn run(command: &mut Command) -> Output {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `command` as `user` (from [`service_user`]) when given.
pub(crate) fn as_user(command: &mut Command, user: Option<(u32, u32)>) -> &mut Command {
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command
}

/// A spawned server: killed (SIGTERM, then SIGKILL) by its PID on drop,
/// and by a watchdog shell if this process exits first.
pub(crate) struct Spawned {
    name: &'static str,
    child: Child,
    watchdog: Child,
}

impl Spawned {
    /// Spawns `command` (its stdout and stderr as the command sets them).
    pub(crate) fn spawn(name: &'static str, command: &mut Command) -> Self {
        let child = command
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
        let watchdog = Command::new("sh")
            .arg("-c")
            .arg(r#"read _ignored; kill -9 "$1" 2>/dev/null"#)
            .arg("aci-writer-watchdog")
            .arg(child.id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let watchdog = match watchdog {
            Ok(watchdog) => watchdog,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                panic!("the watchdog of {name} did not start: {e}");
            }
        };
        Self {
            name,
            child,
            watchdog,
        }
    }

    /// Fails when the server has exited.
    pub(crate) fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status})", self.name);
        }
    }

    /// Asks it to stop (SIGTERM) and waits up to the deadline, then kills.
    pub(crate) fn stop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // The watchdog first, so that it never kills a PID reused later.
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// Polls `ready` until it holds; fails with `what` at the deadline.
pub(crate) fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `path` holds `needle` `times` times; returns the text.
pub(crate) fn wait_for_log(path: &Path, needle: &str, times: usize) -> String {
    let mut text = String::new();
    wait_for(
        &format!("{times} × {needle:?} in {}", path.display()),
        || {
            text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
            text.matches(needle).count() >= times
        },
    );
    text
}

/// A port free on 127.0.0.1 (a server may still lose a race for it: callers
/// that bind it retry).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Waits until the wall clock is in a later second than `ms`, so that lines
/// written after it have a later time even at a one-second resolution.
pub(crate) fn next_second_after(ms: i64) {
    wait_for("the next second", || now_ms() / 1000 > ms / 1000);
}

pub(crate) fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since.as_millis()).expect("in range")
}

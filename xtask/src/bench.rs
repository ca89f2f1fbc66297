//! `cargo xtask bench <target>`: benchmarks that need more than criterion.
//!
//! - `bench redis` builds and runs the `bench_redis` example of
//!   `store-redis` in release mode; it spawns its own `redis-server` (and a
//!   3-node cluster) and prints round trips per READY invocation, memory per
//!   record, throughput against same-run baselines (the bare scripts through
//!   the same client, and `redis-benchmark` sending the same script calls),
//!   and a machine-readable last line
//!   (`round_trips=2 ratio_c1=… ratio_c16=… ratio_c64=… anchor_c1=… anchor_c16=… anchor_c64=… cluster_c64=…`).
//! - `bench instructions` counts instructions per READY call, which repeat
//!   from run to run where times do not: the memory store through the
//!   boundary, and the Redis store's client side (through the boundary, and
//!   the bare create + finalize calls). Each case runs twice with different
//!   call counts under `perf stat -e instructions:u` when the machine
//!   counts instructions, else `valgrind --tool=callgrind`; the difference
//!   over the difference in calls is the figure (start-up cancels out). It
//!   says which counter it used; callgrind's files stay in
//!   `target/callgrind/` for `callgrind_annotate`.
//! - `bench http` builds the release `aci` binary and the `bench_http`
//!   example of `aci-cli`, then runs the example: one and three `aci serve
//!   --http` replicas, driven by the rmcp client and by a lean HTTP/1.1
//!   client, against the same calls made directly on the boundary, on one
//!   spawned `redis-server`, in rounds (medians and per-round ratios); each
//!   row prints CPU time per call of the client, the replicas and Redis
//!   (last line `ratio_rendered_c1=… ratio_raw1r_c16=…`). `ACI_BENCH_*`
//!   variables reach the example (see its docs).
//! - `bench logs` runs the log files bench of `projectors-logs` (`cargo
//!   bench --bench files`): 1 GiB of JSON lines and 1 GiB of `spring_boot`
//!   (multi-line) logs, generated in a temp dir and deleted, the window
//!   search against a whole-file read and `grep -c`, the multi-line full
//!   scan against `json_lines` (`ACI_BENCH_LOG_MIB`,
//!   `ACI_BENCH_LOG_FORMATS=json|spring_boot`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// Runs the Redis store benchmark from the workspace root. Its output is the
/// benchmark's own, so its last line stays the machine-readable one.
pub(crate) fn redis(workspace_root: &Path) -> ExitCode {
    let status = Command::new(cargo())
        .current_dir(workspace_root)
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "store-redis",
            "--features",
            "testing",
            "--example",
            "bench_redis",
        ])
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("the Redis benchmark failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("could not run cargo: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the log files benchmark from the workspace root.
pub(crate) fn logs(workspace_root: &Path) -> ExitCode {
    let status = Command::new(cargo())
        .current_dir(workspace_root)
        .args(["bench", "--package", "projectors-logs", "--bench", "files"])
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("the log files benchmark failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("could not run cargo: {error}");
            ExitCode::FAILURE
        }
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

/// Calls per run: the figure is (count(LONG) - count(SHORT)) / (LONG - SHORT).
const SHORT: u64 = 200;
const LONG: u64 = 1200;

/// One measured case: which example, with which mode argument.
struct Case {
    label: &'static str,
    package: &'static str,
    features: &'static [&'static str],
    example: &'static str,
    mode: &'static str,
}

const CASES: [Case; 3] = [
    Case {
        label: "memory store, through the boundary",
        package: "store-memory",
        features: &[],
        example: "instructions_memory",
        mode: "boundary",
    },
    Case {
        label: "Redis store (client side), through the boundary",
        package: "store-redis",
        features: &["testing"],
        example: "instructions_redis",
        mode: "boundary",
    },
    Case {
        label: "Redis store (client side), bare create + finalize",
        package: "store-redis",
        features: &["testing"],
        example: "instructions_redis",
        mode: "bare",
    },
];

/// What counts instructions here.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counter {
    Perf,
    Callgrind,
}

impl Counter {
    fn detect() -> Option<Self> {
        let perf = Command::new("perf")
            .args(["stat", "-x,", "-e", "instructions:u", "true"])
            .stdout(Stdio::null())
            .output();
        if let Ok(output) = perf
            && output.status.success()
            && parse_perf(&String::from_utf8_lossy(&output.stderr)).is_some()
        {
            return Some(Self::Perf);
        }
        let valgrind = Command::new("valgrind")
            .arg("--version")
            .stdout(Stdio::null())
            .status();
        valgrind
            .is_ok_and(|status| status.success())
            .then_some(Self::Callgrind)
    }

    const fn name(self) -> &'static str {
        match self {
            Self::Perf => "perf stat -e instructions:u",
            Self::Callgrind => "valgrind --tool=callgrind",
        }
    }
}

/// `perf stat -x,` prints `<count>,<unit>,instructions:u,…`; `<not
/// supported>` or `<not counted>` where the machine cannot count.
fn parse_perf(stderr: &str) -> Option<u64> {
    stderr
        .lines()
        .find(|line| line.contains("instructions"))
        .and_then(|line| line.split(',').next())
        .and_then(|count| count.trim().parse().ok())
}

/// Callgrind's out file ends with `totals: <Ir>` (older: `summary:`).
fn parse_callgrind(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| {
            line.strip_prefix("totals:")
                .or_else(|| line.strip_prefix("summary:"))
        })
        .and_then(|count| count.split_whitespace().next())
        .and_then(|count| count.parse().ok())
}

/// Runs the HTTP server benchmark from the workspace root.
pub(crate) fn http(workspace_root: &Path) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let built = Command::new(&cargo)
        .current_dir(workspace_root)
        .args([
            "build",
            "--quiet",
            "--release",
            "--package",
            "aci-cli",
            "--bin",
            "aci",
            "--example",
            "bench_http",
        ])
        .status();
    match built {
        Ok(status) if status.success() => {}
        Ok(status) => {
            eprintln!("building the HTTP benchmark failed ({status})");
            return ExitCode::FAILURE;
        }
        Err(error) => {
            eprintln!("could not run cargo: {error}");
            return ExitCode::FAILURE;
        }
    }
    let release = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root.join("target"), Into::into)
        .join("release");
    let status = Command::new(release.join("examples").join("bench_http"))
        .current_dir(workspace_root)
        .env("ACI_BIN", release.join("aci"))
        .status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("the HTTP benchmark failed ({status})");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("could not run the HTTP benchmark: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Counts instructions per READY call; see the module docs.
pub(crate) fn instructions(workspace_root: &Path) -> ExitCode {
    match run_instructions(workspace_root) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn run_instructions(workspace_root: &Path) -> Result<(), String> {
    let counter = Counter::detect().ok_or(
        "neither `perf stat -e instructions:u` nor valgrind works here (apt-get install valgrind)",
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root.join("target"), PathBuf::from);
    let out_dir = target.join("callgrind");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    for case in &CASES {
        let mut build = Command::new(cargo());
        build
            .current_dir(workspace_root)
            .args(["build", "--quiet", "--release", "--package", case.package])
            .args(["--example", case.example]);
        for feature in case.features {
            build.args(["--features", feature]);
        }
        let status = build.status().map_err(|e| format!("cargo: {e}"))?;
        if !status.success() {
            return Err(format!("building {} failed", case.example));
        }
    }
    println!(
        "instructions per READY call, counted with {} (client process only; start-up cancels out: runs of {LONG} and {SHORT} calls after a warm-up, difference / {}), current-thread runtime, the fake tool of invocation-core:",
        counter.name(),
        LONG - SHORT
    );
    let mut figures = Vec::new();
    for case in &CASES {
        let binary = target.join("release").join("examples").join(case.example);
        let short = count(counter, &binary, case, SHORT, &out_dir)?;
        let long = count(counter, &binary, case, LONG, &out_dir)?;
        let per_call = long.saturating_sub(short) / (LONG - SHORT);
        println!("  {:<52} {per_call:>9}", case.label);
        figures.push(per_call);
    }
    if let [_, boundary, bare] = figures[..] {
        println!(
            "  {:<52} {:>9}",
            "Redis: the boundary's own work (boundary - bare)",
            boundary.saturating_sub(bare)
        );
    }
    if counter == Counter::Callgrind {
        println!(
            "callgrind files: {} (callgrind_annotate <file>)",
            out_dir.display()
        );
    }
    Ok(())
}

fn count(
    counter: Counter,
    binary: &Path,
    case: &Case,
    calls: u64,
    out_dir: &Path,
) -> Result<u64, String> {
    let calls_arg = calls.to_string();
    match counter {
        Counter::Perf => {
            let output = Command::new("perf")
                .args(["stat", "-x,", "-e", "instructions:u", "--"])
                .arg(binary)
                .args([case.mode, &calls_arg])
                .stdout(Stdio::null())
                .output()
                .map_err(|e| format!("perf: {e}"))?;
            let stderr = String::from_utf8_lossy(&output.stderr);
            if !output.status.success() {
                return Err(format!("{} {} failed: {stderr}", case.example, case.mode));
            }
            parse_perf(&stderr).ok_or_else(|| format!("perf printed no count: {stderr}"))
        }
        Counter::Callgrind => {
            let file = out_dir.join(format!("{}-{}-{calls}.out", case.example, case.mode));
            let output = Command::new("valgrind")
                .arg("--tool=callgrind")
                .arg(format!("--callgrind-out-file={}", file.display()))
                .arg(binary)
                .args([case.mode, &calls_arg])
                .stdout(Stdio::null())
                .output()
                .map_err(|e| format!("valgrind: {e}"))?;
            if !output.status.success() {
                return Err(format!(
                    "{} {} under callgrind failed: {}",
                    case.example,
                    case.mode,
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            let text =
                std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            parse_callgrind(&text).ok_or_else(|| format!("no totals in {}", file.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_from_both_tools() {
        assert_eq!(
            parse_perf("1234567,,instructions:u,1000,100.00,,\n"),
            Some(1_234_567)
        );
        assert_eq!(
            parse_perf("<not supported>,,instructions:u,0,100.00,,\n"),
            None
        );
        assert_eq!(
            parse_callgrind("events: Ir\nfn=main\n1 5\ntotals: 987654\n"),
            Some(987_654)
        );
        assert_eq!(parse_callgrind("summary: 42\n"), Some(42));
        assert_eq!(parse_callgrind("events: Ir\n"), None);
    }
}

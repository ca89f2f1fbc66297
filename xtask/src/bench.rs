//! `cargo xtask bench <name> [--record]`: the benchmarks of the `aci-bench`
//! crate (`benches/`), each against a baseline measured in the same run.
//! docs/benchmarks.md says, per benchmark, what it measures, what its ratio
//! means and its goal.
//!
//! A bench's output is its own; its last line is machine-readable. With
//! `--record`, that line becomes the bench's row of the "last measured"
//! table in docs/benchmarks.md ([`crate::record`]).
//!
//! - `redis`, `http`, `knowledge`, `logs`, `log_projection`, `boundary`,
//!   `redaction`, `redaction_mysql`, `redaction_rag`, `traces`, `archive`:
//!   `cargo bench -p aci-bench --bench <name>` (release build). `http`,
//!   `knowledge` and `traces` get `ACI_BIN`, the release `aci` binary built
//!   first; `knowledge` is built with the `jieba` feature (the segmenter
//!   comparison). `ACI_BENCH_*` variables reach the bench (see
//!   its docs).
//! - `instructions` counts instructions per READY call, which repeat
//!   from run to run where times do not: the memory store through the
//!   boundary, and the Redis store's client side (through the boundary, and
//!   the bare create + finalize calls), the `instructions_*` binaries of
//!   `aci-bench`. Each case runs twice with different call counts under
//!   `perf stat -e instructions:u` when the machine counts instructions,
//!   else `valgrind --tool=callgrind`; the difference over the difference in
//!   calls is the figure (start-up cancels out). It says which counter it
//!   used; callgrind's files stay in `target/callgrind/` for
//!   `callgrind_annotate`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The benches `cargo bench -p aci-bench` runs: name, whether it needs the
/// release `aci` binary, its extra features.
const CARGO_BENCHES: [(&str, bool, &[&str]); 11] = [
    ("redis", false, &[]),
    ("http", true, &[]),
    ("knowledge", true, &["jieba"]),
    ("logs", false, &[]),
    ("log_projection", false, &[]),
    ("boundary", false, &[]),
    ("redaction", false, &[]),
    ("redaction_mysql", false, &[]),
    ("redaction_rag", false, &[]),
    ("traces", true, &[]),
    ("archive", false, &[]),
];

/// Every bench name `cargo xtask bench` takes.
pub(crate) fn names() -> Vec<&'static str> {
    CARGO_BENCHES
        .iter()
        .map(|(name, _, _)| *name)
        .chain(["instructions"])
        .collect()
}

/// Runs bench `name`; with `record`, writes its last line into
/// docs/benchmarks.md.
pub(crate) fn run(workspace_root: &Path, name: &str, record: bool) -> ExitCode {
    let last = if name == "instructions" {
        run_instructions(workspace_root)
    } else if let Some((_, needs_aci, features)) =
        CARGO_BENCHES.iter().find(|(bench, _, _)| *bench == name)
    {
        run_cargo_bench(workspace_root, name, *needs_aci, features)
    } else {
        Err(format!(
            "no bench named {name}; one of: {}",
            names().join(", ")
        ))
    };
    let outcome = last.and_then(|last| {
        if !record {
            return Ok(());
        }
        let doc = workspace_root.join("docs").join("benchmarks.md");
        crate::record::write(&doc, name, &last)?;
        println!("recorded in {}", doc.display());
        Ok(())
    });
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned())
}

fn target_dir(workspace_root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| workspace_root.join("target"), Into::into)
}

/// Builds the release `aci` binary; its path.
fn build_aci(workspace_root: &Path) -> Result<PathBuf, String> {
    let status = Command::new(cargo())
        .current_dir(workspace_root)
        .args(["build", "--quiet", "--release", "--package", "aci-cli"])
        .args(["--bin", "aci"])
        .status()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building the release aci binary failed ({status})"));
    }
    Ok(target_dir(workspace_root).join("release").join("aci"))
}

/// `cargo bench -p aci-bench --bench <name>`, its output passed through;
/// its last non-empty line.
fn run_cargo_bench(
    workspace_root: &Path,
    name: &str,
    needs_aci: bool,
    features: &[&str],
) -> Result<String, String> {
    let mut command = Command::new(cargo());
    command.current_dir(workspace_root).args([
        "bench",
        "--quiet",
        "--package",
        "aci-bench",
        "--bench",
        name,
    ]);
    for feature in features {
        command.args(["--features", feature]);
    }
    if needs_aci {
        command.env("ACI_BIN", build_aci(workspace_root)?);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run cargo: {e}"))?;
    let mut last = String::new();
    if let Some(stdout) = child.stdout.take() {
        let mut out = std::io::stdout();
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("reading the bench's output: {e}"))?;
            // A closed stdout (a pager quit) must not stop the bench.
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
            if !line.trim().is_empty() {
                last = line;
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for cargo: {e}"))?;
    if status.success() {
        Ok(last)
    } else {
        Err(format!("the {name} benchmark failed ({status})"))
    }
}

/// Calls per run: the figure is (count(LONG) - count(SHORT)) / (LONG - SHORT).
const SHORT: u64 = 200;
const LONG: u64 = 1200;

/// One measured case: which `aci-bench` binary, with which mode argument,
/// and its key in the last line.
struct Case {
    label: &'static str,
    binary: &'static str,
    mode: &'static str,
    key: &'static str,
}

const CASES: [Case; 3] = [
    Case {
        label: "memory store, through the boundary",
        binary: "instructions_memory",
        mode: "boundary",
        key: "memory_boundary",
    },
    Case {
        label: "Redis store (client side), through the boundary",
        binary: "instructions_redis",
        mode: "boundary",
        key: "redis_boundary",
    },
    Case {
        label: "Redis store (client side), bare create + finalize",
        binary: "instructions_redis",
        mode: "bare",
        key: "redis_bare",
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

    const fn key(self) -> &'static str {
        match self {
            Self::Perf => "perf",
            Self::Callgrind => "callgrind",
        }
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

/// Counts instructions per READY call (see the module docs); the last line.
fn run_instructions(workspace_root: &Path) -> Result<String, String> {
    let counter = Counter::detect().ok_or(
        "neither `perf stat -e instructions:u` nor valgrind works here (apt-get install valgrind)",
    )?;
    let target = target_dir(workspace_root);
    let out_dir = target.join("callgrind");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    let status = Command::new(cargo())
        .current_dir(workspace_root)
        .args(["build", "--quiet", "--release", "--package", "aci-bench"])
        .args([
            "--bin",
            "instructions_memory",
            "--bin",
            "instructions_redis",
        ])
        .status()
        .map_err(|e| format!("cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the instructions binaries failed ({status})"
        ));
    }
    println!(
        "instructions per READY call, counted with {} (client process only; start-up cancels out: runs of {LONG} and {SHORT} calls after a warm-up, difference / {}), current-thread runtime, the fake tool of invocation-core:",
        counter.name(),
        LONG - SHORT
    );
    let mut figures = Vec::new();
    let mut last = Vec::new();
    for case in &CASES {
        let binary = target.join("release").join(case.binary);
        let short = count(counter, &binary, case, SHORT, &out_dir)?;
        let long = count(counter, &binary, case, LONG, &out_dir)?;
        let per_call = long.saturating_sub(short) / (LONG - SHORT);
        println!("  {:<52} {per_call:>9}", case.label);
        figures.push(per_call);
        last.push(format!("{}={per_call}", case.key));
    }
    if let [_, boundary, bare] = figures[..] {
        let own = boundary.saturating_sub(bare);
        println!(
            "  {:<52} {own:>9}",
            "Redis: the boundary's own work (boundary - bare)",
        );
        last.push(format!("redis_boundary_own={own}"));
    }
    if counter == Counter::Callgrind {
        println!(
            "callgrind files: {} (callgrind_annotate <file>)",
            out_dir.display()
        );
    }
    let last = format!("counter={} {}", counter.key(), last.join(" "));
    println!("{last}");
    Ok(last)
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
                return Err(format!("{} {} failed: {stderr}", case.binary, case.mode));
            }
            parse_perf(&stderr).ok_or_else(|| format!("perf printed no count: {stderr}"))
        }
        Counter::Callgrind => {
            let file = out_dir.join(format!("{}-{}-{calls}.out", case.binary, case.mode));
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
                    case.binary,
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

//! `cargo xtask fuzz [--seconds N] [TARGET...]`: builds the targets of the
//! `fuzz/` workspace with libFuzzer's coverage instrumentation on the stable
//! toolchain and runs each for N seconds (default 60).
//!
//! The instrumentation is the one `cargo fuzz build --sanitizer none` asks
//! rustc for (stable `-C` flags only; AddressSanitizer would need nightly):
//! safe Rust needs no sanitizer to find panics, hangs and memory blow-ups.
//! Flags go to the target only (`--target <host>`), never to build scripts
//! and proc macros.
//!
//! Each target runs with a per-input time bound (`-timeout`), a memory
//! bound (`-rss_limit_mb`, `-malloc_limit_mb`), the committed seeds of
//! `fuzz/corpus/<target>/` (read-only) and a working corpus under
//! `target/fuzz/corpus/<target>/`; a crash, hang or out-of-memory input is
//! written to `target/fuzz/artifacts/<target>/` and fails the command.

use std::path::Path;
use std::process::{Command, ExitCode};

/// Per-input time bound, seconds: an input slower than this is a hang.
const INPUT_TIMEOUT_SECS: u32 = 10;
/// Memory bound, megabytes.
const RSS_LIMIT_MB: u32 = 2048;

const RUSTFLAGS: &str = "-Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
--cfg fuzzing -Cdebug-assertions -Coverflow-checks";

pub(crate) fn run(root: &Path, args: &[&str]) -> ExitCode {
    match run_inner(root, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

fn run_inner(root: &Path, args: &[&str]) -> Result<(), String> {
    let mut seconds = 60_u32;
    let mut chosen: Vec<String> = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match *arg {
            "--seconds" => {
                seconds = rest
                    .next()
                    .and_then(|s| s.parse().ok())
                    .filter(|s| *s > 0)
                    .ok_or("--seconds takes a whole number of seconds above 0")?;
            }
            name => chosen.push(name.to_owned()),
        }
    }
    let all = targets(root)?;
    for name in &chosen {
        if !all.contains(name) {
            return Err(format!(
                "no fuzz target `{name}`; targets: {}",
                all.join(", ")
            ));
        }
    }
    let targets = if chosen.is_empty() { all } else { chosen };
    let host = host_triple()?;
    let target_dir = root.join("target").join("fuzz");
    let status = Command::new(env!("CARGO"))
        .current_dir(root.join("fuzz"))
        .args([
            "build",
            "--release",
            "--locked",
            "--bins",
            "--target",
            &host,
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("RUSTFLAGS", RUSTFLAGS)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .map_err(|e| format!("running cargo build for fuzz/: {e}"))?;
    if !status.success() {
        return Err("building the fuzz targets failed".to_owned());
    }
    let mut failed = Vec::new();
    for name in &targets {
        let corpus = target_dir.join("corpus").join(name);
        let artifacts = target_dir.join("artifacts").join(name);
        let seeds = root.join("fuzz").join("corpus").join(name);
        for dir in [&corpus, &artifacts, &seeds] {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        println!("==> fuzz {name} for {seconds} s");
        let status = Command::new(target_dir.join(&host).join("release").join(name))
            .arg(format!("-max_total_time={seconds}"))
            .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
            .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
            .arg(format!("-malloc_limit_mb={RSS_LIMIT_MB}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            .arg(&corpus)
            .arg(&seeds)
            .status()
            .map_err(|e| format!("running fuzz target {name}: {e}"))?;
        if !status.success() {
            eprintln!(
                "fuzz target {name} found an input that fails (in {})",
                artifacts.display()
            );
            failed.push(name.clone());
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("fuzz targets that failed: {}", failed.join(", ")))
    }
}

/// The targets: the files of `fuzz/fuzz_targets/`, sorted.
fn targets(root: &Path) -> Result<Vec<String>, String> {
    let dir = root.join("fuzz").join("fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            (path.extension()? == "rs").then(|| path.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    Ok(names)
}

fn host_triple() -> Result<String, String> {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("running rustc -vV: {e}"))?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: ").map(str::to_owned))
        .ok_or_else(|| "rustc -vV named no host".to_owned())
}

//! `cargo xtask bench <target>`: benchmarks that need more than criterion.
//!
//! `bench redis` builds and runs the `bench_redis` example of `store-redis`
//! in release mode; it spawns its own `redis-server` and prints round trips
//! per READY invocation, memory per record, throughput against a same-run
//! baseline, and a machine-readable last line
//! (`round_trips=2 ratio_c1=… ratio_c16=…`).

//!
//! `bench http` builds the release `aci` binary and the `bench_http` example
//! of `aci-cli`, then runs the example: one and three `aci serve --http`
//! replicas against the same calls made directly on the boundary, on one
//! spawned `redis-server` (last line `ratio_1r_c1=… ratio_3r_c16=…`).

use std::path::Path;
use std::process::{Command, ExitCode};

/// Runs the Redis store benchmark from the workspace root. Its output is the
/// benchmark's own, so its last line stays the machine-readable one.
pub(crate) fn redis(workspace_root: &Path) -> ExitCode {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
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

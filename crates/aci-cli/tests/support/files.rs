//! Temporary files and directories, config files, and unique ids.
//!
//! Everything lives in Cargo's `CARGO_TARGET_TMPDIR` under a random name:
//! tests run in parallel, and a run of the suite never meets what an earlier
//! one left.

use std::path::{Path, PathBuf};

/// A fresh random suffix: 16 lowercase hex digits (also fit for SQL
/// identifiers after a letter).
pub(crate) fn unique_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_owned()
}

/// A fresh id `<tag>-<random hex>`, for run ids, names and markers.
pub(crate) fn unique(tag: &str) -> String {
    format!("{tag}-{}", unique_suffix())
}

/// Writes `contents` to `relative` under `dir`, creating its parent
/// directories, and returns the file's path.
pub(crate) fn write_in(dir: &Path, relative: &str, contents: &str) -> PathBuf {
    let path = dir.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, contents).unwrap();
    path
}

/// A fresh empty directory whose name starts with `tag`.
pub(crate) fn temp_dir(tag: &str) -> PathBuf {
    let dir = tmp_root().join(unique(tag));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fresh file with `contents` whose name ends with `name`.
pub(crate) fn temp_file(name: &str, contents: &str) -> PathBuf {
    write_in(
        &tmp_root(),
        &format!("{}-{name}", unique_suffix()),
        contents,
    )
}

/// A fresh config file `<random>-<name>.toml` with `toml`.
pub(crate) fn config_file(name: &str, toml: &str) -> PathBuf {
    temp_file(&format!("{name}.toml"), toml)
}

fn tmp_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

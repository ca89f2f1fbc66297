//! The files of a knowledge directory: which ones count, their relative
//! names, their bytes and content hashes.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::markdown::Format;
use crate::{Error, Result};

/// One knowledge file found by the walk.
#[derive(Debug, Clone)]
pub(crate) struct FoundFile {
    /// The path on disk.
    pub(crate) path: PathBuf,
    /// The path relative to the directory, `/`-separated.
    pub(crate) relative: String,
    /// Markdown or plain text.
    pub(crate) format: Format,
}

/// A file read from disk: its bytes and their SHA-256 (hex).
#[derive(Debug, Clone)]
pub(crate) struct ReadFile {
    pub(crate) found: FoundFile,
    pub(crate) bytes: Vec<u8>,
    pub(crate) sha256: String,
}

/// Checks that `dir` is a readable directory.
pub(crate) fn check_dir(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(Error::NotADirectory {
            path: dir.to_owned(),
        }),
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
            Err(Error::DirectoryNotFound {
                path: dir.to_owned(),
            })
        }
        Err(source) => Err(Error::DirectoryUnreadable {
            path: dir.to_owned(),
            source,
        }),
    }
}

/// Every knowledge file under `dir` (recursively; hidden entries and
/// symbolic links to directories are skipped), in relative-path order.
/// `.md` always counts; `.txt` when `plain_text`.
pub(crate) fn walk(dir: &Path, plain_text: bool) -> Result<Vec<FoundFile>> {
    let mut paths = Vec::new();
    walk_into(dir, plain_text, &mut paths)?;
    let mut files: Vec<FoundFile> = paths
        .into_iter()
        .map(|(path, format)| {
            let relative = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .components()
                .map(|part| part.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            FoundFile {
                path,
                relative,
                format,
            }
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

fn walk_into(dir: &Path, plain_text: bool, files: &mut Vec<(PathBuf, Format)>) -> Result<()> {
    let unreadable = |source| Error::DirectoryUnreadable {
        path: dir.to_owned(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(unreadable)?;
        if kind.is_dir() {
            walk_into(&path, plain_text, files)?;
            continue;
        }
        let Some(format) = Format::of(&path) else {
            continue;
        };
        if format == Format::PlainText && !plain_text {
            continue;
        }
        if kind.is_file() || std::fs::metadata(&path).is_ok_and(|meta| meta.is_file()) {
            files.push((path, format));
        }
    }
    Ok(())
}

/// Reads `found` and hashes its bytes.
pub(crate) fn read(found: FoundFile) -> Result<ReadFile> {
    let bytes = std::fs::read(&found.path).map_err(|source| Error::FileUnreadable {
        path: found.path.clone(),
        source,
    })?;
    let sha256 = hex(&Sha256::digest(&bytes));
    Ok(ReadFile {
        found,
        bytes,
        sha256,
    })
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

//! Which files a topic may open: names in its directory that match its globs,
//! never anything outside the directory.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};

/// Why a configured pattern is refused.
pub(crate) fn check_pattern(pattern: &str) -> Result<GlobMatcher, &'static str> {
    if pattern.is_empty() {
        return Err("a file pattern is empty");
    }
    if pattern.contains(['/', '\\']) || pattern.contains("..") {
        return Err("a file pattern names a file in `dir`: no `/`, `\\` or `..`");
    }
    let glob: Glob = GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(false)
        .build()
        .map_err(|_| "a file pattern is not a valid glob")?;
    Ok(glob.compile_matcher())
}

/// A file a query may read.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct LogFile {
    /// Its canonical path (inside the canonical directory).
    pub(crate) path: PathBuf,
    /// Its name, for the record.
    pub(crate) name: String,
}

/// What went wrong finding the files (never names them: the error reaches
/// only the harness, but paths stay out of it anyway).
#[derive(Debug, thiserror::Error)]
pub(crate) enum PathError {
    /// The directory or a file could not be read.
    #[error("a configured log directory or file cannot be read")]
    Io(#[source] io::Error),
    /// A pattern matched no file.
    #[error("a configured log file pattern matches no file")]
    NoMatch,
    /// A matched name resolves outside the directory (a symlink).
    #[error("a configured log file resolves outside its directory")]
    Escapes,
}

/// The files of `dir` whose names match `patterns`; each pattern must match
/// at least one regular file. Symlinks are followed only when their target is
/// inside `dir` (after resolving `dir` itself).
pub(crate) fn resolve(dir: &Path, patterns: &[GlobMatcher]) -> Result<Vec<LogFile>, PathError> {
    let root = fs::canonicalize(dir).map_err(PathError::Io)?;
    let mut names: Vec<String> = Vec::new();
    for entry in fs::read_dir(&root).map_err(PathError::Io)? {
        let entry = entry.map_err(PathError::Io)?;
        // Names that are not UTF-8 match no glob.
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    let mut files = BTreeSet::new();
    for pattern in patterns {
        let mut matched = false;
        for name in names.iter().filter(|n| pattern.is_match(n.as_str())) {
            let path = fs::canonicalize(root.join(name)).map_err(PathError::Io)?;
            if path.parent() != Some(root.as_path()) {
                return Err(PathError::Escapes);
            }
            if !fs::metadata(&path).map_err(PathError::Io)?.is_file() {
                continue;
            }
            matched = true;
            files.insert(LogFile {
                path,
                name: name.clone(),
            });
        }
        if !matched {
            return Err(PathError::NoMatch);
        }
    }
    Ok(files.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_stay_in_the_directory() {
        for bad in ["", "../x", "a/b", "..", "a\\b", "[", "sub/*.log"] {
            assert!(check_pattern(bad).is_err(), "{bad}");
        }
        let m = check_pattern("app.log*").unwrap();
        assert!(m.is_match("app.log.2.gz"));
        assert!(!m.is_match("other.log"));
    }

    #[test]
    fn symlinks_out_of_the_directory_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.log"), "x").unwrap();
        fs::write(root.path().join("app.log"), "y").unwrap();
        fs::create_dir(root.path().join("app.log.d")).unwrap();
        let patterns = [check_pattern("app.log*").unwrap()];
        let files = resolve(root.path(), &patterns).unwrap();
        assert_eq!(files.len(), 1, "directories are not files");
        std::os::unix::fs::symlink(
            outside.path().join("secret.log"),
            root.path().join("app.log.1"),
        )
        .unwrap();
        assert!(matches!(
            resolve(root.path(), &patterns),
            Err(PathError::Escapes)
        ));
        let inside = [check_pattern("*.txt").unwrap()];
        assert!(matches!(
            resolve(root.path(), &inside),
            Err(PathError::NoMatch)
        ));
    }
}

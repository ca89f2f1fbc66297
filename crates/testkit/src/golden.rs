//! Golden files: committed expected output, compared byte for byte.
//!
//! One behaviour everywhere:
//!
//! - equal: pass;
//! - different or missing, `UPDATE_GOLDEN` unset: fail with a unified diff
//!   (expected -> actual) and the exact command that regenerates the files;
//! - different or missing, `UPDATE_GOLDEN` set: write the file and pass. An
//!   unchanged file is never rewritten (its timestamp stays).
//!
//! ```no_run
//! let golden = testkit::golden!();
//! golden.check_json("result.json", &serde_json::json!({"ok": true}));
//! ```

use std::path::{Path, PathBuf};

use serde::Serialize;

/// The environment variable that turns comparison into regeneration.
pub const UPDATE_VAR: &str = "UPDATE_GOLDEN";

/// The golden files of the calling crate: `<crate>/tests/golden/`.
#[macro_export]
macro_rules! golden {
    () => {
        $crate::Golden::new(
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden"),
            env!("CARGO_PKG_NAME"),
        )
    };
}

/// A directory of golden files of one package.
#[derive(Debug, Clone)]
pub struct Golden {
    dir: PathBuf,
    package: String,
}

/// What a comparison did, for callers that test the helper itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The file matched.
    Matched,
    /// The file was (re)written because `UPDATE_GOLDEN` was set.
    Written,
}

impl Golden {
    /// Golden files in `dir`, regenerated with `cargo test -p <package>`.
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>, package: impl Into<String>) -> Self {
        Self {
            dir: dir.into(),
            package: package.into(),
        }
    }

    /// The path of golden file `file`.
    #[must_use]
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Compares `actual`, pretty-printed JSON plus a final newline, with
    /// golden file `file`.
    ///
    /// # Panics
    /// On a mismatch (see the module docs), or when `actual` does not serialize.
    pub fn check_json(&self, file: &str, actual: &impl Serialize) {
        #[allow(clippy::expect_used)]
        let text = serde_json::to_string_pretty(actual).expect("golden value serializes") + "\n";
        self.check_text(file, &text);
    }

    /// Compares `actual` with golden file `file`, byte for byte.
    ///
    /// # Panics
    /// On a mismatch (see the module docs).
    pub fn check_text(&self, file: &str, actual: &str) {
        let update = std::env::var_os(UPDATE_VAR).is_some();
        if let Err(message) = self.compare(file, actual, update) {
            panic!("{message}");
        }
    }

    /// The comparison without panicking: `Err` carries the failure message.
    ///
    /// # Errors
    /// The message of a mismatch, a missing file, or a failed write.
    pub fn compare(&self, file: &str, actual: &str, update: bool) -> Result<Outcome, String> {
        let path = self.path(file);
        let expected = std::fs::read_to_string(&path).ok();
        if expected.as_deref() == Some(actual) {
            return Ok(Outcome::Matched);
        }
        if update {
            return write(&path, actual).map(|()| Outcome::Written);
        }
        let regenerate = format!("{UPDATE_VAR}=1 cargo test -p {}", self.package);
        let Some(expected) = expected else {
            return Err(format!(
                "missing golden file {}; create it with {regenerate} and review it",
                path.display()
            ));
        };
        let diff = similar::TextDiff::from_lines(expected.as_str(), actual)
            .unified_diff()
            .header("expected", "actual")
            .to_string();
        Err(format!(
            "golden file {} differs:\n{diff}\nif the change is intended, regenerate with \
             {regenerate} and review the diff",
            path.display()
        ))
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn compare_then_update_then_match() {
        let dir = tempfile::tempdir().unwrap();
        let golden = Golden::new(dir.path(), "demo");

        let missing = golden.compare("a.json", "one\n", false).unwrap_err();
        assert!(missing.contains("missing golden file"), "{missing}");
        assert!(
            missing.contains("UPDATE_GOLDEN=1 cargo test -p demo"),
            "{missing}"
        );

        assert_eq!(
            golden.compare("a.json", "one\n", true),
            Ok(Outcome::Written)
        );
        assert_eq!(
            golden.compare("a.json", "one\n", false),
            Ok(Outcome::Matched)
        );

        let differs = golden.compare("a.json", "two\n", false).unwrap_err();
        assert!(
            differs.contains("-one") && differs.contains("+two"),
            "{differs}"
        );
        assert_eq!(
            std::fs::read_to_string(golden.path("a.json")).unwrap(),
            "one\n"
        );

        // An unchanged file is not rewritten, even when updating.
        let before = std::fs::metadata(golden.path("a.json"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(
            golden.compare("a.json", "one\n", true),
            Ok(Outcome::Matched)
        );
        let after = std::fs::metadata(golden.path("a.json"))
            .unwrap()
            .modified()
            .unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn json_is_pretty_with_a_final_newline() {
        let dir = tempfile::tempdir().unwrap();
        let golden = Golden::new(dir.path(), "demo");
        std::fs::write(golden.path("v.json"), "{\n  \"a\": 1\n}\n").unwrap();
        golden.check_json("v.json", &serde_json::json!({"a": 1}));
    }
}

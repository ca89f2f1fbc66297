//! False positives are a defect too: real, secret-free lines (this
//! machine's service logs and shipped configuration, sampled into
//! `tests/data/redaction_corpus/`, and the bundled runbooks read in place)
//! get no marker, line by line and as whole documents.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use invocation_core::redact::{Redactions, Redactor};

fn files_under(dir: &Path, keep: &dyn Fn(&Path) -> bool, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, keep, out);
        } else if keep(&path) {
            out.push(path);
        }
    }
}

/// Lines (and whole files) that get a marker, with the redacted text.
fn marked(files: &[PathBuf]) -> (usize, Vec<String>) {
    let redactor = Redactor::builtin();
    let mut lines = 0;
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            lines += 1;
            let mut counts = Redactions::new();
            let redacted = redactor.redact_counting(line, &mut counts);
            if !counts.is_empty() {
                found.push(format!("{}:{}: {redacted}", file.display(), n + 1));
            }
        }
        let mut counts = Redactions::new();
        let _ = redactor.redact_counting(&text, &mut counts);
        if !counts.is_empty() {
            found.push(format!("{} (whole file): {counts:?}", file.display()));
        }
    }
    (lines, found)
}

#[test]
fn real_service_logs_and_configuration_get_no_marker() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/redaction_corpus");
    let mut files = Vec::new();
    files_under(
        &dir,
        &|p| p.extension().is_none_or(|e| e != "md"),
        &mut files,
    );
    let (lines, found) = marked(&files);
    assert!(
        files.len() >= 10 && lines >= 300,
        "{} files, {lines} lines",
        files.len()
    );
    assert!(found.is_empty(), "false positives:\n{}", found.join("\n"));
}

#[test]
fn the_bundled_runbooks_get_no_marker() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../projectors-rag/knowledge");
    let mut files = Vec::new();
    files_under(
        &dir,
        &|p| p.extension().is_some_and(|e| e == "md"),
        &mut files,
    );
    let (lines, found) = marked(&files);
    assert!(
        files.len() >= 10 && lines >= 400,
        "{} files, {lines} lines",
        files.len()
    );
    assert!(found.is_empty(), "false positives:\n{}", found.join("\n"));
}

//! `cargo xtask schema [--check]`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use aci_contracts::frozen::schema_files;

/// The command that regenerates the committed schemas.
pub(crate) const REGENERATE: &str = "cargo xtask schema";

/// Writes every schema file whose content changed and removes extra `.json` files.
pub(crate) fn write(dir: &Path) -> Result<String, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let expected: BTreeMap<String, String> = schema_files().into_iter().collect();
    let mut changed = Vec::new();
    for (name, content) in &expected {
        let path = dir.join(name);
        if fs::read_to_string(&path).ok().as_deref() != Some(content.as_str()) {
            fs::write(&path, content)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            changed.push(format!("wrote {name}"));
        }
    }
    for extra in committed(dir)?
        .keys()
        .filter(|n| !expected.contains_key(*n))
    {
        let path = dir.join(extra);
        fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
        changed.push(format!("removed {extra}"));
    }
    if changed.is_empty() {
        Ok(format!("schemas: {} files, all current", expected.len()))
    } else {
        Ok(changed.join("\n"))
    }
}

/// Compares the committed schema files with the contracts.
pub(crate) fn check(dir: &Path) -> Result<String, String> {
    let expected: BTreeMap<String, String> = schema_files().into_iter().collect();
    let actual = committed(dir)?;
    let mut report = String::new();
    for (name, content) in &expected {
        match actual.get(name) {
            None => {
                let _ = writeln!(report, "missing: schemas/{name}");
            }
            Some(current) if current != content => {
                let _ = writeln!(report, "differs: schemas/{name}");
                let diff = similar::TextDiff::from_lines(current.as_str(), content.as_str());
                let _ = write!(
                    report,
                    "{}",
                    diff.unified_diff()
                        .context_radius(3)
                        .header(&format!("committed/{name}"), &format!("generated/{name}"))
                );
            }
            Some(_) => {}
        }
    }
    for name in actual.keys().filter(|n| !expected.contains_key(*n)) {
        let _ = writeln!(report, "extra: schemas/{name}");
    }
    if report.is_empty() {
        Ok(format!("schemas: {} files, all current", expected.len()))
    } else {
        Err(format!(
            "{report}\nThe committed schemas do not match the contracts. Regenerate them with:\n    {REGENERATE}"
        ))
    }
}

fn committed(dir: &Path) -> Result<BTreeMap<String, String>, String> {
    let mut files = BTreeMap::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
    };
    for entry in entries {
        let path = entry
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
            .path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let content = fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        files.insert(name, content);
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_schemas_match_the_contracts() {
        if let Err(report) = check(&crate::schemas_dir()) {
            panic!("{report}");
        }
    }

    #[test]
    fn check_reports_drift_missing_and_extra_files() {
        let dir = std::env::temp_dir().join(format!("aci-schema-check-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert!(write(&dir).is_ok());
        assert!(check(&dir).is_ok());

        let request = dir.join("query_logs.request.json");
        let original = fs::read_to_string(&request).unwrap();
        fs::write(&request, original.replace("lookback_minutes", "lookback")).unwrap();
        fs::write(dir.join("stale.json"), "{}\n").unwrap();
        fs::remove_file(dir.join("error.result.json")).unwrap();
        let report = check(&dir).unwrap_err();
        assert!(
            report.contains("differs: schemas/query_logs.request.json"),
            "{report}"
        );
        assert!(report.contains("+    \"lookback_minutes\""), "{report}");
        assert!(
            report.contains("missing: schemas/error.result.json"),
            "{report}"
        );
        assert!(report.contains("extra: schemas/stale.json"), "{report}");
        assert!(report.contains(REGENERATE), "{report}");

        let written = write(&dir).unwrap();
        assert!(
            written.contains("wrote query_logs.request.json"),
            "{written}"
        );
        assert!(written.contains("removed stale.json"), "{written}");
        assert!(
            !written.contains("wrote lookup_knowledge"),
            "unchanged files are not rewritten"
        );
        assert!(check(&dir).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }
}

//! `cargo xtask bench <name> --record`: the bench's last line becomes its
//! row of the "last measured" table in docs/benchmarks.md, between the
//! markers [`START`] and [`END`]. One row per bench: a new measurement
//! replaces the old one (history stays in commit messages).

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The line before the table.
pub(crate) const START: &str = "<!-- last-measured:start -->";
/// The line after the table.
pub(crate) const END: &str = "<!-- last-measured:end -->";

/// Rewrites bench `name`'s row of the table in `doc` with `last` (the
/// bench's last line), measured today on this machine.
pub(crate) fn write(doc: &Path, name: &str, last: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() / 86_400);
    let measured = format!("{}, {cpus} CPUs", civil_date(days));
    let updated = with_row(&text, name, last, &measured)?;
    std::fs::write(doc, updated).map_err(|e| format!("{}: {e}", doc.display()))
}

/// `text` with bench `name`'s row replaced (or added, keeping the rows in
/// name order).
fn with_row(text: &str, name: &str, last: &str, measured: &str) -> Result<String, String> {
    let start = text
        .find(START)
        .ok_or_else(|| format!("no {START} marker in docs/benchmarks.md"))?;
    let end = text[start..]
        .find(END)
        .map(|end| start + end)
        .ok_or_else(|| format!("no {END} marker after {START}"))?;
    let table = &text[start + START.len()..end];
    let row_name = |line: &str| {
        line.strip_prefix("| `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name.to_owned())
    };
    let figures = last.trim().replace('|', "/");
    let row = format!("| `{name}` | `{figures}` | {measured} |");
    let mut header = Vec::new();
    let mut rows = Vec::new();
    for line in table.lines().filter(|line| !line.trim().is_empty()) {
        match row_name(line) {
            Some(existing) if existing == name => {}
            Some(existing) => rows.push((existing, line.to_owned())),
            None => header.push(line.to_owned()),
        }
    }
    rows.push((name.to_owned(), row));
    rows.sort();
    let mut out = String::with_capacity(text.len() + 128);
    out.push_str(&text[..start + START.len()]);
    out.push('\n');
    for line in header {
        out.push_str(&line);
        out.push('\n');
    }
    for (_, line) in rows {
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&text[end..]);
    Ok(out)
}

/// `YYYY-MM-DD` of `days` since 1970-01-01 (proleptic Gregorian).
fn civil_date(days: u64) -> String {
    // Howard Hinnant's days-to-civil, over eras of 400 years.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Benchmarks\n\nintro\n\n<!-- last-measured:start -->\n| bench | last line | measured |\n|---|---|---|\n| `http` | `ratio_1r_c16=0.62` | 2026-11-30, 2 CPUs |\n| `redis` | `ratio_c1=0.90` | 2026-11-30, 2 CPUs |\n<!-- last-measured:end -->\n\nafter\n";

    #[test]
    fn a_row_is_replaced_in_place_and_the_rest_kept() {
        let out = with_row(
            DOC,
            "redis",
            "ratio_c1=1.01 anchor_c1=0.85",
            "2026-12-02, 2 CPUs",
        )
        .unwrap();
        assert!(
            out.contains("| `redis` | `ratio_c1=1.01 anchor_c1=0.85` | 2026-12-02, 2 CPUs |\n")
        );
        assert!(!out.contains("ratio_c1=0.90"));
        assert!(out.contains("| `http` | `ratio_1r_c16=0.62` | 2026-11-30, 2 CPUs |\n"));
        assert!(out.starts_with("# Benchmarks\n\nintro\n\n"));
        assert!(out.ends_with("<!-- last-measured:end -->\n\nafter\n"));
        assert_eq!(out.matches("| `redis` |").count(), 1);
    }

    #[test]
    fn a_new_row_goes_in_name_order_below_the_header() {
        let out = with_row(DOC, "knowledge", "p50_ms=1.20", "2026-12-02, 2 CPUs").unwrap();
        let http = out.find("| `http` |").unwrap();
        let knowledge = out.find("| `knowledge` |").unwrap();
        let redis = out.find("| `redis` |").unwrap();
        let header = out.find("|---|").unwrap();
        assert!(header < http && http < knowledge && knowledge < redis);
    }

    #[test]
    fn a_doc_without_markers_is_an_error() {
        assert!(with_row("# nothing\n", "redis", "x=1", "today").is_err());
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(20_789), "2026-12-02");
    }
}

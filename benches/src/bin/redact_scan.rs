//! Runs the built-in redaction rules over text files, line by line, and
//! prints every line that would carry a marker, then the counts per rule:
//! how a false positive (or a missed secret) is found on real logs before
//! the model ever sees them.
//!
//! Run with `cargo run -p aci-bench --bin redact_scan -- FILE...`
//! (add `--quiet` to print only the counts). The lines printed are the
//! redacted ones: this prints no secret it finds.

use std::process::ExitCode;

use invocation_core::redact::{Redactions, Redactor};

fn main() -> ExitCode {
    let mut quiet = false;
    let mut files = Vec::new();
    for arg in std::env::args().skip(1) {
        if arg == "--quiet" {
            quiet = true;
        } else {
            files.push(arg);
        }
    }
    if files.is_empty() {
        eprintln!("usage: redact_scan [--quiet] FILE...");
        return ExitCode::FAILURE;
    }
    let redactor = Redactor::builtin();
    let mut total = Redactions::new();
    let (mut lines, mut bytes, mut marked) = (0_u64, 0_u64, 0_u64);
    for file in &files {
        let raw = match std::fs::read(file) {
            Ok(raw) => raw,
            Err(e) => {
                eprintln!("{file}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let text = String::from_utf8_lossy(&raw);
        let mut counts = Redactions::new();
        for (number, line) in text.lines().enumerate() {
            lines += 1;
            bytes += line.len() as u64 + 1;
            let before = counts.total();
            let redacted = redactor.redact_counting(line, &mut counts);
            if counts.total() > before {
                marked += 1;
                if !quiet {
                    println!("{file}:{}: {redacted}", number + 1);
                }
            }
        }
        // Whole-file redaction too: multi-line shapes (PEM blocks) span lines.
        let mut whole = Redactions::new();
        let _ = redactor.redact_counting(&text, &mut whole);
        println!(
            "{file}: {} lines, {} markers by line, {} in the whole file",
            text.lines().count(),
            counts.total(),
            whole.total()
        );
        total.merge(&counts);
    }
    println!("total: {lines} lines, {bytes} bytes, {marked} lines with a marker");
    for (rule, count) in total.iter() {
        println!("  {rule}: {count}");
    }
    ExitCode::SUCCESS
}

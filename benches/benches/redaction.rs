//! Secret redaction against a single-pass `RegexSet::matches` scan of the
//! same bytes, measured in the same run.
//!
//! The corpus is realistic evidence, one text per log line / cell / runbook
//! line, as a projector redacts it: the secret-free real lines of
//! `crates/invocation-core/tests/data/redaction_corpus/` and the bundled runbooks
//! (`crates/projectors-rag/knowledge/`), with secrets of several rules
//! planted into a share of the texts (`clean`: none; `mixed`: 2 %;
//! `dirty`: 20 %).
//!
//! The baseline is a single-pass scan for the same rules: one
//! [`regex::RegexSet::matches`] over each text with every built-in pattern,
//! nothing replaced. Redaction scans each text once with its keyword
//! automaton, runs the regexes of the rules whose keywords it found, and
//! replaces and counts. Target: ratio at most 1.5x on `mixed`.
//!
//! Run with `cargo xtask bench redaction`.

// `criterion_group!` generates an undocumented function; a failed expectation
// aborts the benchmark.
#![allow(missing_docs, clippy::expect_used, clippy::unwrap_used)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use invocation_core::redact::{BUILTIN_RULES, Redactions, Redactor};
use regex::RegexSetBuilder;

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("corpus dir")
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files_under(&path, out);
        } else if path.file_name().is_some_and(|n| n != "README.md") {
            out.push(path);
        }
    }
}

/// The real secret-free lines.
fn clean_lines() -> Vec<String> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates");
    let mut files = Vec::new();
    files_under(
        &crates.join("invocation-core/tests/data/redaction_corpus"),
        &mut files,
    );
    files_under(&crates.join("projectors-rag/knowledge"), &mut files);
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("corpus file")
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Secret-bearing lines, as they show up in logs, rows and runbooks.
fn secret_lines() -> Vec<String> {
    vec![
        "2024-06-01T12:00:01Z ERROR calling https://svc:pW9x!rT2qL@api.internal/v1 failed: 503".into(),
        "export GITHUB_TOKEN=ghp_Zk3Qw8Yh2Jm5Lp0Vt7Rb4Nc6Xs1Gd9Fa2Ke8 && git push".into(),
        "INFO loaded config {\"db_password\": \"s3cr3t-Pa55\", \"pool\": 10}".into(),
        "2024-06-01 12:00:02 WARN aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY in env".into(),
        "curl -H 'Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0' https://api.internal/health".into(),
        "jdbc:mysql://db.internal:3306/shop?user=app&password=Tr0ub4dor3&useSSL=true".into(),
        "token=eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZ2VudC0xIiwiZXhwIjoxNzAwMDAwMDAwfQ.c2lnbmF0dXJlLWhlcmUtZm9yLXRoZS10ZXN0".into(),
        "mysql -h db.internal -u root -pHunter2Hunter2 shop < dump.sql".into(),
    ]
}

/// `n` texts: the clean lines in order, every `1/share`-th replaced by a
/// secret line (none when `share` is 0).
fn corpus(share_percent: usize) -> Vec<String> {
    let clean = clean_lines();
    let secrets = secret_lines();
    clean
        .iter()
        .enumerate()
        .map(|(i, line)| {
            if share_percent > 0 && (i * share_percent) % 100 < share_percent {
                secrets[i % secrets.len()].clone()
            } else {
                line.clone()
            }
        })
        .collect()
}

struct Case {
    name: &'static str,
    texts: Vec<String>,
    target: Option<f64>,
}

fn bench(c: &mut Criterion) {
    let redactor = Redactor::builtin();
    // The baseline at its best: with regex's default DFA cache (2 MiB) the
    // set's lazy DFA gives up on secret-bearing lines and falls back to a
    // far slower engine (about 50x here); 8 MiB keeps it a DFA.
    let set = RegexSetBuilder::new(BUILTIN_RULES.iter().map(|r| r.regex))
        .dfa_size_limit(8 * 1024 * 1024)
        .build()
        .expect("set");
    let cases = [
        Case {
            name: "clean",
            texts: corpus(0),
            target: None,
        },
        Case {
            name: "mixed",
            texts: corpus(2),
            target: Some(1.5),
        },
        Case {
            name: "dirty",
            texts: corpus(20),
            target: None,
        },
    ];
    let mut summary = Vec::new();
    for case in &cases {
        let bytes: usize = case.texts.iter().map(String::len).sum();
        let mut expected = Redactions::new();
        for text in &case.texts {
            let _ = redactor.redact_counting(text, &mut expected);
        }
        let scan = || {
            for text in &case.texts {
                black_box(set.matches(black_box(text)).matched_any());
            }
        };
        let redact = || {
            let mut counts = Redactions::new();
            for text in &case.texts {
                black_box(redactor.redact_counting(black_box(text), &mut counts));
            }
            black_box(counts);
        };
        let mut group = c.benchmark_group(format!("redaction_{}", case.name));
        group.bench_function("regexset_matches", |b| b.iter(scan));
        group.bench_function("redact_counting", |b| b.iter(redact));
        group.finish();
        // The printed ratio: both passes interleaved, round after round, the
        // fastest of each, so that load changes on a shared machine hit both.
        let (mut base, mut red) = (f64::MAX, f64::MAX);
        for _ in 0..ROUNDS {
            base = base.min(timed(scan));
            red = red.min(timed(redact));
        }
        let ratio = red / base;
        let mb = bytes as f64 / 1e6;
        let n = case.texts.len() as f64;
        println!(
            "{}: {} texts, {} bytes, {} secrets; RegexSet::matches {:.0} ns/text ({:.0} MB/s), \
             redaction {:.0} ns/text ({:.0} MB/s), ratio {:.2}{}",
            case.name,
            case.texts.len(),
            bytes,
            expected.total(),
            base * 1e9 / n,
            mb / base,
            red * 1e9 / n,
            mb / red,
            ratio,
            case.target
                .map_or_else(String::new, |t| format!(" (target <= {t})"))
        );
        summary.push(format!("ratio_{}={ratio:.2}", case.name));
    }
    println!("{}", summary.join(" "));
}

/// Interleaved rounds behind each printed ratio.
const ROUNDS: usize = 200;

/// Seconds `f` takes once.
fn timed(f: impl Fn()) -> f64 {
    let start = Instant::now();
    f();
    start.elapsed().as_secs_f64()
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}

//! The knowledge base of `[knowledge]`, and `aci index`, which builds or
//! updates its persistent index with a progress bar and prints what changed.
//!
//! With `[knowledge] dir` set, the index lives under `index_dir` (default: the
//! platform cache directory, e.g. `~/.cache/aci/knowledge` on Linux), one
//! subdirectory per knowledge directory, and later processes reuse it while
//! the files are unchanged. `persistent = false` keeps it in RAM instead
//! (rebuilt by every process).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};
use projectors_rag::{Change, DirOptions, IndexReport, MarkdownKnowledgeBase, Progress};

use crate::config::{Config, KnowledgeSection};
use crate::error::CliError;

/// The knowledge base `section` describes: the bundled runbooks without a
/// `dir`, else the directory's (persistent unless `persistent = false`).
/// `progress` hears of the indexing.
pub(crate) fn open_knowledge(
    section: &KnowledgeSection,
    progress: impl FnMut(Progress),
) -> Result<(MarkdownKnowledgeBase, Option<IndexReport>), CliError> {
    let Some(dir) = &section.dir else {
        let base = MarkdownKnowledgeBase::bundled()
            .map_err(|e| CliError::config(format!("bundled knowledge base: {e}")))?;
        return Ok((base, None));
    };
    let mut options = DirOptions::default();
    if let Some(index_dir) = index_dir(section) {
        options = options.index_dir(index_dir);
    }
    let (base, report) = MarkdownKnowledgeBase::open_dir(dir, &options, progress)
        .map_err(|e| CliError::config(format!("knowledge directory: {e}")))?;
    Ok((base, Some(report)))
}

/// Where the persistent index lives: `index_dir`, else the platform cache
/// directory; `None` when `persistent = false` or no cache directory is known.
pub(crate) fn index_dir(section: &KnowledgeSection) -> Option<PathBuf> {
    if section.persistent == Some(false) {
        return None;
    }
    section.index_dir.clone().or_else(|| {
        directories::ProjectDirs::from("", "", "aci").map(|dirs| dirs.cache_dir().join("knowledge"))
    })
}

/// `aci index`: builds or updates the index of `[knowledge] dir`.
pub(crate) async fn run(config: &Config) -> Result<ExitCode, CliError> {
    if config.knowledge.dir.is_none() {
        return Err(CliError::config(
            "aci index needs a knowledge directory: set [knowledge] dir in the --config file",
        ));
    }
    if let Some(embeddings) = &config.knowledge.embeddings {
        embeddings.check()?;
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} files")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message("indexing knowledge");
    let (base, report) = open_knowledge(&config.knowledge, |progress| match progress {
        Progress::Found { files } => bar.set_length(files as u64),
        Progress::Read { done, .. } => bar.set_position(done as u64),
        Progress::Failed { path, code } => {
            bar.suspend(|| eprintln!("aci: skipped knowledge file {path} ({code})"));
        }
        _ => {}
    })?;
    bar.finish_and_clear();
    if let Some(report) = &report {
        print!("{}", summary(report));
    }
    if config.knowledge.embeddings.is_some() {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} chunks")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_message("embedding chunks");
        let embedded = crate::embeddings::attach(
            config.knowledge.embeddings.as_ref(),
            &base,
            crate::embeddings::vectors_dir(&config.knowledge),
            |done, total| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            },
        )
        .await?;
        bar.finish_and_clear();
        match embedded {
            Some(report) => println!(
                "{} chunks: {} embedded, {} reused",
                report.chunks, report.embedded, report.reused
            ),
            None => println!("chunks not embedded: lookup_knowledge answers with BM25 alone"),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What an update did, as `aci index` prints it.
pub(crate) fn summary(report: &IndexReport) -> String {
    let mut out = String::new();
    match &report.index_path {
        Some(path) => {
            let _ = write!(out, "knowledge index {}", path.display());
        }
        None => out.push_str("knowledge index in memory"),
    }
    if let Some(rebuilt) = report.rebuilt {
        let _ = write!(out, " (built anew: {})", rebuilt.as_str());
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{} files: {} reused, {} added, {} updated, {} removed, {} failed",
        report.files,
        report.reused,
        report.added,
        report.updated,
        report.removed,
        report.failed.len()
    );
    for (path, change) in &report.changes {
        let label = match change {
            Change::Added => "added",
            Change::Updated => "updated",
            Change::Removed => "removed",
            _ => "changed",
        };
        let _ = writeln!(out, "  {label:<8} {path}");
    }
    for failure in &report.failed {
        let _ = writeln!(out, "  {:<8} {} ({})", "failed", failure.path, failure.code);
    }
    let _ = writeln!(
        out,
        "{} documents, {} chunks",
        report.documents, report.chunks
    );
    out
}

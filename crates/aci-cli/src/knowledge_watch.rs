//! `aci serve` picks up changed knowledge files without a restart: the
//! knowledge directory is watched (notify, debounced), and a batch of changes
//! to `.md`/`.txt` files (or to directories) refreshes the knowledge base,
//! which updates its index incrementally and swaps its searcher atomically. A
//! call in flight finishes on the searcher it started with. With
//! `[knowledge.embeddings]`, the changed chunks are embedded next; until
//! they are, searches answer with BM25 alone (fallback `VECTORS_NOT_READY`).

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use notify_debouncer_full::notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};
use projectors_rag::MarkdownKnowledgeBase;

use crate::app::App;

/// How long the directory must be quiet before a batch of changes is applied.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// Watches while alive; dropping it stops the watcher and its thread.
pub(crate) struct KnowledgeWatch {
    _debouncer: Debouncer<notify_debouncer_full::notify::RecommendedWatcher, RecommendedCache>,
}

/// Starts watching the app's knowledge directory, if it has one. A watcher
/// that cannot start is reported on stderr; the server runs without it.
pub(crate) fn watch(app: &App) -> Option<KnowledgeWatch> {
    let dir = app.knowledge.knowledge_dir()?;
    let base = app.knowledge.clone();
    match start(base, &dir) {
        Ok(watch) => Some(watch),
        Err(error) => {
            eprintln!(
                "aci: not watching the knowledge directory for changes: {}",
                error.kind_text()
            );
            None
        }
    }
}

fn start(
    base: MarkdownKnowledgeBase,
    dir: &Path,
) -> Result<KnowledgeWatch, notify_debouncer_full::notify::Error> {
    let (sender, events) = mpsc::channel::<DebounceEventResult>();
    let mut debouncer = new_debouncer(DEBOUNCE, None, sender)?;
    debouncer.watch(dir, RecursiveMode::Recursive)?;
    let runtime = tokio::runtime::Handle::try_current().ok();
    let spawned = std::thread::Builder::new()
        .name("aci-knowledge-watch".to_owned())
        .spawn(move || apply(&base, &events, runtime.as_ref()));
    if let Err(error) = spawned {
        return Err(notify_debouncer_full::notify::Error::io(error));
    }
    Ok(KnowledgeWatch {
        _debouncer: debouncer,
    })
}

/// Refreshes `base` after each batch that touches a knowledge file, until
/// the debouncer (the sender) is dropped.
fn apply(
    base: &MarkdownKnowledgeBase,
    events: &mpsc::Receiver<DebounceEventResult>,
    runtime: Option<&tokio::runtime::Handle>,
) {
    for batch in events {
        let relevant = match batch {
            Ok(batch) => batch.iter().any(|event| {
                event
                    .paths
                    .iter()
                    .any(|path| base.indexes_file(path) || path.extension().is_none())
            }),
            // Lost events: refresh, the manifest tells what changed.
            Err(_) => true,
        };
        if !relevant {
            continue;
        }
        match base.refresh() {
            Ok(Some(report)) => {
                for failure in &report.failed {
                    eprintln!(
                        "aci: skipped knowledge file {} ({})",
                        failure.path, failure.code
                    );
                }
                if !report.unchanged() {
                    eprintln!(
                        "aci: knowledge updated: {} added, {} updated, {} removed ({} documents)",
                        report.added, report.updated, report.removed, report.documents
                    );
                }
            }
            Ok(None) => {}
            Err(error) => eprintln!("aci: knowledge refresh failed: {error}"),
        }
        // The watcher's own thread, not one of the runtime's: blocking on
        // the embedding here is allowed and keeps refreshes in order.
        if let Some(runtime) = runtime
            && let Err(error) = runtime.block_on(base.embed_chunks(|_, _| {}))
        {
            eprintln!(
                "aci: warning: embedding the changed knowledge chunks failed ({}): {error}",
                error.code()
            );
        }
    }
}

/// A notify error in words, without paths.
trait KindText {
    fn kind_text(&self) -> String;
}

impl KindText for notify_debouncer_full::notify::Error {
    fn kind_text(&self) -> String {
        match &self.kind {
            notify_debouncer_full::notify::ErrorKind::Io(error) => error.kind().to_string(),
            notify_debouncer_full::notify::ErrorKind::MaxFilesWatch => {
                "the system's watch limit is reached".to_owned()
            }
            _ => "the watcher could not start".to_owned(),
        }
    }
}

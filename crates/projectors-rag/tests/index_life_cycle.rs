//! The knowledge index over a directory: persistent reuse, incremental
//! updates, corrupt and outdated indexes, failing files, refresh while
//! serving, and errors (never NO_EVIDENCE) when nothing could be searched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use aci_contracts::RunId;
use invocation_core::{Limits, RunContext, ToolBoundary, ToolEnvelope};
use projectors_rag::{
    ANALYZER_VERSION, Change, DirOptions, Error, IndexReport, MarkdownDocument,
    MarkdownKnowledgeBase, Progress, Rebuild, lookup_knowledge_tool,
};
use serde_json::Value;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "projectors-rag-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    fn write(&self, relative: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn runbooks(dir: &TempDir, count: usize) {
    for i in 0..count {
        dir.write(
            &format!("team-{}/runbook-{i:02}.md", i % 3),
            format!("# Runbook {i}\n\n## Symptoms\n\nService svc{i} returns errors.\n\n## 处理\n\n重启 svc{i} 服务。\n"),
        );
    }
}

fn open(dir: &TempDir, index: &TempDir) -> (MarkdownKnowledgeBase, IndexReport) {
    MarkdownKnowledgeBase::open_dir(
        dir.path(),
        &DirOptions::default().index_dir(index.path()),
        |_| {},
    )
    .unwrap()
}

fn top_id(base: &MarkdownKnowledgeBase, query: &str) -> Option<String> {
    base.search(query).unwrap()["documents"]
        .as_array()
        .unwrap()
        .first()
        .map(|d| d["document_id"].as_str().unwrap().to_owned())
}

#[test]
fn a_second_open_reuses_the_index_and_one_changed_file_is_reindexed_alone() {
    let dir = TempDir::new("kb");
    let index = TempDir::new("index");
    runbooks(&dir, 12);

    let (first, report) = open(&dir, &index);
    assert_eq!(report.rebuilt, Some(Rebuild::New));
    assert!(report.persistent);
    assert_eq!((report.files, report.added, report.reused), (12, 12, 0));
    assert_eq!((report.documents, report.chunks), (12, 24));
    assert_eq!(top_id(&first, "svc7").as_deref(), Some("team-1/runbook-07"));
    drop(first);

    // A later open (another process would do the same): nothing re-indexed.
    let (second, report) = open(&dir, &index);
    assert!(report.unchanged(), "{report:?}");
    assert_eq!((report.reused, report.added, report.updated), (12, 0, 0));
    assert_eq!(report.chunks, 24);
    assert_eq!(
        top_id(&second, "重启 svc7").as_deref(),
        Some("team-1/runbook-07")
    );
    drop(second);

    // Touching a file without changing it changes nothing; changing it
    // re-indexes that file only; removing and adding are reported too.
    let same = std::fs::read(dir.path().join("team-0/runbook-03.md")).unwrap();
    dir.write("team-0/runbook-03.md", &same);
    dir.write(
        "team-1/runbook-04.md",
        "# Runbook 4\n\n## Symptoms\n\nThe flux capacitor overheats.\n",
    );
    std::fs::remove_file(dir.path().join("team-2/runbook-05.md")).unwrap();
    dir.write("new.txt", "Plain text: the warp core is unstable.\n");
    let (third, report) = open(&dir, &index);
    assert_eq!(report.rebuilt, None);
    assert_eq!(
        report.changes,
        vec![
            ("new.txt".to_owned(), Change::Added),
            ("team-1/runbook-04.md".to_owned(), Change::Updated),
            ("team-2/runbook-05.md".to_owned(), Change::Removed),
        ]
    );
    assert_eq!(
        (report.reused, report.added, report.updated, report.removed),
        (10, 1, 1, 1)
    );
    assert_eq!(report.documents, 12);
    assert_eq!(
        top_id(&third, "flux capacitor").as_deref(),
        Some("team-1/runbook-04")
    );
    assert_eq!(top_id(&third, "warp core").as_deref(), Some("new"));
    assert_eq!(top_id(&third, "svc5"), None);
    assert_eq!(
        top_id(&third, "svc4"),
        None,
        "the old chunks of a changed file are gone"
    );
}

#[test]
fn a_corrupt_index_directory_is_rebuilt_not_fatal() {
    let dir = TempDir::new("kb");
    let index = TempDir::new("index");
    runbooks(&dir, 3);
    drop(open(&dir, &index));
    let sub = std::fs::read_dir(index.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(sub.join("meta.json"), b"{ not json").unwrap();
    let (base, report) = open(&dir, &index);
    assert_eq!(report.rebuilt, Some(Rebuild::Corrupt));
    assert_eq!(report.added, 3);
    assert_eq!(top_id(&base, "svc2").as_deref(), Some("team-2/runbook-02"));
    drop(base);

    // Segment files that vanished: also rebuilt.
    for entry in std::fs::read_dir(&sub).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "idx" || e == "store") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let outcome = MarkdownKnowledgeBase::open_dir(
        dir.path(),
        &DirOptions::default().index_dir(index.path()),
        |_| {},
    );
    let (base, report) = outcome.unwrap();
    assert_eq!(report.rebuilt, Some(Rebuild::Corrupt), "{report:?}");
    assert_eq!(top_id(&base, "svc1").as_deref(), Some("team-1/runbook-01"));
}

#[test]
fn an_index_of_another_analyzer_version_is_rebuilt() {
    let dir = TempDir::new("kb");
    let index = TempDir::new("index");
    runbooks(&dir, 2);
    drop(open(&dir, &index));
    let sub = std::fs::read_dir(index.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let meta = std::fs::read_to_string(sub.join("meta.json")).unwrap();
    assert!(meta.contains(ANALYZER_VERSION));
    std::fs::write(
        sub.join("meta.json"),
        meta.replace(ANALYZER_VERSION, "runbook-v1-simple"),
    )
    .unwrap();
    let (_, report) = open(&dir, &index);
    assert_eq!(report.rebuilt, Some(Rebuild::VersionChanged));
    assert_eq!(report.added, 2);
}

#[test]
fn a_file_that_fails_is_reported_and_counted_and_the_rest_is_indexed() {
    let dir = TempDir::new("kb");
    dir.write("good.md", "# Good\n\nThe gizmo rattles.\n");
    dir.write("bad.md", [0x23, 0x20, 0xFF, 0xFE, 0x0A]);
    let index = TempDir::new("index");
    for round in 0..2 {
        let mut events = Vec::new();
        let (base, report) = MarkdownKnowledgeBase::open_dir(
            dir.path(),
            &DirOptions::default().index_dir(index.path()),
            |p| events.push(p),
        )
        .unwrap();
        assert!(
            events.contains(&Progress::Failed {
                path: "bad.md".to_owned(),
                code: "KNOWLEDGE_FILE_NOT_UTF8"
            }),
            "round {round}: {events:?}"
        );
        assert_eq!(report.failed.len(), 1, "round {round}");
        assert_eq!(report.failed[0].path, "bad.md");
        assert!(report.failed[0].message.contains("bad.md"));
        assert_eq!(report.documents, 1);
        assert_eq!(top_id(&base, "gizmo").as_deref(), Some("good"));
        if round == 1 {
            assert!(
                report.unchanged(),
                "a failing file is not retried: {report:?}"
            );
        }
    }
}

#[test]
fn nothing_searchable_is_an_error_never_an_empty_answer() {
    let empty = TempDir::new("empty");
    empty.write("notes.rst", "not a knowledge file");
    let error =
        MarkdownKnowledgeBase::open_dir(empty.path(), &DirOptions::default(), |_| {}).unwrap_err();
    assert_eq!(error.code(), "KNOWLEDGE_NO_DOCUMENTS");
    assert!(error.to_string().contains("plain text (*.txt)"), "{error}");

    let broken = TempDir::new("broken");
    broken.write("a.md", [0xFF]);
    broken.write("b.txt", [0xC0, 0x80]);
    let error =
        MarkdownKnowledgeBase::open_dir(broken.path(), &DirOptions::default(), |_| {}).unwrap_err();
    assert!(matches!(error, Error::FileNotUtf8 { .. }), "{error}");
}

fn boundary(base: MarkdownKnowledgeBase, limits: Limits) -> ToolBoundary {
    ToolBoundary::builder(Arc::new(store_memory::MemoryStore::new()))
        .limits(limits)
        .tool(lookup_knowledge_tool(base))
        .build()
        .unwrap()
}

async fn lookup(boundary: &ToolBoundary, call: &str, query: &str) -> Value {
    let run = RunContext::new(
        RunId::new("run-life").unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let arguments = serde_json::json!({ "query": query }).to_string();
    let envelope = ToolEnvelope::new(call, "run-life", "lookup_knowledge", arguments);
    boundary.invoke(&run, envelope).await.observation.to_json()
}

#[tokio::test]
async fn refresh_picks_up_files_and_an_emptied_directory_gives_errors() {
    let dir = TempDir::new("kb");
    dir.write("a.md", "# Alpha\n\nThe alpha pump hums.\n");
    let (base, _) =
        MarkdownKnowledgeBase::open_dir(dir.path(), &DirOptions::default(), |_| {}).unwrap();
    let watcher_side = base.clone();
    let boundary = boundary(base, Limits::default());
    assert_eq!(
        lookup(&boundary, "c1", "beta valve").await["evidence_status"],
        "NO_EVIDENCE"
    );

    dir.write("b.md", "# Beta\n\nThe beta valve sticks.\n");
    let report = watcher_side.refresh().unwrap().unwrap();
    assert_eq!(report.changes, vec![("b.md".to_owned(), Change::Added)]);
    assert_eq!(
        lookup(&boundary, "c2", "beta valve").await["evidence_status"],
        "EVIDENCE_FOUND"
    );

    std::fs::remove_file(dir.path().join("a.md")).unwrap();
    std::fs::remove_file(dir.path().join("b.md")).unwrap();
    let report = watcher_side.refresh().unwrap().unwrap();
    assert_eq!(report.documents, 0);
    let observation = lookup(&boundary, "c3", "beta valve").await;
    assert_eq!(observation["evidence_status"], "ERROR", "{observation}");
    assert_eq!(observation["error_code"], "EXECUTION_FAILED");
    assert!(matches!(
        watcher_side.search("beta").unwrap_err(),
        Error::Unavailable { .. }
    ));

    std::fs::remove_dir_all(dir.path()).unwrap();
    assert!(watcher_side.refresh().is_err());
    assert_eq!(
        lookup(&boundary, "c4", "beta valve").await["evidence_status"],
        "ERROR"
    );

    std::fs::create_dir_all(dir.path()).unwrap();
    dir.write("c.md", "# Gamma\n\nThe gamma valve is back.\n");
    watcher_side.refresh().unwrap();
    assert_eq!(
        lookup(&boundary, "c5", "gamma valve").await["evidence_status"],
        "EVIDENCE_FOUND"
    );
}

fn large_base() -> MarkdownKnowledgeBase {
    let words = [
        "pool", "timeout", "disk", "latency", "replica", "queue", "cache", "leak", "restart",
        "error",
    ];
    let documents = (0..3000).map(|i| {
        let mut text = format!("# Runbook {i}\n\n## Symptoms\n\n");
        for j in 0..40 {
            text.push_str(words[(i * 7 + j) % words.len()]);
            text.push(' ');
        }
        MarkdownDocument {
            document_id: format!("rb-{i}"),
            source: format!("rb-{i}.md"),
            text,
        }
    });
    MarkdownKnowledgeBase::from_documents(documents).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_timeout_shorter_than_the_search_is_execution_timeout() {
    // Every chunk matches and all 3,000 are ranked, fetched and analyzed for
    // coverage: tens of milliseconds of CPU, far beyond the timer's 1 ms tick.
    let base = large_base();
    let slow = base.clone().with_top_k(3000);
    let query = "pool timeout disk latency replica queue cache leak restart error";
    let started = std::time::Instant::now();
    slow.search(query).unwrap();
    let search_time = started.elapsed();
    let quick = Limits {
        timeout: Duration::from_micros(1),
        ..Limits::default()
    };
    let observation = lookup(&boundary(slow, quick), "c-timeout", query).await;
    assert_eq!(observation["evidence_status"], "ERROR", "{observation}");
    assert_eq!(
        observation["error_code"], "EXECUTION_TIMEOUT",
        "a search of {search_time:?}"
    );
    // With time to finish, a search finds evidence.
    let observation = lookup(&boundary(base, Limits::default()), "c-ok", query).await;
    assert_eq!(observation["evidence_status"], "EVIDENCE_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searches_in_flight_during_a_swap_complete() {
    let dir = TempDir::new("kb");
    runbooks(&dir, 30);
    let (base, _) =
        MarkdownKnowledgeBase::open_dir(dir.path(), &DirOptions::default(), |_| {}).unwrap();
    let boundary = Arc::new(boundary(base.clone(), Limits::default()));
    let mut calls = Vec::new();
    for i in 0..40 {
        let boundary = Arc::clone(&boundary);
        calls.push(tokio::spawn(async move {
            lookup(&boundary, &format!("c{i}"), "svc3 errors").await
        }));
        if i % 10 == 5 {
            dir.write(
                &format!("extra-{i}.md"),
                format!("# Extra {i}\n\nsvc3 errors again {i}.\n"),
            );
            let refresher = base.clone();
            tokio::task::spawn_blocking(move || refresher.refresh().unwrap())
                .await
                .unwrap();
        }
    }
    for call in calls {
        let observation = call.await.unwrap();
        assert_eq!(
            observation["evidence_status"], "EVIDENCE_FOUND",
            "{observation}"
        );
    }
}

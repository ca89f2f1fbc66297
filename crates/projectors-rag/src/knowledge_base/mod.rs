//! The knowledge base: Markdown and plain-text runbooks chunked by headings
//! and indexed with tantivy (BM25), in RAM or in a persistent index directory.
//!
//! # Indexing
//! Each document is chunked by [`markdown`] rules (a chunk is one heading's
//! section, or a run of its paragraphs of at most [`CHUNK_TARGET_BYTES`]);
//! plain-text files have no headings, and a leading YAML front matter block
//! is not body text (its `title`, when present, is the document's title).
//! Three fields are indexed per chunk: the document title and the heading
//! path (both boosted ×2) and the chunk text, all through the analyzer of
//! [`analysis`]: words split at anything that is not a letter or digit,
//! full-width and half-width forms folded (NFKC), lowercased, CJK runs cut
//! into character bigrams, English stop words removed and English words
//! stemmed (Snowball), so `timeouts` finds `timeout` and `连接池` finds
//! `数据库连接池耗尽`.
//!
//! # Searching
//! The query is analyzed the same way; its distinct terms (at most
//! [`MAX_QUERY_TERMS`]) become an OR of term queries, scored with BM25. No
//! query syntax is interpreted: every agent string, whatever its punctuation,
//! quotes, operators or script, is just words, and a query with no indexable
//! word finds nothing. The best [`DEFAULT_TOP_K`] chunks are returned.
//! Searching is CPU work: [`KnowledgeSource::retrieve`] runs it on tokio's
//! blocking pool, so the boundary's tool timeout can answer before it ends.
//!
//! # Nothing claimed absent that was not searched
//! A directory that holds no knowledge file, or whose files all failed to
//! read or parse, is an error ([`Error::NoDocuments`], or the first file's
//! error) when the base is opened, and makes later searches fail with
//! [`Error::Unavailable`] if it comes to that while serving: never an empty
//! answer. A file that fails is reported (a [`Progress::Failed`] event and
//! [`IndexReport::failed`]) and the others are indexed.
//!
//! # Index life cycle
//! [`MarkdownKnowledgeBase::open_dir`] with [`DirOptions::index_dir`] keeps
//! the index in a directory (one subdirectory per knowledge directory). The
//! index's commit payload is its manifest: the SHA-256 of every indexed
//! file, the analyzer version ([`ANALYZER_VERSION`]) and schema version.
//! Opening compares the files with the manifest: unchanged files are reused,
//! changed ones re-chunked, removed ones deleted, all in one commit; a
//! manifest of another version, or an index that cannot be opened, is removed
//! and rebuilt. [`MarkdownKnowledgeBase::refresh`] does the same while
//! serving and swaps the searcher atomically: a search in flight finishes on
//! the searcher it started with.
//!
//! # Relevance
//! BM25 scores rank the chunks but are not comparable across queries, so the
//! level comes from how much of the query a chunk covers: the share of the
//! query's distinct terms found in the chunk's title, heading path or text.
//! At least 3/4 is `high`, at least 2/5 `medium`, anything less `low`. The
//! response-level `relevance_level` is the highest level among the returned
//! chunks.
//!
//! # Response
//! [`MarkdownKnowledgeBase::search`] returns a retrieval response in the shape
//! a real retriever would: `documents` with `document_id`, `source`, `title`,
//! `heading_path` and `excerpt` (the exact chunk text), plus fields the
//! projector must drop (`chunk_id`, `score`, per-chunk `relevance_level`,
//! `matched_terms`, `metadata`, a `retrieval_trace`).

pub(crate) mod analysis;
pub mod evaluation;
mod files;
mod index;
pub(crate) mod markdown;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use async_trait::async_trait;
use invocation_core::ExecutionContext;
use serde_json::{Value, json};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value as _};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, Searcher, TantivyDocument, Term};

pub use analysis::{ANALYZER_VERSION, CjkSegmenter};
pub use index::{Change, FileFailure, IndexReport, Rebuild};
pub use markdown::{FileChunk, split_knowledge_file};

use crate::{Error, KnowledgeSource, KnowledgeSourceError, Result};
use index::{DirIndex, Fields};

/// Size target of a chunk in bytes. Sections up to it are one chunk; longer
/// ones are split at paragraph boundaries. Below the projector's default
/// excerpt bound, so a chunk normally reaches the agent whole.
pub const CHUNK_TARGET_BYTES: usize = 1200;
/// Chunks a search returns by default.
pub const DEFAULT_TOP_K: usize = 5;
/// Most distinct query terms searched; further terms are ignored.
pub const MAX_QUERY_TERMS: usize = 32;
/// Smallest share of the query's terms a chunk must cover to be `high`.
pub const HIGH_COVERAGE: f64 = 0.75;
/// Smallest share of the query's terms a chunk must cover to be `medium`.
pub const MEDIUM_COVERAGE: f64 = 0.4;

/// The runbooks shipped with the crate: (file name, text).
const BUNDLED: [(&str, &str); 7] = [
    (
        "connection-pool-exhaustion.md",
        include_str!("../../knowledge/connection-pool-exhaustion.md"),
    ),
    (
        "slow-queries.md",
        include_str!("../../knowledge/slow-queries.md"),
    ),
    (
        "disk-pressure.md",
        include_str!("../../knowledge/disk-pressure.md"),
    ),
    ("oom-kills.md", include_str!("../../knowledge/oom-kills.md")),
    (
        "tls-certificate-expiry.md",
        include_str!("../../knowledge/tls-certificate-expiry.md"),
    ),
    (
        "message-queue-backlog.md",
        include_str!("../../knowledge/message-queue-backlog.md"),
    ),
    (
        "dns-resolution-failures.md",
        include_str!("../../knowledge/dns-resolution-failures.md"),
    ),
];

/// The Chinese (and Chinese-English mixed) runbooks shipped with the crate,
/// under `knowledge/zh/`: (file name, text).
const BUNDLED_CHINESE: [(&str, &str); 4] = [
    (
        "db-connection-pool.md",
        include_str!("../../knowledge/zh/db-connection-pool.md"),
    ),
    (
        "disk-space.md",
        include_str!("../../knowledge/zh/disk-space.md"),
    ),
    (
        "redis-failover.md",
        include_str!("../../knowledge/zh/redis-failover.md"),
    ),
    (
        "jvm-full-gc.md",
        include_str!("../../knowledge/zh/jvm-full-gc.md"),
    ),
];

/// Progress of building a knowledge base from a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// The directory walk found `files` knowledge files.
    Found {
        /// Files to read.
        files: usize,
    },
    /// `done` of `total` files are read (and hashed).
    Read {
        /// Files read so far.
        done: usize,
        /// Files to read.
        total: usize,
    },
    /// A file could not be read or parsed; it is not indexed.
    Failed {
        /// Its path relative to the directory.
        path: String,
        /// The stable code of the failure.
        code: &'static str,
    },
    /// The index is built.
    Indexed {
        /// Documents indexed.
        documents: usize,
        /// Chunks indexed.
        chunks: usize,
    },
}

/// One Markdown document to index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkdownDocument {
    /// Stable id (the bundled and directory bases use the relative path
    /// without `.md`).
    pub document_id: String,
    /// Where it lives (the bundled and directory bases use the relative path).
    pub source: String,
    /// The Markdown text.
    pub text: String,
}

impl MarkdownDocument {
    /// The bundled English runbooks (`knowledge/*.md`), as
    /// [`MarkdownKnowledgeBase::bundled`] indexes them.
    #[must_use]
    pub fn bundled() -> Vec<Self> {
        BUNDLED
            .iter()
            .map(|(file, text)| Self {
                document_id: file.trim_end_matches(".md").to_owned(),
                source: format!("knowledge/{file}"),
                text: (*text).to_owned(),
            })
            .collect()
    }

    /// The bundled Chinese runbooks (`knowledge/zh/*.md`): database
    /// connection pool exhaustion, disk space, Redis failover, JVM full GC.
    #[must_use]
    pub fn bundled_chinese() -> Vec<Self> {
        BUNDLED_CHINESE
            .iter()
            .map(|(file, text)| Self {
                document_id: format!("zh/{}", file.trim_end_matches(".md")),
                source: format!("knowledge/zh/{file}"),
                text: (*text).to_owned(),
            })
            .collect()
    }
}

/// How [`MarkdownKnowledgeBase::open_dir`] indexes a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirOptions {
    /// Where the persistent index lives; `None` keeps it in RAM (built anew
    /// by every process).
    pub index_dir: Option<PathBuf>,
    /// Whether `*.txt` files are indexed too (as plain text).
    pub plain_text: bool,
    /// How CJK text is segmented.
    pub segmenter: CjkSegmenter,
}

impl Default for DirOptions {
    /// In RAM, Markdown and plain text, CJK bigrams.
    fn default() -> Self {
        Self {
            index_dir: None,
            plain_text: true,
            segmenter: CjkSegmenter::default(),
        }
    }
}

impl DirOptions {
    /// Keeps the index under `index_dir`.
    #[must_use]
    pub fn index_dir(mut self, index_dir: impl Into<PathBuf>) -> Self {
        self.index_dir = Some(index_dir.into());
        self
    }

    /// Indexes `*.txt` files too, or not.
    #[must_use]
    pub const fn plain_text(mut self, plain_text: bool) -> Self {
        self.plain_text = plain_text;
        self
    }

    /// Segments CJK text with `segmenter`.
    #[must_use]
    pub const fn segmenter(mut self, segmenter: CjkSegmenter) -> Self {
        self.segmenter = segmenter;
        self
    }
}

/// What searches run on: one searcher and what it holds.
struct Snapshot {
    searcher: Searcher,
    documents: usize,
    chunks: usize,
    unavailable: Option<Arc<Error>>,
}

struct Shared {
    fields: Fields,
    analyzer: TextAnalyzer,
    current: RwLock<Arc<Snapshot>>,
    /// The directory index, for [`MarkdownKnowledgeBase::refresh`].
    dir: Option<Mutex<DirIndex>>,
}

/// A [`KnowledgeSource`] over Markdown (and plain-text) documents, indexed
/// with tantivy. Clones share the index: a clone refreshed by a watcher
/// serves the new files to every clone.
#[derive(Clone)]
pub struct MarkdownKnowledgeBase {
    shared: Arc<Shared>,
    top_k: usize,
}

impl fmt::Debug for MarkdownKnowledgeBase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let snapshot = self.snapshot();
        f.debug_struct("MarkdownKnowledgeBase")
            .field("documents", &snapshot.documents)
            .field("chunks", &snapshot.chunks)
            .field("top_k", &self.top_k)
            .finish_non_exhaustive()
    }
}

impl MarkdownKnowledgeBase {
    /// The runbooks bundled with this crate (`knowledge/*.md`): connection-pool
    /// exhaustion, slow queries, disk pressure, OOM kills, TLS certificate
    /// expiry, message-queue backlog and DNS resolution failures.
    ///
    /// # Errors
    /// [`Error::Index`] if the in-memory index cannot be built.
    pub fn bundled() -> Result<Self> {
        Self::from_documents(MarkdownDocument::bundled())
    }

    /// Every `*.md` file under `dir` (recursively; hidden entries and
    /// symbolic links to directories are skipped), in path order, indexed in
    /// RAM. Ids and sources are paths relative to `dir` with `/` separators;
    /// ids drop `.md`. `progress` hears of the walk, each file read, each
    /// file that failed, and the finished index. A file that cannot be read
    /// or is not UTF-8 is skipped (and reported) unless every file fails.
    ///
    /// # Errors
    /// [`Error::DirectoryNotFound`], [`Error::NotADirectory`],
    /// [`Error::DirectoryUnreadable`], [`Error::NoDocuments`] (no `*.md`
    /// file), the first file's [`Error::FileUnreadable`] or
    /// [`Error::FileNotUtf8`] when no file could be indexed, or
    /// [`Error::Index`].
    pub fn from_dir(dir: impl AsRef<Path>, progress: impl FnMut(Progress)) -> Result<Self> {
        let options = DirOptions::default().plain_text(false);
        Self::open_dir(dir, &options, progress).map(|(base, _)| base)
    }

    /// Opens the knowledge base of `dir` as `options` say: builds its index,
    /// or reuses and updates the persistent one (see the module docs for the
    /// index life cycle). Ids drop the `.md` or `.txt` extension.
    ///
    /// # Errors
    /// As [`from_dir`](Self::from_dir), plus [`Error::IndexDirUnusable`] and
    /// [`Error::IndexLocked`] for a persistent index.
    pub fn open_dir(
        dir: impl AsRef<Path>,
        options: &DirOptions,
        mut progress: impl FnMut(Progress),
    ) -> Result<(Self, IndexReport)> {
        let dir = dir.as_ref();
        files::check_dir(dir)?;
        let analyzer = analysis::analyzer(options.segmenter);
        let (_, fields) = index::schema();
        let mut dir_index = DirIndex::open(
            dir,
            options.index_dir.as_deref(),
            options.segmenter,
            options.plain_text,
            &analyzer,
        )?;
        let (report, unavailable) = dir_index.sync(&fields, &mut progress)?;
        if let Some(error) = unavailable {
            return Err(error);
        }
        let snapshot = Snapshot {
            searcher: dir_index.reader.searcher(),
            documents: report.documents,
            chunks: report.chunks,
            unavailable: None,
        };
        let base = Self {
            shared: Arc::new(Shared {
                fields,
                analyzer,
                current: RwLock::new(Arc::new(snapshot)),
                dir: Some(Mutex::new(dir_index)),
            }),
            top_k: DEFAULT_TOP_K,
        };
        Ok((base, report))
    }

    /// Indexes `documents` (chunked by headings) in RAM. A document's title is
    /// its front matter's `title`, else its first level-1 heading, else its id.
    ///
    /// # Errors
    /// [`Error::Index`] if the in-memory index cannot be built.
    pub fn from_documents(documents: impl IntoIterator<Item = MarkdownDocument>) -> Result<Self> {
        Self::from_documents_with(documents, CjkSegmenter::default())
    }

    /// [`from_documents`](Self::from_documents) with another CJK segmenter.
    ///
    /// # Errors
    /// [`Error::Index`] if the in-memory index cannot be built.
    pub fn from_documents_with(
        documents: impl IntoIterator<Item = MarkdownDocument>,
        segmenter: CjkSegmenter,
    ) -> Result<Self> {
        let analyzer = analysis::analyzer(segmenter);
        let (schema, fields) = index::schema();
        let index = Index::create_in_ram(schema);
        index.tokenizers().register("runbook", analyzer.clone());
        let writer = index::writer(&index).map_err(|source| Error::Index { source })?;
        let mut count = 0_usize;
        let mut chunks = 0_usize;
        for document in documents {
            count += 1;
            for chunk in index::chunk_document(
                &document.document_id,
                &document.source,
                &document.text,
                markdown::Format::Markdown,
            ) {
                index::add_chunk(&writer, &fields, &chunk)?;
                chunks += 1;
            }
        }
        let mut writer = writer;
        writer.commit().map_err(|source| Error::Index { source })?;
        writer
            .wait_merging_threads()
            .map_err(|source| Error::Index { source })?;
        let reader = index::reader(&index)?;
        let snapshot = Snapshot {
            searcher: reader.searcher(),
            documents: count,
            chunks,
            unavailable: None,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                fields,
                analyzer,
                current: RwLock::new(Arc::new(snapshot)),
                dir: None,
            }),
            top_k: DEFAULT_TOP_K,
        })
    }

    /// Returns at most `top_k` chunks per search (at least 1).
    #[must_use]
    pub fn with_top_k(mut self, top_k: usize) -> Self {
        self.top_k = top_k.max(1);
        self
    }

    /// Number of documents indexed.
    #[must_use]
    pub fn document_count(&self) -> usize {
        self.snapshot().documents
    }

    /// Number of chunks indexed.
    #[must_use]
    pub fn chunk_count(&self) -> usize {
        self.snapshot().chunks
    }

    /// Re-reads the knowledge directory and applies what changed (see the
    /// module docs), then swaps the searcher: searches already running finish
    /// on the old one. If the directory now holds nothing indexable, later
    /// searches fail with [`Error::Unavailable`] until a refresh finds files
    /// again. `None` for a base not opened from a directory.
    ///
    /// # Errors
    /// The directory or index errors of [`open_dir`](Self::open_dir); the
    /// base keeps serving what it had.
    pub fn refresh(&self) -> Result<Option<IndexReport>> {
        let Some(dir) = &self.shared.dir else {
            return Ok(None);
        };
        let mut dir = dir.lock().unwrap_or_else(PoisonError::into_inner);
        let (report, unavailable) = match dir.sync(&self.shared.fields, &mut |_| {}) {
            Ok(done) => done,
            // The directory itself is gone or unreadable: nothing to search.
            Err(
                error @ (Error::DirectoryNotFound { .. }
                | Error::NotADirectory { .. }
                | Error::DirectoryUnreadable { .. }),
            ) => {
                let error = Arc::new(error);
                self.swap(|old| Snapshot {
                    searcher: old.searcher.clone(),
                    documents: 0,
                    chunks: 0,
                    unavailable: Some(Arc::clone(&error)),
                });
                return Err(Error::Unavailable { source: error });
            }
            Err(error) => return Err(error),
        };
        let searcher = dir.reader.searcher();
        self.swap(|_| Snapshot {
            searcher,
            documents: report.documents,
            chunks: report.chunks,
            unavailable: unavailable.map(Arc::new),
        });
        Ok(Some(report))
    }

    /// The knowledge directory this base was opened from, if any.
    #[must_use]
    pub fn knowledge_dir(&self) -> Option<PathBuf> {
        self.shared.dir.as_ref().map(|dir| {
            dir.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .root
                .clone()
        })
    }

    /// Whether `path` is a file this base would index (by its extension).
    /// Watchers use it to ignore other files.
    #[must_use]
    pub fn indexes_file(&self, path: &Path) -> bool {
        let plain_text = self.shared.dir.as_ref().is_some_and(|dir| {
            dir.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .plain_text
        });
        index::is_knowledge_file(path, plain_text)
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(
            &self
                .shared
                .current
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    fn swap(&self, next: impl FnOnce(&Snapshot) -> Snapshot) {
        let mut current = self
            .shared
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let replacement = next(&current);
        *current = Arc::new(replacement);
    }

    /// Searches for `query` and returns the retrieval response (see the
    /// module docs for its shape). A query with no indexable word returns no
    /// documents.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the directory holds nothing indexable,
    /// [`Error::Search`] if the index fails.
    pub fn search(&self, query: &str) -> Result<Value> {
        search(&self.shared, &self.snapshot(), self.top_k, query)
    }
}

#[async_trait]
impl KnowledgeSource for MarkdownKnowledgeBase {
    async fn retrieve(
        &self,
        query: &str,
        _context: &ExecutionContext,
    ) -> Result<Value, KnowledgeSourceError> {
        // BM25 over many chunks is CPU work: on the blocking pool, the
        // boundary's timeout can answer while it runs.
        let shared = Arc::clone(&self.shared);
        let snapshot = self.snapshot();
        let top_k = self.top_k;
        let query = query.to_owned();
        tokio::task::spawn_blocking(move || search(&shared, &snapshot, top_k, &query))
            .await
            .map_err(KnowledgeSourceError::permanent)?
            .map_err(KnowledgeSourceError::from)
    }
}

struct Hit {
    score: f32,
    document_id: String,
    source: String,
    title: String,
    heading_path: Vec<String>,
    ordinal: u64,
    start: u64,
    end: u64,
    text: String,
}

fn search(shared: &Shared, snapshot: &Snapshot, top_k: usize, query: &str) -> Result<Value> {
    if let Some(error) = &snapshot.unavailable {
        return Err(Error::Unavailable {
            source: Arc::clone(error),
        });
    }
    let mut terms: Vec<String> = Vec::new();
    for term in analysis::analyze(&shared.analyzer, query) {
        if terms.len() == MAX_QUERY_TERMS {
            break;
        }
        if !terms.contains(&term) {
            terms.push(term);
        }
    }
    let hits = if terms.is_empty() || snapshot.chunks == 0 {
        Vec::new()
    } else {
        top_chunks(&shared.fields, &snapshot.searcher, top_k, &terms)
            .map_err(|source| Error::Search { source })?
    };

    let mut best: Option<&'static str> = None;
    let documents: Vec<Value> = hits
        .iter()
        .map(|hit| {
            let chunk_terms =
                index::chunk_terms(&shared.analyzer, &hit.title, &hit.heading_path, &hit.text);
            let matched: Vec<&String> = terms.iter().filter(|t| chunk_terms.contains(*t)).collect();
            let level = level_for(matched.len(), terms.len());
            if best.is_none_or(|b| rank(level) < rank(b)) {
                best = Some(level);
            }
            json!({
                "document_id": hit.document_id,
                "chunk_id": format!("{}#{}", hit.document_id, hit.ordinal),
                "source": hit.source,
                "title": hit.title,
                "heading_path": hit.heading_path,
                "excerpt": hit.text,
                "score": hit.score,
                "relevance_level": level,
                "matched_terms": matched,
                "metadata": {
                    "chunk_ordinal": hit.ordinal,
                    "byte_start": hit.start,
                    "byte_end": hit.end,
                },
            })
        })
        .collect();
    let mut response = json!({
        "engine": "tantivy-bm25",
        "query": query,
        "documents": documents,
        "retrieval_trace": {
            "analyzed_terms": terms,
            "top_k": top_k,
            "indexed_chunks": snapshot.chunks,
            "fields": {"title": 2.0, "heading_path": 2.0, "text": 1.0},
        },
    });
    if let (Some(level), Some(object)) = (best, response.as_object_mut()) {
        object.insert("relevance_level".to_owned(), Value::from(level));
    }
    Ok(response)
}

fn top_chunks(
    fields: &Fields,
    searcher: &Searcher,
    top_k: usize,
    terms: &[String],
) -> tantivy::Result<Vec<Hit>> {
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(terms.len() * 3);
    for term in terms {
        for (field, boost) in [
            (fields.title, 2.0),
            (fields.headings, 2.0),
            (fields.body, 1.0),
        ] {
            let query = TermQuery::new(
                Term::from_field_text(field, term),
                IndexRecordOption::WithFreqs,
            );
            clauses.push((
                Occur::Should,
                Box::new(BoostQuery::new(Box::new(query), boost)),
            ));
        }
    }
    let query = BooleanQuery::new(clauses);
    let top = searcher.search(&query, &TopDocs::with_limit(top_k).order_by_score())?;
    let mut hits = Vec::with_capacity(top.len());
    for (score, address) in top {
        let document: TantivyDocument = searcher.doc(address)?;
        let text = |field| {
            document
                .get_first(field)
                .and_then(|value| value.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let number = |field| {
            document
                .get_first(field)
                .and_then(|value| value.as_u64())
                .unwrap_or_default()
        };
        hits.push(Hit {
            score,
            document_id: text(fields.document_id),
            source: text(fields.source),
            title: text(fields.title),
            heading_path: serde_json::from_str(&text(fields.headings_json)).unwrap_or_default(),
            ordinal: number(fields.ordinal),
            start: number(fields.start),
            end: number(fields.end),
            text: text(fields.body),
        });
    }
    Ok(hits)
}

/// `high`, `medium` or `low` from the share of query terms matched.
fn level_for(matched: usize, total: usize) -> &'static str {
    #[allow(clippy::cast_precision_loss)] // term counts are at most MAX_QUERY_TERMS
    let coverage = matched as f64 / total.max(1) as f64;
    if coverage >= HIGH_COVERAGE {
        "high"
    } else if coverage >= MEDIUM_COVERAGE {
        "medium"
    } else {
        "low"
    }
}

fn rank(level: &str) -> u8 {
    match level {
        "high" => 0,
        "medium" => 1,
        _ => 2,
    }
}

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
mod vectors;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use async_trait::async_trait;
use invocation_core::ExecutionContext;
use serde_json::{Value, json};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value as _};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{DocAddress, Index, Searcher, TantivyDocument, Term};

pub use analysis::{ANALYZER_VERSION, CjkSegmenter};
pub use index::{Change, FileFailure, IndexReport, Rebuild};
pub use markdown::{FileChunk, split_knowledge_file};
pub use vectors::{
    EVIDENCE_SIMILARITY_CHINESE, EVIDENCE_SIMILARITY_JAPANESE, EVIDENCE_SIMILARITY_KOREAN,
    EVIDENCE_SIMILARITY_LATIN, EmbedReport, VECTORS_NOT_READY, VectorOptions, evidence_similarity,
};

use crate::embeddings::{EmbedError, Embedder};
use crate::{Error, KnowledgeSource, KnowledgeSourceError, Result};
use index::{DirIndex, Fields};
use vectors::{Nearest, VectorLeg, VectorTable};

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
/// Candidates each leg brings to the fusion.
pub const FUSION_CANDIDATES: usize = 20;
/// The rank constant of reciprocal rank fusion.
pub const RRF_K: f64 = 60.0;

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
    /// The persistent index's directory, where the vectors go beside it.
    index_path: Option<PathBuf>,
    /// The vector leg, once an embedder is attached.
    vector: OnceLock<VectorLeg>,
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
        let index_path = dir_index.index_path.clone();
        let base = Self {
            shared: Arc::new(Shared {
                fields,
                analyzer,
                current: RwLock::new(Arc::new(snapshot)),
                dir: Some(Mutex::new(dir_index)),
                index_path,
                vector: OnceLock::new(),
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
                index_path: None,
                vector: OnceLock::new(),
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

    /// Attaches the vector leg: `embedder` embeds every chunk (see
    /// [`embed_chunks`](Self::embed_chunks)) and each query, and searches
    /// fuse its nearest chunks with BM25's. The first embedder attached
    /// stays; `false` when one already was.
    pub fn set_embedder(&self, embedder: Arc<dyn Embedder>, options: VectorOptions) -> bool {
        let leg = VectorLeg::new(embedder, options, self.shared.index_path.as_deref());
        self.shared.vector.set(leg).is_ok()
    }

    /// Embeds the chunks of the current index whose vectors are not known
    /// yet (kept beside a persistent index, keyed by chunk hash, so a later
    /// process embeds nothing that did not change), then lets searches use
    /// the vector leg. Call it after opening and after each
    /// [`refresh`](Self::refresh); until it has run for the current index,
    /// searches answer with BM25 alone (fallback [`VECTORS_NOT_READY`]).
    /// `progress` hears (embedded, to embed). `None` without an embedder.
    ///
    /// # Errors
    /// The embedder's [`EmbedError`]; searches keep answering with BM25.
    pub async fn embed_chunks(
        &self,
        mut progress: impl FnMut(usize, usize) + Send,
    ) -> Result<Option<EmbedReport>, EmbedError> {
        let Some(leg) = self.shared.vector.get() else {
            return Ok(None);
        };
        let searcher = self.snapshot().searcher.clone();
        let synced = leg.sync(searcher, self.shared.fields, &mut progress).await;
        leg.note_sync(synced.as_ref().err().map(EmbedError::code));
        synced.map(Some)
    }

    /// Embeds `query` as the vector leg does (for evaluations).
    ///
    /// # Errors
    /// [`EmbedError`], [`EmbedError::Unavailable`] without an embedder.
    pub async fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let Some(leg) = self.shared.vector.get() else {
            return Err(EmbedError::Unavailable {
                message: "no embedder is attached".to_owned(),
            });
        };
        leg.embed_query(query).await
    }

    /// How often a search answered with BM25 alone although an embedder is
    /// attached, per reason code ([`EmbedError::code`] or
    /// [`VECTORS_NOT_READY`]).
    #[must_use]
    pub fn vector_fallbacks(&self) -> BTreeMap<&'static str, u64> {
        self.shared
            .vector
            .get()
            .map(VectorLeg::fallbacks)
            .unwrap_or_default()
    }

    /// Searches with the given `legs` and the query's vector (from
    /// [`embed_query`](Self::embed_query)): what
    /// [`evaluation`](crate::evaluation) compares. [`Legs::Bm25`] is
    /// [`search`](Self::search).
    ///
    /// # Errors
    /// As [`search`](Self::search).
    pub fn search_legs(&self, query: &str, legs: Legs, vector: Option<&[f32]>) -> Result<Value> {
        let snapshot = self.snapshot();
        let leg = self.shared.vector.get();
        let table = leg
            .and_then(VectorLeg::table)
            .filter(|table| table.serves(&snapshot.searcher));
        let plan = match (legs, table.as_deref(), vector, leg) {
            (Legs::Bm25, ..) | (_, None, ..) | (_, _, None, _) | (_, _, _, None) => None,
            (_, Some(table), Some(vector), Some(leg)) => Some(VectorPlan {
                table,
                query: vector,
                min_similarity: leg.options.min_similarity_for(query),
                model: leg.embedder.model_id(),
            }),
        };
        let legs = if plan.is_none() { Legs::Bm25 } else { legs };
        search_plan(
            &self.shared,
            &snapshot,
            self.top_k,
            query,
            legs,
            plan.as_ref(),
            None,
        )
    }
}

/// Which retrieval legs a search uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Legs {
    /// BM25 alone.
    Bm25,
    /// The vector leg alone (chunks at or above the evidence similarity).
    Vector,
    /// Both, fused by reciprocal rank.
    Fused,
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
        // The vector leg: the query's vector when the leg is ready, else the
        // reason it is not (BM25 answers alone, and says so).
        let mut vector: Option<(Arc<VectorTable>, Vec<f32>)> = None;
        let mut fallback = None;
        if let Some(leg) = shared.vector.get() {
            match leg.table().filter(|table| table.serves(&snapshot.searcher)) {
                None => fallback = Some(leg.not_ready()),
                Some(table) => match leg.embed_query(&query).await {
                    Ok(query_vector) => vector = Some((table, query_vector)),
                    Err(error) => fallback = Some(error.code()),
                },
            }
            if let Some(code) = fallback {
                leg.note_fallback(code);
            }
        }
        tokio::task::spawn_blocking(move || {
            let leg = shared.vector.get();
            let plan = vector
                .as_ref()
                .zip(leg)
                .map(|((table, query_vector), leg)| VectorPlan {
                    table,
                    query: query_vector,
                    min_similarity: leg.options.min_similarity_for(&query),
                    model: leg.embedder.model_id(),
                });
            let legs = if plan.is_some() {
                Legs::Fused
            } else {
                Legs::Bm25
            };
            search_plan(
                &shared,
                &snapshot,
                top_k,
                &query,
                legs,
                plan.as_ref(),
                fallback,
            )
        })
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

/// The vector leg of one search: the table of the snapshot's searcher and
/// the query's unit vector.
struct VectorPlan<'a> {
    table: &'a VectorTable,
    query: &'a [f32],
    min_similarity: f32,
    model: &'a str,
}

/// One chunk of the fused ranking.
#[derive(Debug, Clone, Copy)]
struct Ranked {
    address: DocAddress,
    score: f32,
    bm25_rank: Option<usize>,
    similarity: Option<f32>,
    vector_rank: Option<usize>,
}

fn search(shared: &Shared, snapshot: &Snapshot, top_k: usize, query: &str) -> Result<Value> {
    search_plan(shared, snapshot, top_k, query, Legs::Bm25, None, None)
}

fn search_plan(
    shared: &Shared,
    snapshot: &Snapshot,
    top_k: usize,
    query: &str,
    legs: Legs,
    vector: Option<&VectorPlan<'_>>,
    fallback: Option<&'static str>,
) -> Result<Value> {
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
    let vector = vector.filter(|_| legs != Legs::Bm25);
    let candidates = if vector.is_some() {
        top_k.max(FUSION_CANDIDATES)
    } else {
        top_k
    };
    let bm25 = if legs == Legs::Vector || terms.is_empty() || snapshot.chunks == 0 {
        Vec::new()
    } else {
        bm25_top(&shared.fields, &snapshot.searcher, candidates, &terms)
            .map_err(|source| Error::Search { source })?
    };
    let nearest = vector.map_or_else(Nearest::default, |plan| {
        plan.table.nearest(plan.query, candidates)
    });
    // An exact match is not overruled by similarity: BM25's first chunk
    // stays first when it covers a good share of the query's terms
    // (`medium` or `high`).
    let pin_first = match (vector, bm25.first()) {
        (Some(_), Some((_, address))) if legs == Legs::Fused => {
            let first = hit_at(&shared.fields, &snapshot.searcher, *address, 0.0)
                .map_err(|source| Error::Search { source })?;
            let chunk_terms = index::chunk_terms(
                &shared.analyzer,
                &first.title,
                &first.heading_path,
                &first.text,
            );
            let matched = terms.iter().filter(|t| chunk_terms.contains(*t)).count();
            level_for(matched, terms.len()) != "low"
        }
        _ => false,
    };
    let ranked = rank(legs, top_k, &bm25, &nearest, vector, pin_first);
    let hits = ranked
        .iter()
        .map(|ranked| {
            hit_at(
                &shared.fields,
                &snapshot.searcher,
                ranked.address,
                ranked.score,
            )
        })
        .collect::<tantivy::Result<Vec<Hit>>>()
        .map_err(|source| Error::Search { source })?;

    let mut best: Option<&'static str> = None;
    let documents: Vec<Value> = hits
        .iter()
        .zip(&ranked)
        .map(|(hit, ranked)| {
            let chunk_terms =
                index::chunk_terms(&shared.analyzer, &hit.title, &hit.heading_path, &hit.text);
            let matched: Vec<&String> = terms.iter().filter(|t| chunk_terms.contains(*t)).collect();
            let coverage = level_for(matched.len(), terms.len());
            let level = match vector {
                None => coverage,
                Some(plan) => agreement_level(ranked, coverage, plan.min_similarity),
            };
            if best.is_none_or(|b| level_rank(level) < level_rank(b)) {
                best = Some(level);
            }
            let mut document = json!({
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
            });
            if vector.is_some()
                && let Some(object) = document.as_object_mut()
            {
                object.insert(
                    "bm25_rank".to_owned(),
                    json!(ranked.bm25_rank.map(|r| r + 1)),
                );
                object.insert(
                    "vector_rank".to_owned(),
                    json!(ranked.vector_rank.map(|r| r + 1)),
                );
                object.insert("similarity".to_owned(), json!(ranked.similarity));
                object.insert(
                    "standing".to_owned(),
                    json!(ranked.similarity.map(|s| nearest.standing(s))),
                );
            }
            document
        })
        .collect();
    let mut trace = json!({
        "analyzed_terms": terms,
        "top_k": top_k,
        "indexed_chunks": snapshot.chunks,
        "fields": {"title": 2.0, "heading_path": 2.0, "text": 1.0},
    });
    if let Some(object) = trace.as_object_mut() {
        match (legs, vector) {
            (Legs::Vector, Some(_)) => object.insert("legs".to_owned(), json!(["vector"])),
            (Legs::Fused, Some(_)) => object.insert("legs".to_owned(), json!(["bm25", "vector"])),
            _ => object.insert("legs".to_owned(), json!(["bm25"])),
        };
        if let Some(plan) = vector {
            object.insert(
                "vector".to_owned(),
                json!({
                    "model": plan.model,
                    "min_similarity": plan.min_similarity,
                    "candidates": candidates,
                    "rrf_k": RRF_K,
                    "nearest_similarity": nearest.hits.first().map(|(similarity, _)| *similarity),
                    "nearest_standing": nearest.hits.first().map(|(similarity, _)| nearest.standing(*similarity)),
                    "mean_similarity": nearest.mean,
                }),
            );
        }
        if let Some(code) = fallback {
            object.insert("fallback".to_owned(), json!(code));
        }
    }
    let engine = if vector.is_some() {
        "tantivy-bm25+vector"
    } else {
        "tantivy-bm25"
    };
    let mut response = json!({
        "engine": engine,
        "query": query,
        "documents": documents,
        "retrieval_trace": trace,
    });
    if let (Some(level), Some(object)) = (best, response.as_object_mut()) {
        object.insert("relevance_level".to_owned(), Value::from(level));
    }
    Ok(response)
}

/// The `top_k` chunks of the search: BM25's order alone, the vector leg's
/// evidence alone, or both fused by reciprocal rank. In the fusion a chunk
/// either leg brought scores `1/(k + rank)` per leg that ranked it. When
/// BM25 found nothing, a chunk of the vector leg enters only at or above the
/// evidence similarity, so an unrelated question still finds nothing; when
/// BM25 found evidence, the vector leg's candidates compete by rank. With
/// `pin_first`, BM25's first chunk stays first.
fn rank(
    legs: Legs,
    top_k: usize,
    bm25: &[(f32, DocAddress)],
    nearest: &Nearest,
    vector: Option<&VectorPlan<'_>>,
    pin_first: bool,
) -> Vec<Ranked> {
    let Some(plan) = vector else {
        return bm25
            .iter()
            .take(top_k)
            .enumerate()
            .map(|(at, (score, address))| Ranked {
                address: *address,
                score: *score,
                bm25_rank: Some(at),
                similarity: None,
                vector_rank: None,
            })
            .collect();
    };
    let mut by_address: HashMap<DocAddress, Ranked> = HashMap::new();
    if legs == Legs::Fused {
        for (at, (_, address)) in bm25.iter().enumerate() {
            by_address.insert(
                *address,
                Ranked {
                    address: *address,
                    score: 0.0,
                    bm25_rank: Some(at),
                    similarity: None,
                    vector_rank: None,
                },
            );
        }
    }
    for (at, (similarity, address)) in nearest.hits.iter().enumerate() {
        let evidence =
            *similarity >= plan.min_similarity || (legs == Legs::Fused && !bm25.is_empty());
        match by_address.get_mut(address) {
            Some(ranked) => {
                ranked.similarity = Some(*similarity);
                ranked.vector_rank = Some(at);
            }
            None if evidence => {
                by_address.insert(
                    *address,
                    Ranked {
                        address: *address,
                        score: 0.0,
                        bm25_rank: None,
                        similarity: Some(*similarity),
                        vector_rank: Some(at),
                    },
                );
            }
            None => {}
        }
    }
    let mut ranked: Vec<Ranked> = by_address
        .into_values()
        .map(|mut ranked| {
            let reciprocal = |rank: Option<usize>| {
                #[allow(clippy::cast_precision_loss)] // ranks are below FUSION_CANDIDATES
                rank.map_or(0.0, |rank| 1.0 / (RRF_K + rank as f64 + 1.0))
            };
            #[allow(clippy::cast_possible_truncation)] // a score, not an amount
            {
                ranked.score =
                    (reciprocal(ranked.bm25_rank) + reciprocal(ranked.vector_rank)) as f32;
            }
            ranked
        })
        .collect();
    ranked.sort_by(|a, b| {
        let pinned = |r: &Ranked| pin_first && r.bm25_rank == Some(0);
        pinned(b)
            .cmp(&pinned(a))
            .then_with(|| b.score.total_cmp(&a.score))
            .then_with(|| {
                a.bm25_rank
                    .unwrap_or(usize::MAX)
                    .cmp(&b.bm25_rank.unwrap_or(usize::MAX))
            })
            .then_with(|| a.address.cmp(&b.address))
    });
    ranked.truncate(top_k);
    ranked
}

/// The level of a fused hit, from the agreement of the legs: both found it
/// (BM25 ranked it, the vector leg at evidence similarity) → `high`; BM25
/// alone → its term coverage, at most `medium`; the vector leg alone →
/// `medium` when it is the nearest chunk of all, else `low`.
fn agreement_level(ranked: &Ranked, coverage: &'static str, min_similarity: f32) -> &'static str {
    let vector_agrees = ranked.similarity.is_some_and(|s| s >= min_similarity);
    match (ranked.bm25_rank.is_some(), vector_agrees) {
        (true, true) => "high",
        (true, false) if coverage == "high" => "medium",
        (true, false) => coverage,
        (false, _) if ranked.vector_rank == Some(0) => "medium",
        (false, _) => "low",
    }
}

fn bm25_top(
    fields: &Fields,
    searcher: &Searcher,
    limit: usize,
    terms: &[String],
) -> tantivy::Result<Vec<(f32, DocAddress)>> {
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
    searcher.search(&query, &TopDocs::with_limit(limit).order_by_score())
}

fn hit_at(
    fields: &Fields,
    searcher: &Searcher,
    address: DocAddress,
    score: f32,
) -> tantivy::Result<Hit> {
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
    Ok(Hit {
        score,
        document_id: text(fields.document_id),
        source: text(fields.source),
        title: text(fields.title),
        heading_path: serde_json::from_str(&text(fields.headings_json)).unwrap_or_default(),
        ordinal: number(fields.ordinal),
        start: number(fields.start),
        end: number(fields.end),
        text: text(fields.body),
    })
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

fn level_rank(level: &str) -> u8 {
    match level {
        "high" => 0,
        "medium" => 1,
        _ => 2,
    }
}

//! The bundled knowledge base: Markdown runbooks chunked by headings and
//! indexed in RAM with tantivy (BM25).
//!
//! # Indexing
//! Each document is chunked by [`markdown`] rules (a chunk is one heading's
//! section, or a run of its paragraphs of at most [`CHUNK_TARGET_BYTES`]).
//! Three fields are indexed per chunk: the document title and the heading
//! path (both boosted ×2) and the chunk text. Text is split into words at
//! anything that is not a letter or digit, lowercased, stripped of English
//! stop words and stemmed (English Snowball), so `timeouts` finds `timeout`.
//!
//! # Searching
//! The query is analyzed the same way; its distinct terms (at most
//! [`MAX_QUERY_TERMS`]) become an OR of term queries, scored with BM25. No
//! query syntax is interpreted: every agent string, whatever its punctuation,
//! quotes, operators or script, is just words, and a query with no indexable
//! word finds nothing. The best [`DEFAULT_TOP_K`] chunks are returned.
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

pub(crate) mod markdown;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use invocation_core::{ExecutionContext, ExecutionError};
use serde_json::{Value, json};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, BoostQuery, Occur, Query, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value as _,
};
use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter, TextAnalyzer,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use crate::{Error, KnowledgeSource, Result};

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

const ANALYZER: &str = "runbook_en";
const INDEX_MEMORY_BYTES: usize = 20_000_000;
/// Words too common in queries to tell runbooks apart: Lucene's English stop
/// words plus question words.
const STOP_WORDS: [&str; 51] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with", "how", "what", "why", "when", "where", "which",
    "who", "do", "does", "i", "my", "we", "our", "can", "has", "have", "had", "been",
];

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

/// Progress of building a knowledge base from a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// The directory walk found `files` Markdown files.
    Found {
        /// Markdown files to read.
        files: usize,
    },
    /// `done` of `total` files are read and chunked.
    Read {
        /// Files read so far.
        done: usize,
        /// Files to read.
        total: usize,
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

/// A chunk as indexed.
#[derive(Debug, Clone)]
struct Chunk {
    document_id: String,
    source: String,
    title: String,
    heading_path: Vec<String>,
    ordinal: usize,
    start: usize,
    end: usize,
    text: String,
    terms: BTreeSet<String>,
}

#[derive(Debug, Clone, Copy)]
struct Fields {
    title: Field,
    headings: Field,
    body: Field,
    chunk: Field,
}

/// A [`KnowledgeSource`] over Markdown documents, indexed in RAM with tantivy.
pub struct MarkdownKnowledgeBase {
    reader: IndexReader,
    fields: Fields,
    analyzer: TextAnalyzer,
    chunks: Vec<Chunk>,
    documents: usize,
    top_k: usize,
}

impl fmt::Debug for MarkdownKnowledgeBase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MarkdownKnowledgeBase")
            .field("documents", &self.documents)
            .field("chunks", &self.chunks.len())
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
        let documents = BUNDLED.iter().map(|(file, text)| MarkdownDocument {
            document_id: file.trim_end_matches(".md").to_owned(),
            source: format!("knowledge/{file}"),
            text: (*text).to_owned(),
        });
        Self::from_documents(documents)
    }

    /// Every `*.md` file under `dir` (recursively; hidden entries and
    /// symbolic links to directories are skipped), in path order. Ids and
    /// sources are paths relative to `dir` with `/` separators; ids drop
    /// `.md`. `progress` hears of the walk, each file read, and the finished
    /// index.
    ///
    /// # Errors
    /// [`Error::DirectoryNotFound`], [`Error::NotADirectory`],
    /// [`Error::DirectoryUnreadable`], [`Error::FileUnreadable`],
    /// [`Error::FileNotUtf8`], [`Error::NoDocuments`] (no `*.md` file), or
    /// [`Error::Index`].
    pub fn from_dir(dir: impl AsRef<Path>, mut progress: impl FnMut(Progress)) -> Result<Self> {
        let dir = dir.as_ref();
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(Error::NotADirectory {
                    path: dir.to_owned(),
                });
            }
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::DirectoryNotFound {
                    path: dir.to_owned(),
                });
            }
            Err(source) => {
                return Err(Error::DirectoryUnreadable {
                    path: dir.to_owned(),
                    source,
                });
            }
        }
        let mut files = Vec::new();
        walk(dir, &mut files)?;
        files.sort();
        if files.is_empty() {
            return Err(Error::NoDocuments {
                path: dir.to_owned(),
            });
        }
        let total = files.len();
        progress(Progress::Found { files: total });
        let mut documents = Vec::with_capacity(total);
        for (done, path) in files.into_iter().enumerate() {
            let bytes = std::fs::read(&path).map_err(|source| Error::FileUnreadable {
                path: path.clone(),
                source,
            })?;
            let text =
                String::from_utf8(bytes).map_err(|_| Error::FileNotUtf8 { path: path.clone() })?;
            let relative = path
                .strip_prefix(dir)
                .unwrap_or(&path)
                .components()
                .map(|part| part.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            documents.push(MarkdownDocument {
                document_id: relative.trim_end_matches(".md").to_owned(),
                source: relative,
                text,
            });
            progress(Progress::Read {
                done: done + 1,
                total,
            });
        }
        let base = Self::from_documents(documents)?;
        progress(Progress::Indexed {
            documents: base.documents,
            chunks: base.chunks.len(),
        });
        Ok(base)
    }

    /// Indexes `documents` (chunked by headings). A document's title is its
    /// first level-1 heading, else its id.
    ///
    /// # Errors
    /// [`Error::Index`] if the in-memory index cannot be built.
    pub fn from_documents(documents: impl IntoIterator<Item = MarkdownDocument>) -> Result<Self> {
        let analyzer = analyzer();
        let mut chunks = Vec::new();
        let mut count = 0_usize;
        for document in documents {
            count += 1;
            let chunked = markdown::chunk_markdown(&document.text, CHUNK_TARGET_BYTES);
            let title = chunked
                .title
                .unwrap_or_else(|| document.document_id.clone());
            for (ordinal, piece) in chunked.chunks.into_iter().enumerate() {
                let text = document.text[piece.range.clone()].to_owned();
                let mut terms = analyze(&analyzer, &title);
                for heading in &piece.heading_path {
                    terms.extend(analyze(&analyzer, heading));
                }
                terms.extend(analyze(&analyzer, &text));
                chunks.push(Chunk {
                    document_id: document.document_id.clone(),
                    source: document.source.clone(),
                    title: title.clone(),
                    heading_path: piece.heading_path,
                    ordinal,
                    start: piece.range.start,
                    end: piece.range.end,
                    text,
                    terms: terms.into_iter().collect(),
                });
            }
        }
        let (reader, fields) =
            build_index(&chunks, &analyzer).map_err(|source| Error::Index { source })?;
        Ok(Self {
            reader,
            fields,
            analyzer,
            chunks,
            documents: count,
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
        self.documents
    }

    /// Number of chunks indexed.
    #[must_use]
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// Searches for `query` and returns the retrieval response (see the
    /// module docs for its shape). A query with no indexable word returns no
    /// documents.
    ///
    /// # Errors
    /// [`Error::Search`] if the index fails.
    pub fn search(&self, query: &str) -> Result<Value> {
        let mut terms: Vec<String> = Vec::new();
        for term in analyze(&self.analyzer, query) {
            if terms.len() == MAX_QUERY_TERMS {
                break;
            }
            if !terms.contains(&term) {
                terms.push(term);
            }
        }
        let hits = if terms.is_empty() || self.chunks.is_empty() {
            Vec::new()
        } else {
            self.top_chunks(&terms)
                .map_err(|source| Error::Search { source })?
        };

        let mut best: Option<&'static str> = None;
        let documents: Vec<Value> = hits
            .iter()
            .map(|(score, chunk)| {
                let matched: Vec<&String> =
                    terms.iter().filter(|t| chunk.terms.contains(*t)).collect();
                let level = level_for(matched.len(), terms.len());
                if best.is_none_or(|b| rank(level) < rank(b)) {
                    best = Some(level);
                }
                json!({
                    "document_id": chunk.document_id,
                    "chunk_id": format!("{}#{}", chunk.document_id, chunk.ordinal),
                    "source": chunk.source,
                    "title": chunk.title,
                    "heading_path": chunk.heading_path,
                    "excerpt": chunk.text,
                    "score": score,
                    "relevance_level": level,
                    "matched_terms": matched,
                    "metadata": {
                        "chunk_ordinal": chunk.ordinal,
                        "byte_start": chunk.start,
                        "byte_end": chunk.end,
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
                "top_k": self.top_k,
                "indexed_chunks": self.chunks.len(),
                "fields": {"title": 2.0, "heading_path": 2.0, "text": 1.0},
            },
        });
        if let (Some(level), Some(object)) = (best, response.as_object_mut()) {
            object.insert("relevance_level".to_owned(), Value::from(level));
        }
        Ok(response)
    }

    fn top_chunks(&self, terms: &[String]) -> tantivy::Result<Vec<(f32, &Chunk)>> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(terms.len() * 3);
        for term in terms {
            for (field, boost) in [
                (self.fields.title, 2.0),
                (self.fields.headings, 2.0),
                (self.fields.body, 1.0),
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
        let searcher = self.reader.searcher();
        let top = searcher.search(&query, &TopDocs::with_limit(self.top_k).order_by_score())?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let document: TantivyDocument = searcher.doc(address)?;
            let chunk = document
                .get_first(self.fields.chunk)
                .and_then(|value| value.as_u64())
                .and_then(|ordinal| usize::try_from(ordinal).ok())
                .and_then(|ordinal| self.chunks.get(ordinal));
            if let Some(chunk) = chunk {
                hits.push((score, chunk));
            }
        }
        Ok(hits)
    }
}

#[async_trait]
impl KnowledgeSource for MarkdownKnowledgeBase {
    async fn retrieve(
        &self,
        query: &str,
        _context: &ExecutionContext,
    ) -> Result<Value, ExecutionError> {
        self.search(query).map_err(ExecutionError::failed)
    }
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

fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(StopWordFilter::remove(
            STOP_WORDS.iter().map(|w| (*w).to_owned()),
        ))
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The analyzed terms of `text`, in order, with repeats.
fn analyze(analyzer: &TextAnalyzer, text: &str) -> Vec<String> {
    let mut analyzer = analyzer.clone();
    let mut stream = analyzer.token_stream(text);
    let mut terms = Vec::new();
    while let Some(token) = stream.next() {
        terms.push(token.text.clone());
    }
    terms
}

fn build_index(
    chunks: &[Chunk],
    analyzer: &TextAnalyzer,
) -> tantivy::Result<(IndexReader, Fields)> {
    let mut schema = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        title: schema.add_text_field("title", text.clone()),
        headings: schema.add_text_field("heading_path", text.clone()),
        body: schema.add_text_field("text", text),
        chunk: schema.add_u64_field("chunk", STORED),
    };
    let index = Index::create_in_ram(schema.build());
    index.tokenizers().register(ANALYZER, analyzer.clone());
    let mut writer: IndexWriter = index.writer_with_num_threads(1, INDEX_MEMORY_BYTES)?;
    for (ordinal, chunk) in chunks.iter().enumerate() {
        let mut document = TantivyDocument::default();
        document.add_text(fields.title, &chunk.title);
        document.add_text(fields.headings, chunk.heading_path.join(" "));
        document.add_text(fields.body, &chunk.text);
        document.add_u64(fields.chunk, ordinal as u64);
        writer.add_document(document)?;
    }
    writer.commit()?;
    writer.wait_merging_threads()?;
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()?;
    Ok((reader, fields))
}

/// Collects `*.md` files under `dir`.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let unreadable = |source| Error::DirectoryUnreadable {
        path: dir.to_owned(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(unreadable)?;
        if kind.is_dir() {
            walk(&path, files)?;
        } else if path.extension().is_some_and(|ext| ext == "md")
            && (kind.is_file() || std::fs::metadata(&path).is_ok_and(|meta| meta.is_file()))
        {
            files.push(path);
        }
    }
    Ok(())
}

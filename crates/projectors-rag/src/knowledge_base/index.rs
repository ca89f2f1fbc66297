//! The tantivy index of chunks, in RAM or in a directory, and its
//! incremental update from the files of a knowledge directory.
//!
//! The manifest (which file, with which content hash, gave how many chunks;
//! which analyzer and schema made the index) is the index's commit payload,
//! so it changes atomically with the chunks it describes: a process killed
//! mid-update leaves the previous commit and its manifest, and the next
//! update redoes the difference.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::TextAnalyzer;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError, Term};

use super::analysis::{ANALYZER_VERSION, CjkSegmenter, analyze};
use super::files::{self, ReadFile};
use super::markdown::{self, Format};
use super::{CHUNK_TARGET_BYTES, Progress};
use crate::{Error, Result};

/// Version of the schema and chunking rules; a persistent index made with
/// another one is rebuilt.
pub(crate) const SCHEMA_VERSION: u32 = 2;
const TOKENIZER: &str = "runbook";
const INDEX_MEMORY_BYTES: usize = 20_000_000;
/// How long an update waits for another process's writer lock.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// The fields of a chunk document.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields {
    pub(crate) title: Field,
    pub(crate) headings: Field,
    pub(crate) body: Field,
    pub(crate) headings_json: Field,
    pub(crate) document_id: Field,
    pub(crate) source: Field,
    pub(crate) ordinal: Field,
    pub(crate) start: Field,
    pub(crate) end: Field,
}

pub(crate) fn schema() -> (Schema, Fields) {
    let mut schema = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqs),
    );
    let fields = Fields {
        title: schema.add_text_field("title", text.clone().set_stored()),
        headings: schema.add_text_field("heading_path", text.clone()),
        body: schema.add_text_field("text", text.set_stored()),
        headings_json: schema.add_text_field("heading_path_json", STORED),
        document_id: schema.add_text_field("document_id", STORED),
        source: schema.add_text_field("source", STRING | STORED),
        ordinal: schema.add_u64_field("ordinal", STORED),
        start: schema.add_u64_field("byte_start", STORED),
        end: schema.add_u64_field("byte_end", STORED),
    };
    (schema.build(), fields)
}

/// One chunk ready to index.
#[derive(Debug, Clone)]
pub(crate) struct ChunkDoc {
    pub(crate) document_id: String,
    pub(crate) source: String,
    pub(crate) title: String,
    pub(crate) heading_path: Vec<String>,
    pub(crate) ordinal: usize,
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) text: String,
}

/// One document's chunks.
pub(crate) fn chunk_document(
    document_id: &str,
    source: &str,
    text: &str,
    format: Format,
) -> Vec<ChunkDoc> {
    let chunked = markdown::chunk_file(text, format, CHUNK_TARGET_BYTES);
    let title = chunked.title.unwrap_or_else(|| document_id.to_owned());
    chunked
        .chunks
        .into_iter()
        .enumerate()
        .map(|(ordinal, piece)| ChunkDoc {
            document_id: document_id.to_owned(),
            source: source.to_owned(),
            title: title.clone(),
            heading_path: piece.heading_path,
            ordinal,
            start: piece.range.start,
            end: piece.range.end,
            text: text[piece.range].to_owned(),
        })
        .collect()
}

pub(crate) fn add_chunk(writer: &IndexWriter, fields: &Fields, chunk: &ChunkDoc) -> Result<()> {
    let mut document = TantivyDocument::default();
    document.add_text(fields.title, &chunk.title);
    document.add_text(fields.headings, chunk.heading_path.join(" "));
    document.add_text(fields.body, &chunk.text);
    document.add_text(
        fields.headings_json,
        serde_json::to_string(&chunk.heading_path).unwrap_or_else(|_| "[]".to_owned()),
    );
    document.add_text(fields.document_id, &chunk.document_id);
    document.add_text(fields.source, &chunk.source);
    document.add_u64(fields.ordinal, chunk.ordinal as u64);
    document.add_u64(fields.start, chunk.start as u64);
    document.add_u64(fields.end, chunk.end as u64);
    writer
        .add_document(document)
        .map(|_| ())
        .map_err(|source| Error::Index { source })
}

pub(crate) fn writer(index: &Index) -> tantivy::Result<IndexWriter> {
    // One thread: document ids follow insertion order, so ties rank alike in
    // every build.
    index.writer_with_num_threads(1, INDEX_MEMORY_BYTES)
}

pub(crate) fn reader(index: &Index) -> Result<IndexReader> {
    index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()
        .map_err(|source| Error::Index { source })
}

/// What an index over a directory holds: the commit payload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub(crate) schema: u32,
    pub(crate) analyzer: String,
    pub(crate) segmenter: String,
    pub(crate) plain_text: bool,
    pub(crate) root: String,
    pub(crate) files: BTreeMap<String, FileEntry>,
}

/// One indexed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct FileEntry {
    pub(crate) sha256: String,
    pub(crate) chunks: usize,
    /// The content is not UTF-8: nothing indexed, reported at every update.
    #[serde(default)]
    pub(crate) not_utf8: bool,
}

impl Manifest {
    pub(crate) fn empty(root: &Path, segmenter: CjkSegmenter, plain_text: bool) -> Self {
        Self {
            schema: SCHEMA_VERSION,
            analyzer: ANALYZER_VERSION.to_owned(),
            segmenter: segmenter.name().to_owned(),
            plain_text,
            root: root.to_string_lossy().into_owned(),
            files: BTreeMap::new(),
        }
    }

    /// Whether an index with this manifest can be updated under `wanted`
    /// (same schema, analyzer and formats) rather than rebuilt.
    fn compatible(&self, wanted: &Self) -> bool {
        self.schema == wanted.schema
            && self.analyzer == wanted.analyzer
            && self.segmenter == wanted.segmenter
            && self.plain_text == wanted.plain_text
            && self.root == wanted.root
    }

    fn read(index: &Index) -> Option<Self> {
        let payload = index.load_metas().ok()?.payload?;
        serde_json::from_str(&payload).ok()
    }
}

/// Why a persistent index was made anew instead of updated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rebuild {
    /// There was no index yet.
    New,
    /// The index was made with another analyzer, schema or file formats.
    VersionChanged,
    /// The index directory could not be opened or read (it was removed).
    Corrupt,
}

impl Rebuild {
    /// A short stable name: `new`, `version_changed`, `corrupt`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::VersionChanged => "version_changed",
            Self::Corrupt => "corrupt",
        }
    }
}

/// A change to the index, by file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A new file was indexed.
    Added,
    /// A file's content changed: its chunks were replaced.
    Updated,
    /// A file is gone (or no longer parses): its chunks were removed.
    Removed,
}

impl Change {
    /// `added`, `updated` or `removed`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Added => "added",
            Self::Updated => "updated",
            Self::Removed => "removed",
        }
    }
}

/// A file that could not be indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileFailure {
    /// The file's path relative to the knowledge directory.
    pub path: String,
    /// The stable code of the failure ([`Error::code`]).
    pub code: &'static str,
    /// The failure, one line (names the file, never its content).
    pub message: String,
}

/// What building or updating a knowledge index did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IndexReport {
    /// Knowledge files found.
    pub files: usize,
    /// Files whose chunks were reused unchanged from the index.
    pub reused: usize,
    /// Files indexed for the first time.
    pub added: usize,
    /// Files whose changed content was re-indexed.
    pub updated: usize,
    /// Files removed from the index.
    pub removed: usize,
    /// Files that could not be read or parsed (not indexed).
    pub failed: Vec<FileFailure>,
    /// Every change, by relative path, in path order.
    pub changes: Vec<(String, Change)>,
    /// Set when a persistent index was made anew, and why.
    pub rebuilt: Option<Rebuild>,
    /// Documents indexed after the update.
    pub documents: usize,
    /// Chunks indexed after the update.
    pub chunks: usize,
    /// Whether the index lives in a directory (else in RAM).
    pub persistent: bool,
    /// The directory of the persistent index, if any.
    pub index_path: Option<PathBuf>,
}

impl IndexReport {
    /// Whether the update changed nothing.
    #[must_use]
    pub fn unchanged(&self) -> bool {
        self.changes.is_empty() && self.rebuilt.is_none()
    }
}

/// An index over a knowledge directory, with what it needs to update.
pub(crate) struct DirIndex {
    pub(crate) index: Index,
    pub(crate) reader: IndexReader,
    pub(crate) root: PathBuf,
    pub(crate) plain_text: bool,
    pub(crate) wanted: Manifest,
    pub(crate) rebuilt: Option<Rebuild>,
    pub(crate) index_path: Option<PathBuf>,
}

/// Where the persistent index of `root` lives under `index_dir`: one
/// subdirectory per knowledge directory, named by a hash of its path.
pub(crate) fn index_path(index_dir: &Path, root: &Path) -> PathBuf {
    let digest = Sha256::digest(root.to_string_lossy().as_bytes());
    index_dir.join(format!("kb-{}", &files::hex(&digest)[..16]))
}

impl DirIndex {
    /// Opens (or creates) the index of `root`: in RAM when `index_dir` is
    /// `None`, else under it. An index of another version, or one that cannot
    /// be opened, is removed and made anew.
    pub(crate) fn open(
        root: &Path,
        index_dir: Option<&Path>,
        segmenter: CjkSegmenter,
        plain_text: bool,
        analyzer: &TextAnalyzer,
    ) -> Result<Self> {
        // One index per knowledge directory, however its path was spelled.
        let canonical = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
        let wanted = Manifest::empty(&canonical, segmenter, plain_text);
        let (schema, _) = schema();
        let path = index_dir.map(|index_dir| index_path(index_dir, &canonical));
        let (index, rebuilt) = match &path {
            None => (Index::create_in_ram(schema), None),
            Some(path) => open_persistent(path, schema, &wanted)?,
        };
        index.tokenizers().register(TOKENIZER, analyzer.clone());
        let reader = reader(&index)?;
        Ok(Self {
            index,
            reader,
            root: root.to_owned(),
            plain_text,
            wanted,
            rebuilt,
            index_path: path,
        })
    }

    /// Brings the index up to date with the directory: unchanged files (same
    /// content hash) are reused, changed ones re-chunked, missing ones
    /// removed. Returns the report and, when the directory holds nothing that
    /// could be indexed, the error that makes the base unavailable.
    pub(crate) fn sync(
        &mut self,
        fields: &Fields,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(IndexReport, Option<Error>)> {
        files::check_dir(&self.root)?;
        let found = files::walk(&self.root, self.plain_text)?;
        let total = found.len();
        progress(Progress::Found { files: total });
        let mut report = IndexReport {
            files: total,
            persistent: self.index_path.is_some(),
            index_path: self.index_path.clone(),
            rebuilt: self.rebuilt.take(),
            ..IndexReport::default()
        };
        let mut first_error: Option<Error> = None;
        let mut readable: Vec<ReadFile> = Vec::with_capacity(total);
        for (done, file) in found.into_iter().enumerate() {
            let relative = file.relative.clone();
            match files::read(file) {
                Ok(read) => readable.push(read),
                Err(error) => fail(&mut report, &mut first_error, progress, relative, error),
            }
            progress(Progress::Read {
                done: done + 1,
                total,
            });
        }

        let mut before = self.current_manifest();
        let mut after = before.clone();
        if !Plan::new(&before, &readable).is_empty() {
            let mut writer = self.lock_writer()?;
            // Another process may have updated the index meanwhile.
            before = self.current_manifest();
            let plan = Plan::new(&before, &readable);
            after = before.clone();
            after.files.retain(|path, _| !plan.drop.contains(path));
            for path in &plan.drop {
                writer.delete_term(Term::from_field_text(fields.source, path));
            }
            for read in &plan.index {
                let chunks = parse(read).unwrap_or_default();
                for chunk in &chunks {
                    add_chunk(&writer, fields, chunk)?;
                }
                after.files.insert(
                    read.found.relative.clone(),
                    FileEntry {
                        sha256: read.sha256.clone(),
                        chunks: chunks.len(),
                        not_utf8: std::str::from_utf8(&read.bytes).is_err(),
                    },
                );
            }
            if !plan.is_empty() {
                let payload = serde_json::to_string(&after).map_err(|e| Error::Index {
                    source: TantivyError::InternalError(e.to_string()),
                })?;
                let mut commit = writer
                    .prepare_commit()
                    .map_err(|source| Error::Index { source })?;
                commit.set_payload(&payload);
                commit.commit().map_err(|source| Error::Index { source })?;
            }
            writer
                .wait_merging_threads()
                .map_err(|source| Error::Index { source })?;
            self.reader
                .reload()
                .map_err(|source| Error::Index { source })?;
        }
        report_changes(&mut report, &before, &after);
        for read in &readable {
            let relative = &read.found.relative;
            match after.files.get(relative) {
                Some(entry) if entry.not_utf8 => {
                    let error = Error::FileNotUtf8 {
                        path: read.found.path.clone(),
                    };
                    fail(
                        &mut report,
                        &mut first_error,
                        progress,
                        relative.clone(),
                        error,
                    );
                }
                Some(entry) if before.files.get(relative) == Some(entry) => report.reused += 1,
                _ => {}
            }
        }
        report.documents = after.files.values().filter(|f| !f.not_utf8).count();
        report.chunks = after.files.values().map(|f| f.chunks).sum();
        progress(Progress::Indexed {
            documents: report.documents,
            chunks: report.chunks,
        });
        let unavailable = if total == 0 {
            Some(Error::NoDocuments {
                path: self.root.clone(),
                formats: if self.plain_text {
                    "Markdown (*.md) or plain text (*.txt)"
                } else {
                    "Markdown (*.md)"
                },
            })
        } else if report.documents == 0 {
            first_error
        } else {
            None
        };
        Ok((report, unavailable))
    }

    fn current_manifest(&self) -> Manifest {
        Manifest::read(&self.index)
            .filter(|m| m.compatible(&self.wanted))
            .unwrap_or_else(|| self.wanted.clone())
    }

    fn lock_writer(&self) -> Result<IndexWriter> {
        let started = Instant::now();
        loop {
            match writer(&self.index) {
                Ok(writer) => return Ok(writer),
                Err(TantivyError::LockFailure(..)) if started.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(TantivyError::LockFailure(..)) => return Err(Error::IndexLocked),
                Err(source) => return Err(Error::Index { source }),
            }
        }
    }
}

fn fail(
    report: &mut IndexReport,
    first_error: &mut Option<Error>,
    progress: &mut dyn FnMut(Progress),
    path: String,
    error: Error,
) {
    progress(Progress::Failed {
        path: path.clone(),
        code: error.code(),
    });
    report.failed.push(FileFailure {
        path,
        code: error.code(),
        message: error.to_string(),
    });
    if first_error.is_none() {
        *first_error = Some(error);
    }
}

fn parse(read: &ReadFile) -> Result<Vec<ChunkDoc>> {
    let text = std::str::from_utf8(&read.bytes).map_err(|_| Error::FileNotUtf8 {
        path: read.found.path.clone(),
    })?;
    let relative = &read.found.relative;
    let document_id = relative
        .strip_suffix(".md")
        .or_else(|| relative.strip_suffix(".txt"))
        .unwrap_or(relative);
    Ok(chunk_document(
        document_id,
        relative,
        text,
        read.found.format,
    ))
}

/// What an update does: files whose chunks go, files (re)indexed.
struct Plan<'a> {
    drop: Vec<String>,
    index: Vec<&'a ReadFile>,
}

impl<'a> Plan<'a> {
    fn new(manifest: &Manifest, readable: &'a [ReadFile]) -> Self {
        let present: BTreeMap<&str, &ReadFile> = readable
            .iter()
            .map(|r| (r.found.relative.as_str(), r))
            .collect();
        let mut drop = Vec::new();
        let mut index = Vec::new();
        for (path, entry) in &manifest.files {
            match present.get(path.as_str()) {
                Some(read) if read.sha256 == entry.sha256 => {}
                _ => drop.push(path.clone()),
            }
        }
        for read in readable {
            let known = manifest.files.get(&read.found.relative);
            if known.is_none_or(|entry| entry.sha256 != read.sha256) {
                index.push(read);
            }
        }
        Self { drop, index }
    }

    fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.index.is_empty()
    }
}

fn report_changes(report: &mut IndexReport, before: &Manifest, after: &Manifest) {
    let mut paths: Vec<&String> = before.files.keys().chain(after.files.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        let change = match (before.files.get(path), after.files.get(path)) {
            (None, Some(_)) => Change::Added,
            (Some(_), None) => Change::Removed,
            (Some(old), Some(new)) if old != new => Change::Updated,
            _ => continue,
        };
        match change {
            Change::Added => report.added += 1,
            Change::Updated => report.updated += 1,
            Change::Removed => report.removed += 1,
        }
        report.changes.push((path.clone(), change));
    }
}

/// Opens the index at `path`, or makes it anew (removing what is there) when
/// it is missing, of another version, or unreadable.
fn open_persistent(
    path: &Path,
    schema: Schema,
    wanted: &Manifest,
) -> Result<(Index, Option<Rebuild>)> {
    let unusable = |source| Error::IndexDirUnusable {
        path: path.to_owned(),
        source,
    };
    let reason = if path.join("meta.json").exists() {
        match Index::open_in_dir(path) {
            Ok(index) => {
                let same_schema = index.schema() == schema;
                // Opening a reader opens every segment: missing or truncated
                // segment files show here, not at the first search.
                let readable = reader(&index).is_ok();
                match Manifest::read(&index) {
                    Some(_) if !readable => Rebuild::Corrupt,
                    Some(manifest) if same_schema && manifest.compatible(wanted) => {
                        return Ok((index, None));
                    }
                    Some(_) => Rebuild::VersionChanged,
                    None if same_schema => Rebuild::Corrupt,
                    None => Rebuild::VersionChanged,
                }
            }
            Err(_) => Rebuild::Corrupt,
        }
    } else if path.exists() {
        Rebuild::Corrupt
    } else {
        Rebuild::New
    };
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(unusable)?;
    }
    std::fs::create_dir_all(path).map_err(unusable)?;
    match Index::create_in_dir(path, schema.clone()) {
        Ok(index) => Ok((index, Some(reason))),
        // Another process made it first: use theirs.
        Err(TantivyError::IndexAlreadyExists) => Index::open_in_dir(path)
            .map(|index| (index, Some(reason)))
            .map_err(|source| Error::Index { source }),
        Err(source) => Err(Error::Index { source }),
    }
}

/// Whether `found` is a file the index would take (for watchers).
#[must_use]
pub(crate) fn is_knowledge_file(path: &Path, plain_text: bool) -> bool {
    match Format::of(path) {
        Some(Format::Markdown) => true,
        Some(Format::PlainText) => plain_text,
        None => false,
    }
}

/// Analyzed terms of a stored chunk's title, headings and text.
pub(crate) fn chunk_terms(
    analyzer: &TextAnalyzer,
    title: &str,
    headings: &[String],
    text: &str,
) -> std::collections::BTreeSet<String> {
    let mut terms: std::collections::BTreeSet<String> =
        analyze(analyzer, title).into_iter().collect();
    for heading in headings {
        terms.extend(analyze(analyzer, heading));
    }
    terms.extend(analyze(analyzer, text));
    terms
}

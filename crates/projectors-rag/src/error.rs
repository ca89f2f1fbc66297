//! The crate's error: building or searching the Markdown knowledge base.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the knowledge base could not be built or searched.
///
/// Messages name the configured path (operator configuration, never agent
/// input) and the I/O error kind; the driver error stays in `source`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The knowledge directory does not exist.
    #[error("knowledge directory `{}` does not exist", .path.display())]
    DirectoryNotFound {
        /// The configured directory.
        path: PathBuf,
    },
    /// The knowledge path exists but is not a directory.
    #[error("knowledge path `{}` is not a directory", .path.display())]
    NotADirectory {
        /// The configured path.
        path: PathBuf,
    },
    /// A directory of the knowledge base cannot be listed.
    #[error("knowledge directory `{}` cannot be read: {}", .path.display(), .source.kind())]
    DirectoryUnreadable {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A Markdown file cannot be read.
    #[error("knowledge file `{}` cannot be read: {}", .path.display(), .source.kind())]
    FileUnreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A Markdown file is not UTF-8 text.
    #[error("knowledge file `{}` is not valid UTF-8", .path.display())]
    FileNotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// The directory holds no knowledge file (`*.md`, and `*.txt` when plain
    /// text is on).
    #[error("knowledge directory `{}` holds no {} files", .path.display(), .formats)]
    NoDocuments {
        /// The configured directory.
        path: PathBuf,
        /// The formats looked for, in words.
        formats: &'static str,
    },
    /// The index directory cannot be created, cleared or written.
    #[error("knowledge index directory `{}` cannot be used: {}", .path.display(), .source.kind())]
    IndexDirUnusable {
        /// The index directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Another process held the index's writer lock for too long.
    #[error("the knowledge index is locked by another process")]
    IndexLocked,
    /// The knowledge base has nothing it could search: the directory became
    /// empty, unreadable, or every file in it failed. Searching is refused
    /// rather than answered with "nothing found".
    #[error("the knowledge base is unavailable: {source}")]
    Unavailable {
        /// Why.
        #[source]
        source: Arc<Error>,
    },
    /// The search index could not be built.
    #[error("the knowledge index could not be built")]
    Index {
        /// The index error.
        #[source]
        source: tantivy::TantivyError,
    },
    /// A search failed inside the index.
    #[error("the knowledge search failed")]
    Search {
        /// The index error.
        #[source]
        source: tantivy::TantivyError,
    },
}

impl Error {
    /// A stable SCREAMING_SNAKE code.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::DirectoryNotFound { .. } => "KNOWLEDGE_DIR_NOT_FOUND",
            Self::NotADirectory { .. } => "KNOWLEDGE_NOT_A_DIRECTORY",
            Self::DirectoryUnreadable { .. } => "KNOWLEDGE_DIR_UNREADABLE",
            Self::FileUnreadable { .. } => "KNOWLEDGE_FILE_UNREADABLE",
            Self::FileNotUtf8 { .. } => "KNOWLEDGE_FILE_NOT_UTF8",
            Self::NoDocuments { .. } => "KNOWLEDGE_NO_DOCUMENTS",
            Self::IndexDirUnusable { .. } => "KNOWLEDGE_INDEX_DIR_UNUSABLE",
            Self::IndexLocked => "KNOWLEDGE_INDEX_LOCKED",
            Self::Unavailable { .. } => "KNOWLEDGE_UNAVAILABLE",
            Self::Index { .. } => "KNOWLEDGE_INDEX_FAILED",
            Self::Search { .. } => "KNOWLEDGE_SEARCH_FAILED",
        }
    }
}

impl From<Error> for crate::KnowledgeSourceError {
    /// Searching fails with `EXECUTION_FAILED`: retryable when the knowledge
    /// directory may be refilled or the index freed ([`Error::Unavailable`],
    /// directory and file errors, [`Error::IndexLocked`]), permanent for a
    /// broken index.
    fn from(error: Error) -> Self {
        match error {
            Error::Index { .. } | Error::Search { .. } => Self::permanent(error),
            _ => Self::transient(error),
        }
    }
}

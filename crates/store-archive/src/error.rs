//! The archive's one error type.

/// Why an archive operation failed.
///
/// Display and Debug carry no URL, password, SQL or payload; the driver's
/// error is only the `source`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The archive URL could not be parsed, or names no database.
    #[error("the archive URL is invalid")]
    InvalidUrl,
    /// The database could not be reached, or a statement failed.
    #[error("the archive database is unavailable ({operation})")]
    Unavailable {
        /// What was being done.
        operation: &'static str,
        /// The driver's error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The invocation store (or its outbox) failed.
    #[error("the invocation store is unavailable")]
    Store {
        /// The store's error (sanitized by its adapter).
        #[source]
        source: invocation_core::StoreError,
    },
    /// The signing key could not be read (never shown).
    #[error("the archive signing key is not an Ed25519 PKCS#8 PEM key")]
    InvalidKey,
    /// A record still `PROJECTING` cannot be archived.
    #[error("the record is not final")]
    NotFinal,
    /// The database holds something this version cannot read.
    #[error("the archive holds a malformed row ({what})")]
    Corrupt {
        /// Which part.
        what: &'static str,
    },
    /// The database's schema is newer than this version knows.
    #[error("the archive schema is newer than this version ({found} > {known})")]
    SchemaTooNew {
        /// The version found.
        found: i32,
        /// The newest this version knows.
        known: i32,
    },
}

impl ArchiveError {
    pub(crate) fn unavailable(operation: &'static str) -> impl Fn(tokio_postgres::Error) -> Self {
        move |source| Self::Unavailable { operation, source }
    }

    pub(crate) const fn store(source: invocation_core::StoreError) -> Self {
        Self::Store { source }
    }

    /// Stable SCREAMING_SNAKE code.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::InvalidUrl => "ARCHIVE_INVALID_URL",
            Self::Unavailable { .. } => "ARCHIVE_UNAVAILABLE",
            Self::Store { .. } => "STORE_UNAVAILABLE",
            Self::NotFinal => "ARCHIVE_NOT_FINAL",
            Self::InvalidKey => "ARCHIVE_INVALID_KEY",
            Self::Corrupt { .. } => "ARCHIVE_CORRUPT",
            Self::SchemaTooNew { .. } => "ARCHIVE_SCHEMA_TOO_NEW",
        }
    }

    /// Whether the same operation may succeed later (the database was
    /// unreachable, a transaction was chosen as a deadlock victim, …).
    #[must_use]
    pub const fn is_transient(&self) -> bool {
        match self {
            Self::Unavailable { .. } => true,
            Self::Store { source } => source.is_transient(),
            _ => false,
        }
    }
}

/// `Result` with [`ArchiveError`].
pub type Result<T, E = ArchiveError> = std::result::Result<T, E>;

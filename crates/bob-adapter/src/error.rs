//! The crate's one error type.

/// Why the adapter refused a call or a journal operation.
///
/// Display and Debug never contain arguments, results, store keys or URLs.
/// Journal errors reach bob as `bob_core::StoreError::Other(Box<Error>)`;
/// downcast to read the [`code`](Error::code).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The bob session id is not a valid run id (1 to 128 bytes of ASCII
    /// letters, digits, `_`, `.`, `:`, `-`).
    #[error("the bob session id is not a valid run id")]
    InvalidSession,
    /// A journal fingerprint is neither bob's `name:json` text nor 64 hex digits.
    #[error("the journal fingerprint is neither `tool:json` nor 64 lowercase hex digits")]
    InvalidFingerprint,
    /// An entry's `call_fingerprint` does not belong to its tool name and arguments.
    #[error("the entry's fingerprint does not match its tool name and arguments")]
    FingerprintMismatch,
    /// The entry's arguments are larger than the request limit.
    #[error("the entry's arguments are larger than the request limit")]
    RequestTooLarge,
    /// The entry's result (or the whole entry) is larger than allowed.
    #[error("the entry's result is larger than the result or record limit")]
    ResultTooLarge,
    /// The call was journaled as a transient failure too many times in this session.
    #[error("the call failed transiently too many times to journal another attempt")]
    TooManyAttempts,
    /// A registered tool has no descriptor (give one with `BoundaryToolPort::describe`).
    #[error("a registered tool has no descriptor")]
    MissingDescriptor,
    /// The store failed.
    #[error("the invocation store failed ({})", .0.code())]
    Store(#[source] invocation_core::StoreError),
}

impl Error {
    /// Stable SCREAMING_SNAKE code.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::InvalidSession => "INVALID_SESSION",
            Self::InvalidFingerprint => "INVALID_FINGERPRINT",
            Self::FingerprintMismatch => "FINGERPRINT_MISMATCH",
            Self::RequestTooLarge => "REQUEST_TOO_LARGE",
            Self::ResultTooLarge => "RESULT_TOO_LARGE",
            Self::TooManyAttempts => "TOO_MANY_ATTEMPTS",
            Self::MissingDescriptor => "MISSING_DESCRIPTOR",
            Self::Store(error) => error.code(),
        }
    }

    /// Whether the same operation may succeed later.
    #[must_use]
    pub const fn is_transient(&self) -> bool {
        matches!(self, Self::Store(error) if error.is_transient())
    }
}

impl From<invocation_core::StoreError> for Error {
    fn from(error: invocation_core::StoreError) -> Self {
        Self::Store(error)
    }
}

impl From<Error> for bob_core::StoreError {
    fn from(error: Error) -> Self {
        Self::Other(Box::new(error))
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

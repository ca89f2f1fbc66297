//! The adapter's error type: configuration problems and sanitized driver failures.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use invocation_core::StoreError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// A `Result` with [`RedisStoreError`].
pub type Result<T, E = RedisStoreError> = std::result::Result<T, E>;

/// Why the Redis store could not be built or reached.
///
/// Display and Debug never contain a URL, host, port, password, key or
/// payload: driver errors are reduced to a [`Failure`] category before they
/// are stored here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisStoreError {
    /// The configuration is invalid.
    #[error("invalid Redis store configuration: {0}")]
    Config(ConfigProblem),
    /// A file named in [`RedisSettings`](crate::RedisSettings) could not be
    /// read. Names the setting and the path, never the file's contents.
    #[error("invalid Redis store configuration: cannot read {key} {}: {kind}", path.display())]
    UnreadableFile {
        /// The setting that names the file (`tls_ca_file`, …).
        key: &'static str,
        /// The path as configured.
        path: PathBuf,
        /// Why it could not be read.
        kind: std::io::ErrorKind,
    },
    /// Redis could not be reached or did not answer in time.
    #[error("Redis {operation} failed: {failure}")]
    Unavailable {
        /// The store operation (`create`, `finalize`, `get`, …).
        operation: &'static str,
        /// What went wrong, as a category.
        failure: Failure,
    },
}

impl RedisStoreError {
    /// Stable SCREAMING_SNAKE code.
    #[must_use]
    pub const fn code(&self) -> &'static str {
        match self {
            Self::Config(_) | Self::UnreadableFile { .. } => "REDIS_CONFIG_INVALID",
            Self::Unavailable { .. } => "STORE_UNAVAILABLE",
        }
    }

    /// Whether the same operation may succeed later.
    #[must_use]
    pub const fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// The failure category, for [`RedisStoreError::Unavailable`].
    #[must_use]
    pub const fn failure(&self) -> Option<Failure> {
        match self {
            Self::Unavailable { failure, .. } => Some(*failure),
            Self::Config(_) | Self::UnreadableFile { .. } => None,
        }
    }

    pub(crate) const fn unavailable(operation: &'static str, failure: Failure) -> Self {
        Self::Unavailable { operation, failure }
    }
}

impl From<RedisStoreError> for StoreError {
    fn from(error: RedisStoreError) -> Self {
        Self::unavailable(error)
    }
}

/// What is wrong with a [`RedisConfig`](crate::RedisConfig). Never echoes the
/// offending value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// No URL (single node) or no node URL (cluster) was given.
    #[error("no Redis URL was given")]
    MissingUrl,
    /// A URL does not start with `redis://` or `rediss://`.
    #[error("a Redis URL must start with redis:// or rediss://")]
    UnsupportedScheme,
    /// A URL could not be parsed.
    #[error("a Redis URL is malformed")]
    MalformedUrl,
    /// Cluster node URLs mix `redis://` and `rediss://`.
    #[error("cluster node URLs must all use the same scheme")]
    MixedSchemes,
    /// A `rediss://` URL asks for `#insecure` (no certificate verification),
    /// which this store does not allow: configure the CA instead.
    #[error("rediss://…#insecure (TLS without certificate verification) is not allowed")]
    InsecureTls,
    /// TLS certificates were configured, but the URLs are `redis://`: the
    /// connection would not be encrypted.
    #[error("TLS certificates are configured but the Redis URL is not rediss://")]
    TlsWithoutRediss,
    /// The TLS root CA is not one or more PEM certificates usable as trust
    /// anchors.
    #[error("the TLS root CA is not a valid PEM certificate bundle")]
    InvalidTlsRootCa,
    /// The TLS client certificate chain is not one or more PEM certificates.
    #[error("the TLS client certificate is not a valid PEM certificate chain")]
    InvalidTlsClientCert,
    /// The TLS client key is not a PEM private key of a supported kind, or it
    /// does not belong to the client certificate.
    #[error("the TLS client key is not a valid PEM private key matching the client certificate")]
    InvalidTlsClientKey,
    /// A store URL is none of `redis://`, `rediss://`, `redis+cluster://` or
    /// `rediss+cluster://` ([`RedisConfig::from_url`](crate::RedisConfig::from_url)).
    #[error(
        "a Redis store URL must start with redis://, rediss://, redis+cluster:// or rediss+cluster://"
    )]
    UnrecognizedStoreUrl,
    /// A `redis+cluster://` or `rediss+cluster://` URL names no node.
    #[error("a redis+cluster:// or rediss+cluster:// URL needs at least one host:port")]
    NoClusterNodes,
    /// Only one of `tls_client_cert_file` and `tls_client_key_file` is set
    /// ([`RedisSettings`](crate::RedisSettings)).
    #[error("tls_client_cert_file and tls_client_key_file go together")]
    UnpairedTlsClientFiles,
    /// The pool size is zero.
    #[error("the pool size must be at least 1")]
    ZeroPoolSize,
    /// A timeout is zero.
    #[error("timeouts must be longer than zero")]
    ZeroTimeout,
    /// The connection pool could not be built.
    #[error("the connection pool could not be built")]
    Pool,
    /// The key prefix is empty, too long, or holds a byte outside
    /// `[A-Za-z0-9_.:-]` (braces would break the `{run_id}` hash tag).
    #[error("the key prefix must be 1 to 64 bytes of [A-Za-z0-9_.:-]")]
    InvalidKeyPrefix,
}

/// The category of a Redis failure. Safe to log: carries no address, key or
/// server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// The operation did not finish within the operation timeout.
    Timeout,
    /// No pooled connection became free within the operation timeout.
    PoolExhausted,
    /// The server refused the connection (nothing listens there).
    ConnectionRefused,
    /// An established connection was closed or reset.
    ConnectionLost,
    /// Connecting, sending or receiving failed otherwise.
    Connection,
    /// The TLS handshake or session failed: the server's certificate is not
    /// trusted or does not match the host, the server refused the client
    /// certificate, or a TLS alert ended the connection.
    Tls,
    /// Authentication was refused.
    Authentication,
    /// Redis Cluster could not route the command (slots moving, cluster down,
    /// no connection to the node owning the slot).
    Cluster,
    /// The server refused the command (out of memory, read-only replica,
    /// script error, …).
    Server,
    /// The server's reply did not have the expected shape.
    Protocol,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => f.write_str("timed out"),
            Self::PoolExhausted => f.write_str("no pooled connection became free in time"),
            Self::ConnectionRefused => f.write_str("connection refused"),
            Self::ConnectionLost => f.write_str("connection lost"),
            Self::Connection => f.write_str("connection failed"),
            Self::Tls => f.write_str("the TLS handshake or session failed"),
            Self::Authentication => f.write_str("authentication was refused"),
            Self::Cluster => f.write_str("the cluster could not route the command"),
            Self::Server => f.write_str("the server refused the command"),
            Self::Protocol => f.write_str("unexpected reply"),
        }
    }
}

impl Failure {
    /// Classifies a driver error without keeping any of its text.
    pub(crate) fn of(error: &RedisError) -> Self {
        if error.is_timeout() {
            return Self::Timeout;
        }
        match error.kind() {
            ErrorKind::Io if is_tls_failure(error) => Self::Tls,
            ErrorKind::Io if error.is_connection_refusal() => Self::ConnectionRefused,
            ErrorKind::Io if error.is_connection_dropped() => Self::ConnectionLost,
            ErrorKind::Io => Self::Connection,
            ErrorKind::AuthenticationFailed | ErrorKind::Server(ServerErrorKind::NoPerm) => {
                Self::Authentication
            }
            ErrorKind::ClusterConnectionNotFound => Self::Cluster,
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Self::Protocol,
            _ if error.is_cluster_error() => Self::Cluster,
            ErrorKind::Server(_) | ErrorKind::Extension => Self::Server,
            _ => Self::Connection,
        }
    }

    /// Whether every pooled connection may be dead (the server restarted,
    /// failed over, or went away), so all of them should be replaced.
    pub(crate) const fn retires_all_connections(self) -> bool {
        matches!(
            self,
            Self::ConnectionRefused
                | Self::ConnectionLost
                | Self::Connection
                | Self::Tls
                | Self::Authentication
                | Self::Cluster
        )
    }

    /// Whether the connection the failure happened on must not be reused.
    pub(crate) const fn breaks_connection(self) -> bool {
        matches!(self, Self::Timeout | Self::Protocol) || self.retires_all_connections()
    }
}

/// Whether a driver error is a failed TLS handshake or session (untrusted
/// or mismatched certificate, refused client certificate, protocol alert),
/// as opposed to a plain network failure.
fn is_tls_failure(error: &RedisError) -> bool {
    // redis keeps an I/O error as `Arc<dyn Error>`; tokio-rustls wraps the
    // `rustls::Error` in that `io::Error`.
    let Some(source) = std::error::Error::source(error) else {
        return false;
    };
    let io = source
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()
        .and_then(|inner| inner.downcast_ref::<std::io::Error>())
        .or_else(|| source.downcast_ref::<std::io::Error>());
    io.and_then(std::io::Error::get_ref)
        .is_some_and(|inner| inner.is::<rustls::Error>())
}

//! `[archive]`, the serde section of a configuration file.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::RawPolicy;

/// Entries taken from the outbox per batch, by default.
pub const DEFAULT_BATCH_SIZE: usize = 256;
/// How long an entry taken by an archiver stays its own before another may
/// take it over (the archiver was killed), by default.
pub const DEFAULT_RECLAIM_AFTER: Duration = Duration::from_secs(60);
/// How long an idle archiver waits before looking at the outbox again, by
/// default.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Batches one `aci archive` process runs at once, by default: each its own
/// outbox consumer and database connection, so that one batch's insert
/// overlaps the next one's reads.
pub const DEFAULT_WORKERS: usize = 4;

/// How long a run must have had nothing archived before it is sealed, by
/// default.
pub const DEFAULT_SEAL_IDLE: Duration = Duration::from_secs(3600);

/// `[archive]`: where and how finalized records are archived. Unknown keys
/// are refused. Debug never shows the URL (it may carry a password).
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveSettings {
    /// `postgres://user[:password]@host:port/db[?sslmode=…]`: the archiver
    /// role, which needs only `SELECT, INSERT` on the data.
    pub url: Option<String>,
    /// The owner role's URL: migrations, month partitions (made ahead) and
    /// retention run on it. Absent: on `url` (which must then own the
    /// schema).
    pub admin_url: Option<String>,
    /// `host:port` where `aci archive` serves `GET /metrics` (Prometheus
    /// text; default: not served).
    pub metrics_listen: Option<String>,
    /// Whole month partitions that ended more than this many days ago are
    /// dropped by the archiver (default: kept for ever).
    pub retention_days: Option<u32>,
    /// What of the raw response is archived (default `redacted`).
    pub raw: Option<RawPolicy>,
    /// The Ed25519 key (PKCS#8 PEM) that signs checkpoints.
    pub signing_key_file: Option<PathBuf>,
    /// Outbox entries per batch (default [`DEFAULT_BATCH_SIZE`]).
    pub batch_size: Option<usize>,
    /// Batches an `aci archive` process runs at once (default
    /// [`DEFAULT_WORKERS`], at most 64).
    pub workers: Option<usize>,
    /// Seconds before a killed archiver's entries are taken over (default
    /// [`DEFAULT_RECLAIM_AFTER`]).
    pub reclaim_after_secs: Option<u64>,
    /// Milliseconds an idle archiver waits between looks at the outbox
    /// (default [`DEFAULT_POLL_INTERVAL`]).
    pub poll_interval_ms: Option<u64>,
    /// A run with nothing archived for this many seconds (or whose deadline
    /// passed) is sealed (default [`DEFAULT_SEAL_IDLE`]); only with a
    /// `signing_key_file`.
    pub seal_idle_secs: Option<u64>,
}

impl std::fmt::Debug for ArchiveSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveSettings")
            .field("url", &self.url.as_ref().map(|_| "<redacted>"))
            .field("admin_url", &self.admin_url.as_ref().map(|_| "<redacted>"))
            .field("metrics_listen", &self.metrics_listen)
            .field("retention_days", &self.retention_days)
            .field("raw", &self.raw)
            .field("signing_key_file", &self.signing_key_file)
            .field("batch_size", &self.batch_size)
            .field("workers", &self.workers)
            .field("reclaim_after_secs", &self.reclaim_after_secs)
            .field("poll_interval_ms", &self.poll_interval_ms)
            .field("seal_idle_secs", &self.seal_idle_secs)
            .finish()
    }
}

impl ArchiveSettings {
    /// The raw policy (default `redacted`).
    #[must_use]
    pub fn raw_policy(&self) -> RawPolicy {
        self.raw.unwrap_or_default()
    }

    /// The batch size (default [`DEFAULT_BATCH_SIZE`], at least 1).
    #[must_use]
    pub fn batch(&self) -> usize {
        self.batch_size.unwrap_or(DEFAULT_BATCH_SIZE).max(1)
    }

    /// The concurrent batches of one process (default [`DEFAULT_WORKERS`],
    /// 1 to 64).
    #[must_use]
    pub fn workers(&self) -> usize {
        self.workers.unwrap_or(DEFAULT_WORKERS).clamp(1, 64)
    }

    /// The reclaim time.
    #[must_use]
    pub fn reclaim_after(&self) -> Duration {
        self.reclaim_after_secs
            .map_or(DEFAULT_RECLAIM_AFTER, Duration::from_secs)
    }

    /// The idle poll interval.
    #[must_use]
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval_ms
            .map_or(DEFAULT_POLL_INTERVAL, Duration::from_millis)
    }

    /// The idle time after which a run is sealed.
    #[must_use]
    pub fn seal_idle(&self) -> Duration {
        self.seal_idle_secs
            .map_or(DEFAULT_SEAL_IDLE, Duration::from_secs)
    }

    /// The checkpoint key of `signing_key_file`, if one is configured.
    ///
    /// # Errors
    /// [`ArchiveError::InvalidKey`](crate::ArchiveError::InvalidKey) when it cannot be read or is no Ed25519
    /// PKCS#8 PEM key (the error shows neither the path's contents nor the
    /// key).
    pub fn signing_key(&self) -> crate::Result<Option<crate::CheckpointKey>> {
        let Some(path) = &self.signing_key_file else {
            return Ok(None);
        };
        let pem = std::fs::read_to_string(path).map_err(|_| crate::ArchiveError::InvalidKey)?;
        crate::CheckpointKey::from_pem(&pem).map(Some)
    }

    /// The retention as a duration, if any.
    #[must_use]
    pub fn retention(&self) -> Option<Duration> {
        self.retention_days
            .map(|days| Duration::from_secs(u64::from(days) * 86_400))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_url_and_defaults_hold() {
        let settings = ArchiveSettings {
            url: Some("postgres://u:secret@h/db".into()),
            admin_url: Some("postgres://o:hidden@h/db".into()),
            ..ArchiveSettings::default()
        };
        let debug = format!("{settings:?}");
        assert!(
            !debug.contains("secret") && !debug.contains("hidden"),
            "{debug}"
        );
        assert_eq!(settings.raw_policy(), RawPolicy::Redacted);
        assert_eq!(settings.batch(), DEFAULT_BATCH_SIZE);
        assert_eq!(settings.reclaim_after(), DEFAULT_RECLAIM_AFTER);
        assert_eq!(settings.retention(), None);
    }
}

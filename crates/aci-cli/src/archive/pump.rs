//! The archiving loop of `aci archive` and of a process whose memory store
//! archives its own records: batches from the outbox into the archive,
//! sealing, retention, month partitions, and the four archive metrics.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use invocation_core::Backlog;
use prometheus::{Gauge, IntCounter, IntGauge, Registry};
use store_archive::{Archive, ArchiveSettings, Archiver, CheckpointKey, Step};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::CliError;

/// How often retention and the making of month partitions run.
const HOUSEKEEPING_EVERY: Duration = Duration::from_secs(3600);

/// How often an idle archiver looks for runs to seal.
const SEAL_EVERY: Duration = Duration::from_secs(10);

/// How long a failed step waits before the next (the database or the store
/// may be down; the backlog waits in the outbox).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest one batch may take; past it the batch is given up (it stays
/// pending) and the connection is opened again (it may hang on a dead peer).
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the pending and lag gauges are read while batches run.
const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Months of partitions made ahead of the current one.
const MONTHS_AHEAD: u32 = 1;

/// The archive metrics. The collectors are made once and registered in
/// whichever registry serves them (`aci archive`'s own, or `aci serve
/// --http`'s); their labels are none, so the series count is fixed.
#[derive(Debug, Clone)]
pub(crate) struct ArchiveMetrics {
    pending: IntGauge,
    lag_seconds: Gauge,
    rows: IntCounter,
    errors: IntCounter,
}

impl ArchiveMetrics {
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        Ok(Self {
            pending: IntGauge::new(
                "aci_archive_pending",
                "Finalized records waiting in the outbox (taken or not).",
            )?,
            lag_seconds: Gauge::new(
                "aci_archive_lag_seconds",
                "Age of the oldest finalized record not archived yet (0 when none waits).",
            )?,
            rows: IntCounter::new(
                "aci_archive_rows_total",
                "Calls inserted into the archive by this process.",
            )?,
            errors: IntCounter::new(
                "aci_archive_errors_total",
                "Archive batches that failed (database or store unavailable); they stay pending.",
            )?,
        })
    }

    /// Registers the four collectors in `registry`.
    pub(crate) fn register(&self, registry: &Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.pending.clone()))?;
        registry.register(Box::new(self.lag_seconds.clone()))?;
        registry.register(Box::new(self.rows.clone()))?;
        registry.register(Box::new(self.errors.clone()))?;
        Ok(())
    }

    fn backlog(&self, backlog: Backlog) {
        self.pending
            .set(i64::try_from(backlog.pending).unwrap_or(i64::MAX));
        let lag = backlog.oldest.map_or(0.0, |oldest| {
            let ms = now_millis().saturating_sub(oldest.unix_millis());
            #[allow(clippy::cast_precision_loss)] // ms of lag: far below 2^52
            let secs = ms.max(0) as f64 / 1000.0;
            secs
        });
        self.lag_seconds.set(lag);
    }
}

pub(crate) fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The archive connections of a process: rows go through `url` (the
/// archiver role); migrations, partitions and retention through `admin_url`
/// when set, else through `url` too.
#[derive(Debug, Clone)]
pub(crate) struct Connections {
    pub(crate) rows: Archive,
    pub(crate) admin: Archive,
}

impl Connections {
    /// Connects both and migrates the schema on the admin connection; when
    /// that is a separate role, makes this and next month's partitions too.
    pub(crate) async fn open(settings: &ArchiveSettings) -> Result<Self, CliError> {
        let url = settings.url.as_deref().unwrap_or_default();
        // The error names a category only, never the URL.
        let rows = Archive::connect(url).await.map_err(archive_error)?;
        let admin = match settings.admin_url.as_deref() {
            Some(admin_url) => Archive::connect(admin_url)
                .await
                .map_err(|e| CliError::config(format!("archive admin_url: {e}")))?,
            None => rows.clone(),
        };
        admin.migrate().await.map_err(archive_error)?;
        if settings.admin_url.is_some() {
            admin
                .prepare_months(now_millis(), MONTHS_AHEAD)
                .await
                .map_err(|e| CliError::config(format!("archive admin_url: {e}")))?;
        }
        Ok(Self { rows, admin })
    }
}

pub(crate) fn archive_error(error: store_archive::ArchiveError) -> CliError {
    CliError::config(format!("archive: {error}"))
}

/// The loop around one [`Archiver`].
#[derive(Debug)]
pub(crate) struct Pump {
    pub(crate) archiver: Archiver,
    pub(crate) connections: Connections,
    pub(crate) settings: ArchiveSettings,
    pub(crate) key: Option<CheckpointKey>,
    pub(crate) metrics: ArchiveMetrics,
    /// When the gauges were last read.
    pub(crate) refreshed_at: Mutex<Option<Instant>>,
    /// Whether this loop also seals runs and keeps the partitions (one
    /// loop of a process does).
    pub(crate) housekeeper: bool,
}

impl Pump {
    /// Batches until `stop` turns `true` (finishing the batch in hand) or,
    /// with `once`, until the outbox has nothing more for this archiver
    /// (the caller seals then, once every loop of the process is done).
    /// Returns what was done. With `once`, a failed batch ends the loop
    /// with its error.
    pub(crate) async fn run(
        &self,
        mut stop: watch::Receiver<bool>,
        once: bool,
    ) -> Result<Step, CliError> {
        let mut total = Step::default();
        if self.housekeeper {
            self.housekeeping().await;
        }
        let mut housekept_at = Instant::now();
        let mut sealed_at: Option<Instant> = None;
        let mut failures = 0_u32;
        while !*stop.borrow() {
            if self.housekeeper && housekept_at.elapsed() >= HOUSEKEEPING_EVERY {
                self.housekeeping().await;
                housekept_at = Instant::now();
            }
            let wait = match self.step().await {
                Ok(step) => {
                    failures = 0;
                    add(&mut total, step);
                    if step.taken > 0 {
                        continue;
                    }
                    if once {
                        break;
                    }
                    if self.housekeeper && sealed_at.is_none_or(|at| at.elapsed() >= SEAL_EVERY) {
                        self.seal().await;
                        sealed_at = Some(Instant::now());
                    }
                    self.settings.poll_interval()
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(
                        code = e.code(),
                        failures,
                        "archive batch failed; it stays pending"
                    );
                    if once {
                        return Err(CliError::config(format!("archive: {e}")));
                    }
                    RETRY_AFTER
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = stop.changed() => {}
            }
        }
        Ok(total)
    }

    /// One batch, bounded by [`STEP_TIMEOUT`], with the metrics updated.
    pub(crate) async fn step(&self) -> Result<Step, StepFailed> {
        let outcome = match tokio::time::timeout(STEP_TIMEOUT, self.archiver.step()).await {
            Ok(outcome) => outcome.map_err(StepFailed::Archive),
            Err(_) => {
                // The connection may hang on a dead peer: open a new one.
                if let Err(e) = self.connections.rows.reconnect().await {
                    tracing::warn!(code = e.code(), "archive reconnect failed");
                }
                Err(StepFailed::TimedOut)
            }
        };
        match &outcome {
            Ok(step) => {
                self.metrics.rows.inc_by(step.archived);
                if step.taken > 0 {
                    tracing::info!(
                        archived = step.archived,
                        duplicates = step.duplicates,
                        expired = step.expired,
                        "archive batch committed"
                    );
                }
            }
            Err(_) => self.metrics.errors.inc(),
        }
        // The backlog costs a scan of the outbox streams: read at most once
        // per REFRESH_EVERY while batches follow each other.
        let due = {
            let mut at = self
                .refreshed_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let due = at.is_none_or(|t| t.elapsed() >= REFRESH_EVERY);
            if due {
                *at = Some(Instant::now());
            }
            due
        };
        if due {
            self.refresh().await;
        }
        outcome
    }

    /// Reads the backlog into the pending and lag gauges (kept as they were
    /// when the store does not answer).
    pub(crate) async fn refresh(&self) -> Option<Backlog> {
        match self.archiver.outbox().backlog().await {
            Ok(backlog) => {
                self.metrics.backlog(backlog);
                Some(backlog)
            }
            Err(e) => {
                tracing::warn!(code = e.code(), "reading the outbox backlog failed");
                None
            }
        }
    }

    /// Seals the runs that can take no more calls (with a signing key).
    pub(crate) async fn seal(&self) {
        let Some(key) = &self.key else {
            return;
        };
        match self
            .connections
            .rows
            .seal_idle_runs(key, self.settings.seal_idle(), now_millis())
            .await
        {
            Ok(0) => {}
            Ok(runs) => tracing::info!(runs, "archive runs sealed and checkpointed"),
            Err(e) => tracing::warn!(code = e.code(), "archive sealing failed"),
        }
    }

    /// Retention, and the month partitions ahead (on the admin connection).
    async fn housekeeping(&self) {
        let admin = &self.connections.admin;
        if self.settings.admin_url.is_some()
            && let Err(e) = admin.prepare_months(now_millis(), MONTHS_AHEAD).await
        {
            tracing::warn!(code = e.code(), "making the next month partitions failed");
        }
        let Some(keep) = self.settings.retention() else {
            return;
        };
        let cutoff = now_millis() - i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
        match admin.drop_partitions_before(cutoff).await {
            Ok(dropped) if !dropped.is_empty() => {
                tracing::info!(
                    partitions = dropped.len(),
                    "archive retention dropped partitions"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(code = e.code(), "archive retention failed"),
        }
    }
}

/// Why a batch failed; nothing of it was acknowledged.
#[derive(Debug)]
pub(crate) enum StepFailed {
    /// The archive or the store refused or was unreachable.
    Archive(store_archive::ArchiveError),
    /// The batch took longer than [`STEP_TIMEOUT`].
    TimedOut,
}

impl StepFailed {
    const fn code(&self) -> &'static str {
        match self {
            Self::Archive(e) => e.code(),
            Self::TimedOut => "ARCHIVE_TIMEOUT",
        }
    }
}

impl std::fmt::Display for StepFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Archive(e) => write!(f, "{e}"),
            Self::TimedOut => write!(
                f,
                "an archive batch took longer than {}s",
                STEP_TIMEOUT.as_secs()
            ),
        }
    }
}

pub(crate) fn add(total: &mut Step, step: Step) {
    total.taken += step.taken;
    total.archived += step.archived;
    total.duplicates += step.duplicates;
    total.expired += step.expired;
    total.stale += step.stale;
}

/// The archiver of a process whose memory store keeps an outbox: it runs
/// beside the server, and at the end archives what is left, bounded, and
/// says how much it could not.
#[derive(Debug)]
pub(crate) struct LocalArchive {
    pump: Arc<Pump>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl LocalArchive {
    pub(crate) fn new(pump: Pump) -> Self {
        Self {
            pump: Arc::new(pump),
            stop: watch::channel(false).0,
            task: Mutex::new(None),
        }
    }

    /// The metrics, for a server to register.
    pub(crate) fn metrics(&self) -> &ArchiveMetrics {
        &self.pump.metrics
    }

    /// Starts archiving in the background (once).
    pub(crate) fn start(&self) {
        let mut task = self.task.lock().unwrap_or_else(PoisonError::into_inner);
        if task.is_none() {
            let pump = Arc::clone(&self.pump);
            let stop = self.stop.subscribe();
            *task = Some(tokio::spawn(async move {
                if let Err(e) = pump.run(stop, false).await {
                    tracing::warn!(error = %e, "the archiver stopped");
                }
            }));
        }
    }

    /// Stops the background loop, then archives what the outbox still
    /// holds for up to `bound`. Returns how many finalized records are left
    /// unarchived (lost with the process), after saying so on stderr.
    pub(crate) async fn finish(&self, bound: Duration) -> u64 {
        let _ = self.stop.send(true);
        let task = self
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = task.await;
        }
        let until = Instant::now() + bound;
        let left = loop {
            if matches!(self.pump.step().await, Ok(step) if step.taken > 0) {
                continue;
            }
            let left = self.pump.refresh().await.map_or(u64::MAX, |b| b.pending);
            if left == 0 || Instant::now() >= until {
                break left;
            }
            tokio::time::sleep(RETRY_AFTER.min(until.saturating_duration_since(Instant::now())))
                .await;
        };
        if left > 0 {
            tracing::error!(
                code = "ARCHIVE_INCOMPLETE",
                records = left,
                "finalized records were not archived before the process ended"
            );
            eprintln!(
                "aci: {left} finalized records were not archived (the archive did not take them in time); they end with this process"
            );
        }
        left
    }
}

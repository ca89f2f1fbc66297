//! `aci archive`, `aci verify --archive` and `aci export`: the process
//! around `store_archive`.
//!
//! `aci archive` moves finalized records from the Redis store's outbox into
//! the `[archive]` PostgreSQL archive ([`store_archive::Archiver`]), batch
//! after batch, acknowledging a batch only after its insert committed. With
//! `--once` it stops when the outbox has nothing more for it; otherwise it
//! waits for new entries until SIGTERM (or Ctrl-C), then finishes the batch
//! in hand and exits 0. At start, and hourly, it drops the month partitions
//! older than `retention_days` (when its role may). It logs counts and
//! codes, never a payload, id or URL; stdout gets one JSON summary line.

mod pump;

use std::process::ExitCode;
use std::sync::Arc;

use invocation_core::{CitationCheck, CitationVerdict, NotCitable};
use serde_json::{Value, json};
use store_archive::{
    Archive, ArchiveSettings, ArchivedCall, Archiver, CheckpointKey, StoredCall, Verdict, to_hex,
};
use store_redis::RedisStore;
use tokio::sync::watch;

pub(crate) use self::pump::{ArchiveMetrics, LocalArchive};
use self::pump::{Connections, Pump, archive_error};
use crate::StoreArgs;
use crate::app::{StoreSpec, redis_error};
use crate::config::Config;
use crate::error::CliError;
use crate::output::outln;

/// Exit status of `--once` when entries are still pending (taken by another
/// archiver), and of a verify or export that finds nothing intact.
const NOT_DONE: u8 = 2;

fn load_config(args: &StoreArgs) -> Result<Config, CliError> {
    match &args.config {
        Some(path) => Config::load(path),
        None => Ok(Config::default()),
    }
}

fn settings(config: &Config) -> Result<&ArchiveSettings, CliError> {
    config
        .archive
        .as_ref()
        .filter(|s| s.url.is_some())
        .ok_or_else(|| CliError::config("the configuration has no [archive] url"))
}

/// A connection for reading the archive back (inspect, export, verify).
async fn connect(settings: &ArchiveSettings) -> Result<Archive, CliError> {
    let url = settings.url.as_deref().unwrap_or_default();
    // The error names a category only, never the URL.
    let archive = Archive::connect(url).await.map_err(archive_error)?;
    archive.migrate().await.map_err(archive_error)?;
    Ok(archive)
}

fn signing_key(settings: &ArchiveSettings) -> Result<Option<CheckpointKey>, CliError> {
    settings
        .signing_key()
        .map_err(|e| CliError::config(format!("[archive] signing_key_file: {e}")))
}

/// The archiver of a memory store's outbox, for a process whose
/// configuration has `[archive]`: connected (a database that cannot be
/// reached at start is a configuration error), not started yet.
pub(crate) async fn local(
    config: &Config,
    store: &store_memory::MemoryStore,
) -> Result<Option<LocalArchive>, CliError> {
    let Some(settings) = config.archive.as_ref().filter(|s| s.url.is_some()) else {
        return Ok(None);
    };
    let key = signing_key(settings)?;
    let connections = Connections::open(settings).await?;
    let archiver = Archiver::new(
        Arc::new(store.clone()),
        Arc::new(store.outbox()),
        connections.rows.clone(),
        "aci-local",
    )
    .raw(settings.raw_policy(), config.redactor()?)
    // One consumer, one batch at a time: an entry taken and not
    // acknowledged is from a batch that failed, to be taken again at once.
    .batching(settings.batch(), std::time::Duration::ZERO);
    let metrics = ArchiveMetrics::new().map_err(|e| CliError::config(format!("metrics: {e}")))?;
    Ok(Some(LocalArchive::new(Pump {
        archiver,
        connections,
        settings: settings.clone(),
        key,
        metrics,
        refreshed_at: std::sync::Mutex::new(None),
        housekeeper: true,
    })))
}

/// SIGTERM or Ctrl-C, as a watch that turns `true`. The handlers are in
/// place when this returns (called first thing, before any connection):
/// a signal while the archiver is still starting (connecting, within the
/// stores' connect timeouts) stops it cleanly once it has started, with
/// its summary, instead of killing it.
fn stop_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate()).ok();
        let interrupt = signal(SignalKind::interrupt()).ok();
        tokio::spawn(async move {
            match (term, interrupt) {
                (Some(mut term), Some(mut interrupt)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = interrupt.recv() => {}
                    }
                }
                (Some(mut one), None) | (None, Some(mut one)) => {
                    one.recv().await;
                }
                (None, None) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            let _ = tx.send(true);
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = tx.send(true);
    });
    rx
}

/// Serves `GET /metrics` of `registry` on `addr` until the process ends.
async fn serve_metrics(addr: &str, registry: prometheus::Registry) -> Result<(), CliError> {
    use axum::http::header;
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| CliError::config(format!("[archive] metrics_listen: cannot listen: {e}")))?;
    if let Ok(local) = listener.local_addr() {
        eprintln!("aci: archive metrics on http://{local}/metrics");
    }
    let registry = Arc::new(registry);
    let router = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/metrics",
            get(move || {
                let registry = Arc::clone(&registry);
                async move {
                    let mut text = Vec::new();
                    let encoded = prometheus::Encoder::encode(
                        &prometheus::TextEncoder::new(),
                        &registry.gather(),
                        &mut text,
                    );
                    if encoded.is_err() {
                        text.clear();
                    }
                    (
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        text,
                    )
                }
            }),
        );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            tracing::warn!(error = %e, "archive metrics listener stopped");
        }
    });
    Ok(())
}

/// `aci archive [--once] [--metrics ADDR]`.
pub(crate) async fn run(
    args: &StoreArgs,
    once: bool,
    metrics_listen: Option<&str>,
) -> Result<ExitCode, CliError> {
    let stop = stop_signal();
    let config = load_config(args)?;
    let settings = settings(&config)?;
    let spec = StoreSpec::parse(
        args.store
            .as_deref()
            .or(config.store.as_deref())
            .unwrap_or("memory"),
    )?;
    let StoreSpec::Redis(redis) = spec else {
        return Err(CliError::config(
            "aci archive reads the outbox of a shared store: set store to a Redis URL (a memory store archives from its own process)",
        ));
    };
    let redis = config.redis.apply(redis).map_err(redis_error)?.outbox(true);
    let key = signing_key(settings)?;
    let metrics = ArchiveMetrics::new().map_err(|e| CliError::config(format!("metrics: {e}")))?;
    if let Some(addr) = metrics_listen.or(settings.metrics_listen.as_deref()) {
        let registry = prometheus::Registry::new();
        metrics
            .register(&registry)
            .map_err(|e| CliError::config(format!("metrics: {e}")))?;
        serve_metrics(addr, registry).await?;
    }
    let store = RedisStore::new(redis).map_err(redis_error)?;
    store.ping().await.map_err(redis_error)?;
    let connections = Connections::open(settings).await?;
    // `workers` loops, each its own consumer and connection: one batch's
    // insert overlaps the next one's reads. The first also seals and keeps
    // the partitions.
    let redactor = config.redactor()?;
    // One outbox for every loop: one scan of the keyspace a second, and
    // loops that take from different streams.
    let outbox = Arc::new(store.outbox());
    let mut pumps = Vec::with_capacity(settings.workers());
    for worker in 0..settings.workers() {
        let rows = if worker == 0 {
            connections.rows.clone()
        } else {
            Archive::connect(settings.url.as_deref().unwrap_or_default())
                .await
                .map_err(archive_error)?
        };
        let consumer = format!(
            "aci-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let archiver = Archiver::new(
            Arc::new(store.clone()),
            Arc::clone(&outbox) as Arc<dyn invocation_core::Outbox>,
            rows.clone(),
            consumer,
        )
        .raw(settings.raw_policy(), Arc::clone(&redactor))
        .batching(settings.batch(), settings.reclaim_after());
        pumps.push(Arc::new(Pump {
            archiver,
            connections: Connections {
                rows,
                admin: connections.admin.clone(),
            },
            settings: settings.clone(),
            key: key.clone(),
            metrics: metrics.clone(),
            refreshed_at: std::sync::Mutex::new(None),
            housekeeper: worker == 0,
        }));
    }
    if !once {
        // Connected and about to read: what a supervisor (or a test) waits
        // for before it counts on this archiver.
        eprintln!(
            "aci: archiving with {} workers (SIGTERM or Ctrl-C drains and stops)",
            pumps.len()
        );
    }
    // Each loop its own task: the batches' own work (redaction, hashing,
    // encoding) runs on every thread of the runtime, not on one.
    let loops: Vec<_> = pumps
        .iter()
        .map(|pump| {
            let (pump, stop) = (Arc::clone(pump), stop.clone());
            tokio::spawn(async move { pump.run(stop, once).await })
        })
        .collect();
    let mut total = store_archive::Step::default();
    for outcome in futures::future::join_all(loops).await {
        match outcome {
            Ok(outcome) => pump::add(&mut total, outcome?),
            // As when the loops ran in this task: a panic stays a panic.
            Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
            Err(_) => return Err(CliError::config("archive: a worker loop was cancelled")),
        }
    }
    let pump = &pumps[0];
    if once {
        // After every loop is done: a run archived by another loop is
        // sealed too.
        pump.seal().await;
    }
    let backlog = pump
        .archiver
        .outbox()
        .backlog()
        .await
        .map_err(|e| CliError::config(format!("redis store: {e}")))?;
    outln!(
        "{}",
        json!({
            "archived": total.archived,
            "duplicates": total.duplicates,
            "expired": total.expired,
            "pending": backlog.pending,
        })
    )?;
    Ok(if once && backlog.pending > 0 {
        ExitCode::from(NOT_DONE)
    } else {
        ExitCode::SUCCESS
    })
}

/// `aci verify --archive --run R`: exit 0 when intact, 2 naming the first
/// bad record (or when the run is not archived). With a `signing_key_file`,
/// a sealed run's checkpoint signature is checked too.
pub(crate) async fn verify(args: &StoreArgs, run: &str) -> Result<ExitCode, CliError> {
    let config = load_config(args)?;
    let settings = settings(&config)?;
    let key = signing_key(settings)?.map(|k| k.verifying_key());
    let archive = connect(settings).await?;
    let verdict = archive
        .verify_run(run, key.as_ref())
        .await
        .map_err(archive_error)?;
    let (line, intact) = match verdict {
        Verdict::Intact { records, sealed } => (
            json!({"run_id": run, "verdict": "INTACT", "records": records, "sealed": sealed}),
            true,
        ),
        Verdict::NotFound => (json!({"run_id": run, "verdict": "NOT_FOUND"}), false),
        Verdict::Broken {
            problem,
            seq,
            tool_call_id,
        } => (
            json!({
                "run_id": run,
                "verdict": "BROKEN",
                "problem": problem.as_str(),
                "seq": seq,
                "tool_call_id": tool_call_id,
            }),
            false,
        ),
    };
    outln!("{line}")?;
    Ok(ExitCode::from(if intact { 0 } else { NOT_DONE }))
}

/// `aci inspect --run R` for a run the store no longer has: the archived
/// calls, as JSON lines (payloads with `--json`, the raw response as
/// archived with `--raw`) or a table; says on stderr that it read the
/// archive. Exit 0, or 2 when the archive has none either.
pub(crate) async fn inspect(
    config: &Config,
    run: &str,
    json_lines: bool,
    raw: bool,
) -> Result<ExitCode, CliError> {
    let archive = connect(settings(config)?).await?;
    let calls = archive.calls(run).await.map_err(archive_error)?;
    eprintln!("aci: run {run} read from the archive");
    if calls.is_empty() {
        return Ok(ExitCode::from(NOT_DONE));
    }
    if !json_lines {
        outln!("seq  finished_at_ms  tool  tool_call_id  status  evidence  error_code")?;
    }
    for stored in &calls {
        let call = &stored.call;
        if json_lines {
            let mut value = exported(stored);
            if let Value::Object(map) = &mut value {
                if !raw {
                    map.remove("raw");
                }
                map.insert("source".into(), json!("archive"));
            }
            outln!("{value}")?;
        } else {
            let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
            outln!(
                "{}  {}  {}  {}  {}  {}  {}",
                stored.seq,
                call.finished_at_ms,
                call.tool_name,
                call.tool_call_id,
                call.status,
                dash(&call.evidence_status),
                dash(&call.error_code),
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// For `aci verify --run R ID…`: the citations the store no longer knows
/// (expired), judged on their archived records instead (a READY record
/// stands as it did; an ERROR one never does).
pub(crate) async fn recheck_expired(
    config: &Config,
    run: &str,
    checks: &mut [CitationCheck],
) -> Result<(), CliError> {
    if !checks.iter().any(expired) {
        return Ok(());
    }
    let archive = connect(settings(config)?).await?;
    let calls: Vec<ArchivedCall> = archive
        .calls(run)
        .await
        .map_err(archive_error)?
        .into_iter()
        .map(|stored| stored.call)
        .collect();
    recheck_archived(&calls, checks);
    Ok(())
}

/// Whether the store gave `check` no record: an unknown id, or an expired one.
fn expired(check: &CitationCheck) -> bool {
    matches!(
        check.verdict,
        CitationVerdict::NotCitable {
            reason: NotCitable::UnknownOrExpired
        }
    )
}

/// The citations of `checks` the store does not know, judged again on
/// `calls`, one run's archived calls ([`archived_verdict`]); a citation no
/// archived call answers stays unknown.
pub(crate) fn recheck_archived(calls: &[ArchivedCall], checks: &mut [CitationCheck]) {
    for check in checks.iter_mut().filter(|c| expired(c)) {
        let id = check
            .citation
            .rsplit_once('/')
            .map_or(check.citation.as_str(), |(_, id)| id);
        if let Some(call) = calls.iter().find(|call| call.tool_call_id == id) {
            check.verdict = archived_verdict(call);
        }
    }
}

/// The verdict on a citation of an archived call, by `aci verify`'s rules:
/// READY with `EVIDENCE_FOUND` stands; READY with `NO_EVIDENCE` is a
/// negative observation within its scope only (the result's `scope`, else
/// the request's normalized scope); anything else (ERROR) is not citable.
pub(crate) fn archived_verdict(call: &ArchivedCall) -> CitationVerdict {
    let parse = |text: &Option<String>| {
        text.as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
    };
    match (call.status.as_str(), call.evidence_status.as_deref()) {
        ("READY", Some("EVIDENCE_FOUND")) => CitationVerdict::Evidence {
            tool_name: call.tool_name.clone(),
        },
        ("READY", Some("NO_EVIDENCE")) => CitationVerdict::NegativeObservation {
            tool_name: call.tool_name.clone(),
            scope: parse(&call.result)
                .and_then(|r| r.get("scope").cloned())
                .or_else(|| parse(&call.scope))
                .unwrap_or(Value::Null),
        },
        _ => CitationVerdict::NotCitable {
            reason: NotCitable::Failed(
                call.error_code
                    .as_deref()
                    .and_then(aci_contracts::ErrorCode::parse)
                    .unwrap_or(aci_contracts::ErrorCode::StoreUnavailable),
            ),
        },
    }
}

/// A connection for reading runs back from the archive (the review page
/// and `aci report` of a run the store no longer holds): opened when first
/// needed, or at start with [`connect_now`](Self::connect_now); opened
/// again at the next read when that failed.
#[derive(Debug)]
pub(crate) struct ArchiveReader {
    settings: ArchiveSettings,
    archive: tokio::sync::Mutex<Option<Archive>>,
}

impl ArchiveReader {
    /// The reader of `config`'s archive; `None` without `[archive] url`.
    pub(crate) fn of(config: &Config) -> Option<Self> {
        let settings = settings(config).ok()?;
        Some(Self {
            settings: settings.clone(),
            archive: tokio::sync::Mutex::new(None),
        })
    }

    /// Connects now; when the database cannot be reached, says so on
    /// stderr (a category, never the URL) and tries again when a read
    /// needs it.
    pub(crate) async fn connect_now(&self) {
        if let Err(e) = self.archive().await {
            eprintln!(
                "aci: the archive cannot be read now ({e}); runs the store no longer holds are read from it once it can"
            );
        }
    }

    /// The connection, opened first when it is not.
    pub(crate) async fn archive(&self) -> Result<Archive, CliError> {
        let mut held = self.archive.lock().await;
        if let Some(archive) = held.as_ref() {
            return Ok(archive.clone());
        }
        let archive = connect(&self.settings).await?;
        *held = Some(archive.clone());
        Ok(archive)
    }
}

/// `aci export` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportFormat {
    /// One JSON object per call.
    Jsonl,
    /// RFC 4180 CSV with a header line.
    Csv,
}

fn exported(stored: &StoredCall) -> Value {
    let mut value = stored.call.to_json();
    if let Value::Object(map) = &mut value {
        map.insert("seq".into(), json!(stored.seq));
        map.insert("leaf_hash".into(), json!(to_hex(&stored.leaf_hash)));
        map.insert("chain_hash".into(), json!(to_hex(&stored.chain_hash)));
    }
    value
}

/// The CSV columns, in order.
const CSV_COLUMNS: [&str; 25] = [
    "seq",
    "run_id",
    "tool_call_id",
    "tool_name",
    "status",
    "evidence_status",
    "error_code",
    "retryable",
    "scope_fp",
    "created_at_ms",
    "finished_at_ms",
    "replayed_from",
    "redactions",
    "request",
    "scope",
    "result",
    "raw",
    "raw_sha256",
    "raw_mode",
    "request_bytes",
    "raw_bytes",
    "result_bytes",
    "timings_us",
    "leaf_hash",
    "chain_hash",
];

/// One CSV field: quoted when it holds a comma, quote or line break.
fn csv_field(value: &Value) -> String {
    let text = match value {
        Value::Null => return String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// `aci export --run R --format jsonl|csv`: the run's archived calls in
/// chain order; exit 2 when the archive has none.
pub(crate) async fn export(
    args: &StoreArgs,
    run: &str,
    format: ExportFormat,
) -> Result<ExitCode, CliError> {
    let config = load_config(args)?;
    let archive = connect(settings(&config)?).await?;
    let calls = archive.calls(run).await.map_err(archive_error)?;
    if calls.is_empty() {
        eprintln!("aci: the archive has no calls of run {run}");
        return Ok(ExitCode::from(NOT_DONE));
    }
    if format == ExportFormat::Csv {
        outln!("{}", CSV_COLUMNS.join(","))?;
    }
    for stored in &calls {
        let value = exported(stored);
        match format {
            ExportFormat::Jsonl => outln!("{value}")?,
            ExportFormat::Csv => {
                let fields: Vec<String> = CSV_COLUMNS
                    .iter()
                    .map(|column| csv_field(value.get(*column).unwrap_or(&Value::Null)))
                    .collect();
                outln!("{}", fields.join(","))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_when_needed() {
        assert_eq!(csv_field(&json!("plain")), "plain");
        assert_eq!(csv_field(&json!("a,b")), "\"a,b\"");
        assert_eq!(csv_field(&json!("say \"hi\"")), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field(&json!(null)), "");
        assert_eq!(csv_field(&json!(3)), "3");
    }
}

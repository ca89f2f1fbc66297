//! The subcommands.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use aci_contracts::{RunId, tool_definitions};
use invocation_core::{
    CallPolicy, CitationVerdict, InvocationRecord, RecordFields, RunState, ToolEnvelope,
};
use serde_json::{Value, json};

use crate::app::{App, StoreSpec};
use crate::config::Config;
use crate::error::CliError;
use crate::output::{out, outln};
use crate::server::ServeOptions;
use crate::server::service::Answer;
use crate::telemetry::{self, CallTrace};
use crate::{Command, StoreArgs, http, pretty, stdio};

/// Tool definition formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ToolFormat {
    Mcp,
    Openai,
    Anthropic,
}

/// How long `aci call` waits for its span to reach the collector.
const CALL_FLUSH: Duration = Duration::from_secs(10);

/// How long `aci call` with a memory store and `[archive]` tries to archive
/// its record before it says it could not.
const CALL_ARCHIVE: Duration = Duration::from_secs(10);

/// Exit status of a READY call.
const READY: u8 = 0;
/// Exit status of an ERROR call, or of a citation that does not stand.
const NOT_READY: u8 = 2;

/// Runs one subcommand.
pub(crate) async fn run(command: Command) -> Result<ExitCode, CliError> {
    match command {
        Command::Tools { format } => {
            out!("{}", tools(format.into()))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Call {
            tool,
            arguments,
            run_id,
            tool_call_id,
            store,
        } => call(&store, tool, arguments, run_id, tool_call_id).await,
        Command::Inspect {
            run,
            json,
            raw,
            store,
        } => inspect(&store, &run, json || raw, raw).await,
        Command::Verify {
            run,
            archive: true,
            store,
            ..
        } => crate::archive::verify(&store, &run).await,
        Command::Verify {
            run, ids, store, ..
        } => verify(&store, &run, &ids).await,
        Command::Report { run, out, store } => crate::review::report(&store, &run, &out).await,
        Command::Archive {
            once,
            metrics,
            store,
        } => crate::archive::run(&store, once, metrics.as_deref()).await,
        Command::Export { run, format, store } => {
            crate::archive::export(&store, &run, format).await
        }
        Command::Index { config } => {
            let config = match config {
                Some(path) => Config::load(&path)?,
                None => Config::default(),
            };
            crate::index::run(&config).await
        }
        Command::Recover {
            run,
            older_than,
            store,
        } => recover(&store, &run, older_than).await,
        Command::Serve {
            run_id,
            http: Some(addr),
            insecure_no_auth,
            store,
        } => {
            debug_assert!(run_id.is_none(), "clap: --run-id conflicts with --http");
            let config = load_config(&store)?;
            let spec = StoreSpec::parse(
                store
                    .store
                    .as_deref()
                    .or(config.store.as_deref())
                    .unwrap_or("memory"),
            )?;
            telemetry::install(&config.telemetry)?;
            let app = App::build(&config, store.store.as_deref()).await?;
            let drain = ServeOptions::new(&config.serve, &app).drain;
            let options = http::HttpOptions {
                addr,
                insecure_no_auth,
                shared_store: spec.is_shared(),
            };
            let served = http::serve(app, &config, options).await;
            telemetry::shutdown(drain).await;
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            run_id,
            http: None,
            store,
            ..
        } => {
            let config = load_config(&store)?;
            let run_id = match run_id {
                Some(id) => parse_run_id(&id)?,
                None => {
                    let id = fresh_id("run");
                    eprintln!("aci: serving run {id}");
                    id
                }
            };
            telemetry::install(&config.telemetry)?;
            let app = App::build(&config, store.store.as_deref()).await?;
            let options = ServeOptions::new(&config.serve, &app);
            let served = stdio::serve(app, run_id, options).await;
            telemetry::shutdown(options.drain).await;
            served?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The definitions in `format`, as pretty JSON with sorted keys.
pub(crate) fn tools(format: ToolFormat) -> String {
    let tools: Vec<Value> = tool_definitions()
        .iter()
        .map(|d| match format {
            ToolFormat::Mcp => d.to_mcp(),
            ToolFormat::Openai => d.to_openai(),
            ToolFormat::Anthropic => d.to_anthropic(),
        })
        .collect();
    aci_contracts::frozen::render(Value::Array(tools))
}

pub(crate) fn load_config(args: &StoreArgs) -> Result<Config, CliError> {
    match &args.config {
        Some(path) => Config::load(path),
        None => Ok(Config::default()),
    }
}

fn parse_run_id(text: &str) -> Result<RunId, CliError> {
    RunId::new(text).map_err(|e| CliError::config(format!("invalid run id: {e}")))
}

/// A fresh id for the command's role as the agent framework: `<kind>-<uuid>`.
fn fresh_id(kind: &str) -> RunId {
    // A hyphenated UUID only has identifier characters.
    RunId::new(format!("{kind}-{}", uuid::Uuid::new_v4()))
        .unwrap_or_else(|_| unreachable!("uuid ids are valid"))
}

async fn call(
    store: &StoreArgs,
    tool: String,
    arguments: String,
    run_id: Option<String>,
    tool_call_id: Option<String>,
) -> Result<ExitCode, CliError> {
    let config = load_config(store)?;
    let run_id = match run_id {
        Some(id) => parse_run_id(&id)?,
        None => fresh_id("run"),
    };
    let tool_call_id = tool_call_id.unwrap_or_else(|| fresh_id("call").into_string());
    telemetry::install(&config.telemetry)?;
    let app = App::build(&config, store.store.as_deref()).await?;
    // The operator who runs `aci call` is the harness: the call is theirs,
    // and every tool the command registers is read-only.
    let ctx = app.run_context(run_id.clone(), CallPolicy::AUTHORIZED_READ_ONLY);
    let mut trace = CallTrace::start();
    trace.run(run_id.as_str());
    trace.arguments(&arguments);
    let envelope = ToolEnvelope::new(tool_call_id, run_id.as_str(), tool.as_str(), arguments);
    let invoked = std::time::SystemTime::now();
    let outcome = app.boundary.invoke(&ctx, envelope).await;
    trace.outcome(invoked, &outcome);
    let compact = serde_json::to_string(&outcome)
        .map_err(|e| CliError::config(format!("cannot print the outcome: {e}")))?;
    let status = if outcome.observation.is_error() {
        NOT_READY
    } else {
        READY
    };
    if trace.is_on() {
        trace.end(&tool, &Answer::from(outcome));
    }
    let printed = outln!("{}", pretty::indent(&compact));
    if let Some(archive) = &app.archive {
        // The memory store's record dies with the process: archived now, or
        // said not to be.
        archive.finish(CALL_ARCHIVE).await;
    }
    // The span leaves before the process does.
    telemetry::shutdown(CALL_FLUSH).await;
    printed?;
    Ok(ExitCode::from(status))
}

pub(crate) async fn shared_app(store: &StoreArgs, command: &str) -> Result<App, CliError> {
    let config = load_config(store)?;
    let spec = store
        .store
        .as_deref()
        .or(config.store.as_deref())
        .unwrap_or("memory");
    if !StoreSpec::parse(spec)?.is_shared() {
        return Err(CliError::config(format!(
            "{command} reads records another process wrote: pass --store redis://… (the memory store lives only inside one process)"
        )));
    }
    App::build(&config, store.store.as_deref()).await
}

/// Margin over the longest tool timeout before `recover` takes a PROJECTING
/// record for abandoned: finalization and clock skew between hosts.
pub(crate) const RECOVER_MARGIN: Duration = Duration::from_secs(30);

/// The age past which no live process can still finish a call of `app`.
pub(crate) fn recovery_threshold(app: &App) -> Duration {
    app.boundary.longest_timeout() + RECOVER_MARGIN
}

async fn recover(
    store: &StoreArgs,
    run: &str,
    older_than: Option<u64>,
) -> Result<ExitCode, CliError> {
    let run_id = parse_run_id(run)?;
    let app = shared_app(store, "recover").await?;
    let min_age = older_than.map_or_else(|| recovery_threshold(&app), Duration::from_secs);
    let recovered = app
        .boundary
        .journal()
        .recover_run(&run_id, min_age)
        .await
        .map_err(|e| CliError::config(format!("cannot recover the run: {e}")))?;
    for id in &recovered {
        outln!(
            "{}",
            json!({
                "tool_call_id": id,
                "status": "ERROR",
                "error_code": "EXECUTION_ABANDONED",
            })
        )?;
    }
    eprintln!(
        "aci: recovered {} record(s) of run {run_id} older than {} s",
        recovered.len(),
        min_age.as_secs()
    );
    Ok(ExitCode::SUCCESS)
}

/// The run's state as JSON (start, deadline, owner), `null` when none is held.
pub(crate) fn run_json(state: Option<&RunState>) -> Value {
    state.map_or(
        Value::Null,
        |s| json!({ "started_at": s.started_at, "deadline": s.deadline, "owner": s.owner }),
    )
}

async fn inspect(
    store: &StoreArgs,
    run: &str,
    json: bool,
    raw: bool,
) -> Result<ExitCode, CliError> {
    let run_id = parse_run_id(run)?;
    let app = shared_app(store, "inspect").await?;
    let fields = if raw {
        RecordFields::All
    } else if json {
        RecordFields::WithoutRaw
    } else {
        RecordFields::Metadata
    };
    let unreadable = |e: invocation_core::StoreError| {
        CliError::config(format!("cannot read the run's journal: {e}"))
    };
    let records = app
        .boundary
        .journal()
        .entries(&run_id, fields)
        .await
        .map_err(unreadable)?;
    if records.is_empty() {
        // Expired from the store: the archive may have the run.
        let config = load_config(store)?;
        if config.archive.is_some() {
            return crate::archive::inspect(&config, run, json, raw).await;
        }
    }
    let state = app
        .boundary
        .store()
        .run_state(&run_id)
        .await
        .map_err(unreadable)?;
    if json {
        let run = run_json(state.as_ref());
        for record in &records {
            let mut line = record_json(record);
            if let Some(object) = line.as_object_mut() {
                object.insert("run".to_owned(), run.clone());
            }
            outln!("{line}")?;
        }
    } else {
        if let Some(state) = &state {
            let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
            outln!(
                "run {run_id}: started {}, deadline {}, owner {}",
                state.started_at,
                or_dash(state.deadline.map(|d| d.to_string())),
                or_dash(state.owner.clone()),
            )?;
        }
        out!("{}", table(&records))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One journal entry as a JSON line; payloads only when they were read.
pub(crate) fn record_json(r: &InvocationRecord) -> Value {
    let parse = |text: &Option<String>| {
        text.as_deref().map(|t| {
            serde_json::from_str::<Value>(t).unwrap_or_else(|_| Value::String(t.to_owned()))
        })
    };
    let mut line = json!({
        "created_at": r.created_at,
        "finished_at": r.finished_at,
        "tool_name": r.tool_name,
        "tool_call_id": r.key.tool_call_id,
        "status": r.status,
        "evidence_status": r.evidence_status,
        "error_code": r.error_code,
        "request_bytes": r.request_bytes,
        "raw_bytes": r.raw_bytes,
        "agent_result_bytes": r.agent_result_bytes,
        "duration_ms": r.duration().map(|d| d.as_millis() as u64),
        "scope_fingerprint": r.scope_fingerprint.to_hex(),
        "replayed_from": r.replayed_from,
    });
    if let Some(object) = line.as_object_mut() {
        if let Some(retryable) = r.retryable {
            object.insert("retryable".to_owned(), Value::Bool(retryable));
        }
        if !r.redactions.is_empty() {
            object.insert("redactions".to_owned(), json!(r.redactions));
        }
        if let Some(t) = r.timings {
            let micros = |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
            object.insert(
                "timings_us".to_owned(),
                json!({
                    "preflight": micros(t.preflight),
                    "execution": t.execution.map(micros),
                    "projection": t.projection.map(micros),
                }),
            );
        }
        for (key, value) in [
            ("request", parse(&r.request_json)),
            ("agent_result", parse(&r.agent_result_json)),
            ("raw", parse(&r.raw_json)),
        ] {
            if let Some(value) = value {
                object.insert(key.to_owned(), value);
            }
        }
    }
    line
}

fn table(records: &[InvocationRecord]) -> String {
    let header = [
        "TIME",
        "TOOL",
        "TOOL_CALL_ID",
        "STATUS",
        "EVIDENCE",
        "ERROR",
        "REQ_B",
        "RAW_B",
        "RESULT_B",
        "MS",
    ];
    let dash = || "-".to_owned();
    let rows: Vec<[String; 10]> = records
        .iter()
        .map(|r| {
            [
                r.created_at.to_string(),
                r.tool_name.clone(),
                r.key.tool_call_id.to_string(),
                r.status.as_str().to_owned(),
                r.evidence_status
                    .map_or_else(dash, |e| e.as_str().to_owned()),
                r.error_code.map_or_else(dash, |c| c.as_str().to_owned()),
                r.request_bytes.to_string(),
                r.raw_bytes.map_or_else(dash, |b| b.to_string()),
                r.agent_result_bytes.map_or_else(dash, |b| b.to_string()),
                r.duration()
                    .map_or_else(dash, |d| d.as_millis().to_string()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let text: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", text.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in &rows {
        line(row.iter().map(String::as_str).collect());
    }
    if rows.is_empty() {
        let _ = writeln!(out, "(no records: unknown run, or its records expired)");
    }
    out
}

async fn verify(store: &StoreArgs, run: &str, ids: &[String]) -> Result<ExitCode, CliError> {
    let run_id = parse_run_id(run)?;
    let app = shared_app(store, "verify").await?;
    let mut checks = app.boundary.journal().verify_citations(&run_id, ids).await;
    // Calls expired from the store may stand in the archive.
    let config = load_config(store)?;
    if config.archive.is_some() {
        crate::archive::recheck_expired(&config, run, &mut checks).await?;
    }
    // Who the run belongs to, beside the verdicts (stdout keeps one verdict
    // per line).
    if let Ok(Some(owner)) = app
        .boundary
        .store()
        .run_state(&run_id)
        .await
        .map(|state| state.and_then(|s| s.owner))
    {
        eprintln!("aci: run {run_id} is owned by {owner}");
    }
    let mut all_stand = true;
    for check in &checks {
        all_stand &= !matches!(check.verdict, CitationVerdict::NotCitable { .. });
        let line = serde_json::to_string(check)
            .map_err(|e| CliError::config(format!("cannot print a verdict: {e}")))?;
        outln!("{line}")?;
    }
    Ok(ExitCode::from(if all_stand { READY } else { NOT_READY }))
}

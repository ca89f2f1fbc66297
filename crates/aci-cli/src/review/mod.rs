//! Reviewing a run: one page of everything an agent called, saw and cited.
//!
//! - [`model`]: the run read from the store (the records as `aci inspect`
//!   reads them, with the raw responses), or, once the store no longer
//!   holds it and `[archive] url` is set, from the archive; arranged for
//!   the page, which says which it read;
//! - [`page`]: the page itself, server-rendered with maud, self-contained;
//! - [`json_view`]: a raw response beside the model's view, with what the
//!   model did not get marked;
//! - [`citations`]: the citation check of an answer text, with
//!   `aci verify`'s rules.
//!
//! Served by `aci serve --http` ([`routes`]) under the same bearer
//! authentication as `/mcp`, to the run's owner (the store's, or the
//! archive's `aci_runs.owner`) and to principals marked `review = true`;
//! written to a file by `aci report` ([`report`]).

mod citations;
mod json_view;
mod model;
mod page;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use aci_contracts::{RunId, ToolCallId};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use invocation_core::{InvocationKey, InvocationRecord, RecordFields, RunState, ToolBoundary};
use serde_json::{Value, json};
use store_archive::Archive;

use self::model::{Budgets, LoadError, RunView, Source};
use self::page::Mode;
use crate::StoreArgs;
use crate::archive::ArchiveReader;
use crate::commands::{load_config, record_json, run_json, shared_app};
use crate::error::CliError;
use crate::server::Principal;

/// Largest answer text the citation check reads.
pub(crate) const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// What the review routes need.
#[derive(Debug)]
pub(crate) struct ReviewState {
    /// The boundary whose store holds the runs.
    pub(crate) boundary: ToolBoundary,
    /// The configured budgets, for the header.
    pub(crate) budgets: Budgets,
    /// `--insecure-no-auth`: no principal, every run open.
    pub(crate) open: bool,
    /// With `[archive] url`: where runs the store no longer holds are read.
    pub(crate) archive: Option<Arc<ArchiveReader>>,
}

impl ReviewState {
    /// The state of `boundary` under `config`, reading expired runs through
    /// `archive`.
    pub(crate) fn new(
        boundary: ToolBoundary,
        config: &crate::config::Config,
        open: bool,
        archive: Option<Arc<ArchiveReader>>,
    ) -> Self {
        Self {
            boundary,
            budgets: Budgets::of(config),
            open,
            archive,
        }
    }
}

/// `GET /runs/{run_id}` (the page), `GET /runs/{run_id}/calls` (JSON lines,
/// as `aci inspect --json`), `GET /runs/{run_id}/calls/{tool_call_id}` (one
/// call with its raw response) and `POST /runs/{run_id}/citations` (the
/// citation check). Every answer is `Cache-Control: no-store`.
pub(crate) fn routes(state: Arc<ReviewState>) -> Router {
    Router::new()
        .route("/runs/{run_id}", get(run_page))
        .route("/runs/{run_id}/calls", get(run_calls))
        .route("/runs/{run_id}/calls/{tool_call_id}", get(one_call))
        .route("/runs/{run_id}/citations", post(check_citations))
        .with_state(state)
        .layer(axum::middleware::map_response(private))
}

/// Nothing here may be kept by a cache or sent on as a referrer.
async fn private(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// Why a request gets no run.
enum Refusal {
    /// Not the owner and not a reviewer: the same answer whether the run
    /// exists or not.
    Forbidden,
    /// A reviewer (or an open server) asked for a run the store does not hold.
    NotFound,
    /// The store could not be read.
    Unavailable,
    /// The archive could not be read.
    ArchiveUnavailable,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, text) = match self {
            Self::Forbidden => (StatusCode::FORBIDDEN, "forbidden\n"),
            Self::NotFound => (StatusCode::NOT_FOUND, "no such run or call\n"),
            Self::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "STORE_UNAVAILABLE\n"),
            Self::ArchiveUnavailable => (StatusCode::SERVICE_UNAVAILABLE, "ARCHIVE_UNAVAILABLE\n"),
        };
        (status, text).into_response()
    }
}

impl From<LoadError> for Refusal {
    fn from(error: LoadError) -> Self {
        match error {
            LoadError::Store(_) => Self::Unavailable,
            LoadError::Archive(_) => Self::ArchiveUnavailable,
        }
    }
}

/// The archive's connection, when one is configured.
async fn archive_of(reader: Option<&ArchiveReader>) -> Result<Option<Archive>, LoadError> {
    match reader {
        None => Ok(None),
        Some(reader) => reader
            .archive()
            .await
            .map(Some)
            .map_err(|e| LoadError::Archive(e.to_string())),
    }
}

/// The run's state: the store's, or, once the store no longer holds it,
/// the archive's (`aci_runs`).
async fn run_state_of(
    boundary: &ToolBoundary,
    reader: Option<&ArchiveReader>,
    run_id: &RunId,
) -> Result<Option<RunState>, LoadError> {
    if let Some(state) = boundary.store().run_state(run_id).await? {
        return Ok(Some(state));
    }
    match archive_of(reader).await? {
        Some(archive) => Ok(archive.run_state(run_id.as_str()).await?),
        None => Ok(None),
    }
}

/// The run as the page shows it: from the store while it holds any call of
/// the run; otherwise from the archive, when one is configured and has the
/// run.
pub(crate) async fn read_run(
    boundary: &ToolBoundary,
    reader: Option<&ArchiveReader>,
    run_id: &RunId,
    budgets: &Budgets,
) -> Result<RunView, LoadError> {
    let view = RunView::load(boundary, run_id, budgets).await?;
    if !view.calls.is_empty() {
        return Ok(view);
    }
    let Some(archive) = archive_of(reader).await? else {
        return Ok(view);
    };
    let calls = archive.calls(run_id.as_str()).await?;
    let state = archive.run_state(run_id.as_str()).await?;
    if calls.is_empty() && state.is_none() {
        return Ok(view);
    }
    let calls = calls.into_iter().map(|stored| stored.call).collect();
    RunView::archived(run_id, state, calls, budgets)
}

/// The run of `run`, when `principal` may see it: its owner, a reviewer,
/// or anyone on an open server.
async fn authorize(
    state: &ReviewState,
    principal: Option<&Principal>,
    run: &str,
) -> Result<RunId, Refusal> {
    let reviewer = match principal {
        None if state.open => true,
        None => return Err(Refusal::Forbidden),
        Some(p) => p.may_review_every_run(),
    };
    let Ok(run_id) = RunId::new(run) else {
        return Err(if reviewer {
            Refusal::NotFound
        } else {
            Refusal::Forbidden
        });
    };
    if reviewer {
        // The store must answer, as for anyone else.
        state
            .boundary
            .store()
            .run_state(&run_id)
            .await
            .map_err(|_| Refusal::Unavailable)?;
        return Ok(run_id);
    }
    // The owner is the store's, or once the store no longer holds the run,
    // the archive's: the same refusal whether the run exists or not.
    let state_of_run = run_state_of(&state.boundary, state.archive.as_deref(), &run_id).await?;
    let owner = state_of_run.as_ref().and_then(|s| s.owner.as_deref());
    match (owner, principal) {
        (Some(owner), Some(p)) if owner == p.name() => Ok(run_id),
        _ => Err(Refusal::Forbidden),
    }
}

async fn load(state: &ReviewState, run_id: &RunId) -> Result<RunView, Refusal> {
    let view = read_run(
        &state.boundary,
        state.archive.as_deref(),
        run_id,
        &state.budgets,
    )
    .await?;
    if view.exists() {
        Ok(view)
    } else {
        Err(Refusal::NotFound)
    }
}

async fn run_page(
    State(state): State<Arc<ReviewState>>,
    principal: Option<Extension<Principal>>,
    UrlPath(run): UrlPath<String>,
) -> Result<Response, Refusal> {
    let run_id = authorize(&state, principal.as_deref(), &run).await?;
    let view = load(&state, &run_id).await?;
    Ok(html(page::render(&view, Mode::Served, None)))
}

async fn run_calls(
    State(state): State<Arc<ReviewState>>,
    principal: Option<Extension<Principal>>,
    UrlPath(run): UrlPath<String>,
) -> Result<Response, Refusal> {
    let run_id = authorize(&state, principal.as_deref(), &run).await?;
    let records = state
        .boundary
        .journal()
        .entries(&run_id, RecordFields::WithoutRaw)
        .await
        .map_err(|_| Refusal::Unavailable)?;
    let run_state = state
        .boundary
        .store()
        .run_state(&run_id)
        .await
        .map_err(|_| Refusal::Unavailable)?;
    if records.is_empty() {
        if let Some(lines) = archived_lines(&state, &run_id).await? {
            return Ok(jsonl(lines));
        }
        if run_state.is_none() {
            return Err(Refusal::NotFound);
        }
    }
    let run = run_json(run_state.as_ref());
    let mut body = String::new();
    for record in &records {
        let mut line = record_json(record);
        if let Some(object) = line.as_object_mut() {
            object.insert("run".to_owned(), run.clone());
        }
        body.push_str(&line.to_string());
        body.push('\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/jsonl")], body).into_response())
}

/// The lines of `GET /runs/{run_id}/calls` of a run read from the archive:
/// each call as the store's lines have it (without the raw response), with
/// the archive's run state and `"source":"archive"`, as `aci inspect`
/// marks what it read there. `None` when no archive is configured or it
/// has no call of the run.
async fn archived_lines(
    state: &ReviewState,
    run_id: &RunId,
) -> Result<Option<Vec<Value>>, Refusal> {
    let Some(archive) = archive_of(state.archive.as_deref()).await? else {
        return Ok(None);
    };
    let unavailable = |_| Refusal::ArchiveUnavailable;
    let calls = archive.calls(run_id.as_str()).await.map_err(unavailable)?;
    if calls.is_empty() {
        return Ok(None);
    }
    let run_state = archive
        .run_state(run_id.as_str())
        .await
        .map_err(unavailable)?;
    let run = run_json(run_state.as_ref());
    calls
        .iter()
        .map(|stored| {
            let record = stored.call.to_record().map_err(unavailable)?;
            Ok(archived_json(
                &record.select(RecordFields::WithoutRaw),
                run.clone(),
            ))
        })
        .collect::<Result<Vec<Value>, Refusal>>()
        .map(Some)
}

/// A record read from the archive as the routes answer it: with its run
/// and `"source":"archive"`.
fn archived_json(record: &InvocationRecord, run: Value) -> Value {
    let mut line = record_json(record);
    if let Some(object) = line.as_object_mut() {
        object.insert("run".to_owned(), run);
        object.insert("source".to_owned(), json!("archive"));
    }
    line
}

fn jsonl(lines: Vec<Value>) -> Response {
    let mut body = String::new();
    for line in lines {
        body.push_str(&line.to_string());
        body.push('\n');
    }
    ([(header::CONTENT_TYPE, "application/jsonl")], body).into_response()
}

async fn one_call(
    State(state): State<Arc<ReviewState>>,
    principal: Option<Extension<Principal>>,
    UrlPath((run, id)): UrlPath<(String, String)>,
) -> Result<Response, Refusal> {
    let run_id = authorize(&state, principal.as_deref(), &run).await?;
    let id = ToolCallId::new(id).map_err(|_| Refusal::NotFound)?;
    let store = state.boundary.store();
    let record = store
        .get(
            &InvocationKey::new(run_id.clone(), id.clone()),
            RecordFields::All,
        )
        .await
        .map_err(|_| Refusal::Unavailable)?;
    let Some(record) = record else {
        return archived_call(&state, &run_id, &id).await;
    };
    let run_state = store
        .run_state(&run_id)
        .await
        .map_err(|_| Refusal::Unavailable)?;
    let mut body = record_json(&record);
    if let Some(object) = body.as_object_mut() {
        object.insert("run".to_owned(), run_json(run_state.as_ref()));
    }
    Ok(json_response(&body))
}

/// `GET /runs/{run_id}/calls/{tool_call_id}` of a call the store no longer
/// holds: from the archive, its raw response as the raw policy kept it.
async fn archived_call(
    state: &ReviewState,
    run_id: &RunId,
    id: &ToolCallId,
) -> Result<Response, Refusal> {
    let Some(archive) = archive_of(state.archive.as_deref()).await? else {
        return Err(Refusal::NotFound);
    };
    let unavailable = |_| Refusal::ArchiveUnavailable;
    let calls = archive.calls(run_id.as_str()).await.map_err(unavailable)?;
    let stored = calls
        .iter()
        .find(|stored| stored.call.tool_call_id == id.as_str())
        .ok_or(Refusal::NotFound)?;
    let record = stored.call.to_record().map_err(unavailable)?;
    let run_state = archive
        .run_state(run_id.as_str())
        .await
        .map_err(unavailable)?;
    let mut body = archived_json(&record, run_json(run_state.as_ref()));
    if let Some(object) = body.as_object_mut() {
        object.insert("raw_mode".to_owned(), json!(stored.call.raw_mode));
    }
    Ok(json_response(&body))
}

/// The citation check: a form post (`answer=…`) gets the page with the
/// marks; any other body is the answer text itself and gets JSON.
async fn check_citations(
    State(state): State<Arc<ReviewState>>,
    principal: Option<Extension<Principal>>,
    UrlPath(run): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Refusal> {
    let run_id = authorize(&state, principal.as_deref(), &run).await?;
    let view = load(&state, &run_id).await?;
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let answer = if is_form {
        form_field(&body, "answer").unwrap_or_default()
    } else {
        String::from_utf8_lossy(&body).into_owned()
    };
    let report = citations::check(&state.boundary, &view, &answer).await;
    if is_form {
        return Ok(html(page::render(&view, Mode::Served, Some(&report))));
    }
    let cited: Vec<Value> = report
        .cited
        .iter()
        .map(|c| json!({"citation": c.citation, "mark": c.mark().class(), "verdict": c.verdict}))
        .collect();
    Ok(json_response(
        &json!({"cited": cited, "uncited": report.uncited}),
    ))
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

fn json_response(body: &Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn html(page: String) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; form-action 'self'",
            ),
        ],
        page,
    )
        .into_response()
}

/// `aci report`: writes the page of `run` to `out` as one self-contained
/// file, its citation check working offline.
pub(crate) async fn report(store: &StoreArgs, run: &str, out: &Path) -> Result<ExitCode, CliError> {
    let run_id = RunId::new(run).map_err(|e| CliError::config(format!("invalid run id: {e}")))?;
    let config = load_config(store)?;
    let app = shared_app(store, "report").await?;
    let reader = ArchiveReader::of(&config);
    let view = read_run(
        &app.boundary,
        reader.as_ref(),
        &run_id,
        &Budgets::of(&config),
    )
    .await
    .map_err(|e| CliError::config(e.to_string()))?;
    if !view.exists() {
        let archive = if reader.is_some() {
            ", in the store or the archive"
        } else {
            ""
        };
        return Err(CliError::config(format!(
            "run {run_id}: no records{archive} (unknown run, or its records expired)"
        )));
    }
    if view.source == Source::Archive {
        eprintln!("aci: run {run_id} read from the archive");
    }
    let page = page::render(&view, Mode::Offline, None);
    std::fs::write(out, page)
        .map_err(|e| CliError::config(format!("cannot write {}: {e}", out.display())))?;
    eprintln!(
        "aci: wrote the review of run {run_id} ({} calls) to {}",
        view.calls.len(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

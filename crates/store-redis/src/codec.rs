//! A record as a Redis hash: small metadata fields, and each payload in its
//! own field so a metadata read (`HMGET` of the small fields) never fetches
//! a payload.
//!
//! | field | when | value |
//! | --- | --- | --- |
//! | `run_id`, `tool_call_id`, `tool_name` | always | as given |
//! | `status` | always | `PROJECTING`, `READY`, `ERROR` |
//! | `evidence_status` | finalized | `EVIDENCE_FOUND`, `NO_EVIDENCE`, `ERROR` |
//! | `error_code` | ERROR | the safe code |
//! | `retryable` | ERROR | `1` or `0`: whether calling again may succeed |
//! | `scope_fp` | always | 64 hex digits |
//! | `created_at`, `finished_at` | always / finalized | Unix milliseconds |
//! | `replayed_from` | replayed READY | a tool call id |
//! | `redactions` | READY with redactions | `{"rule": count}` (JSON), never values |
//! | `timings` | concluded by the boundary | `preflight,execution,projection` in microseconds, a phase not reached empty |
//! | `request_bytes`, `raw_bytes`, `result_bytes` | when the payload is stored | UTF-8 bytes |
//! | `attempt` | always | the create attempt's token (decimal) |
//! | `tombstone` | tombstones only | `1`: settled with no create applied |
//! | `request`, `scope` | always but tombstones | request text, canonical scope JSON |
//! | `result` | READY | the bounded agent result |
//! | `raw` | READY, ERROR when kept | the raw response (harness-only) |
//!
//! `calls` writes these fields into the create, finalize and settle script
//! calls (a tombstone's from [`tombstone`]); this module reads them back.

use std::borrow::Cow;
use std::time::Duration;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId, Timestamp, ToolCallId};
use invocation_core::redact::Redactions;
use invocation_core::{
    InvocationKey, InvocationRecord, PhaseTimings, RecordFields, ScopeFingerprint, StoreError,
    Unsettled,
};

pub(crate) const STATUS: &str = "status";
pub(crate) const REDACTIONS: &str = "redactions";
pub(crate) const TIMINGS: &str = "timings";

/// The small fields, in the order `decode` reads them.
const METADATA: [&str; 16] = [
    "run_id",
    "tool_call_id",
    "tool_name",
    STATUS,
    "evidence_status",
    "error_code",
    "retryable",
    "scope_fp",
    "created_at",
    "finished_at",
    "replayed_from",
    REDACTIONS,
    TIMINGS,
    "request_bytes",
    "raw_bytes",
    "result_bytes",
];
const WITHOUT_RAW: [&str; 3] = ["request", "scope", "result"];
const RAW: &str = "raw";

/// The fields an `HMGET` for `fields` asks for, in decode order.
pub(crate) fn field_names(fields: RecordFields) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = METADATA.to_vec();
    if fields >= RecordFields::WithoutRaw {
        names.extend(WITHOUT_RAW);
    }
    if fields == RecordFields::All {
        names.push(RAW);
    }
    names
}

/// Field/value pairs of a tombstone: an ERROR record with no payloads that
/// holds the key of a call whose create never applied.
pub(crate) fn tombstone(
    call: &Unsettled,
    error_code: ErrorCode,
    finished_at: Timestamp,
) -> Vec<(&'static str, Cow<'_, str>)> {
    vec![
        ("run_id", Cow::Borrowed(call.key.run_id.as_str())),
        (
            "tool_call_id",
            Cow::Borrowed(call.key.tool_call_id.as_str()),
        ),
        ("tool_name", Cow::Borrowed(call.tool_name.as_str())),
        (STATUS, Cow::Borrowed(InvocationStatus::Error.as_str())),
        (
            "evidence_status",
            Cow::Borrowed(EvidenceStatus::Error.as_str()),
        ),
        ("error_code", Cow::Borrowed(error_code.as_str())),
        (
            "retryable",
            Cow::Borrowed(str_flag(error_code.is_transient())),
        ),
        ("scope_fp", Cow::Owned(call.scope_fingerprint.to_hex())),
        (
            "created_at",
            Cow::Owned(call.created_at.unix_millis().to_string()),
        ),
        (
            "finished_at",
            Cow::Owned(finished_at.unix_millis().to_string()),
        ),
        ("request_bytes", Cow::Borrowed("0")),
        ("attempt", Cow::Owned(call.attempt.to_string())),
        ("tombstone", Cow::Borrowed("1")),
    ]
}

/// A stored flag: `1` or `0`.
pub(crate) const fn flag(value: bool) -> &'static [u8] {
    str_flag(value).as_bytes()
}

const fn str_flag(value: bool) -> &'static str {
    if value { "1" } else { "0" }
}

type Field = Option<Vec<u8>>;

/// Decodes an `HMGET` reply for `fields` of the record at `key`. `None` when
/// the record does not exist (every field missing).
pub(crate) fn decode(
    key: &InvocationKey,
    fields: RecordFields,
    values: Vec<Field>,
) -> Result<Option<InvocationRecord>, StoreError> {
    if values.len() != field_names(fields).len() {
        return Err(corrupt("field count"));
    }
    if values.iter().all(Option::is_none) {
        return Ok(None);
    }
    let mut values = values.into_iter();
    let mut next = || values.next().flatten();

    let run_id = required(next(), "run_id")?;
    let tool_call_id = required(next(), "tool_call_id")?;
    if run_id != key.run_id.as_str() || tool_call_id != key.tool_call_id.as_str() {
        return Err(corrupt("ids"));
    }
    let tool_name = required(next(), "tool_name")?;
    let status =
        InvocationStatus::parse(&required(next(), "status")?).ok_or_else(|| corrupt("status"))?;
    let evidence_status = optional(next(), "evidence_status")?
        .map(|s| EvidenceStatus::parse(&s).ok_or_else(|| corrupt("evidence_status")))
        .transpose()?;
    let error_code = optional(next(), "error_code")?
        .map(|s| ErrorCode::parse(&s).ok_or_else(|| corrupt("error_code")))
        .transpose()?;
    let retryable = optional(next(), "retryable")?
        .map(|s| match s.as_str() {
            "1" => Ok(true),
            "0" => Ok(false),
            _ => Err(corrupt("retryable")),
        })
        .transpose()?;
    let scope_fingerprint: ScopeFingerprint = required(next(), "scope_fp")?
        .parse()
        .map_err(|_| corrupt("scope_fp"))?;
    let created_at = millis(required(next(), "created_at")?, "created_at")?;
    let finished_at = optional(next(), "finished_at")?
        .map(|s| millis(s, "finished_at"))
        .transpose()?;
    let replayed_from = optional(next(), "replayed_from")?
        .map(|s| ToolCallId::new(s).map_err(|_| corrupt("replayed_from")))
        .transpose()?;
    let redactions = optional(next(), REDACTIONS)?
        .map(|s| serde_json::from_str::<Redactions>(&s).map_err(|_| corrupt(REDACTIONS)))
        .transpose()?
        .unwrap_or_default();
    let timings = optional(next(), TIMINGS)?
        .map(|s| decode_timings(&s).ok_or_else(|| corrupt(TIMINGS)))
        .transpose()?;
    let request_bytes = size(required(next(), "request_bytes")?, "request_bytes")?;
    let raw_bytes = optional(next(), "raw_bytes")?
        .map(|s| size(s, "raw_bytes"))
        .transpose()?;
    let agent_result_bytes = optional(next(), "result_bytes")?
        .map(|s| size(s, "result_bytes"))
        .transpose()?;
    let (request_json, scope_json, agent_result_json) = if fields >= RecordFields::WithoutRaw {
        // Only a tombstone (an ERROR record whose create never applied) has
        // no request and scope.
        let payload = |value: Field, what: &'static str| match optional(value, what)? {
            None if status != InvocationStatus::Error => Err(corrupt(what)),
            text => Ok(text),
        };
        (
            payload(next(), "request")?,
            payload(next(), "scope")?,
            optional(next(), "result")?,
        )
    } else {
        (None, None, None)
    };
    let raw_json = if fields == RecordFields::All {
        optional(next(), "raw")?
    } else {
        None
    };
    Ok(Some(InvocationRecord {
        key: key.clone(),
        tool_name,
        status,
        evidence_status,
        error_code,
        retryable,
        scope_fingerprint,
        created_at,
        finished_at,
        replayed_from,
        redactions,
        timings,
        request_bytes,
        raw_bytes,
        agent_result_bytes,
        request_json,
        scope_json,
        agent_result_json,
        raw_json,
    }))
}

/// The `redactions` field: rule name to count, a JSON object.
pub(crate) fn encode_redactions(redactions: &Redactions) -> String {
    serde_json::to_string(redactions).unwrap_or_else(|_| unreachable!("a map of counts serializes"))
}

/// The `timings` field: `preflight,execution,projection` in whole
/// microseconds, a phase that was not reached empty.
pub(crate) fn encode_timings(timings: &PhaseTimings) -> String {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).to_string();
    let phase = |d: Option<Duration>| d.map(micros).unwrap_or_default();
    format!(
        "{},{},{}",
        micros(timings.preflight),
        phase(timings.execution),
        phase(timings.projection)
    )
}

fn decode_timings(text: &str) -> Option<PhaseTimings> {
    let micros = |s: &str| s.parse::<u64>().ok().map(Duration::from_micros);
    let phase = |s: &str| {
        if s.is_empty() {
            Some(None)
        } else {
            micros(s).map(Some)
        }
    };
    let mut parts = text.split(',');
    let timings = PhaseTimings {
        preflight: micros(parts.next()?)?,
        execution: phase(parts.next()?)?,
        projection: phase(parts.next()?)?,
    };
    parts.next().is_none().then_some(timings)
}

/// The key of a record of `run_id` named in the run index.
pub(crate) fn index_entry(run_id: &RunId, entry: Vec<u8>) -> Result<InvocationKey, StoreError> {
    let id = String::from_utf8(entry)
        .ok()
        .and_then(|s| ToolCallId::new(s).ok())
        .ok_or_else(|| corrupt("run index"))?;
    Ok(InvocationKey::new(run_id.clone(), id))
}

pub(crate) const fn corrupt(what: &'static str) -> StoreError {
    StoreError::Corrupt { what }
}

fn optional(value: Field, what: &'static str) -> Result<Option<String>, StoreError> {
    value
        .map(|bytes| String::from_utf8(bytes).map_err(|_| corrupt(what)))
        .transpose()
}

fn required(value: Field, what: &'static str) -> Result<String, StoreError> {
    optional(value, what)?.ok_or_else(|| corrupt(what))
}

fn millis(text: String, what: &'static str) -> Result<Timestamp, StoreError> {
    text.parse::<i64>()
        .map(Timestamp::from_unix_millis)
        .map_err(|_| corrupt(what))
}

fn size(text: String, what: &'static str) -> Result<u64, StoreError> {
    text.parse::<u64>().map_err(|_| corrupt(what))
}

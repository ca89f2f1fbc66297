//! What one archived call holds, its canonical JSON and its hashes.
//!
//! The leaf hash of a call is `SHA-256(0x00 || canonical JSON)`, the chain
//! hash `SHA-256(0x01 || previous chain hash || leaf hash)`, the previous
//! chain hash of a run's first call 32 zero bytes (the prefixes keep leaves
//! and chain links apart, as RFC 6962 does for Merkle trees). The canonical
//! JSON is every column of the call but its position and hashes, keys
//! sorted, no whitespace: changing any stored column changes the leaf.

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, RunId, Timestamp, ToolCallId};
use invocation_core::redact::{Redactions, Redactor};
use invocation_core::{InvocationKey, InvocationRecord, PhaseTimings, ScopeFingerprint};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{ArchiveError, Result};

/// A SHA-256 digest.
pub type Hash = [u8; 32];

/// The chain hash before a run's first call.
pub const GENESIS: Hash = [0; 32];

/// What of a record's raw response the archive keeps (`[archive] raw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawPolicy {
    /// Only its SHA-256 and size.
    None,
    /// The raw response with credentials replaced by named markers (the
    /// built-in redaction rules), and the SHA-256 of the whole one.
    #[default]
    Redacted,
    /// The raw response as recorded, and its SHA-256.
    Full,
}

impl RawPolicy {
    /// As written in the configuration and the archive.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Redacted => "redacted",
            Self::Full => "full",
        }
    }
}

/// One archived call: the final record's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedCall {
    /// The run.
    pub run_id: String,
    /// The framework's tool call id.
    pub tool_call_id: String,
    /// The tool's registered name.
    pub tool_name: String,
    /// `READY` or `ERROR`.
    pub status: String,
    /// `EVIDENCE_FOUND`, `NO_EVIDENCE` or `ERROR`.
    pub evidence_status: Option<String>,
    /// The error code of an `ERROR` record.
    pub error_code: Option<String>,
    /// Whether the error was retryable, when recorded.
    pub retryable: Option<bool>,
    /// Fingerprint of tool name and normalized scope, hex.
    pub scope_fp: String,
    /// Created, Unix milliseconds.
    pub created_at_ms: i64,
    /// Finalized, Unix milliseconds (the partition key).
    pub finished_at_ms: i64,
    /// The READY record whose result this one replays.
    pub replayed_from: Option<String>,
    /// Redaction counts per rule, canonical JSON (`{}` for none).
    pub redactions: String,
    /// The request text.
    pub request: Option<String>,
    /// The normalized scope.
    pub scope: Option<String>,
    /// The agent result.
    pub result: Option<String>,
    /// The raw response, as the raw policy keeps it.
    pub raw: Option<String>,
    /// SHA-256 of the whole raw response as recorded, hex.
    pub raw_sha256: Option<String>,
    /// The raw policy it was archived with.
    pub raw_mode: String,
    /// Size of the request in bytes.
    pub request_bytes: i64,
    /// Size of the recorded raw response in bytes.
    pub raw_bytes: Option<i64>,
    /// Size of the agent result in bytes.
    pub result_bytes: Option<i64>,
    /// Phase timings in microseconds, canonical JSON (`preflight`,
    /// `execution`, `projection`), when recorded.
    pub timings_us: Option<String>,
}

fn size(bytes: Option<u64>) -> Option<i64> {
    bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

impl ArchivedCall {
    /// The archived form of a final record read with all its fields (its
    /// payloads are moved, not copied).
    ///
    /// # Errors
    /// [`ArchiveError::NotFinal`] for a `PROJECTING` record.
    pub fn from_record(
        record: InvocationRecord,
        raw: RawPolicy,
        redactor: &Redactor,
    ) -> Result<Self> {
        let finished_at = match (record.status, record.finished_at) {
            (InvocationStatus::Projecting, _) | (_, None) => return Err(ArchiveError::NotFinal),
            (_, Some(at)) => at,
        };
        let redactions: serde_json::Map<String, Value> = record
            .redactions
            .iter()
            .map(|(rule, count)| (rule.to_owned(), json!(count)))
            .collect();
        let raw_sha256 = record
            .raw_json
            .as_deref()
            .map(|text| hex(&Sha256::digest(text.as_bytes())));
        let kept_raw = match raw {
            RawPolicy::None => None,
            RawPolicy::Full => record.raw_json,
            RawPolicy::Redacted => record.raw_json.map(|text| {
                match redactor.redact(&text) {
                    std::borrow::Cow::Owned(redacted) => Some(redacted),
                    // Nothing to replace: the text itself, not a copy.
                    std::borrow::Cow::Borrowed(_) => None,
                }
                .unwrap_or(text)
            }),
        };
        Ok(Self {
            run_id: record.key.run_id.as_str().to_owned(),
            tool_call_id: record.key.tool_call_id.as_str().to_owned(),
            tool_name: record.tool_name,
            status: record.status.as_str().to_owned(),
            evidence_status: record.evidence_status.map(|s| s.as_str().to_owned()),
            error_code: record.error_code.map(|c| c.as_str().to_owned()),
            retryable: record.retryable,
            scope_fp: record.scope_fingerprint.to_hex(),
            created_at_ms: record.created_at.unix_millis(),
            finished_at_ms: finished_at.unix_millis(),
            replayed_from: record
                .replayed_from
                .as_ref()
                .map(|id| id.as_str().to_owned()),
            redactions: invocation_core::fingerprint::canonical_json(&Value::Object(redactions)),
            request: record.request_json,
            scope: record.scope_json,
            result: record.agent_result_json,
            raw: kept_raw,
            raw_sha256,
            raw_mode: raw.as_str().to_owned(),
            request_bytes: i64::try_from(record.request_bytes).unwrap_or(i64::MAX),
            raw_bytes: size(record.raw_bytes),
            result_bytes: size(record.agent_result_bytes),
            timings_us: record.timings.map(|t| {
                let micros =
                    |d: std::time::Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
                invocation_core::fingerprint::canonical_json(&json!({
                    "preflight": micros(t.preflight),
                    "execution": t.execution.map(micros),
                    "projection": t.projection.map(micros),
                }))
            }),
        })
    }

    /// The record this call was archived from, as far as the archive kept
    /// it: every column parsed back with the contracts' parsers, the raw
    /// response as the raw policy kept it (redacted, whole, or none: see
    /// [`raw_mode`](Self::raw_mode)), the phase timings from `timings_us`.
    /// For reading an expired run back (the review page); the archive row
    /// stays the record of truth.
    ///
    /// # Errors
    /// [`ArchiveError::Corrupt`] naming the column that does not parse.
    pub fn to_record(&self) -> Result<InvocationRecord> {
        fn corrupt<E>(what: &'static str) -> impl Fn(E) -> ArchiveError {
            move |_| ArchiveError::Corrupt { what }
        }
        let status = InvocationStatus::parse(&self.status)
            .ok_or(ArchiveError::Corrupt { what: "status" })?;
        let evidence_status = self
            .evidence_status
            .as_deref()
            .map(|text| {
                EvidenceStatus::parse(text).ok_or(ArchiveError::Corrupt {
                    what: "evidence_status",
                })
            })
            .transpose()?;
        let error_code = self
            .error_code
            .as_deref()
            .map(|text| ErrorCode::parse(text).ok_or(ArchiveError::Corrupt { what: "error_code" }))
            .transpose()?;
        let replayed_from = self
            .replayed_from
            .as_deref()
            .map(ToolCallId::new)
            .transpose()
            .map_err(corrupt("replayed_from"))?;
        let redactions: Redactions =
            serde_json::from_str(&self.redactions).map_err(corrupt("redactions"))?;
        let timings = self.timings_us.as_deref().map(parse_timings).transpose()?;
        let size = |bytes: Option<i64>, what: &'static str| {
            bytes.map(u64::try_from).transpose().map_err(corrupt(what))
        };
        Ok(InvocationRecord {
            key: InvocationKey::new(
                RunId::new(self.run_id.as_str()).map_err(corrupt("run_id"))?,
                ToolCallId::new(self.tool_call_id.as_str()).map_err(corrupt("tool_call_id"))?,
            ),
            tool_name: self.tool_name.clone(),
            status,
            evidence_status,
            error_code,
            retryable: self.retryable,
            scope_fingerprint: self
                .scope_fp
                .parse::<ScopeFingerprint>()
                .map_err(corrupt("scope_fp"))?,
            created_at: Timestamp::from_unix_millis(self.created_at_ms),
            finished_at: Some(Timestamp::from_unix_millis(self.finished_at_ms)),
            replayed_from,
            redactions,
            timings,
            request_bytes: u64::try_from(self.request_bytes).map_err(corrupt("request_bytes"))?,
            raw_bytes: size(self.raw_bytes, "raw_bytes")?,
            agent_result_bytes: size(self.result_bytes, "result_bytes")?,
            request_json: self.request.clone(),
            scope_json: self.scope.clone(),
            agent_result_json: self.result.clone(),
            raw_json: self.raw.clone(),
        })
    }

    /// The canonical JSON the leaf hash is taken over (and what
    /// `aci export --format jsonl` writes, with the position and hashes).
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({
            "run_id": self.run_id,
            "tool_call_id": self.tool_call_id,
            "tool_name": self.tool_name,
            "status": self.status,
            "evidence_status": self.evidence_status,
            "error_code": self.error_code,
            "retryable": self.retryable,
            "scope_fp": self.scope_fp,
            "created_at_ms": self.created_at_ms,
            "finished_at_ms": self.finished_at_ms,
            "replayed_from": self.replayed_from,
            "redactions": self.redactions,
            "request": self.request,
            "scope": self.scope,
            "result": self.result,
            "raw": self.raw,
            "raw_sha256": self.raw_sha256,
            "raw_mode": self.raw_mode,
            "request_bytes": self.request_bytes,
            "raw_bytes": self.raw_bytes,
            "result_bytes": self.result_bytes,
            "timings_us": self.timings_us,
        })
    }

    /// `SHA-256(0x00 || canonical JSON)`.
    #[must_use]
    pub fn leaf_hash(&self) -> Hash {
        let mut hasher = Sha256::new();
        hasher.update([0_u8]);
        hasher.update(self.canonical());
        hasher.finalize().into()
    }

    /// The canonical JSON of [`to_json`](Self::to_json), written field by
    /// field in key order: what `canonical_json(&self.to_json())` is,
    /// without copying every payload into a JSON value first (a test keeps
    /// the two equal).
    fn canonical(&self) -> Vec<u8> {
        enum Field<'a> {
            Text(&'a str),
            MaybeText(Option<&'a str>),
            Number(i64),
            MaybeNumber(Option<i64>),
            MaybeBool(Option<bool>),
        }
        use Field::{MaybeBool, MaybeNumber, MaybeText, Number, Text};
        // Sorted by key, as the canonical form sorts them.
        let fields: [(&str, Field<'_>); 22] = [
            ("created_at_ms", Number(self.created_at_ms)),
            ("error_code", MaybeText(self.error_code.as_deref())),
            (
                "evidence_status",
                MaybeText(self.evidence_status.as_deref()),
            ),
            ("finished_at_ms", Number(self.finished_at_ms)),
            ("raw", MaybeText(self.raw.as_deref())),
            ("raw_bytes", MaybeNumber(self.raw_bytes)),
            ("raw_mode", Text(&self.raw_mode)),
            ("raw_sha256", MaybeText(self.raw_sha256.as_deref())),
            ("redactions", Text(&self.redactions)),
            ("replayed_from", MaybeText(self.replayed_from.as_deref())),
            ("request", MaybeText(self.request.as_deref())),
            ("request_bytes", Number(self.request_bytes)),
            ("result", MaybeText(self.result.as_deref())),
            ("result_bytes", MaybeNumber(self.result_bytes)),
            ("retryable", MaybeBool(self.retryable)),
            ("run_id", Text(&self.run_id)),
            ("scope", MaybeText(self.scope.as_deref())),
            ("scope_fp", Text(&self.scope_fp)),
            ("status", Text(&self.status)),
            ("timings_us", MaybeText(self.timings_us.as_deref())),
            ("tool_call_id", Text(&self.tool_call_id)),
            ("tool_name", Text(&self.tool_name)),
        ];
        debug_assert!(fields.windows(2).all(|w| w[0].0 < w[1].0));
        let payloads = [&self.raw, &self.request, &self.result, &self.scope]
            .iter()
            .filter_map(|text| text.as_ref().map(String::len))
            .sum::<usize>();
        let mut out = Vec::with_capacity(payloads + 1024);
        // Writing JSON into a `Vec` cannot fail: the results are ignored.
        let text = |out: &mut Vec<u8>, text: &str| {
            let _ = serde_json::to_writer(&mut *out, text);
        };
        out.push(b'{');
        for (at, (key, value)) in fields.iter().enumerate() {
            if at > 0 {
                out.push(b',');
            }
            text(&mut out, key);
            out.push(b':');
            match value {
                Text(value) | MaybeText(Some(value)) => text(&mut out, value),
                Number(n) | MaybeNumber(Some(n)) => {
                    use std::io::Write as _;
                    let _ = write!(out, "{n}");
                }
                MaybeBool(Some(flag)) => {
                    out.extend_from_slice(if *flag { b"true" } else { b"false" })
                }
                MaybeText(None) | MaybeNumber(None) | MaybeBool(None) => {
                    out.extend_from_slice(b"null");
                }
            }
        }
        out.push(b'}');
        out
    }
}

/// Phase timings from `timings_us` (`{"preflight":µs,"execution":µs|null,
/// "projection":µs|null}`).
fn parse_timings(text: &str) -> Result<PhaseTimings> {
    let corrupt = || ArchiveError::Corrupt { what: "timings_us" };
    let value: Value = serde_json::from_str(text).map_err(|_| corrupt())?;
    let micros = |key: &str| -> Result<Option<std::time::Duration>> {
        match value.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|us| Some(std::time::Duration::from_micros(us)))
                .ok_or_else(corrupt),
        }
    };
    Ok(PhaseTimings {
        preflight: micros("preflight")?.ok_or_else(corrupt)?,
        execution: micros("execution")?,
        projection: micros("projection")?,
    })
}

/// `SHA-256(0x01 || previous || leaf)`.
#[must_use]
pub fn chain(previous: &Hash, leaf: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([1_u8]);
    hasher.update(previous);
    hasher.update(leaf);
    hasher.finalize().into()
}

/// Lower-case hex of a hash.
#[must_use]
pub fn to_hex(hash: &[u8]) -> String {
    hex(hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text() -> impl Strategy<Value = String> {
        // Quotes, backslashes, control characters and non-ASCII: what the
        // escaping must agree on.
        "(\\PC|[\"\\\\\u{0}-\u{1f}\u{7f}é€𝄞])*"
    }

    fn maybe_text() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(text())
    }

    prop_compose! {
        fn archived_call()(
            texts in proptest::collection::vec(text(), 7),
            maybe in proptest::collection::vec(maybe_text(), 8),
            numbers in proptest::collection::vec(any::<i64>(), 3),
            maybe_numbers in proptest::collection::vec(proptest::option::of(any::<i64>()), 2),
            retryable in proptest::option::of(any::<bool>()),
        ) -> ArchivedCall {
            ArchivedCall {
                run_id: texts[0].clone(),
                tool_call_id: texts[1].clone(),
                tool_name: texts[2].clone(),
                status: texts[3].clone(),
                evidence_status: maybe[0].clone(),
                error_code: maybe[1].clone(),
                retryable,
                scope_fp: texts[4].clone(),
                created_at_ms: numbers[0],
                finished_at_ms: numbers[1],
                replayed_from: maybe[2].clone(),
                redactions: texts[5].clone(),
                request: maybe[3].clone(),
                scope: maybe[4].clone(),
                result: maybe[5].clone(),
                raw: maybe[6].clone(),
                raw_sha256: maybe[7].clone(),
                raw_mode: texts[6].clone(),
                request_bytes: numbers[2],
                raw_bytes: maybe_numbers[0],
                result_bytes: maybe_numbers[1],
                timings_us: maybe[0].clone(),
            }
        }
    }

    proptest! {
        /// The leaf is taken over exactly the canonical JSON of `to_json`
        /// (what `aci export` writes and `aci verify` recomputes).
        #[test]
        fn the_written_canonical_form_is_the_json_values(call in archived_call()) {
            let expected = invocation_core::fingerprint::canonical_json(&call.to_json());
            prop_assert_eq!(String::from_utf8(call.canonical()).unwrap(), expected.clone());
            let mut hasher = Sha256::new();
            hasher.update([0_u8]);
            hasher.update(expected.as_bytes());
            let leaf: Hash = hasher.finalize().into();
            prop_assert_eq!(call.leaf_hash(), leaf);
        }
    }

    #[test]
    fn chain_and_leaf_are_domain_separated() {
        let zero = GENESIS;
        let linked = chain(&zero, &zero);
        let mut plain = Sha256::new();
        plain.update(zero);
        plain.update(zero);
        let plain: Hash = plain.finalize().into();
        assert_ne!(linked, plain);
        assert_eq!(to_hex(&[0xab, 0x01]), "ab01");
    }

    fn finalized(finalization: invocation_core::Finalization) -> InvocationRecord {
        let scope = json!({"q": "pool"});
        let mut record = InvocationRecord::from_new(invocation_core::NewInvocation {
            key: InvocationKey::new(
                RunId::new("run-1").unwrap(),
                ToolCallId::new("call_1").unwrap(),
            ),
            tool_name: "lookup_knowledge".into(),
            request_json: r#"{"query":"pool"}"#.into(),
            scope_json: scope.to_string(),
            scope_fingerprint: ScopeFingerprint::of("lookup_knowledge", &scope),
            created_at: Timestamp::from_unix_millis(1_700_000_000_000),
            ttl: std::time::Duration::from_secs(60),
            budgets: invocation_core::Budgets::default(),
            claim_scope: false,
            run: invocation_core::RunTerms::default(),
            attempt: 7,
        });
        record.apply(finalization);
        record
    }

    #[test]
    fn an_archived_call_reads_back_as_its_record() {
        let mut redactions = Redactions::new();
        redactions.add("password", 2);
        let ready = finalized(invocation_core::Finalization::Ready {
            evidence: invocation_core::ReadyEvidence::NoEvidence,
            raw_json: r#"{"raw":"password=hunter2"}"#.into(),
            agent_result_json: r#"{"answer":"none"}"#.into(),
            redactions,
            replayed_from: Some(ToolCallId::new("call_0").unwrap()),
            finished_at: Timestamp::from_unix_millis(1_700_000_000_250),
            timings: Some(PhaseTimings {
                preflight: std::time::Duration::from_micros(12),
                execution: Some(std::time::Duration::from_micros(3400)),
                projection: None,
            }),
        });
        let redactor = Redactor::builtin();
        let full = ArchivedCall::from_record(ready.clone(), RawPolicy::Full, &redactor).unwrap();
        assert_eq!(full.to_record().unwrap(), ready);
        // Without the raw response, only the raw is missing.
        let none = ArchivedCall::from_record(ready.clone(), RawPolicy::None, &redactor).unwrap();
        let read = none.to_record().unwrap();
        assert_eq!(read.raw_json, None);
        assert_eq!(read.raw_bytes, ready.raw_bytes);
        assert_eq!(
            read.select(invocation_core::RecordFields::WithoutRaw),
            ready.select(invocation_core::RecordFields::WithoutRaw)
        );

        let failed = finalized(invocation_core::Finalization::Error {
            error_code: ErrorCode::ExecutionTimeout,
            retryable: true,
            raw_json: None,
            finished_at: Timestamp::from_unix_millis(1_700_000_001_000),
            timings: None,
        });
        let archived =
            ArchivedCall::from_record(failed.clone(), RawPolicy::Full, &redactor).unwrap();
        assert_eq!(archived.to_record().unwrap(), failed);

        let mut bad = archived;
        bad.error_code = Some("NOT_A_CODE".into());
        assert!(matches!(
            bad.to_record(),
            Err(ArchiveError::Corrupt { what: "error_code" })
        ));
    }
}

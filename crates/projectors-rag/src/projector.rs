//! The RAG projector: an upstream retrieval response in, a bounded
//! [`LookupKnowledgeResult`] out. Pure and deterministic.
//!
//! See the crate's README for the accepted spellings, bounds, relevance rule
//! and truncation rules; the constants below are the single source of them.

use aci_contracts::{
    KnowledgeEvidence, LookupKnowledgeRequest, LookupKnowledgeResult, MAX_RETRIEVAL_FALLBACK_BYTES,
    MAX_RETRIEVAL_LEG_BYTES, MAX_RETRIEVAL_LEGS, ReadyEvidenceStatus, RelevanceLevel, ToolCallId,
    is_retrieval_fallback, is_retrieval_leg, relevance_in,
};
use invocation_core::{
    DEFAULT_MAX_AGENT_RESULT_BYTES, ProjectionContext, ProjectionError, Projector,
};
use serde_json::{Map, Value};

use invocation_core::bounds::{InvalidBounds, ProjectionBounds, at_least};
use invocation_core::json_size::{escaped_len, escaped_prefix};
use invocation_core::redact::{self, RedactionPass, Redactions, Redactor};

/// Keys of the top-level object that may hold the list of documents, in the
/// order they are consulted.
pub const LIST_KEYS: [&str; 5] = ["documents", "chunks", "results", "hits", "data"];
/// Keys of a document's id, in the order they are consulted.
pub const ID_KEYS: [&str; 4] = ["document_id", "documentId", "doc_id", "id"];
/// Keys of a document's source (path, URL, collection), in order.
pub const SOURCE_KEYS: [&str; 4] = ["source", "path", "url", "uri"];
/// Keys of a document's title, in order.
pub const TITLE_KEYS: [&str; 2] = ["title", "name"];
/// Keys of a passage's heading path (an array joined with ` > `, or a string), in order.
pub const HEADING_KEYS: [&str; 5] = [
    "heading_path",
    "headingPath",
    "breadcrumb",
    "headings",
    "section_path",
];
/// Keys of a passage's text, in order. The first non-blank one is the
/// upstream text the excerpt is cut from; the others (full bodies) are dropped.
pub const TEXT_KEYS: [&str; 7] = [
    "excerpt",
    "text",
    "content",
    "chunk",
    "snippet",
    "body",
    "page_content",
];
/// A nested object of a document consulted for id, source, title and heading
/// path when the document itself has none (LangChain-style documents).
pub const METADATA_KEY: &str = "metadata";
/// What joins the segments of an array heading path.
pub const BREADCRUMB_SEPARATOR: &str = " > ";
/// The object of the response that may say which retrieval legs ran: its
/// [`TRACE_LEGS_KEY`] and [`TRACE_FALLBACK_KEY`] go to the result's
/// harness-only `retrieval_legs` and `retrieval_fallback`, never to the
/// model; the rest of it is dropped.
const RETRIEVAL_TRACE_KEY: &str = "retrieval_trace";
/// The retrieval legs whose results were fused, in order: an array of names.
const TRACE_LEGS_KEY: &str = "legs";
/// Why a configured leg did not run: an upper-case code.
const TRACE_FALLBACK_KEY: &str = "fallback";

/// Default [`RagBounds::max_items`].
pub const DEFAULT_MAX_ITEMS: usize = 5;
/// Default [`RagBounds::max_excerpt_bytes`].
pub const DEFAULT_MAX_EXCERPT_BYTES: usize = 1536;
/// Default [`RagBounds::max_field_bytes`].
pub const DEFAULT_MAX_FIELD_BYTES: usize = 192;
/// Length of query (as JSON text, without quotes) up to which the default
/// bounds alone keep the largest possible result (retrieval trace included)
/// within [`DEFAULT_MAX_AGENT_RESULT_BYTES`], so that the total budget
/// [`RagBounds::max_result_bytes`] never has to drop anything. Every query the
/// contract accepts is shorter
/// ([`MAX_QUERY_JSON_BYTES`](aci_contracts::MAX_QUERY_JSON_BYTES)).
pub const STATIC_QUERY_ALLOWANCE_BYTES: usize = 3968;

/// Smallest accepted [`RagBounds::max_excerpt_bytes`] and
/// [`RagBounds::max_field_bytes`]: the shared
/// [`invocation_core::bounds::MIN_TEXT_BYTES`] (one character always fits, so
/// a non-blank field never shortens to blank).
pub const MIN_TEXT_BYTES: usize = invocation_core::bounds::MIN_TEXT_BYTES;

/// Bounds of a `lookup_knowledge` projection. All byte sizes are UTF-8 bytes of
/// JSON text: a field's length once escaped inside a JSON string, without its
/// quotes (so a control character counts 6 bytes, a quote 2, `中` 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RagBounds {
    /// Most evidence items returned (at least 1).
    pub max_items: usize,
    /// Longest excerpt (at least [`MIN_TEXT_BYTES`]).
    pub max_excerpt_bytes: usize,
    /// Longest `document_id`, `source`, `title` and `breadcrumb`, each (at
    /// least [`MIN_TEXT_BYTES`]).
    pub max_field_bytes: usize,
    /// Longest serialized result. Items are dropped from the end (and, as a
    /// last resort, the only item's excerpt shortened) until the result fits.
    /// Set it to the boundary's agent result limit when that is tightened.
    pub max_result_bytes: usize,
}

impl Default for RagBounds {
    fn default() -> Self {
        Self {
            max_items: DEFAULT_MAX_ITEMS,
            max_excerpt_bytes: DEFAULT_MAX_EXCERPT_BYTES,
            max_field_bytes: DEFAULT_MAX_FIELD_BYTES,
            max_result_bytes: DEFAULT_MAX_AGENT_RESULT_BYTES,
        }
    }
}

impl ProjectionBounds for RagBounds {
    /// `max_items` at least 1, `max_excerpt_bytes` and `max_field_bytes` at
    /// least [`MIN_TEXT_BYTES`]; `max_result_bytes` at least 1. Bounds below
    /// are refused, never raised silently.
    fn validate(&self) -> Result<(), InvalidBounds> {
        at_least("max_items", self.max_items, 1)?;
        at_least("max_excerpt_bytes", self.max_excerpt_bytes, MIN_TEXT_BYTES)?;
        at_least("max_field_bytes", self.max_field_bytes, MIN_TEXT_BYTES)?;
        at_least("max_result_bytes", self.max_result_bytes, 1)
    }
}

impl RagBounds {
    /// The largest serialized result these bounds allow, ignoring
    /// `max_result_bytes`, for a query of `query_json_bytes` (JSON text,
    /// without quotes) and the longest tool call id: every field at its bound
    /// after escaping, `max_items` items, the longest status and relevance,
    /// and the longest retrieval trace (`retrieval_legs`, `retrieval_fallback`).
    #[must_use]
    pub fn worst_case_result_bytes(&self, query_json_bytes: usize) -> usize {
        let bounds = self;
        let item = r#"{"document_id":"","source":"","title":"","breadcrumb":"","excerpt":""}"#
            .len()
            + 4 * bounds.max_field_bytes
            + bounds.max_excerpt_bytes;
        let envelope = concat!(
            r#"{"evidence_status":"EVIDENCE_FOUND","tool_call_id":"","query":"","#,
            r#""evidence":[],"returned_count":,"relevance_level":"MEDIUM","truncated":false}"#
        )
        .len();
        let trace = r#","retrieval_legs":[],"retrieval_fallback":"""#.len()
            + MAX_RETRIEVAL_LEGS * (MAX_RETRIEVAL_LEG_BYTES + 2)
            + MAX_RETRIEVAL_LEGS.saturating_sub(1)
            + MAX_RETRIEVAL_FALLBACK_BYTES;
        envelope
            + trace
            + aci_contracts::MAX_ID_BYTES
            + query_json_bytes
            + bounds.max_items.to_string().len()
            + bounds.max_items * item
            + bounds.max_items.saturating_sub(1)
    }
}

/// Projects an upstream retrieval response (`serde_json::Value`) into a
/// [`LookupKnowledgeResult`] under [`RagBounds`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RagProjector {
    bounds: RagBounds,
}

impl RagProjector {
    /// A projector with `bounds`.
    ///
    /// # Errors
    /// [`InvalidBounds`] when a bound is below its minimum (see
    /// [`RagBounds`]'s [`ProjectionBounds::validate`]): refused, not clamped.
    pub fn new(bounds: RagBounds) -> Result<Self, InvalidBounds> {
        Ok(Self {
            bounds: bounds.validated()?,
        })
    }

    /// The bounds in force.
    #[must_use]
    pub const fn bounds(&self) -> RagBounds {
        self.bounds
    }

    /// Projects `raw` for the call `tool_call_id` whose agent query was
    /// `query`, redacting with the built-in rules ([`Redactor::builtin`]);
    /// the counts are dropped. The boundary calls
    /// [`project_redacting`](Self::project_redacting) with its own pass.
    ///
    /// # Errors
    /// As [`project_redacting`](Self::project_redacting).
    pub fn project_response(
        &self,
        tool_call_id: &ToolCallId,
        query: &str,
        raw: &Value,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        let redactor = Redactor::builtin();
        self.project_redacting(tool_call_id, query, raw, &RedactionPass::new(&redactor))
    }

    /// Projects `raw` for the call `tool_call_id` whose agent query was
    /// `query`. Each passage's id, source, title, breadcrumb and excerpt go
    /// through `redaction` before they are bounded: an excerpt is exact text
    /// of the document except for `<redacted:RULE>` markers. Only the
    /// passages returned are counted. The response's `retrieval_trace`
    /// object gives the harness-only `retrieval_legs` and
    /// `retrieval_fallback` (bounded; anything else in it is dropped).
    ///
    /// # Errors
    /// [`ProjectionError`] only if the result cannot be measured (serialization
    /// of plain strings; it does not fail in practice).
    pub fn project_redacting(
        &self,
        tool_call_id: &ToolCallId,
        query: &str,
        raw: &Value,
        redaction: &RedactionPass<'_>,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        let bounds = self.bounds;
        let mut truncated = false;
        let mut picked: Vec<Candidate> = Vec::new();
        for item in documents_of(raw) {
            let Some(candidate) = item
                .as_object()
                .and_then(|map| candidate(map, &bounds, redaction))
            else {
                continue;
            };
            if picked.len() == bounds.max_items {
                truncated = true;
                break;
            }
            truncated |= candidate.shortened;
            picked.push(candidate);
        }
        let response_level = raw.as_object().and_then(relevance_in);
        let (retrieval_legs, retrieval_fallback) = retrieval_trace(raw);

        let assemble = |picked: &[Candidate], truncated: bool| {
            let evidence: Vec<KnowledgeEvidence> =
                picked.iter().map(|c| c.evidence.clone()).collect();
            let found = !evidence.is_empty();
            // A recognized response level wins; else the highest level among
            // the returned passages (`RelevanceLevel` orders `High` first).
            let relevance_level = if found {
                response_level.or_else(|| picked.iter().filter_map(|c| c.level).min())
            } else {
                None
            };
            LookupKnowledgeResult {
                evidence_status: if found {
                    ReadyEvidenceStatus::EvidenceFound
                } else {
                    ReadyEvidenceStatus::NoEvidence
                },
                tool_call_id: tool_call_id.clone(),
                query: query.to_owned(),
                returned_count: evidence.len() as u64,
                evidence,
                relevance_level,
                truncated,
                retrieval_legs: retrieval_legs.clone(),
                retrieval_fallback: retrieval_fallback.clone(),
            }
        };

        // Fit the total budget: drop items from the end, never the first one.
        let mut result = assemble(&picked, truncated);
        let mut size = serialized_len(&result)?;
        while size > bounds.max_result_bytes && picked.len() > 1 {
            let mut freed = 0_usize;
            while picked.len() > 1 && freed < size - bounds.max_result_bytes {
                if let Some(dropped) = picked.pop() {
                    freed += dropped.serialized_len + 1;
                }
            }
            truncated = true;
            result = assemble(&picked, truncated);
            size = serialized_len(&result)?;
        }
        // Still over with one item: shorten its excerpt, keeping at least one
        // character. If even that cannot fit (a query that nearly fills the
        // budget by itself), the oversized result goes to the boundary, which
        // fails closed with RESULT_TOO_LARGE: evidence that exists is never
        // reported as NO_EVIDENCE.
        if size > bounds.max_result_bytes
            && let Some(only) = picked.first_mut()
        {
            let excerpt = &only.evidence.excerpt;
            let target = escaped_len(excerpt).saturating_sub(size - bounds.max_result_bytes);
            let shorter = escaped_prefix(excerpt, target).0.trim_end();
            if !shorter.is_empty() && shorter.len() < excerpt.len() {
                only.evidence.excerpt = shorter.to_owned();
                result = assemble(&picked, true);
            }
        }
        for candidate in &picked {
            redaction.add(&candidate.redactions);
        }
        Ok(result)
    }
}

impl Projector for RagProjector {
    type Request = LookupKnowledgeRequest;
    type Raw = Value;
    type Output = LookupKnowledgeResult;

    fn project(
        &self,
        context: &ProjectionContext<'_, LookupKnowledgeRequest>,
        raw: &Value,
    ) -> Result<LookupKnowledgeResult, ProjectionError> {
        self.project_redacting(
            context.tool_call_id,
            &context.request.query,
            raw,
            context.redaction(),
        )
    }
}

/// One usable passage of the upstream response.
#[derive(Debug)]
struct Candidate {
    evidence: KnowledgeEvidence,
    level: Option<RelevanceLevel>,
    shortened: bool,
    serialized_len: usize,
    /// What redaction replaced in it (counted once it is returned).
    redactions: Redactions,
}

fn serialized_len<T: serde::Serialize>(value: &T) -> Result<usize, ProjectionError> {
    invocation_core::json_size::serialized_len(value).map_err(ProjectionError::new)
}

/// Which retrieval legs ran, as the response's [`RETRIEVAL_TRACE_KEY`]
/// object says: its [`TRACE_LEGS_KEY`] names that are
/// [`is_retrieval_leg`], in order, each once, at most [`MAX_RETRIEVAL_LEGS`];
/// its [`TRACE_FALLBACK_KEY`] when [`is_retrieval_fallback`]. The response is
/// upstream data: anything else there (other types, other spellings, longer
/// names) is dropped, never an error.
fn retrieval_trace(raw: &Value) -> (Vec<String>, Option<String>) {
    let Some(trace) = raw.get(RETRIEVAL_TRACE_KEY).and_then(Value::as_object) else {
        return (Vec::new(), None);
    };
    let mut legs: Vec<String> = Vec::new();
    let names = trace
        .get(TRACE_LEGS_KEY)
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    for name in names.iter().filter_map(Value::as_str) {
        if legs.len() == MAX_RETRIEVAL_LEGS {
            break;
        }
        if is_retrieval_leg(name) && !legs.iter().any(|leg| leg == name) {
            legs.push(name.to_owned());
        }
    }
    let fallback = trace
        .get(TRACE_FALLBACK_KEY)
        .and_then(Value::as_str)
        .filter(|code| is_retrieval_fallback(code))
        .map(str::to_owned);
    (legs, fallback)
}

/// The list of documents: a bare array, or the first of [`LIST_KEYS`] holding
/// an array, looking one object deep (`{"hits": {"hits": [...]}}`).
fn documents_of(raw: &Value) -> &[Value] {
    match raw {
        Value::Array(items) => items,
        Value::Object(map) => list_in(map, 1).unwrap_or(&[]),
        _ => &[],
    }
}

fn list_in(map: &Map<String, Value>, depth: u8) -> Option<&[Value]> {
    LIST_KEYS.iter().find_map(|key| match map.get(*key) {
        Some(Value::Array(items)) => Some(items.as_slice()),
        Some(Value::Object(inner)) if depth > 0 => list_in(inner, depth - 1),
        _ => None,
    })
}

/// A passage from one document object, or `None` when it has no usable
/// (non-blank) text, or neither an id nor a source to cite it by.
fn candidate(
    map: &Map<String, Value>,
    bounds: &RagBounds,
    redaction: &RedactionPass<'_>,
) -> Option<Candidate> {
    let metadata = map.get(METADATA_KEY).and_then(Value::as_object);
    let text = TEXT_KEYS.iter().find_map(|key| {
        map.get(*key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
    })?;
    let source = lookup(map, metadata, &SOURCE_KEYS, plain_text)
        .map(|source| redact::link(&source).into_owned())
        .unwrap_or_default();
    // A passage must be citable: without an id, its source identifies the document.
    let id = lookup(map, metadata, &ID_KEYS, id_text)
        .or_else(|| (!source.is_empty()).then(|| source.clone()))?;
    let title = lookup(map, metadata, &TITLE_KEYS, plain_text).unwrap_or_default();
    let breadcrumb = lookup(map, metadata, &HEADING_KEYS, heading_text).unwrap_or_default();

    let redaction = redaction.fresh();
    let mut shortened = false;
    let mut bound = |text: &str, max: usize| {
        let text = redaction.redact(text);
        let kept = escaped_prefix(&text, max).0.trim_end();
        shortened |= kept.len() < text.len();
        kept.to_owned()
    };
    let evidence = KnowledgeEvidence {
        document_id: bound(&id, bounds.max_field_bytes),
        source: bound(&source, bounds.max_field_bytes),
        title: bound(&title, bounds.max_field_bytes),
        breadcrumb: bound(&breadcrumb, bounds.max_field_bytes),
        excerpt: bound(text, bounds.max_excerpt_bytes),
    };
    let serialized_len = serialized_len(&evidence).ok()?;
    Some(Candidate {
        evidence,
        level: relevance_in(map),
        shortened,
        serialized_len,
        redactions: redaction.into_redactions(),
    })
}

/// The first usable value under `keys` in the document, else in its metadata.
fn lookup(
    map: &Map<String, Value>,
    metadata: Option<&Map<String, Value>>,
    keys: &[&str],
    read: fn(&Value) -> Option<String>,
) -> Option<String> {
    let first_in =
        |map: &Map<String, Value>| keys.iter().find_map(|key| map.get(*key).and_then(read));
    first_in(map).or_else(|| metadata.and_then(first_in))
}

/// A non-blank string, trimmed.
fn plain_text(value: &Value) -> Option<String> {
    let text = value.as_str()?.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A non-blank string, trimmed, or a number as JSON writes it.
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::Number(number) => Some(number.to_string()),
        other => plain_text(other),
    }
}

/// A heading path: a string, or an array whose non-blank string segments are
/// trimmed and joined with [`BREADCRUMB_SEPARATOR`].
fn heading_text(value: &Value) -> Option<String> {
    match value {
        Value::Array(segments) => {
            let joined = segments
                .iter()
                .filter_map(|segment| segment.as_str().map(str::trim).filter(|s| !s.is_empty()))
                .collect::<Vec<_>>()
                .join(BREADCRUMB_SEPARATOR);
            (!joined.is_empty()).then_some(joined)
        }
        other => plain_text(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_userinfo_and_query() {
        assert_eq!(redact::link("runbooks/db.md"), "runbooks/db.md");
        assert_eq!(
            redact::link("https://wiki.example.com/runbooks/db#pool"),
            "https://wiki.example.com/runbooks/db#pool"
        );
        assert_eq!(
            redact::link("https://bob:s3cret@wiki.example.com/db?token=abc#pool"),
            "https://wiki.example.com/db#pool"
        );
        assert_eq!(
            redact::link("s3://bucket/kb/db.md?X-Amz-Signature=deadbeef"),
            "s3://bucket/kb/db.md"
        );
        assert_eq!(redact::link("https://u@host?x=1"), "https://host");
        assert_eq!(redact::link("not a url: ://x@y"), "not a url: ://x@y");
    }

    #[test]
    fn heading_paths() {
        assert_eq!(
            heading_text(&serde_json::json!(["A", " ", 3, " B "])).as_deref(),
            Some("A > B")
        );
        assert_eq!(heading_text(&serde_json::json!([])), None);
        assert_eq!(
            heading_text(&serde_json::json!(" X > Y ")).as_deref(),
            Some("X > Y")
        );
    }
}

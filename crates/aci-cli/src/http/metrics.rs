//! Prometheus metrics of the HTTP server (`GET /metrics`).
//!
//! Labels are drawn from closed sets only: a tool label is one of the three
//! tool names or `other`, statuses and codes are the contract's enums. No
//! id, principal, argument or payload is ever a label, so the series count is
//! bounded whatever the traffic.

use std::sync::LazyLock;
use std::time::Duration;

use aci_contracts::{ErrorCode, EvidenceStatus, InvocationStatus, ToolName};
use projectors_rag::{MarkdownKnowledgeBase, VECTORS_NOT_READY};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder as _, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};
use tracing::field::{Field, Visit};
use tracing::{Subscriber, span};
use tracing_subscriber::filter;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use crate::server::CallObserver;
use crate::server::service::Answer;

/// Latency buckets, in seconds: 1 ms to 60 s.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The server's metrics and their registry.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    call_seconds: HistogramVec,
    in_flight: IntGauge,
    store_errors: IntCounter,
    unauthorized: IntCounter,
    body_too_large: IntCounter,
}

impl Metrics {
    /// Registers every metric.
    ///
    /// # Errors
    /// Only when two metrics share a name (a programming error).
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let calls = IntCounterVec::new(
            Opts::new(
                "aci_calls_total",
                "Tool calls answered, by tool, status, evidence status and error code.",
            ),
            &["tool", "status", "evidence_status", "code"],
        )?;
        let call_seconds = HistogramVec::new(
            HistogramOpts::new(
                "aci_call_duration_seconds",
                "Time from receiving a tools/call to its answer, by tool.",
            )
            .buckets(BUCKETS.to_vec()),
            &["tool"],
        )?;
        let in_flight = IntGauge::new("aci_calls_in_flight", "Tool calls running now.")?;
        let store_errors = IntCounter::new(
            "aci_store_errors_total",
            "Calls and readiness checks that found the store unavailable.",
        )?;
        let unauthorized = IntCounter::new(
            "aci_http_unauthorized_total",
            "Requests refused with 401 (no, bad or expired token).",
        )?;
        let body_too_large = IntCounter::new(
            "aci_http_body_too_large_total",
            "Requests refused with 413 (body over the limit).",
        )?;
        registry.register(Box::new(calls.clone()))?;
        registry.register(Box::new(call_seconds.clone()))?;
        registry.register(Box::new(EXECUTION_SECONDS.clone()))?;
        registry.register(Box::new(in_flight.clone()))?;
        registry.register(Box::new(store_errors.clone()))?;
        registry.register(Box::new(unauthorized.clone()))?;
        registry.register(Box::new(body_too_large.clone()))?;
        registry.register(Box::new(crate::telemetry::DROPPED_SPANS.clone()))?;
        Ok(Self {
            registry,
            calls,
            call_seconds,
            in_flight,
            store_errors,
            unauthorized,
            body_too_large,
        })
    }

    /// Serves the metrics of the archiver of this process's memory store
    /// too.
    pub(crate) fn register_archive(
        &self,
        archive: &crate::archive::ArchiveMetrics,
    ) -> Result<(), prometheus::Error> {
        archive.register(&self.registry)
    }

    /// Serves the connection metrics of `table`.
    pub(crate) fn register_connections(
        &self,
        table: &super::connections::ConnectionTable,
    ) -> Result<(), prometheus::Error> {
        table.register(&self.registry)
    }

    /// Serves `aci_knowledge_vector_fallbacks_total{reason}`: the searches
    /// `base` answered with BM25 alone although an embedder is attached,
    /// read from it at each scrape. Register it with `[knowledge.embeddings]`
    /// only: without an embedder there is no vector leg to fall back from.
    pub(crate) fn register_knowledge(
        &self,
        base: &MarkdownKnowledgeBase,
    ) -> Result<(), prometheus::Error> {
        self.registry.register(Box::new(VectorFallbacks {
            base: base.clone(),
            desc: vector_fallback_counters()?,
        }))
    }

    /// Counts one answered call and its whole duration.
    pub(crate) fn call(
        &self,
        tool: &str,
        status: InvocationStatus,
        evidence_status: EvidenceStatus,
        code: Option<ErrorCode>,
        elapsed: Duration,
    ) {
        let tool = tool_label(tool);
        self.calls
            .with_label_values(&[
                tool,
                status.as_str(),
                evidence_status.as_str(),
                code.map_or("", ErrorCode::as_str),
            ])
            .inc();
        self.call_seconds
            .with_label_values(&[tool])
            .observe(elapsed.as_secs_f64());
        if code == Some(ErrorCode::StoreUnavailable) {
            self.store_errors.inc();
        }
    }

    /// A readiness check found the store unavailable.
    pub(crate) fn store_error(&self) {
        self.store_errors.inc();
    }

    /// A request was refused with 401.
    pub(crate) fn unauthorized(&self) {
        self.unauthorized.inc();
    }

    /// A request was refused with 413.
    pub(crate) fn body_too_large(&self) {
        self.body_too_large.inc();
    }

    /// The Prometheus text exposition of every metric, with `in_flight`
    /// calls running now (the server's gate counts them).
    pub(crate) fn render(&self, in_flight: usize) -> String {
        self.in_flight
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
        let mut buffer = Vec::new();
        // Encoding gathered families into memory does not fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buffer);
        String::from_utf8(buffer).unwrap_or_default()
    }
}

impl CallObserver for Metrics {
    fn answered(&self, tool: &str, answer: &Answer, elapsed: Duration) {
        self.call(
            tool,
            answer.status,
            answer.evidence_status,
            answer.code,
            elapsed,
        );
    }
}

/// Every reason the knowledge base falls back to BM25 for
/// ([`projectors_rag::EmbedError::code`] and [`VECTORS_NOT_READY`]): each is
/// served from the first scrape, at 0 until it happens.
const VECTOR_FALLBACK_REASONS: [&str; 5] = [
    "EMBEDDER_UNAVAILABLE",
    "EMBEDDER_TIMEOUT",
    "EMBEDDER_FAILED",
    "EMBEDDER_MALFORMED",
    VECTORS_NOT_READY,
];

fn vector_fallback_counters() -> Result<IntCounterVec, prometheus::Error> {
    IntCounterVec::new(
        Opts::new(
            "aci_knowledge_vector_fallbacks_total",
            "lookup_knowledge searches answered with BM25 alone although an embedder is configured, by reason.",
        ),
        &["reason"],
    )
}

/// The knowledge base's own per-reason count, exposed at scrape time (the
/// base counts; a counter here would only copy it).
struct VectorFallbacks {
    base: MarkdownKnowledgeBase,
    /// The family's description (its values are never used).
    desc: IntCounterVec,
}

impl Collector for VectorFallbacks {
    fn desc(&self) -> Vec<&Desc> {
        self.desc.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // A fresh family per scrape: two concurrent scrapes never see each
        // other's half-filled values.
        let Ok(counters) = vector_fallback_counters() else {
            return Vec::new();
        };
        for reason in VECTOR_FALLBACK_REASONS {
            counters.with_label_values(&[reason]);
        }
        // The base's reasons are static codes: a closed set, never input.
        for (reason, count) in self.base.vector_fallbacks() {
            counters.with_label_values(&[reason]).inc_by(count);
        }
        counters.collect()
    }
}

/// How long executors ran, by tool: fed by [`ExecutionLayer`] from the
/// boundary's `aci.invoke` spans, registered by [`Metrics::new`].
static EXECUTION_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    HistogramVec::new(
        HistogramOpts::new(
            "aci_execution_duration_seconds",
            "Time the tool's executor ran, by tool (calls that reached execution).",
        )
        .buckets(BUCKETS.to_vec()),
        &["tool"],
    )
    .unwrap_or_else(|_| unreachable!("a valid histogram definition"))
});

/// A tracing layer that reads the boundary's `aci.invoke` spans (their
/// `tool_name` and `execute_ms` fields) into the execution histogram. It has
/// its own filter, so it sees those spans whatever `RUST_LOG` says, and it
/// never looks at any other field.
pub(crate) fn execution_metrics_layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    ExecutionLayer.with_filter(filter::filter_fn(|meta| {
        meta.is_span() && meta.name() == INVOKE_SPAN
    }))
}

/// The boundary's span of one call.
const INVOKE_SPAN: &str = "aci.invoke";

struct ExecutionLayer;

#[derive(Default)]
struct ExecutionFields {
    tool: Option<&'static str>,
    execute_ms: Option<u64>,
}

impl Visit for ExecutionFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "tool_name" {
            self.tool = Some(tool_label(value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "execute_ms" {
            self.execute_ms = Some(value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if field.name() == "execute_ms" {
            self.execute_ms = u64::try_from(value).ok();
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S> Layer<S> for ExecutionLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = ExecutionFields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<ExecutionFields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id)
            && let Some(fields) = span.extensions().get::<ExecutionFields>()
            && let (Some(tool), Some(ms)) = (fields.tool, fields.execute_ms)
        {
            EXECUTION_SECONDS
                .with_label_values(&[tool])
                .observe(Duration::from_millis(ms).as_secs_f64());
        }
    }
}

/// A tool label from a closed set, whatever name the client sent.
fn tool_label(tool: &str) -> &'static str {
    ToolName::ALL
        .iter()
        .find(|t| t.as_str() == tool)
        .map_or("other", |t| t.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_archivers_metrics_are_served_too() {
        let metrics = Metrics::new().unwrap();
        let archive = crate::archive::ArchiveMetrics::new().unwrap();
        metrics.register_archive(&archive).unwrap();
        let text = metrics.render(0);
        for name in [
            "aci_archive_pending 0",
            "aci_archive_lag_seconds 0",
            "aci_archive_rows_total 0",
            "aci_archive_errors_total 0",
        ] {
            assert!(text.contains(name), "{name} in {text}");
        }
    }

    /// An embedder whose every answer is an error.
    #[derive(Debug)]
    struct Refusing;

    #[async_trait::async_trait]
    impl projectors_rag::Embedder for Refusing {
        fn model_id(&self) -> &'static str {
            "refusing"
        }

        async fn embed(
            &self,
            _: &[String],
            _: projectors_rag::EmbedRole,
        ) -> Result<Vec<Vec<f32>>, projectors_rag::EmbedError> {
            Err(projectors_rag::EmbedError::Failed {
                message: "refused".to_owned(),
            })
        }
    }

    #[tokio::test]
    async fn vector_fallbacks_are_read_from_the_knowledge_base_at_each_scrape() {
        use projectors_rag::KnowledgeSource as _;

        let metrics = Metrics::new().unwrap();
        let base = MarkdownKnowledgeBase::bundled().unwrap();
        assert!(base.set_embedder(
            std::sync::Arc::new(Refusing),
            projectors_rag::VectorOptions::default()
        ));
        metrics.register_knowledge(&base).unwrap();
        let line = |reason: &str, count: u64| {
            format!("aci_knowledge_vector_fallbacks_total{{reason=\"{reason}\"}} {count}")
        };
        let text = metrics.render(0);
        for reason in VECTOR_FALLBACK_REASONS {
            assert!(text.lines().any(|l| l == line(reason, 0)), "{text}");
        }

        let context = invocation_core::ExecutionContext {
            run_id: aci_contracts::RunId::new("run-metrics").unwrap(),
            tool_call_id: aci_contracts::ToolCallId::new("call-metrics").unwrap(),
            now: aci_contracts::Timestamp::from_unix_millis(1_796_033_776_123),
            deadline: None,
        };
        // Before the chunks are embedded, then after embedding them failed.
        base.retrieve("disk full", &context).await.unwrap();
        assert!(base.embed_chunks(|_, _| {}).await.is_err());
        base.retrieve("disk full", &context).await.unwrap();
        base.retrieve("pool exhausted", &context).await.unwrap();
        let text = metrics.render(0);
        for expected in [
            line("VECTORS_NOT_READY", 1),
            line("EMBEDDER_FAILED", 2),
            line("EMBEDDER_TIMEOUT", 0),
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected} in {text}");
        }
    }

    #[test]
    fn labels_are_closed_sets() {
        let metrics = Metrics::new().unwrap();
        metrics.call(
            "query_logs",
            InvocationStatus::Ready,
            EvidenceStatus::NoEvidence,
            None,
            Duration::from_millis(3),
        );
        metrics.call(
            "secret-tool-name-run-123",
            InvocationStatus::Error,
            EvidenceStatus::Error,
            Some(ErrorCode::UnknownTool),
            Duration::from_millis(1),
        );
        let text = metrics.render(2);
        assert!(text.contains(
            "aci_calls_total{code=\"\",evidence_status=\"NO_EVIDENCE\",status=\"READY\",tool=\"query_logs\"} 1"
        ), "{text}");
        assert!(text.contains("tool=\"other\""), "{text}");
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("aci_call_duration_seconds_bucket"), "{text}");
        assert!(text.contains("\naci_calls_in_flight 2\n"), "{text}");
    }
}

//! Export off the call path: the SDK's batch span processor (its own
//! thread, a bounded queue) behind a gate that counts every span that does
//! not reach the collector, and the trace ids of runs.
//!
//! A span is dropped, and counted in `aci_telemetry_dropped_spans_total`,
//! when the queue is full (a collector that is down, answers errors or hangs
//! holds the export thread for the exporter's timeout while calls keep
//! ending) or when its batch's export failed. Ending a span never waits.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, Span, SpanData,
    SpanExporter, SpanProcessor,
};
use prometheus::IntCounter;
use sha2::{Digest as _, Sha256};

/// Spans that ended but never reached the collector.
pub(crate) static DROPPED_SPANS: LazyLock<IntCounter> = LazyLock::new(|| {
    IntCounter::new(
        "aci_telemetry_dropped_spans_total",
        "Spans not exported: the export queue was full or the collector refused or missed a batch.",
    )
    .unwrap_or_else(|_| unreachable!("a valid counter definition"))
});

/// Spans waiting for export, at most.
pub(crate) const MAX_QUEUED_SPANS: usize = 2048;
/// Spans in one export request, at most.
const MAX_BATCH: usize = 512;
/// How long an ended span may wait for its batch.
const SCHEDULED_DELAY: Duration = Duration::from_millis(500);

/// The batch processor over `exporter`, with the dropped spans counted.
pub(super) fn processor<E>(exporter: E) -> CountingProcessor
where
    E: SpanExporter + 'static,
{
    let queued = Arc::new(AtomicUsize::new(0));
    let exporter = CountingExporter {
        inner: exporter,
        queued: Arc::clone(&queued),
    };
    // The SDK's queue is larger than the gate's: the gate alone decides what
    // is dropped, so every drop is counted.
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(MAX_QUEUED_SPANS * 2)
        .with_max_export_batch_size(MAX_BATCH)
        .with_scheduled_delay(SCHEDULED_DELAY)
        .build();
    CountingProcessor {
        inner: BatchSpanProcessor::builder(exporter)
            .with_batch_config(config)
            .build(),
        queued,
    }
}

/// The SDK's batch processor behind the gate of [`MAX_QUEUED_SPANS`].
#[derive(Debug)]
pub(super) struct CountingProcessor {
    inner: BatchSpanProcessor,
    /// Spans handed to the batch processor and not yet taken by an export.
    queued: Arc<AtomicUsize>,
}

impl SpanProcessor for CountingProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= MAX_QUEUED_SPANS {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            DROPPED_SPANS.inc();
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, releasing the gate as batches leave the queue and
/// counting the spans of a failed export.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    queued: Arc<AtomicUsize>,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        self.queued.fetch_sub(spans, Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        if result.is_err() {
            DROPPED_SPANS.inc_by(u64::try_from(spans).unwrap_or(u64::MAX));
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

thread_local! {
    /// The trace id the next root span started on this thread takes.
    static NEXT_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Random ids, but for a root span started through [`with_trace_id`].
#[derive(Debug, Default)]
pub(super) struct RunTraceIds(RandomIdGenerator);

impl IdGenerator for RunTraceIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID
            .with(Cell::take)
            .unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

/// Runs `start` (which starts one root span, synchronously) so that the
/// span's trace id is `trace_id`.
pub(super) fn with_trace_id<T>(trace_id: TraceId, start: impl FnOnce() -> T) -> T {
    NEXT_TRACE_ID.with(|next| next.set(Some(trace_id)));
    let started = start();
    // A span the sampler dropped before asking leaves nothing behind.
    NEXT_TRACE_ID.with(|next| next.set(None));
    started
}

/// The trace id of a run's calls that came without a trace context: the
/// first 16 bytes of the SHA-256 of the run id, so every process and replica
/// serving the run puts its calls in one trace.
pub(crate) fn run_trace_id(run_id: &str) -> TraceId {
    let digest = Sha256::digest(run_id.as_bytes());
    let mut bytes = [0_u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    TraceId::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_trace_ids_are_stable_and_distinct() {
        let a = run_trace_id("run-a");
        assert_eq!(a, run_trace_id("run-a"));
        assert_ne!(a, run_trace_id("run-b"));
        assert_ne!(a, TraceId::INVALID);
        let digest = Sha256::digest(b"run-a");
        assert_eq!(a.to_string(), hex(&digest[..16]));
    }

    #[test]
    fn the_next_trace_id_is_taken_once() {
        let ids = RunTraceIds::default();
        let wanted = run_trace_id("run-x");
        let taken = with_trace_id(wanted, || ids.new_trace_id());
        assert_eq!(taken, wanted);
        assert_ne!(ids.new_trace_id(), wanted);
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

//! Export off the call path: answered calls wait in a bounded queue; one
//! thread of their own makes their spans (the SDK's tracer, so sampling,
//! ids and limits are the SDK's) and hands them to the OTLP exporter in
//! batches. Also the trace ids of runs.
//!
//! A call costs its serving thread one push: every span is made, converted
//! and sent on the telemetry thread, a batch at a time, where that code stays
//! warm. A call's spans are dropped, and counted in
//! `aci_telemetry_dropped_spans_total`, when the queue is full (a collector
//! that is down, answers errors or hangs holds the thread for the
//! exporter's timeout while calls keep ending; the call counts the spans it
//! would have had, before sampling), when their batch's export failed, or
//! when making or exporting them panicked. Queuing a call never waits.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SdkTracer, Span, SpanData, SpanExporter, SpanProcessor,
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

/// Spans of queued calls, at most.
pub(crate) const MAX_QUEUED_SPANS: usize = 4096;
/// Queued spans that wake the telemetry thread before its delay.
const EXPORT_AT: usize = 1024;
/// Spans in one export request, at most.
const MAX_BATCH: usize = 2048;
/// How long an answered call may wait for its batch.
const SCHEDULED_DELAY: Duration = Duration::from_millis(500);

/// An answered call whose spans are still to be made.
pub(super) trait CallSpans: Send + 'static {
    /// The spans it makes, at most (what a full queue counts as dropped).
    fn spans(&self) -> usize;
    /// Starts and ends its spans with `tracer`.
    fn emit(self: Box<Self>, tracer: &SdkTracer);
}

/// The queue of answered calls and the thread that exports their spans.
#[derive(Debug)]
pub(super) struct Pipeline {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// The telemetry thread waits on it.
    wake: Condvar,
    /// The shutdown waits on it.
    done: Condvar,
    /// The spans the tracer ended, on their way to the exporter.
    ended: Mutex<Vec<SpanData>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    calls: Vec<Box<dyn CallSpans>>,
    /// The spans of `calls`, at most.
    queued_spans: usize,
    /// When the first of `calls` was queued.
    oldest: Option<Instant>,
    /// The exporter's resource, when the provider set a new one.
    resource: Option<Resource>,
    shutdown: bool,
    stopped: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing the thread does holding these locks can panic half way.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` for a notification until `deadline` (`None`: no
/// deadline); `Err` with the guard, without waiting, once it has passed.
fn wait_until<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    deadline: Option<Instant>,
) -> Result<MutexGuard<'a, T>, MutexGuard<'a, T>> {
    let Some(deadline) = deadline else {
        return Ok(condvar.wait(guard).unwrap_or_else(PoisonError::into_inner));
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(guard);
    }
    Ok(condvar
        .wait_timeout(guard, left)
        .unwrap_or_else(PoisonError::into_inner)
        .0)
}

/// The queue (its thread not started: [`Pipeline::start`]) and the span
/// processor the tracer provider must carry so that the spans the thread
/// makes reach the exporter.
pub(super) fn pipeline() -> (Pipeline, Collector) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        wake: Condvar::new(),
        done: Condvar::new(),
        ended: Mutex::new(Vec::new()),
    });
    let collector = Collector {
        shared: Arc::clone(&shared),
    };
    (Pipeline { shared }, collector)
}

impl Pipeline {
    /// Starts the telemetry thread: it makes spans with `tracer` (of the
    /// provider carrying this pipeline's [`Collector`]) and exports them
    /// with `exporter`.
    pub(super) fn start<E>(&self, exporter: E, tracer: SdkTracer) -> std::io::Result<()>
    where
        E: SpanExporter + 'static,
    {
        let shared = Arc::clone(&self.shared);
        std::thread::Builder::new()
            .name("aci-telemetry".to_owned())
            .spawn(move || shared.run(exporter, &tracer))?;
        Ok(())
    }

    /// Queues an answered call; a full queue drops its spans, counted.
    pub(super) fn submit(&self, call: Box<dyn CallSpans>) {
        let spans = call.spans();
        let mut state = lock(&self.shared.state);
        if state.shutdown || state.queued_spans + spans > MAX_QUEUED_SPANS {
            drop(state);
            DROPPED_SPANS.inc_by(spans as u64);
            return;
        }
        let before = state.queued_spans;
        state.queued_spans += spans;
        // The thread waits for a first call (to time its delay) and for a
        // batch's worth.
        let first = state.calls.is_empty();
        if first {
            state.oldest = Some(Instant::now());
        }
        state.calls.push(call);
        let wake = first || (before < EXPORT_AT && state.queued_spans >= EXPORT_AT);
        drop(state);
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// Exports what is queued, then stops the thread and the exporter;
    /// waits at most `within`. Calls queued afterwards are dropped.
    pub(super) fn shutdown(&self, within: Duration) -> bool {
        // A drain time too long for the clock is no deadline.
        let deadline = Instant::now().checked_add(within);
        let mut state = lock(&self.shared.state);
        state.shutdown = true;
        self.shared.wake.notify_one();
        while !state.stopped {
            match wait_until(&self.shared.done, state, deadline) {
                Ok(woken) => state = woken,
                Err(_) => return false,
            }
        }
        true
    }
}

impl Shared {
    /// The telemetry thread: waits for calls (a batch's worth, the delay
    /// or the shutdown), makes their spans and exports them.
    fn run<E: SpanExporter>(&self, mut exporter: E, tracer: &SdkTracer) {
        let mut state = lock(&self.state);
        loop {
            // Until the shutdown, a batch's worth, or the delay after the
            // oldest queued call (idle: until a first call).
            while !state.shutdown && state.queued_spans < EXPORT_AT {
                let due = state.oldest.map(|oldest| oldest + SCHEDULED_DELAY);
                match wait_until(&self.wake, state, due) {
                    Ok(woken) => state = woken,
                    Err(due) => {
                        state = due;
                        break;
                    }
                }
            }
            let calls = std::mem::take(&mut state.calls);
            let spans = std::mem::take(&mut state.queued_spans);
            state.oldest = None;
            let resource = state.resource.take();
            let shutdown = state.shutdown;
            drop(state);

            if let Some(resource) = resource {
                exporter.set_resource(&resource);
            }
            // Room for every span up front: the buffer never grows (and
            // moves) while the calls make them.
            lock(&self.ended).reserve(spans);
            let mut calls = calls.into_iter();
            let mut making = 0;
            let made = catch_unwind(AssertUnwindSafe(|| {
                for call in calls.by_ref() {
                    making = call.spans();
                    call.emit(tracer);
                }
            }));
            if made.is_err() {
                // Making a call's spans panicked: they count as dropped (but
                // those it ended go out), and so do those of the calls after
                // it, never made.
                let rest: usize = calls.map(|c| c.spans()).sum();
                DROPPED_SPANS.inc_by((making + rest) as u64);
            }
            let ended = std::mem::take(&mut *lock(&self.ended));
            let count = ended.len();
            let mut handled = 0;
            if catch_unwind(AssertUnwindSafe(|| export(&exporter, ended, &mut handled))).is_err() {
                DROPPED_SPANS.inc_by((count - handled) as u64);
            }

            if shutdown {
                let _ = exporter.shutdown();
                lock(&self.state).stopped = true;
                self.done.notify_all();
                return;
            }
            state = lock(&self.state);
        }
    }
}

/// Sends `spans` in requests of at most [`MAX_BATCH`], counting those of a
/// failed request as dropped; `handled` counts the spans of the requests
/// that came back.
fn export<E: SpanExporter>(exporter: &E, mut spans: Vec<SpanData>, handled: &mut usize) {
    while !spans.is_empty() {
        let rest = spans.split_off(spans.len().min(MAX_BATCH));
        let count = spans.len();
        if futures::executor::block_on(exporter.export(spans)).is_err() {
            DROPPED_SPANS.inc_by(count as u64);
        }
        *handled += count;
        spans = rest;
    }
}

/// The span processor of the provider: hands every ended span to the
/// telemetry thread's next export.
#[derive(Debug)]
pub(super) struct Collector {
    shared: Arc<Shared>,
}

impl SpanProcessor for Collector {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        lock(&self.shared.ended).push(span);
    }

    /// Spans are exported by the telemetry thread, at the latest after its
    /// delay and at [`Pipeline::shutdown`].
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        if lock(&self.shared.state).stopped {
            Ok(())
        } else {
            Err(OTelSdkError::InternalFailure(
                "the telemetry thread is still exporting".to_owned(),
            ))
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        lock(&self.shared.state).resource = Some(resource.clone());
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

    use std::sync::mpsc;

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    /// A call making `spans` spans named `name` (`"panic"`: none, it
    /// panics).
    struct Call {
        name: &'static str,
        spans: usize,
    }

    impl CallSpans for Call {
        fn spans(&self) -> usize {
            self.spans
        }

        fn emit(self: Box<Self>, tracer: &SdkTracer) {
            assert_ne!(self.name, "panic", "a call whose spans panic");
            for _ in 0..self.spans {
                tracer.start(self.name);
            }
        }
    }

    /// Sends each batch's span names to the test; refuses batches while
    /// `failing`.
    #[derive(Debug)]
    struct Recorder {
        batches: mpsc::Sender<Vec<String>>,
        failing: bool,
    }

    impl SpanExporter for Recorder {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let names = batch.iter().map(|s| s.name.to_string()).collect();
            let _ = self.batches.send(names);
            if self.failing {
                Err(OTelSdkError::InternalFailure("refused".to_owned()))
            } else {
                Ok(())
            }
        }
    }

    fn started(failing: bool) -> (Pipeline, SdkTracerProvider, mpsc::Receiver<Vec<String>>) {
        let (pipeline, collector) = pipeline();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(collector)
            .build();
        let (batches, received) = mpsc::channel();
        pipeline
            .start(Recorder { batches, failing }, provider.tracer("test"))
            .unwrap();
        (pipeline, provider, received)
    }

    const WAIT: Duration = Duration::from_secs(30);

    // One test owns the process-wide dropped counter: its figures are exact.
    #[test]
    fn queued_calls_are_exported_or_counted_as_dropped() {
        // A call waits at most the delay, not for a batch's worth.
        let (pipeline, _provider, batches) = started(false);
        pipeline.submit(Box::new(Call {
            name: "one",
            spans: 3,
        }));
        assert_eq!(batches.recv_timeout(WAIT).unwrap(), ["one"; 3]);

        // A full queue (the thread not started: nothing leaves it) drops
        // whole calls and counts their spans; a call that fits still goes in.
        let (stalled, _collector) = super::pipeline();
        let before = DROPPED_SPANS.get();
        for _ in 0..MAX_QUEUED_SPANS / 5 {
            stalled.submit(Box::new(Call {
                name: "x",
                spans: 5,
            }));
        }
        let room = MAX_QUEUED_SPANS % 5;
        stalled.submit(Box::new(Call {
            name: "x",
            spans: room + 1,
        }));
        assert_eq!(DROPPED_SPANS.get() - before, (room + 1) as u64);
        stalled.submit(Box::new(Call {
            name: "x",
            spans: room,
        }));
        assert_eq!(DROPPED_SPANS.get() - before, (room + 1) as u64);
        assert!(
            !stalled.shutdown(Duration::from_millis(10)),
            "no thread to stop"
        );

        // A panic making a call's spans drops (and counts) its spans and
        // those of the calls after it in its batch; the thread goes on.
        let before = DROPPED_SPANS.get();
        {
            // Queued at once: one batch.
            let mut state = lock(&pipeline.shared.state);
            for (name, spans) in [("panic", 2), ("skipped", 3), ("skipped", 3)] {
                state.calls.push(Box::new(Call { name, spans }));
                state.queued_spans += spans;
            }
            state.oldest = Some(Instant::now());
            pipeline.shared.wake.notify_one();
        }
        let counted = Instant::now() + WAIT;
        while DROPPED_SPANS.get() - before < 8 {
            assert!(
                Instant::now() < counted,
                "the panicked batch was not counted"
            );
            std::thread::yield_now();
        }
        pipeline.submit(Box::new(Call {
            name: "after",
            spans: 1,
        }));
        assert_eq!(batches.recv_timeout(WAIT).unwrap(), ["after"]);
        assert_eq!(DROPPED_SPANS.get() - before, 8);

        // A refused export counts its spans.
        let (failing, _provider, refused) = started(true);
        let before = DROPPED_SPANS.get();
        failing.submit(Box::new(Call {
            name: "lost",
            spans: 4,
        }));
        assert_eq!(refused.recv_timeout(WAIT).unwrap().len(), 4);
        assert!(failing.shutdown(WAIT));
        assert_eq!(DROPPED_SPANS.get() - before, 4);

        // Shutdown exports what is queued (in requests of at most
        // MAX_BATCH), then refuses and counts later calls.
        let calls = MAX_QUEUED_SPANS / 4;
        for _ in 0..calls {
            pipeline.submit(Box::new(Call {
                name: "late",
                spans: 4,
            }));
        }
        assert!(pipeline.shutdown(WAIT));
        let mut exported = 0;
        while let Ok(batch) = batches.try_recv() {
            assert!(batch.len() <= MAX_BATCH);
            exported += batch.len();
        }
        assert_eq!(exported, calls * 4);
        let before = DROPPED_SPANS.get();
        pipeline.submit(Box::new(Call {
            name: "after",
            spans: 2,
        }));
        assert_eq!(DROPPED_SPANS.get() - before, 2);
        assert!(batches.try_recv().is_err());
    }
}

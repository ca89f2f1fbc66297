//! Traces: every `tools/call` an OpenTelemetry span, exported over OTLP/HTTP
//! with protobuf.
//!
//! - [`config`]: the `[telemetry]` section;
//! - [`export`]: the bounded queue of answered calls and the thread that
//!   makes and exports their spans, the count of dropped spans, and the
//!   trace ids of runs;
//! - [`spans`]: what a call's spans carry ([`CallTrace`]).
//!
//! Telemetry is on when `[telemetry] otlp_endpoint`,
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is
//! set (and `OTEL_SDK_DISABLED` is not `true`); otherwise nothing here runs
//! beyond one check per call. The exporter reads the standard variables
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, …), the
//! resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`, the sampler
//! `OTEL_TRACES_SAMPLER` unless `[telemetry] sample_ratio` is set. The
//! endpoint, the headers and span content never appear in `aci`'s logs.
//!
//! The one tracer of the process is installed once at start ([`install`])
//! and read by the MCP service and `aci call`: it is a process resource like
//! the allocator, not state of a request.

mod config;
mod export;
mod spans;

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

pub(crate) use self::config::TelemetrySection;
pub(crate) use self::export::DROPPED_SPANS;
pub(crate) use self::spans::{CallTrace, NetworkTransport, ServerFacts};
use crate::error::CliError;

/// The installed tracer, when telemetry is on.
static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();

#[derive(Debug)]
struct Telemetry {
    provider: SdkTracerProvider,
    /// Answered calls on their way to the telemetry thread.
    pipeline: export::Pipeline,
    capture_content: bool,
}

/// The installed telemetry, if any.
fn installed() -> Option<&'static Telemetry> {
    TELEMETRY.get()
}

/// Whether spans go anywhere: `[telemetry] otlp_endpoint` or an OTLP
/// endpoint variable, and the SDK not disabled.
fn enabled(section: &TelemetrySection) -> bool {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let disabled =
        std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled
        && (section
            .otlp_endpoint
            .as_deref()
            .is_some_and(|e| !e.is_empty())
            || set("OTEL_EXPORTER_OTLP_ENDPOINT")
            || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Installs the process's tracer when telemetry is configured; returns
/// whether it did. Call once, at start.
///
/// # Errors
/// A `[telemetry]` value out of range, or an endpoint the exporter cannot
/// use (the message never repeats the endpoint, which may hold a token).
pub(crate) fn install(section: &TelemetrySection) -> Result<bool, CliError> {
    let sample_ratio = section.sample_ratio().map_err(CliError::config)?;
    if !enabled(section) || TELEMETRY.get().is_some() {
        return Ok(TELEMETRY.get().is_some());
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(endpoint) = section.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
        exporter = exporter.with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')));
    }
    let exporter = exporter.build().map_err(|_| {
        CliError::config(
            "[telemetry]: cannot build the OTLP/HTTP exporter: check otlp_endpoint, \
             OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and \
             OTEL_EXPORTER_OTLP_HEADERS",
        )
    })?;
    let mut resource = Resource::builder().with_attribute(opentelemetry::KeyValue::new(
        "service.version",
        env!("CARGO_PKG_VERSION"),
    ));
    if std::env::var_os("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
        resource = resource.with_service_name("aci");
    }
    let (pipeline, collector) = export::pipeline();
    let mut provider = SdkTracerProvider::builder()
        .with_span_processor(collector)
        .with_id_generator(export::RunTraceIds::default())
        .with_resource(resource.build());
    if let Some(ratio) = sample_ratio {
        provider = provider.with_sampler(Sampler::ParentBased(Box::new(
            Sampler::TraceIdRatioBased(ratio),
        )));
    }
    let provider = provider.build();
    pipeline
        .start(exporter, provider.tracer("aci"))
        .map_err(|error| {
            CliError::config(format!("[telemetry]: cannot start its thread: {error}"))
        })?;
    let _ = TELEMETRY.set(Telemetry {
        provider,
        pipeline,
        capture_content: section.capture_content,
    });
    Ok(true)
}

/// Exports the spans still queued and stops the exporter, waiting at most
/// `within` (a collector that is down or hangs costs at most that); a
/// no-op when telemetry is off.
pub(crate) async fn shutdown(within: Duration) {
    let Some(telemetry) = installed() else {
        return;
    };
    // Blocks on the telemetry thread's answer: the queued calls' spans
    // first, then the provider (nothing is left to end by then).
    let stopped = tokio::task::spawn_blocking(move || {
        telemetry.pipeline.shutdown(within) && telemetry.provider.shutdown().is_ok()
    })
    .await;
    if !matches!(stopped, Ok(true)) {
        tracing::warn!(
            within_secs = within.as_secs(),
            "telemetry: spans still queued were not all exported"
        );
    }
}

//! `[telemetry]`: where spans go, and what they may carry.

use serde::Deserialize;

/// `[telemetry]`. With no `otlp_endpoint` here and no
/// `OTEL_EXPORTER_OTLP_ENDPOINT`/`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` in the
/// environment, no span is made.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TelemetrySection {
    /// The collector's OTLP/HTTP base URL, e.g. `http://127.0.0.1:4318`
    /// (spans go to its `/v1/traces`); it wins over the `OTEL_EXPORTER_OTLP_*`
    /// endpoint variables.
    pub(crate) otlp_endpoint: Option<String>,
    /// Put the call's arguments and the model's observation on the
    /// `execute_tool` span (`gen_ai.tool.call.arguments`,
    /// `gen_ai.tool.call.result`). Off by default; the raw response never.
    #[serde(default)]
    pub(crate) capture_content: bool,
    /// The share of traces kept, 0.0 to 1.0, decided on the trace id (so all
    /// spans of a run, or of an agent's trace, are kept or dropped together;
    /// a sampled parent from `traceparent` is always followed). Without it,
    /// `OTEL_TRACES_SAMPLER`/`OTEL_TRACES_SAMPLER_ARG` decide (default: all).
    pub(crate) sample_ratio: Option<f64>,
}

// The one float is a checked ratio, never NaN in a valid config, and
// `Config` compares whole files in tests.
impl Eq for TelemetrySection {}

impl TelemetrySection {
    /// The checked sample ratio.
    pub(crate) fn sample_ratio(&self) -> Result<Option<f64>, String> {
        match self.sample_ratio {
            Some(ratio) if !(0.0..=1.0).contains(&ratio) => {
                Err("[telemetry] sample_ratio must be between 0.0 and 1.0".to_owned())
            }
            ratio => Ok(ratio),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn the_section_parses_and_checks_its_ratio() {
        let config = Config::parse(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\ncapture_content = true\nsample_ratio = 0.25\n",
        )
        .unwrap();
        let section = &config.telemetry;
        assert_eq!(
            section.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4318")
        );
        assert!(section.capture_content);
        assert_eq!(section.sample_ratio(), Ok(Some(0.25)));
        let default = Config::parse("").unwrap().telemetry;
        assert!(!default.capture_content && default.otlp_endpoint.is_none());
        let over = Config::parse("[telemetry]\nsample_ratio = 1.5\n").unwrap();
        assert!(over.telemetry.sample_ratio().is_err());
        let err = Config::parse("[telemetry]\nheaders = \"x\"\n").unwrap_err();
        assert!(err.contains("unknown field `headers`"), "{err}");
    }
}

//! Byte limits, record TTL and execution timeout, globally and per tool.

use std::time::Duration;

use serde::Deserialize;

/// Default [`Limits::max_request_bytes`]: 16 KiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 16 * 1024;
/// Default [`Limits::max_raw_bytes`]: 1 MiB.
pub const DEFAULT_MAX_RAW_BYTES: usize = 1024 * 1024;
/// Default [`Limits::max_agent_result_bytes`]: 16 KiB.
pub const DEFAULT_MAX_AGENT_RESULT_BYTES: usize = 16 * 1024;
/// Default [`Limits::max_record_bytes`]: 2 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 2 * 1024 * 1024;
/// Default [`Limits::record_ttl`]: 24 hours.
pub const DEFAULT_RECORD_TTL: Duration = Duration::from_secs(24 * 60 * 60);
/// Default [`Limits::timeout`]: 30 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The limits one invocation runs under. All sizes are UTF-8 bytes of JSON text.
///
/// Every limit fails closed: nothing is ever truncated to fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted arguments text (the request as the framework sent it).
    /// Over it: `REQUEST_TOO_LARGE`, before any record exists.
    pub max_request_bytes: usize,
    /// Largest raw response (serialized once). Over it: `ERROR/RESULT_TOO_LARGE`,
    /// the raw response is not stored and the projector is not called.
    pub max_raw_bytes: usize,
    /// Largest bounded agent result. Over it: `ERROR/RESULT_TOO_LARGE` and the
    /// result is not returned.
    pub max_agent_result_bytes: usize,
    /// Largest record: request + raw + agent result. Over it:
    /// `ERROR/RESULT_TOO_LARGE`.
    pub max_record_bytes: usize,
    /// How long a record lives after it is created. Set once, at creation.
    pub record_ttl: Duration,
    /// Longest execution; the run's deadline may cut it shorter.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_raw_bytes: DEFAULT_MAX_RAW_BYTES,
            max_agent_result_bytes: DEFAULT_MAX_AGENT_RESULT_BYTES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            record_ttl: DEFAULT_RECORD_TTL,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// [`Limits`] as a configuration file states them: the `[limits]` section of
/// `aci`'s TOML file, whose keys are this struct's fields. Every key is
/// optional over the defaults; unknown keys are refused.
///
/// [`into_limits`](Self::into_limits) refuses a zero with an
/// [`InvalidLimit`] naming the key (`record_ttl_secs`, not `record_ttl`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// [`Limits::max_request_bytes`].
    pub max_request_bytes: Option<usize>,
    /// [`Limits::max_raw_bytes`].
    pub max_raw_bytes: Option<usize>,
    /// [`Limits::max_agent_result_bytes`].
    pub max_agent_result_bytes: Option<usize>,
    /// [`Limits::max_record_bytes`].
    pub max_record_bytes: Option<usize>,
    /// [`Limits::record_ttl`], in seconds.
    pub record_ttl_secs: Option<u64>,
    /// [`Limits::timeout`], in seconds.
    pub timeout_secs: Option<u64>,
}

impl LimitsConfig {
    /// These settings over [`Limits::default`].
    ///
    /// # Errors
    /// [`InvalidLimit`] naming the first key (in field order) that is zero.
    pub fn into_limits(self) -> Result<Limits, InvalidLimit> {
        let d = Limits::default();
        Ok(Limits {
            max_request_bytes: positive(self.max_request_bytes, "max_request_bytes")?
                .unwrap_or(d.max_request_bytes),
            max_raw_bytes: positive(self.max_raw_bytes, "max_raw_bytes")?
                .unwrap_or(d.max_raw_bytes),
            max_agent_result_bytes: positive(
                self.max_agent_result_bytes,
                "max_agent_result_bytes",
            )?
            .unwrap_or(d.max_agent_result_bytes),
            max_record_bytes: positive(self.max_record_bytes, "max_record_bytes")?
                .unwrap_or(d.max_record_bytes),
            record_ttl: positive(self.record_ttl_secs, "record_ttl_secs")?
                .map_or(d.record_ttl, Duration::from_secs),
            timeout: positive(self.timeout_secs, "timeout_secs")?
                .map_or(d.timeout, Duration::from_secs),
        })
    }
}

/// `value` unless it is zero, which is refused as `key`.
fn positive<T: Default + PartialEq>(
    value: Option<T>,
    key: &'static str,
) -> Result<Option<T>, InvalidLimit> {
    match value {
        Some(v) if v == T::default() => Err(InvalidLimit(key)),
        other => Ok(other),
    }
}

/// Per-tool overrides of [`Limits`]; `None` keeps the global value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitOverrides {
    /// Overrides [`Limits::max_request_bytes`].
    pub max_request_bytes: Option<usize>,
    /// Overrides [`Limits::max_raw_bytes`].
    pub max_raw_bytes: Option<usize>,
    /// Overrides [`Limits::max_agent_result_bytes`].
    pub max_agent_result_bytes: Option<usize>,
    /// Overrides [`Limits::max_record_bytes`].
    pub max_record_bytes: Option<usize>,
    /// Overrides [`Limits::record_ttl`].
    pub record_ttl: Option<Duration>,
    /// Overrides [`Limits::timeout`].
    pub timeout: Option<Duration>,
}

/// A limit that is zero: every limit must be positive, since a zero TTL
/// would delete records (and budgets) as they are written, a zero timeout
/// would fail every call, and a zero byte limit would refuse everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} must be positive")]
pub struct InvalidLimit(pub &'static str);

impl Limits {
    /// Checks that every limit is positive.
    ///
    /// # Errors
    /// [`InvalidLimit`] naming the first limit that is zero.
    pub const fn validate(&self) -> Result<(), InvalidLimit> {
        if self.max_request_bytes == 0 {
            return Err(InvalidLimit("max_request_bytes"));
        }
        if self.max_raw_bytes == 0 {
            return Err(InvalidLimit("max_raw_bytes"));
        }
        if self.max_agent_result_bytes == 0 {
            return Err(InvalidLimit("max_agent_result_bytes"));
        }
        if self.max_record_bytes == 0 {
            return Err(InvalidLimit("max_record_bytes"));
        }
        if self.record_ttl.is_zero() {
            return Err(InvalidLimit("record_ttl"));
        }
        if self.timeout.is_zero() {
            return Err(InvalidLimit("timeout"));
        }
        Ok(())
    }

    /// These limits with `overrides` applied.
    #[must_use]
    pub fn with(self, overrides: &LimitOverrides) -> Self {
        Self {
            max_request_bytes: overrides
                .max_request_bytes
                .unwrap_or(self.max_request_bytes),
            max_raw_bytes: overrides.max_raw_bytes.unwrap_or(self.max_raw_bytes),
            max_agent_result_bytes: overrides
                .max_agent_result_bytes
                .unwrap_or(self.max_agent_result_bytes),
            max_record_bytes: overrides.max_record_bytes.unwrap_or(self.max_record_bytes),
            record_ttl: overrides.record_ttl.unwrap_or(self.record_ttl),
            timeout: overrides.timeout.unwrap_or(self.timeout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(json: serde_json::Value) -> Result<LimitsConfig, serde_json::Error> {
        serde_json::from_value(json)
    }

    #[test]
    fn an_empty_section_is_the_defaults() {
        let limits = config(serde_json::json!({})).unwrap().into_limits();
        assert_eq!(limits, Ok(Limits::default()));
    }

    #[test]
    fn every_key_sets_its_limit() {
        let limits = config(serde_json::json!({
            "max_request_bytes": 1,
            "max_raw_bytes": 2,
            "max_agent_result_bytes": 3,
            "max_record_bytes": 4,
            "record_ttl_secs": 5,
            "timeout_secs": 6,
        }))
        .unwrap()
        .into_limits();
        assert_eq!(
            limits,
            Ok(Limits {
                max_request_bytes: 1,
                max_raw_bytes: 2,
                max_agent_result_bytes: 3,
                max_record_bytes: 4,
                record_ttl: Duration::from_secs(5),
                timeout: Duration::from_secs(6),
            })
        );
        let only_timeout = config(serde_json::json!({"timeout_secs": 7}))
            .unwrap()
            .into_limits();
        assert_eq!(
            only_timeout,
            Ok(Limits {
                timeout: Duration::from_secs(7),
                ..Limits::default()
            })
        );
    }

    #[test]
    fn a_zero_is_refused_naming_its_key() {
        for key in [
            "max_request_bytes",
            "max_raw_bytes",
            "max_agent_result_bytes",
            "max_record_bytes",
            "record_ttl_secs",
            "timeout_secs",
        ] {
            let limits = config(serde_json::json!({ key: 0 })).unwrap().into_limits();
            assert_eq!(limits, Err(InvalidLimit(key)), "{key}");
            assert_eq!(
                InvalidLimit(key).to_string(),
                format!("{key} must be positive")
            );
        }
    }

    #[test]
    fn unknown_and_renamed_keys_are_refused() {
        for key in ["record_ttl", "timeout", "max_bytes"] {
            let err = config(serde_json::json!({ key: 1 })).unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{key}: {err}");
        }
        assert!(config(serde_json::json!({"timeout_secs": -1})).is_err());
    }

    #[test]
    fn defaults_are_valid_and_every_zero_is_named() {
        assert_eq!(Limits::default().validate(), Ok(()));
        type Zero = fn(&mut Limits);
        let zeroes: [(&str, Zero); 6] = [
            ("max_request_bytes", |l| l.max_request_bytes = 0),
            ("max_raw_bytes", |l| l.max_raw_bytes = 0),
            ("max_agent_result_bytes", |l| l.max_agent_result_bytes = 0),
            ("max_record_bytes", |l| l.max_record_bytes = 0),
            ("record_ttl", |l| l.record_ttl = Duration::ZERO),
            ("timeout", |l| l.timeout = Duration::ZERO),
        ];
        for (name, zero) in zeroes {
            let mut limits = Limits::default();
            zero(&mut limits);
            assert_eq!(limits.validate(), Err(InvalidLimit(name)));
            assert_eq!(
                InvalidLimit(name).to_string(),
                format!("{name} must be positive")
            );
        }
    }
}

//! Byte limits, record TTL and execution timeout, globally and per tool.

use std::time::Duration;

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

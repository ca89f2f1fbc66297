//! Errors of the command itself (usage and configuration), as opposed to tool
//! call failures, which are results.

/// A usage or configuration error: one line on stderr, exit status 1.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CliError {
    message: String,
    exit_code: u8,
}

impl CliError {
    /// A configuration error with a one-line message (no secrets in it).
    pub(crate) fn config(message: impl Into<String>) -> Self {
        let message: String = message.into();
        Self {
            message: message.lines().next().unwrap_or_default().to_owned(),
            exit_code: 1,
        }
    }

    /// The reader of stdout went away: a quiet end, exit status 141
    /// (128 + SIGPIPE), no message.
    pub(crate) fn closed_stdout() -> Self {
        Self {
            message: String::new(),
            exit_code: 141,
        }
    }

    /// The command's exit status.
    pub(crate) const fn exit_code(&self) -> u8 {
        self.exit_code
    }

    /// Whether the error is reported on stderr (a closed stdout is not).
    pub(crate) fn has_message(&self) -> bool {
        !self.message.is_empty()
    }
}

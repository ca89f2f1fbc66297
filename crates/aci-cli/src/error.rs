//! Errors of the command itself (usage and configuration), as opposed to tool
//! call failures, which are results.

/// A usage or configuration error: one line on stderr, exit status 1.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CliError {
    message: String,
}

impl CliError {
    /// A configuration error with a one-line message (no secrets in it).
    pub(crate) fn config(message: impl Into<String>) -> Self {
        let message: String = message.into();
        Self {
            message: message.lines().next().unwrap_or_default().to_owned(),
        }
    }
}

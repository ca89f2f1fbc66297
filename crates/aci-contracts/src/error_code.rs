//! The closed list of stable error codes that anything agent-facing may carry.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $variant:ident = $wire:literal, retry: $retry:literal, $message:literal; )+) => {
        /// A stable, agent-safe error code.
        ///
        /// Each code has a constant one-sentence [`message`](ErrorCode::message)
        /// that tells the model what to do next. Nothing built from runtime data
        /// ever reaches the model with it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
        pub enum ErrorCode {
            $( $(#[$doc])* #[serde(rename = $wire)] $variant, )+
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            /// The stable wire spelling, for example `RESULT_TOO_LARGE`.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $wire,)+ }
            }

            /// The constant sentence shown to the model with this code.
            #[must_use]
            pub const fn message(self) -> &'static str {
                match self { $(ErrorCode::$variant => $message,)+ }
            }

            /// Whether calling again later, unchanged, may succeed (a transient
            /// condition) rather than needing a different request or never working.
            #[must_use]
            pub const fn is_transient(self) -> bool {
                match self { $(ErrorCode::$variant => $retry,)+ }
            }

            /// Parses the wire spelling (exact, case-sensitive).
            #[must_use]
            pub fn parse(text: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|c| c.as_str() == text)
            }
        }
    };
}

error_codes! {
    /// The framework's tool call id was missing, blank or unsafe.
    InvalidToolCallId = "INVALID_TOOL_CALL_ID", retry: false,
        "The call had no valid tool call id, so it was not run; the call cannot be cited.";
    /// The envelope names a different run than the harness's run context.
    RunMismatch = "RUN_MISMATCH", retry: false,
        "The call belongs to a different run, so it was not run; use only calls of this run.";
    /// The run is no longer active.
    RunInactive = "RUN_INACTIVE", retry: false,
        "This run is no longer active; stop calling tools and report what you have found.";
    /// The run's deadline has passed.
    RunDeadlineExceeded = "RUN_DEADLINE_EXCEEDED", retry: false,
        "This run has reached its deadline; stop calling tools and report what you have found.";
    /// No tool with this name is registered.
    UnknownTool = "UNKNOWN_TOOL", retry: false,
        "No tool has this name; call only the tools you were given.";
    /// The harness did not authorize this call.
    Unauthorized = "UNAUTHORIZED", retry: false,
        "This call is not authorized; do not repeat it, and continue with other evidence.";
    /// The call or the tool is not read-only.
    NotReadOnly = "NOT_READ_ONLY", retry: false,
        "Only read-only calls are allowed; ask only for reads.";
    /// The arguments are not a JSON object matching the tool's input schema.
    InvalidInput = "INVALID_INPUT", retry: false,
        "The arguments do not match the tool's input schema; fix them and call again.";
    /// The request is larger than allowed.
    RequestTooLarge = "REQUEST_TOO_LARGE", retry: false,
        "The arguments are too large; shorten them and call again.";
    /// This tool call id was already used in this run.
    DuplicateToolCall = "DUPLICATE_TOOL_CALL", retry: false,
        "This tool call id was already used in this run; the earlier call stands and this one was not run.";
    /// The run's budget for this tool is used up.
    ToolBudgetExhausted = "TOOL_BUDGET_EXHAUSTED", retry: false,
        "This tool may not be called again in this run; continue with the evidence you have or another tool.";
    /// The run's budget for all tools is used up.
    RunBudgetExhausted = "RUN_BUDGET_EXHAUSTED", retry: false,
        "No more tool calls are allowed in this run; report what you have found with the evidence you have.";
    /// The tool failed while running.
    ExecutionFailed = "EXECUTION_FAILED", retry: true,
        "The tool failed while running; call it again later or continue without it.";
    /// The tool did not finish in time.
    ExecutionTimeout = "EXECUTION_TIMEOUT", retry: true,
        "The tool did not finish in time; narrow the request or continue without it.";
    /// The call was interrupted (for example by a restart) before it finished.
    ExecutionAbandoned = "EXECUTION_ABANDONED", retry: true,
        "The call was interrupted before it finished; call the tool again if you still need it.";
    /// The raw response or the bounded result is larger than allowed.
    ResultTooLarge = "RESULT_TOO_LARGE", retry: false,
        "The result is too large to return; narrow the request and call again.";
    /// The tool's output could not be turned into evidence.
    ProjectionFailed = "PROJECTION_FAILED", retry: false,
        "The tool's output could not be turned into evidence; rephrase the request or continue without it.";
    /// The projected result had an invalid evidence status or inconsistent fields.
    InvalidEvidenceStatus = "INVALID_EVIDENCE_STATUS", retry: false,
        "The tool produced an invalid result, which must not be cited; continue without it.";
    /// A payload could not be encoded.
    SerializationFailed = "SERIALIZATION_FAILED", retry: false,
        "The result could not be encoded, so it is not returned; continue without it.";
    /// The result could not be recorded.
    StoreUnavailable = "STORE_UNAVAILABLE", retry: true,
        "The result could not be recorded, so it is not returned; call the tool again shortly.";
    /// The call's record expired before the call finished.
    RecordExpired = "RECORD_EXPIRED", retry: true,
        "The call's record expired before it finished, so its result is not available; call the tool again.";
    /// No data source has the requested logical name.
    DataSourceUnknown = "DATA_SOURCE_UNKNOWN", retry: false,
        "No data source has that name; use one of the data sources you were told about.";
    /// The query is not a single read-only statement the tool accepts.
    QueryRejected = "QUERY_REJECTED", retry: false,
        "The query was refused; send one read-only SELECT statement with ? placeholders for values.";
    /// The server already runs as many calls as it admits; nothing was run or recorded.
    Overloaded = "OVERLOADED", retry: true,
        "The server is busy with other calls, so this one was not run; call the tool again shortly.";
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_list_is_exactly_the_frozen_one() {
        let wire: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(
            wire,
            [
                "INVALID_TOOL_CALL_ID",
                "RUN_MISMATCH",
                "RUN_INACTIVE",
                "RUN_DEADLINE_EXCEEDED",
                "UNKNOWN_TOOL",
                "UNAUTHORIZED",
                "NOT_READ_ONLY",
                "INVALID_INPUT",
                "REQUEST_TOO_LARGE",
                "DUPLICATE_TOOL_CALL",
                "TOOL_BUDGET_EXHAUSTED",
                "RUN_BUDGET_EXHAUSTED",
                "EXECUTION_FAILED",
                "EXECUTION_TIMEOUT",
                "EXECUTION_ABANDONED",
                "RESULT_TOO_LARGE",
                "PROJECTION_FAILED",
                "INVALID_EVIDENCE_STATUS",
                "SERIALIZATION_FAILED",
                "STORE_UNAVAILABLE",
                "RECORD_EXPIRED",
                "DATA_SOURCE_UNKNOWN",
                "QUERY_REJECTED",
                "OVERLOADED",
            ]
        );
        for code in ErrorCode::ALL {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
        }
    }

    #[test]
    fn messages_are_single_sentences_that_say_what_to_do() {
        for code in ErrorCode::ALL {
            let m = code.message();
            assert!(m.ends_with('.'), "{code}");
            assert_eq!(m.matches(". ").count(), 0, "{code}: one sentence");
            assert!(m.len() < 160, "{code}");
            assert!(m.is_ascii(), "{code}");
        }
        assert!(ErrorCode::ResultTooLarge.message().contains("narrow"));
        assert!(
            ErrorCode::DuplicateToolCall
                .message()
                .contains("already used")
        );
    }
}

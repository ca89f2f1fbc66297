use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{ErrorCode, EvidenceStatus, ToolCallId};

/// The one result of a failed call: `{ evidence_status: "ERROR", error_code,
/// message, tool_call_id? }`.
///
/// The message is always the code's constant sentence, so nothing from the
/// failure (payloads, driver errors, panic text) can reach the model.
/// `tool_call_id` is present only when the framework's id was valid. An error
/// result is never citable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ErrorResult {
    error_code: ErrorCode,
    tool_call_id: Option<ToolCallId>,
}

impl ErrorResult {
    /// The error result for `code`, carrying the framework id when it was valid.
    #[must_use]
    pub const fn new(error_code: ErrorCode, tool_call_id: Option<ToolCallId>) -> Self {
        Self {
            error_code,
            tool_call_id,
        }
    }

    /// The stable code.
    #[must_use]
    pub const fn error_code(&self) -> ErrorCode {
        self.error_code
    }

    /// The code's constant message.
    #[must_use]
    pub const fn message(&self) -> &'static str {
        self.error_code.message()
    }

    /// The framework id, when it was valid.
    #[must_use]
    pub const fn tool_call_id(&self) -> Option<&ToolCallId> {
        self.tool_call_id.as_ref()
    }

    /// Always [`EvidenceStatus::Error`].
    #[must_use]
    pub const fn evidence_status(&self) -> EvidenceStatus {
        EvidenceStatus::Error
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire<'a> {
    evidence_status: EvidenceStatus,
    error_code: ErrorCode,
    #[serde(borrow)]
    message: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<ToolCallId>,
}

impl Serialize for ErrorResult {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Wire {
            evidence_status: EvidenceStatus::Error,
            error_code: self.error_code,
            message: Cow::Borrowed(self.message()),
            tool_call_id: self.tool_call_id.clone(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ErrorResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        if wire.evidence_status != EvidenceStatus::Error {
            return Err(D::Error::custom(
                "an error result has evidence_status ERROR",
            ));
        }
        if wire.message != wire.error_code.message() {
            return Err(D::Error::custom(
                "an error result carries its code's constant message",
            ));
        }
        Ok(Self::new(wire.error_code, wire.tool_call_id))
    }
}

impl JsonSchema for ErrorResult {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("ErrorResult")
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        let id = generator.subschema_for::<ToolCallId>();
        json_schema!({
            "title": "error result",
            "description": "The call failed. It is not evidence and cannot be cited.",
            "type": "object",
            "properties": {
                "evidence_status": {
                    "description": "Always ERROR.",
                    "const": "ERROR"
                },
                "error_code": {
                    "description": "Stable code of the failure.",
                    "type": "string",
                    "enum": codes
                },
                "message": {
                    "description": "What to do next.",
                    "type": "string"
                },
                "tool_call_id": id
            },
            "required": ["evidence_status", "error_code", "message"],
            "additionalProperties": false
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn golden_with_and_without_id() {
        let id = ToolCallId::new("call_1").unwrap();
        let with = ErrorResult::new(ErrorCode::DuplicateToolCall, Some(id));
        assert_eq!(
            serde_json::to_value(&with).unwrap(),
            json!({
                "evidence_status": "ERROR",
                "error_code": "DUPLICATE_TOOL_CALL",
                "message": ErrorCode::DuplicateToolCall.message(),
                "tool_call_id": "call_1"
            })
        );
        let without = ErrorResult::new(ErrorCode::InvalidToolCallId, None);
        assert_eq!(
            serde_json::to_value(&without).unwrap(),
            json!({
                "evidence_status": "ERROR",
                "error_code": "INVALID_TOOL_CALL_ID",
                "message": ErrorCode::InvalidToolCallId.message()
            })
        );
        for r in [with, without] {
            let text = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<ErrorResult>(&text).unwrap(), r);
        }
    }

    #[test]
    fn rejects_forged_messages_and_statuses() {
        let forged = json!({
            "evidence_status": "ERROR",
            "error_code": "EXECUTION_FAILED",
            "message": "java.lang.NullPointerException at com.example"
        });
        assert!(serde_json::from_value::<ErrorResult>(forged).is_err());
        let wrong_status = json!({
            "evidence_status": "NO_EVIDENCE",
            "error_code": "EXECUTION_FAILED",
            "message": ErrorCode::ExecutionFailed.message()
        });
        assert!(serde_json::from_value::<ErrorResult>(wrong_status).is_err());
    }
}

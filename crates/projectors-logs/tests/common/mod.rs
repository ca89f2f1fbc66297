//! Shared helpers of the integration tests.
#![allow(dead_code, unreachable_pub)]

use aci_contracts::{LogTopic, QueryLogsRequest, QueryLogsResult, RunId, Timestamp, ToolCallId};
use invocation_core::{ExecutionContext, Executor};
use projectors_logs::{LogExecutor, LogProjector, MockLogSource, RawLogResponse};

/// 2026-01-01T00:00:00Z, where `ManualClock::at_default_start` stands.
pub const NOW_MILLIS: i64 = 1_767_225_600_000;

pub fn now() -> Timestamp {
    Timestamp::from_unix_millis(NOW_MILLIS)
}

pub fn request(topic: LogTopic, query: &str, lookback_minutes: Option<u32>) -> QueryLogsRequest {
    QueryLogsRequest {
        topic,
        query: query.to_owned(),
        lookback_minutes,
    }
}

/// Runs the executor over the mock source at [`now`].
pub async fn execute_mock(source: MockLogSource, request: &QueryLogsRequest) -> RawLogResponse {
    let executor = LogExecutor::new(std::sync::Arc::new(source));
    let context = ExecutionContext {
        run_id: RunId::new("run-golden").unwrap(),
        tool_call_id: ToolCallId::new("call-golden").unwrap(),
        now: now(),
        deadline: None,
    };
    executor.execute(request, &context).await.unwrap()
}

pub async fn project_mock(
    projector: &LogProjector,
    request: &QueryLogsRequest,
    tool_call_id: &str,
) -> QueryLogsResult {
    let raw = execute_mock(MockLogSource::new(), request).await;
    let result = projector
        .project_raw(&ToolCallId::new(tool_call_id).unwrap(), &raw)
        .unwrap();
    aci_contracts::EvidenceResult::validate(&result).unwrap();
    result
}

/// Compares `actual` with `tests/golden/<name>.json` (testkit's golden
/// files: `UPDATE_GOLDEN=1` rewrites the file, only when it changed).
pub fn check_golden(name: &str, actual: &impl serde::Serialize) {
    testkit::golden!().check_json(&format!("{name}.json"), actual);
}

//! Citations and recall through the boundary.

use aci_contracts::RunId;
use serde_json::Value;

use crate::{CitationCheck, NotCitable, RunContext, ToolBoundary};

impl ToolBoundary {
    /// The verdict on each citation of the run (see [`crate::Journal::verify_citations`]).
    pub async fn verify_citations<S: AsRef<str>>(
        &self,
        ctx: &RunContext,
        citations: &[S],
    ) -> Vec<CitationCheck> {
        self.journal()
            .verify_citations(&ctx.run_id, citations)
            .await
    }

    /// The stored model observation of a READY call of `run_id`: nothing is
    /// executed and no TTL is touched. `citation` is a tool call id or
    /// `run_id/tool_call_id`.
    ///
    /// # Errors
    /// [`NotCitable`] when there is no READY record to recall; `Failed` when
    /// the result cannot be read back by its tool.
    pub async fn recall(&self, run_id: &RunId, citation: &str) -> Result<Value, NotCitable> {
        let record = self.journal().citable_record(run_id, citation).await?;
        let unreadable = NotCitable::Failed(aci_contracts::ErrorCode::SerializationFailed);
        let json = record.agent_result_json.ok_or(unreadable)?;
        let tool = self.tool(&record.tool_name).ok_or(unreadable)?;
        let result = tool.parse_result(&json).ok_or(unreadable)?;
        let observation = result.observation().map_err(|_| unreadable)?;
        serde_json::from_str(observation.get()).map_err(|_| unreadable)
    }
}

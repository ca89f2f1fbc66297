//! `aci serve`: the MCP server on stdio.

use aci_contracts::RunId;

use crate::app::App;
use crate::error::CliError;

/// Serves the boundary's tools over MCP on stdin/stdout until the client
/// disconnects.
pub(crate) async fn serve(app: App, run_id: RunId) -> Result<(), CliError> {
    let _ = (app, run_id);
    Err(CliError::config(
        "aci serve is not available in this build yet",
    ))
}

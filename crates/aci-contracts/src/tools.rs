//! The definitions of the three frozen tools (name, description, schemas)
//! and their export formats (MCP, OpenAI function tools, Anthropic tools).

use serde_json::{Value, json};

use crate::ToolName;
use crate::schema::{self, without_meta_schema};

impl ToolName {
    /// The tool's definition with its frozen schemas.
    #[must_use]
    pub fn definition(self) -> ToolDefinition {
        ToolDefinition {
            name: self,
            input_schema: schema::request_schema(self),
            output_schema: schema::output_schema(self),
        }
    }
}

/// One tool's name, description and JSON Schemas (draft 2020-12).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDefinition {
    /// Which tool.
    pub name: ToolName,
    /// The request schema: an object closed to unknown properties.
    pub input_schema: Value,
    /// The output schema: an object that is either the tool's observation or
    /// the error result.
    pub output_schema: Value,
}

impl ToolDefinition {
    /// The definition as an MCP tool object: `name`, `title`, `description`,
    /// `inputSchema`, `outputSchema` and `annotations` (read-only).
    #[must_use]
    pub fn to_mcp(&self) -> Value {
        json!({
            "name": self.name.as_str(),
            "title": self.name.title(),
            "description": self.name.description(),
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": {
                "title": self.name.title(),
                "readOnlyHint": true,
                "destructiveHint": false,
                "idempotentHint": true,
                "openWorldHint": false
            }
        })
    }

    /// The definition as an OpenAI function tool (`{"type": "function", "function": …}`).
    #[must_use]
    pub fn to_openai(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name.as_str(),
                "description": self.name.description(),
                "parameters": without_meta_schema(self.input_schema.clone())
            }
        })
    }

    /// The definition as an Anthropic tool (`name`, `description`, `input_schema`).
    #[must_use]
    pub fn to_anthropic(&self) -> Value {
        json!({
            "name": self.name.as_str(),
            "description": self.name.description(),
            "input_schema": without_meta_schema(self.input_schema.clone())
        })
    }
}

/// The three definitions, in export order.
#[must_use]
pub fn tool_definitions() -> Vec<ToolDefinition> {
    ToolName::ALL
        .into_iter()
        .map(ToolName::definition)
        .collect()
}

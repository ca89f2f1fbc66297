//! The query_mysql tool: row projector and a read-only MySQL executor.

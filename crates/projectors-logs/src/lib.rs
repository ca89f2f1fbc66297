//! The query_logs tool: log projector with pattern aggregation, and the deterministic mock log source.

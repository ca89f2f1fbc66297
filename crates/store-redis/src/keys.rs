//! The key layout. Every key of a run carries the run id as its Redis Cluster
//! hash tag, so all of a run's keys live in one slot and one script may touch
//! them all.
//!
//! | key | type | holds |
//! | --- | --- | --- |
//! | `<prefix>:{<run_id>}:inv:<tool_call_id>` | hash | one canonical record |
//! | `<prefix>:{<run_id>}:budget` | hash | `run` and `tool:<name>` counters |
//! | `<prefix>:{<run_id>}:index` | list | tool call ids in creation order |
//! | `<prefix>:{<run_id>}:scopes` | hash | `<fp>:first`, `<fp>:first_ready`, `<fp>:claim` |
//!
//! Run ids, tool call ids and the prefix never contain `{` or `}` (the
//! identifier rule of `aci-contracts` and the prefix check forbid them), so
//! the first `{…}` of every key is exactly the run id.

use aci_contracts::{RunId, ToolCallId};
use invocation_core::ScopeFingerprint;

/// Builds the keys of one deployment (one prefix).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

/// The per-run keys besides the records.
#[derive(Debug, Clone)]
pub(crate) struct RunKeys {
    pub(crate) budget: String,
    pub(crate) index: String,
    pub(crate) scopes: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// `<prefix>:{<run_id>}:inv:<tool_call_id>`.
    pub(crate) fn record(&self, run_id: &RunId, tool_call_id: &ToolCallId) -> String {
        format!("{}:{{{}}}:inv:{}", self.prefix, run_id, tool_call_id)
    }

    pub(crate) fn run(&self, run_id: &RunId) -> RunKeys {
        let base = format!("{}:{{{}}}", self.prefix, run_id);
        RunKeys {
            budget: format!("{base}:budget"),
            index: format!("{base}:index"),
            scopes: format!("{base}:scopes"),
        }
    }

    pub(crate) fn scopes(&self, run_id: &RunId) -> String {
        format!("{}:{{{}}}:scopes", self.prefix, run_id)
    }
}

/// Field of the budget hash counting one tool's records.
pub(crate) fn tool_counter(tool_name: &str) -> String {
    format!("tool:{tool_name}")
}

/// Field of the scopes hash naming a fingerprint's first record.
pub(crate) fn first_field(fingerprint: &ScopeFingerprint) -> String {
    format!("{fingerprint}:first")
}

/// Field of the scopes hash naming a fingerprint's first READY record.
pub(crate) fn first_ready_field(fingerprint: &ScopeFingerprint) -> String {
    format!("{fingerprint}:first_ready")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_key_of_a_run_shares_its_hash_tag() {
        let keys = Keys::new("aci");
        let run = RunId::new("run-1:a").unwrap();
        let record = keys.record(&run, &ToolCallId::new("call_9").unwrap());
        assert_eq!(record, "aci:{run-1:a}:inv:call_9");
        let run_keys = keys.run(&run);
        for key in [&record, &run_keys.budget, &run_keys.index, &run_keys.scopes] {
            let tag = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
            assert_eq!(tag, "run-1:a");
        }
        assert_eq!(keys.scopes(&run), run_keys.scopes);
    }
}

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

use std::fmt;

use aci_contracts::{RunId, ToolCallId};
use invocation_core::ScopeFingerprint;

/// Builds the keys of one deployment (one prefix).
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    /// `<prefix>:{<run_id>}:inv:<tool_call_id>`.
    pub(crate) fn record(&self, run_id: &RunId, tool_call_id: &ToolCallId) -> String {
        record(&self.prefix, run_id, tool_call_id).to_string()
    }

    /// The run hash: the run's state and its budget counters.
    pub(crate) fn budget(&self, run_id: &RunId) -> String {
        run(&self.prefix, run_id, BUDGET).to_string()
    }

    pub(crate) fn index(&self, run_id: &RunId) -> String {
        run(&self.prefix, run_id, INDEX).to_string()
    }

    pub(crate) fn scopes(&self, run_id: &RunId) -> String {
        run(&self.prefix, run_id, SCOPES).to_string()
    }
}

/// Before and after the run id, the hash tag: `<prefix>:{<run_id>}:`.
pub(crate) const TAG_OPEN: &str = ":{";
pub(crate) const TAG_CLOSE: &str = "}:";
/// Between the run part and the tool call id of a record key.
pub(crate) const RECORD: &str = "inv:";
/// Suffixes of the per-run keys.
pub(crate) const BUDGET: &str = "budget";
pub(crate) const INDEX: &str = "index";
pub(crate) const SCOPES: &str = "scopes";

/// The per-run keys besides records, in this order: the budget (run) hash,
/// the index list, the scopes hash.
#[cfg(feature = "testing")]
pub(crate) const RUN_SUFFIXES: [&str; 3] = [BUDGET, INDEX, SCOPES];

/// `<prefix>:{<run_id>}:inv:<tool_call_id>`, formatted where it is written
/// (a command buffer takes it without an intermediate `String`).
pub(crate) fn record<'a>(
    prefix: &'a str,
    run_id: &'a RunId,
    tool_call_id: &'a ToolCallId,
) -> Key<'a> {
    record_of_text(prefix, run_id.as_str(), tool_call_id.as_str())
}

/// `<prefix>:{<run_id>}:<suffix>`.
pub(crate) fn run<'a>(prefix: &'a str, run_id: &'a RunId, suffix: &'a str) -> Key<'a> {
    run_of_text(prefix, run_id.as_str(), suffix)
}

/// As [`record`], for ids given as text: test support names the keys of ids
/// it made itself, and must spell them exactly as the store does.
pub(crate) const fn record_of_text<'a>(
    prefix: &'a str,
    run_id: &'a str,
    tool_call_id: &'a str,
) -> Key<'a> {
    Key {
        prefix,
        run_id,
        rest: Rest::Record(tool_call_id),
    }
}

/// As [`run`], for a run id given as text.
pub(crate) const fn run_of_text<'a>(prefix: &'a str, run_id: &'a str, suffix: &'a str) -> Key<'a> {
    Key {
        prefix,
        run_id,
        rest: Rest::Run(suffix),
    }
}

/// A key, displayed as its text.
pub(crate) struct Key<'a> {
    prefix: &'a str,
    run_id: &'a str,
    rest: Rest<'a>,
}

enum Rest<'a> {
    Record(&'a str),
    Run(&'a str),
}

impl fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { prefix, run_id, .. } = self;
        match self.rest {
            Rest::Record(id) => write!(f, "{prefix}{TAG_OPEN}{run_id}{TAG_CLOSE}{RECORD}{id}"),
            Rest::Run(suffix) => write!(f, "{prefix}{TAG_OPEN}{run_id}{TAG_CLOSE}{suffix}"),
        }
    }
}

/// Field of the budget hash counting one tool's records: this, then the
/// tool's name.
pub(crate) const TOOL_COUNTER: &str = "tool:";

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
        let run_id = RunId::new("run-1:a").unwrap();
        let record = keys.record(&run_id, &ToolCallId::new("call_9").unwrap());
        assert_eq!(record, "aci:{run-1:a}:inv:call_9");
        let budget = run("aci", &run_id, BUDGET).to_string();
        assert_eq!(budget, "aci:{run-1:a}:budget");
        for key in [
            &record,
            &budget,
            &keys.index(&run_id),
            &keys.scopes(&run_id),
        ] {
            let tag = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
            assert_eq!(tag, "run-1:a");
        }
    }
}

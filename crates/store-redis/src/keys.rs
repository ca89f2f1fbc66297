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
//! | `<prefix>:{<run_id>}:refusals` | list | calls refused before they had a record (JSON), at most 256 |
//! | `<prefix>:outbox:{<tag>}` | stream | finalized records waiting for the archive |
//! | `<prefix>:outbox-busy` | set | on a single node: the outbox streams that may hold entries |
//!
//! The outbox streams are the one exception to "the tag is the run id": there
//! is one per hash slot, and its tag is the smallest decimal number whose
//! slot is that slot ([`outbox_tag`]), so a run's outbox lives in its run's
//! slot and the scripts that finalize a record append to it without a
//! cross-slot write. On a single node the same scripts also add the stream
//! to the set `<prefix>:outbox-busy`, which archivers read to find the
//! streams holding entries; on a cluster (where that set would be a
//! cross-slot write) and once in a while on a single node, archivers find
//! the streams with `SCAN MATCH <prefix>:outbox:* TYPE stream` on every
//! primary, or, on a single node holding many keys, by their 16,384 names
//! ([`Keys::outbox_of_slot`]).
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

    pub(crate) fn refusals(&self, run_id: &RunId) -> String {
        run(&self.prefix, run_id, REFUSALS).to_string()
    }

    pub(crate) fn scopes(&self, run_id: &RunId) -> String {
        run(&self.prefix, run_id, SCOPES).to_string()
    }

    /// `<prefix>:outbox:{<tag>}`: the outbox stream of hash slot `slot`.
    pub(crate) fn outbox_of_slot(&self, slot: u16) -> String {
        format!("{}{OUTBOX}{{{}}}", self.prefix, outbox_tag(slot))
    }

    /// `<prefix>:outbox-busy`: on a single node, the set of the outbox
    /// streams that may hold entries (see `outbox.rs`).
    pub(crate) fn outbox_busy(&self) -> String {
        format!("{}{OUTBOX_BUSY}", self.prefix)
    }

    /// The `SCAN MATCH` pattern of every outbox stream of this prefix.
    pub(crate) fn outbox_pattern(&self) -> String {
        let mut pattern = String::with_capacity(self.prefix.len() + 10);
        for c in self.prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(c);
        }
        pattern.push_str(OUTBOX);
        pattern.push('*');
        pattern
    }
}

/// Between the prefix and the tag of an outbox stream.
pub(crate) const OUTBOX: &str = ":outbox:";

/// After the prefix: the set of the outbox streams that may hold entries
/// (single node). Not matched by the streams' `SCAN` pattern.
pub(crate) const OUTBOX_BUSY: &str = ":outbox-busy";

/// `<prefix>:outbox:{<tag>}` for the slot of `run_id` (the script calls
/// write it straight into their buffer: `calls::outbox_key`).
#[cfg(test)]
pub(crate) fn outbox(prefix: &str, run_id: &str) -> String {
    format!(
        "{prefix}{OUTBOX}{{{}}}",
        outbox_tag(slot(run_id.as_bytes()))
    )
}

/// Redis Cluster hash slots.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot of a hash tag's text: CRC16 (XMODEM) modulo 16384, as Redis
/// Cluster computes it for the text between the braces.
pub(crate) fn slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in tag {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc % SLOTS
}

/// The smallest decimal number whose hash slot is `slot`: the tag of the
/// outbox stream of that slot. Computed once for all slots.
pub(crate) fn outbox_tag(slot: u16) -> u32 {
    static TAGS: std::sync::LazyLock<Vec<u32>> = std::sync::LazyLock::new(|| {
        let mut tags = vec![u32::MAX; usize::from(SLOTS)];
        let mut missing = usize::from(SLOTS);
        let mut n: u32 = 0;
        while missing > 0 {
            let at = usize::from(self::slot(n.to_string().as_bytes()));
            if tags[at] == u32::MAX {
                tags[at] = n;
                missing -= 1;
            }
            n += 1;
        }
        tags
    });
    TAGS[usize::from(slot % SLOTS)]
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
pub(crate) const REFUSALS: &str = "refusals";

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

    #[test]
    fn slots_are_those_of_redis_cluster() {
        // `CLUSTER KEYSLOT` answers for these keys.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"123456789"), 0x31C3 % SLOTS);
    }

    #[test]
    fn the_outbox_of_a_run_is_in_the_run_slot() {
        for run_id in ["run-1:a", "r", "abc", "a-much-longer-run-id-0123456789"] {
            let key = outbox("aci", run_id);
            let tag = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
            assert_eq!(slot(tag.as_bytes()), slot(run_id.as_bytes()), "{key}");
            assert!(key.starts_with("aci:outbox:{"));
        }
        let largest = (0..SLOTS).map(outbox_tag).max().unwrap();
        let mut first_seen = std::collections::HashMap::new();
        for n in 0..=largest {
            first_seen
                .entry(slot(n.to_string().as_bytes()))
                .or_insert(n);
        }
        for s in 0..SLOTS {
            assert_eq!(first_seen.get(&s), Some(&outbox_tag(s)), "slot {s}");
        }
    }

    #[test]
    fn the_outbox_pattern_escapes_glob_characters() {
        assert_eq!(Keys::new("aci").outbox_pattern(), "aci:outbox:*");
        assert_eq!(Keys::new("a*b").outbox_pattern(), "a\\*b:outbox:*");
    }
}

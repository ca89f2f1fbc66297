//! Names tests isolate themselves with (random key prefixes and ids) and
//! the keys those land on, spelled by the store's own layout
//! (`crate::keys`), never rewritten here.

use crate::keys;

/// A key prefix no other test (or process) uses: `acitest-<16 hex digits>`.
#[must_use]
pub fn unique_prefix() -> String {
    format!("acitest-{:016x}", fastrand::u64(..))
}

/// A random identifier with `tag` in front, valid as a run or tool call id.
#[must_use]
pub fn unique_id(tag: &str) -> String {
    format!("{tag}-{:016x}", fastrand::u64(..))
}

/// The key of a record: `<prefix>:{<run_id>}:inv:<tool_call_id>`, as the
/// store writes it.
#[must_use]
pub fn record_key(prefix: &str, run_id: &str, tool_call_id: &str) -> String {
    keys::record_of_text(prefix, run_id, tool_call_id).to_string()
}

/// The per-run keys besides records, as the store writes them, in this
/// order: budget counters (the run hash), run index, scopes.
#[must_use]
pub fn run_keys(prefix: &str, run_id: &str) -> [String; 3] {
    keys::RUN_SUFFIXES.map(|suffix| keys::run_of_text(prefix, run_id, suffix).to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use aci_contracts::{RunId, ToolCallId};

    use super::*;

    #[test]
    fn test_keys_are_the_store_keys() {
        let store = keys::Keys::new("aci");
        let run = RunId::new("run-1:a").unwrap();
        let call = ToolCallId::new("call_9").unwrap();
        assert_eq!(
            record_key("aci", "run-1:a", "call_9"),
            store.record(&run, &call)
        );
        assert_eq!(
            record_key("aci", "run-1:a", "call_9"),
            "aci:{run-1:a}:inv:call_9"
        );
        assert_eq!(
            run_keys("aci", "run-1:a"),
            [store.budget(&run), store.index(&run), store.scopes(&run)]
        );
    }

    #[test]
    fn unique_names_are_valid_and_distinct() {
        let prefix = unique_prefix();
        assert!(
            prefix.starts_with("acitest-") && prefix.len() == 24,
            "{prefix}"
        );
        assert_ne!(prefix, unique_prefix());
        let id = unique_id("run");
        assert!(RunId::new(id.clone()).is_ok(), "{id}");
        assert!(ToolCallId::new(id.clone()).is_ok(), "{id}");
    }
}

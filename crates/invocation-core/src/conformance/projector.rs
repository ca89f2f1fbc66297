//! The projector conformance suite: what every tool's projector must do,
//! asserted once, the twin of the store suite.
//!
//! A tool crate describes its projector in a [`ProjectorHarness`] and stamps
//! the scenarios over its own generator of raw responses with
//! [`projector_conformance_tests!`](crate::projector_conformance_tests) (its
//! tests need `proptest` and `testkit` as dev-dependencies):
//!
//! ```text
//! invocation_core::projector_conformance_tests!(MyHarness, my_raw_strategy());
//! ```
//!
//! Each scenario projects one raw response with the projector's default
//! bounds, as the boundary would.

use std::collections::BTreeSet;

use aci_contracts::{EvidenceResult, ToolCallId};
use serde_json::Value;

use crate::{DEFAULT_MAX_AGENT_RESULT_BYTES, ProjectionContext, Projector};

/// The raw response type of `H`'s projector.
pub type RawOf<H> = <<H as ProjectorHarness>::Projector as Projector>::Raw;
/// The request type of `H`'s projector.
pub type RequestOf<H> = <<H as ProjectorHarness>::Projector as Projector>::Request;
/// The result type of `H`'s projector.
pub type OutputOf<H> = <<H as ProjectorHarness>::Projector as Projector>::Output;

/// What the scenarios need to know of a tool's projector.
pub trait ProjectorHarness {
    /// The projector under test.
    type Projector: Projector;

    /// The projector with its default bounds (the bounds the tool is built
    /// with by `x_tool(source)`).
    fn projector(&self) -> Self::Projector;

    /// A request that `raw` answers (what the executor would have been given).
    fn request(&self, raw: &RawOf<Self>) -> RequestOf<Self>;

    /// Whether the projector must refuse `raw` (a raw response that
    /// contradicts itself); the default refuses nothing.
    fn refuses(&self, _raw: &RawOf<Self>) -> bool {
        false
    }

    /// Whether projecting `raw` left anything out or shortened it, as told
    /// from outside the projector; `None` when this raw does not tell.
    fn was_cut(&self, raw: &RawOf<Self>, result: &OutputOf<Self>) -> Option<bool>;

    /// Every key the result's JSON may have, at any depth: the frozen
    /// fields. Anything else would be a key of the raw response leaking.
    fn result_keys(&self) -> &'static [&'static str];
}

/// Projects `raw` as the boundary would, checking that the projector
/// refuses exactly what the harness says it must. `None` when refused.
///
/// # Panics
/// When the projector refuses a raw response it must accept, or accepts one
/// it must refuse.
pub fn project<H: ProjectorHarness>(harness: &H, raw: &RawOf<H>) -> Option<OutputOf<H>> {
    let id = ToolCallId::new("call-conformance").expect("a valid id");
    let request = harness.request(raw);
    // With the built-in rules, as the boundary's default redaction pass.
    let redactor = crate::redact::Redactor::builtin();
    let context =
        ProjectionContext::new(&id, &request, crate::redact::RedactionPass::new(&redactor));
    let projected = harness.projector().project(&context, raw);
    assert_eq!(
        projected.is_err(),
        harness.refuses(raw),
        "refused: {}, must refuse: {}",
        projected.is_err(),
        harness.refuses(raw)
    );
    let result = projected.ok()?;
    assert_eq!(
        result.tool_call_id(),
        &id,
        "the result carries the call's id"
    );
    Some(result)
}

fn to_json<T: serde::Serialize>(result: &T) -> String {
    serde_json::to_string(result).expect("a result serializes")
}

/// With the default bounds, the result fits the default agent result limit.
pub fn default_bounds_fit_the_agent_limit<H: ProjectorHarness>(harness: &H, raw: &RawOf<H>) {
    if let Some(result) = project(harness, raw) {
        let bytes = to_json(&result).len();
        assert!(
            bytes <= DEFAULT_MAX_AGENT_RESULT_BYTES,
            "{bytes} bytes > {DEFAULT_MAX_AGENT_RESULT_BYTES}"
        );
    }
}

/// The same raw response projects to the same bytes.
pub fn projection_is_deterministic<H: ProjectorHarness>(harness: &H, raw: &RawOf<H>) {
    let first = project(harness, raw).map(|r| to_json(&r));
    let second = project(harness, raw).map(|r| to_json(&r));
    assert_eq!(first, second);
}

/// The result passes its own `validate()`.
pub fn results_validate<H: ProjectorHarness>(harness: &H, raw: &RawOf<H>) {
    if let Some(result) = project(harness, raw) {
        assert_eq!(result.validate(), Ok(()));
    }
}

/// `truncated` is set exactly when something was left out or shortened
/// (where the harness can tell).
pub fn truncated_exactly_when_cut<H: ProjectorHarness>(harness: &H, raw: &RawOf<H>) {
    if let Some(result) = project(harness, raw)
        && let Some(cut) = harness.was_cut(raw, &result)
    {
        assert_eq!(result.counters().truncated, cut, "truncated vs cut");
    }
}

/// The control view's counters say what the result itself says.
pub fn counters_agree<H: ProjectorHarness>(harness: &H, raw: &RawOf<H>) {
    let Some(result) = project(harness, raw) else {
        return;
    };
    let counters = result.counters();
    let json: Value = serde_json::from_str(&to_json(&result)).expect("JSON");
    assert_eq!(
        Some(counters.returned_count),
        json["returned_count"].as_u64()
    );
    assert_eq!(Some(counters.truncated), json["truncated"].as_bool());
    assert_eq!(counters.match_count, json["match_count"].as_u64());
    let relevance = json.get("relevance_level").filter(|v| !v.is_null());
    assert_eq!(
        counters
            .relevance_level
            .map(|level| serde_json::to_value(level).expect("JSON")),
        relevance.cloned()
    );
    let observation = serde_json::to_value(result.observation()).expect("JSON");
    assert_eq!(observation["evidence_status"], json["evidence_status"]);
}

/// The result's JSON has only the frozen keys: no key of the raw response
/// (scores, traces, hosts, the source's own fields) reaches it.
pub fn no_raw_keys_leak<H: ProjectorHarness>(harness: &H, raw: &RawOf<H>) {
    let Some(result) = project(harness, raw) else {
        return;
    };
    let json: Value = serde_json::from_str(&to_json(&result)).expect("JSON");
    let mut keys = BTreeSet::new();
    keys_in(&json, &mut keys);
    let allowed: BTreeSet<&str> = harness.result_keys().iter().copied().collect();
    let leaked: Vec<&String> = keys
        .iter()
        .filter(|key| !allowed.contains(key.as_str()))
        .collect();
    assert!(
        leaked.is_empty(),
        "keys that are not frozen fields: {leaked:?}"
    );
}

fn keys_in(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                out.insert(key.clone());
                keys_in(item, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| keys_in(item, out)),
        _ => {}
    }
}

/// Stamps every projector scenario into a property test over `$raw` (a
/// proptest strategy of the projector's raw responses) for `$harness` (a
/// [`ProjectorHarness`]). The calling crate needs `proptest` and `testkit`
/// (for the case count, `PROPTEST_CASES`) as dev-dependencies.
#[macro_export]
macro_rules! projector_conformance_tests {
    ($harness:expr, $raw:expr) => {
        mod projector_conformance {
            #[allow(unused_imports)]
            use super::*;

            $crate::projector_conformance_tests!(@tests $harness, $raw;
                default_bounds_fit_the_agent_limit,
                projection_is_deterministic,
                results_validate,
                truncated_exactly_when_cut,
                counters_agree,
                no_raw_keys_leak,
            );
        }
    };
    (@tests $harness:expr, $raw:expr; $($scenario:ident,)+) => {
        proptest::proptest! {
            #![proptest_config(testkit::proptest_config())]
            $(
                #[test]
                fn $scenario(raw in $raw) {
                    $crate::conformance::$scenario(&$harness, &raw);
                }
            )+
        }
    };
}

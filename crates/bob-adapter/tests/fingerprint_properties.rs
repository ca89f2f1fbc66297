//! Properties of the fingerprint mapping over arbitrary JSON: bob's text maps
//! to the canonical fingerprint, whatever the key order, whitespace or
//! integral-number spelling, and distinct calls stay distinct.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use bob_adapter::fingerprint::{call_fingerprint, parse_fingerprint, split_bob_fingerprint};
use bob_core::JournalEntry;
use invocation_core::fingerprint::canonical_json;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|n| Value::Number(n.into())),
        (-1.0e6..1.0e6f64).prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z:{}\" é\\\\]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z:]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// `value` as JSON text with every object's keys reversed and integral
/// numbers written as floats (`1` becomes `1.0`): what another serde build
/// might have produced.
fn respelled(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("{} : {}", Value::String(k.clone()), respelled(v)))
                .collect();
            format!("{{ {} }}", fields.join(" , "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(respelled).collect();
            format!("[{}]", items.join(","))
        }
        Value::Number(n) if n.is_i64() => format!("{}.0", n),
        other => other.to_string(),
    }
}

proptest! {
    #![proptest_config(testkit::proptest_config())]

    #[test]
    fn bob_text_maps_to_the_canonical_fingerprint(name in "[a-z_/:]{1,12}", args in json()) {
        let text = JournalEntry::fingerprint(&name, &args);
        let (split_name, split_args) = split_bob_fingerprint(&text).unwrap();
        prop_assert_eq!(split_name, name.as_str());
        prop_assert_eq!(&split_args, &args);
        prop_assert_eq!(parse_fingerprint(&text).unwrap(), call_fingerprint(&name, &args));
        let hex = call_fingerprint(&name, &args).to_hex();
        prop_assert_eq!(parse_fingerprint(&hex).unwrap(), call_fingerprint(&name, &args));
    }

    #[test]
    fn key_order_whitespace_and_number_spelling_do_not_matter(name in "[a-z_]{1,12}", args in json()) {
        let other = format!("{name}:{}", respelled(&args));
        prop_assert_eq!(
            parse_fingerprint(&other).unwrap(),
            parse_fingerprint(&JournalEntry::fingerprint(&name, &args)).unwrap()
        );
    }

    #[test]
    fn different_calls_differ(name in "[a-z_]{1,12}", a in json(), b in json()) {
        // `1` and `1.0` are one call; anything canonically different is not.
        prop_assume!(canonical_json(&a) != canonical_json(&b));
        prop_assert_ne!(call_fingerprint(&name, &a), call_fingerprint(&name, &b));
        prop_assert_ne!(call_fingerprint(&name, &a), call_fingerprint(&format!("{name}x"), &a));
    }
}

//! Normalization of upstream relevance levels. Raw scores never become levels.

use serde_json::{Map, Value};

use crate::RelevanceLevel;

/// The field names under which an upstream response may carry a relevance level,
/// in the order they are consulted.
pub const RELEVANCE_FIELDS: [&str; 2] = ["relevance_level", "relevanceLevel"];

/// Maps an upstream relevance value to a level.
///
/// Recognized, case-insensitively and without trimming: `high`; `medium` or
/// `mid`; `low`. Anything else, including every number (a raw score), booleans,
/// null, blank or padded text, gives `None`.
#[must_use]
pub fn normalize_relevance(value: &Value) -> Option<RelevanceLevel> {
    let text = value.as_str()?;
    if text.eq_ignore_ascii_case("high") {
        Some(RelevanceLevel::High)
    } else if text.eq_ignore_ascii_case("medium") || text.eq_ignore_ascii_case("mid") {
        Some(RelevanceLevel::Medium)
    } else if text.eq_ignore_ascii_case("low") {
        Some(RelevanceLevel::Low)
    } else {
        None
    }
}

/// The level found in `object` under `relevance_level`, or else under
/// `relevanceLevel`, normalized by [`normalize_relevance`].
///
/// The first field present decides: an unrecognized `relevance_level` is not
/// overridden by a `relevanceLevel`.
#[must_use]
pub fn relevance_in(object: &Map<String, Value>) -> Option<RelevanceLevel> {
    RELEVANCE_FIELDS
        .iter()
        .find_map(|field| object.get(*field))
        .and_then(normalize_relevance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_relevance_table() {
        let table = [
            (json!("high"), Some(RelevanceLevel::High)),
            (json!("HIGH"), Some(RelevanceLevel::High)),
            (json!("High"), Some(RelevanceLevel::High)),
            (json!("medium"), Some(RelevanceLevel::Medium)),
            (json!("MEDIUM"), Some(RelevanceLevel::Medium)),
            (json!("mid"), Some(RelevanceLevel::Medium)),
            (json!("Mid"), Some(RelevanceLevel::Medium)),
            (json!("low"), Some(RelevanceLevel::Low)),
            (json!("LOW"), Some(RelevanceLevel::Low)),
            (json!(" high"), None),
            (json!("high "), None),
            (json!("hi"), None),
            (json!("very high"), None),
            (json!("middle"), None),
            (json!("none"), None),
            (json!(""), None),
            (json!(0.93), None),
            (json!(1), None),
            (json!(0), None),
            (json!(-1.5), None),
            (json!("0.93"), None),
            (json!(true), None),
            (json!(null), None),
            (json!(["high"]), None),
            (json!({"level": "high"}), None),
        ];
        for (value, expected) in table {
            assert_eq!(normalize_relevance(&value), expected, "{value}");
        }
    }

    #[test]
    fn both_field_spellings() {
        let snake = json!({"relevance_level": "mid"});
        let camel = json!({"relevanceLevel": "LOW"});
        let both = json!({"relevance_level": 0.7, "relevanceLevel": "high"});
        let none = json!({"score": 0.99, "relevance": "high"});
        assert_eq!(
            relevance_in(snake.as_object().unwrap()),
            Some(RelevanceLevel::Medium)
        );
        assert_eq!(
            relevance_in(camel.as_object().unwrap()),
            Some(RelevanceLevel::Low)
        );
        assert_eq!(relevance_in(both.as_object().unwrap()), None);
        assert_eq!(relevance_in(none.as_object().unwrap()), None);
    }
}

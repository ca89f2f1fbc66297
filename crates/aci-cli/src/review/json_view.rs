//! A JSON value as escaped, indented HTML text, with what the model did not
//! get marked: the raw response is laid beside the model's result, and
//!
//! - an item of a raw list that no item of the result's list of the same
//!   name matches is wrapped in `<span class="cut">` (not given to the
//!   model: beyond the bound);
//! - a raw text the result kept only the beginning of has its tail wrapped
//!   in `<span class="cut">` (cut text);
//! - a raw text whose counterpart holds a `<redacted:RULE>` marker is
//!   wrapped in `<span class="redacted-source">`.
//!
//! Matching is structural and lenient (a result item matches a raw item
//! when every field they share agrees, texts by prefix, case aside); when a
//! list's items match none at all the shapes differ and nothing is marked,
//! rather than marking everything.

use std::fmt::Write as _;

use serde_json::Value;

/// Most item comparisons one list may take before marking is skipped.
const MAX_COMPARISONS: usize = 4_000_000;

/// The redaction marker's start, as the redactor writes it.
const REDACTED: &str = "<redacted:";

/// `value` as indented JSON in escaped HTML, marked against `model` (the
/// model's view of the same call) when given.
pub(crate) fn render(value: &Value, model: Option<&Value>) -> String {
    let mut out = String::new();
    write_value(&mut out, value, model, 0);
    out
}

fn write_value(out: &mut String, raw: &Value, model: Option<&Value>, depth: usize) {
    match (raw, model) {
        (Value::Object(fields), counterpart) if !fields.is_empty() => {
            let other = counterpart.and_then(Value::as_object);
            out.push('{');
            for (n, (key, value)) in fields.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                escape_into(out, &json_text(&Value::String(key.clone())));
                out.push_str(": ");
                write_value(out, value, other.and_then(|o| o.get(key)), depth + 1);
            }
            newline(out, depth);
            out.push('}');
        }
        (Value::Array(items), counterpart) if !items.is_empty() => {
            let pairs = counterpart
                .and_then(Value::as_array)
                .and_then(|model_items| pair_items(items, model_items));
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                newline(out, depth + 1);
                match &pairs {
                    None => write_value(out, item, None, depth + 1),
                    Some(pairs) => match pairs[n] {
                        Some(partner) => write_value(out, item, Some(partner), depth + 1),
                        None => {
                            out.push_str("<span class=\"cut\" title=\"not given to the model\">");
                            write_value(out, item, None, depth + 1);
                            out.push_str("</span>");
                        }
                    },
                }
            }
            newline(out, depth);
            out.push(']');
        }
        (Value::String(text), Some(Value::String(kept))) if text != kept => {
            write_string(out, text, kept);
        }
        _ => escape_into(out, &json_text(raw)),
    }
}

/// A raw text beside the model's `kept` text.
fn write_string(out: &mut String, text: &str, kept: &str) {
    if kept.contains(REDACTED) {
        out.push_str("<span class=\"redacted-source\" title=\"redacted in the model's view\">");
        escape_into(out, &json_text(&Value::String(text.to_owned())));
        out.push_str("</span>");
    } else if let Some(rest) = text.strip_prefix(kept) {
        let whole = json_text(&Value::String(kept.to_owned()));
        // The kept part without its closing quote, the cut tail, the quote.
        escape_into(out, &whole[..whole.len() - 1]);
        out.push_str("<span class=\"cut\" title=\"cut from the model's view\">");
        let tail = json_text(&Value::String(rest.to_owned()));
        escape_into(out, &tail[1..tail.len() - 1]);
        out.push_str("</span>&quot;");
    } else {
        escape_into(out, &json_text(&Value::String(text.to_owned())));
    }
}

/// For each raw item, the model item it matches (each used once, first come
/// first served); `None` when the lists cannot be compared: too large, or
/// no item matches at all while the model has some.
fn pair_items<'m>(raw: &[Value], model: &'m [Value]) -> Option<Vec<Option<&'m Value>>> {
    if raw.len().saturating_mul(model.len()) > MAX_COMPARISONS {
        return None;
    }
    let mut used = vec![false; model.len()];
    let pairs: Vec<Option<&'m Value>> = raw
        .iter()
        .map(|item| {
            let j = (0..model.len()).find(|&j| !used[j] && items_match(item, &model[j]))?;
            used[j] = true;
            Some(&model[j])
        })
        .collect();
    if !model.is_empty() && pairs.iter().all(Option::is_none) {
        return None;
    }
    Some(pairs)
}

/// Whether a model item is the raw item (bounded, redacted or renamed in
/// case).
fn items_match(raw: &Value, model: &Value) -> bool {
    match (raw, model) {
        (Value::Object(r), Value::Object(m)) => {
            let mut shared = 0;
            for (key, value) in r {
                if let Some(other) = m.get(key) {
                    shared += 1;
                    if !scalars_match(value, other) {
                        return false;
                    }
                }
            }
            shared > 0
        }
        (Value::Array(r), Value::Array(m)) => {
            r.len() == m.len() && r.iter().zip(m).all(|(a, b)| scalars_match(a, b))
        }
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        _ => scalars_match(raw, model),
    }
}

/// Scalars agree; nested values are not compared here.
fn scalars_match(raw: &Value, model: &Value) -> bool {
    match (raw, model) {
        (Value::String(r), Value::String(m)) => {
            let (r, m) = (r.to_lowercase(), m.to_lowercase());
            r.starts_with(&m) || m.starts_with(&r) || m.contains(REDACTED)
        }
        (Value::Object(_) | Value::Array(_), Value::Object(_) | Value::Array(_)) => true,
        _ => raw == model,
    }
}

fn json_text(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn newline(out: &mut String, depth: usize) {
    out.push('\n');
    for _ in 0..depth {
        out.push_str("  ");
    }
}

/// `text` escaped for HTML text and attribute values.
pub(crate) fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => {
                let _ = out.write_char(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn items_beyond_the_bound_and_cut_text_are_marked() {
        let raw = json!({"events": [
            {"timestamp": "t1", "message": "first <b>"},
            {"timestamp": "t2", "message": "second, long text"},
        ], "match_count": 2});
        let model = json!({"events": [{"timestamp": "t2", "message": "second"}]});
        let html = render(&raw, Some(&model));
        assert!(
            html.contains("<span class=\"cut\" title=\"not given to the model\">{"),
            "{html}"
        );
        assert!(html.contains("first &lt;b&gt;"), "{html}");
        assert!(
            html.contains(
                "&quot;second<span class=\"cut\" title=\"cut from the model's view\">, long text</span>&quot;"
            ),
            "{html}"
        );
        assert_eq!(html.matches("class=\"cut\"").count(), 2, "{html}");
    }

    #[test]
    fn lists_of_another_shape_and_unbounded_values_are_not_marked() {
        let raw = json!({"rows": [[1, "a"], [2, "b"]], "note": "x"});
        let model = json!({"rows": [{"id": 9}]});
        assert!(!render(&raw, Some(&model)).contains("class="));
        assert!(!render(&raw, None).contains("class="));
        let redacted = json!({"note": "token <redacted:jwt>"});
        let raw = json!({"note": "token eyJ.x.y"});
        assert!(render(&raw, Some(&redacted)).contains("redacted-source"));
    }
}

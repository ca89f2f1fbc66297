//! Indents compact JSON text without reordering anything (a `serde_json::Value`
//! would sort object keys and lose the contract's field order).

/// `compact` indented with two spaces. `compact` must be JSON text as
/// serde_json writes it (no insignificant whitespace).
pub(crate) fn indent(compact: &str) -> String {
    let mut out = String::with_capacity(compact.len() * 2);
    let mut depth = 0_usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut chars = compact.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&"  ".repeat(depth));
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                if matches!(chars.peek(), Some('}' | ']')) {
                    if let Some(close) = chars.next() {
                        out.push(close);
                    }
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::indent;

    #[test]
    fn indents_like_serde_json_pretty_without_reordering() {
        let value = serde_json::json!({
            "z": [1, {"b": "x,y:{}[]\"\\", "a": []}, {}],
            "a": {"k": null, "e": "数😀"}
        });
        let compact = serde_json::to_string(&value).unwrap();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        assert_eq!(indent(&compact), pretty);
        assert_eq!(indent(r#"{"z":1,"a":2}"#), "{\n  \"z\": 1,\n  \"a\": 2\n}");
    }
}

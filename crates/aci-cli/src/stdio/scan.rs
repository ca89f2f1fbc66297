//! The id of a request line that cannot be read whole: scanned from the
//! line's first bytes, so that the error reply to a line that does not parse
//! or is too long still carries the request's id when it can be trusted.

use serde_json::Value;

/// A JSON-RPC id: a string or a number.
pub(crate) fn is_id(value: &Value) -> bool {
    value.is_string() || value.is_number()
}

/// The top-level `"id"` of a JSON object text that may be cut short or broken
/// further on: found only when the object's members up to and including the
/// id are well formed and the id is a string or a number.
pub(crate) fn scan_id(text: &[u8]) -> Option<Value> {
    let mut scanner = Scanner { text, at: 0 };
    scanner.space();
    scanner.expect(b'{')?;
    loop {
        scanner.space();
        let key_start = scanner.at;
        scanner.string()?;
        let key: String = serde_json::from_slice(&text[key_start..scanner.at]).ok()?;
        scanner.space();
        scanner.expect(b':')?;
        scanner.space();
        let value_start = scanner.at;
        if key == "id" {
            match text.get(scanner.at)? {
                b'"' => scanner.string()?,
                b'-' | b'0'..=b'9' => scanner.number()?,
                _ => return None,
            }
            let id: Value = serde_json::from_slice(&text[value_start..scanner.at]).ok()?;
            return is_id(&id).then_some(id);
        }
        scanner.value()?;
        // Well formed, or the id that follows cannot be trusted.
        serde_json::from_slice::<Value>(&text[value_start..scanner.at]).ok()?;
        scanner.space();
        match text.get(scanner.at)? {
            b',' => scanner.at += 1,
            _ => return None,
        }
    }
}

/// Just enough of a JSON tokenizer to step over values.
struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
}

impl Scanner<'_> {
    fn space(&mut self) {
        while self
            .text
            .get(self.at)
            .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.text.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    /// Steps over a string, quotes included.
    fn string(&mut self) -> Option<()> {
        self.expect(b'"')?;
        loop {
            match self.text.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }

    fn number(&mut self) -> Option<()> {
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|b| matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
        {
            self.at += 1;
        }
        // A number that runs to the end of the text may be cut short.
        (self.at > start && self.at < self.text.len()).then_some(())
    }

    /// Steps over any value (nested ones by bracket depth); the caller checks
    /// that it is well formed.
    fn value(&mut self) -> Option<()> {
        match self.text.get(self.at)? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0_usize;
                loop {
                    match self.text.get(self.at)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.at += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.at += 1;
                }
            }
            _ => {
                let start = self.at;
                while self.text.get(self.at).is_some_and(|b| {
                    !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    self.at += 1;
                }
                // true, false, null or a number, exactly.
                serde_json::from_slice::<Value>(self.text.get(start..self.at)?)
                    .ok()
                    .map(|_| ())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ids_are_found_before_the_damage() {
        assert_eq!(
            scan_id(br#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":"\ud800"}}"#),
            Some(json!(7))
        );
        assert_eq!(scan_id(br#" { "id" : "req-1" , "#), Some(json!("req-1")));
        assert_eq!(
            scan_id(br#"{"jsonrpc":"2.0","params":{"a":[1,{"b":"}"}]},"id":"x\"y","method""#),
            Some(json!("x\"y"))
        );
        // Cut inside the id, after the damage, or not an id at all.
        assert_eq!(scan_id(br#"{"jsonrpc":"2.0","id":12"#), None);
        assert_eq!(scan_id(br#"{"jsonrpc":"2.0","id":"ab"#), None);
        assert_eq!(scan_id(br#"{"jsonrpc":2.0.0,"id":1}"#), None);
        assert_eq!(
            scan_id(br#"{"a":true,"b":null,"c":-1.5e3,"id":1}"#),
            Some(json!(1))
        );
        assert_eq!(scan_id(br#"{"params":{"a":[1,2},"id":1}"#), None);
        assert_eq!(scan_id(b"{\"params\":{\"a\":\xff},\"id\":1}"), None);
        assert_eq!(scan_id(br#"{"params":"\ud800","id":1}"#), None);
        let deep = format!(
            r#"{{"params":{}{},"id":1}}"#,
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(scan_id(deep.as_bytes()), None);
        assert_eq!(scan_id(br#"{"id":null}"#), None);
        assert_eq!(scan_id(br#"{"id":{"a":1}}"#), None);
        assert_eq!(scan_id(br#"[{"id":1}]"#), None);
        assert_eq!(scan_id(b"\xff\xfe"), None);
        assert_eq!(scan_id(b""), None);
    }
}

//! Any bytes as an MCP client's lines to `aci serve` on stdio, after a
//! valid handshake: the real server (default configuration: memory store,
//! bundled runbooks, mock logs) reads them through its line framing, serves
//! them, and drains at the end of input as it does when a client leaves.
//! Every line it writes is a well-formed JSON-RPC message; a response has
//! exactly one of `result` and `error`; no id is answered more often than
//! it was asked, beyond one reply per line that is not a JSON object, has
//! no method, or has an id that is neither a string nor a number (the framing answers
//! such a line with the id it finds in it, or null); nothing
//! written carries a panic message; the handshake is answered.
#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;

use aci_cli::fuzzing::StdioHarness;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

static HARNESS: LazyLock<StdioHarness> = LazyLock::new(StdioHarness::new);

const HANDSHAKE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":\"fuzz-init\",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"fuzz\",\"version\":\"0\"}}}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

fuzz_target!(|data: &[u8]| {
    let mut input = HANDSHAKE.to_vec();
    input.extend_from_slice(data);
    // How often each id was asked, over the lines that are JSON objects,
    // and how many other lines there are.
    let mut asked: HashMap<String, usize> = HashMap::new();
    let mut other_lines = 0;
    for line in input.split(|b| *b == b'\n') {
        let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            // Not a request nor a notification: answered as invalid, if at
            // all (a response from the client is not answered).
            Ok(Value::Object(object)) if !object.contains_key("method") => other_lines += 1,
            Ok(Value::Object(object)) => match object.get("id") {
                Some(id @ (Value::String(_) | Value::Number(_))) => {
                    *asked.entry(id.to_string()).or_default() += 1;
                }
                // Answered with a null id, if at all.
                Some(_) => other_lines += 1,
                None => {}
            },
            _ => other_lines += 1,
        }
    }
    let output = HARNESS.session(&input);
    let mut answered: HashMap<String, usize> = HashMap::new();
    for line in output.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let text = String::from_utf8_lossy(line);
        assert!(!text.contains("panicked"), "{text}");
        let value: Value = serde_json::from_slice(line)
            .unwrap_or_else(|e| panic!("a line that is not JSON ({e}): {text}"));
        let object = value.as_object().expect("a JSON-RPC message is an object");
        assert_eq!(object.get("jsonrpc"), Some(&Value::from("2.0")), "{text}");
        if object.contains_key("method") {
            // A message the server sends of its own (a notification).
            continue;
        }
        assert!(
            object.contains_key("result") != object.contains_key("error"),
            "a response has exactly one of result and error: {text}"
        );
        let id = object.get("id").expect("a response has an id");
        *answered.entry(id.to_string()).or_default() += 1;
    }
    let beyond: usize = answered
        .iter()
        .map(|(id, times)| times.saturating_sub(asked.get(id).copied().unwrap_or(0)))
        .sum();
    assert!(
        beyond <= other_lines,
        "{beyond} replies beyond the ids asked, for {other_lines} lines that are not JSON objects: {answered:?} {asked:?}"
    );
    assert!(
        answered.contains_key("\"fuzz-init\""),
        "the handshake was not answered"
    );
});

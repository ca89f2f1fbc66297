//! Any bytes as a client's traffic on one connection to `aci serve --http`
//! (`aci_cli::fuzzing::HttpHarness`: the replica `serve` starts, with two
//! static tokens and 1 s deadlines, on an in-memory connection served as a
//! worker serves an accepted socket): request lines, headers and bodies,
//! several requests on a keep-alive connection, JSON-RPC with `_meta`. The
//! client waits for its answers, then closes its side.
//!
//! What the server writes is a sequence of whole HTTP/1.x responses (the
//! last may be cut only when the harness had to drop the connection), each
//! framed by its `Content-Length`, chunked, or by the close; every status
//! is one the server may answer; no 500; nothing written carries a panic
//! message or a backtrace (unless it quotes the client's own bytes, as
//! rmcp's refusal of an unsupported `MCP-Protocol-Version` does); a JSON body (each line of JSON lines) is JSON,
//! and a JSON-RPC message in it (or in an event stream's `data:` line) is
//! well formed, a response with exactly one of `result` and `error`.
#![no_main]

use std::sync::LazyLock;

use aci_cli::fuzzing::HttpHarness;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

static HARNESS: LazyLock<HttpHarness> = LazyLock::new(HttpHarness::new);

/// The statuses the server may answer: hyper's own (400 for a malformed
/// head, 414, 431), the operations endpoints (200, 503), the login and
/// review routes (200, 303, 400 for a malformed path, 401, 403, 404, 413,
/// 503), bearer authentication (401), the body limit (413), the router
/// (404, 405), and rmcp's Streamable HTTP transport (200, 202, 400, 403 for
/// a host not allowed, 404 for an unknown method or session, 405, 406,
/// 413, 415); 100 before a body the client said it expects to send.
const STATUSES: &[u16] = &[
    100, 200, 202, 303, 400, 401, 403, 404, 405, 406, 413, 414, 415, 431, 503,
];

fuzz_target!(|data: &[u8]| {
    let exchange = HARNESS.exchange(data);
    let output = &exchange.output;
    // A response to `HEAD` has its `Content-Length` but no body: at most
    // one such response per `HEAD ` in the input. Not only at a line's
    // start: a request line follows a body's last byte directly when the
    // body ends without a newline.
    let mut heads = data.windows(5).filter(|w| *w == b"HEAD ").count();
    let mut at = 0;
    while at < output.len() {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut response = httparse::Response::new(&mut headers);
        let head = match response.parse(&output[at..]) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if !exchange.closed => break,
            other => panic!(
                "not a response head at byte {at} ({other:?}): {}",
                String::from_utf8_lossy(&output[at..])
            ),
        };
        let status = response.code.unwrap_or_default();
        assert!(
            STATUSES.contains(&status),
            "status {status}: {}",
            String::from_utf8_lossy(&output[at..])
        );
        let mut length = None;
        let mut chunked = false;
        let mut content_type = String::new();
        for header in response.headers.iter() {
            let value = String::from_utf8_lossy(header.value);
            assert_clean(&value, data);
            if header.name.eq_ignore_ascii_case("content-length") {
                assert!(length.is_none(), "two Content-Length headers");
                length = Some(
                    value
                        .parse::<usize>()
                        .unwrap_or_else(|e| panic!("Content-Length {value:?}: {e}")),
                );
            } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                assert_eq!(value, "chunked", "an unknown transfer coding");
                chunked = true;
            } else if header.name.eq_ignore_ascii_case("content-type") {
                // The media type, without its parameters.
                content_type = value
                    .split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase();
            }
        }
        assert!(
            !(chunked && length.is_some()),
            "both Content-Length and chunked"
        );
        at += head;
        let rest = &output[at..];
        let body: Vec<u8> = if (100..200).contains(&status) || status == 204 || status == 304 {
            Vec::new()
        } else if chunked {
            match dechunk(rest) {
                Some((body, used)) => {
                    at += used;
                    body
                }
                None if !exchange.closed => break,
                None => panic!("a cut chunked body: {}", String::from_utf8_lossy(rest)),
            }
        } else if let Some(length) = length {
            if heads > 0 && length > 0 && (rest.is_empty() || rest.starts_with(b"HTTP/1.")) {
                heads -= 1;
                Vec::new()
            } else if rest.len() < length {
                assert!(
                    !exchange.closed,
                    "a body shorter than its Content-Length {length}: {}",
                    String::from_utf8_lossy(rest)
                );
                break;
            } else {
                at += length;
                rest[..length].to_vec()
            }
        } else {
            // Delimited by the close: the last response.
            at = output.len();
            rest.to_vec()
        };
        check_body(status, &content_type, &body, data);
    }
});

/// Neither a panic message nor a backtrace, unless the client's own bytes
/// `sent` hold that text: a reply may quote what it was sent (rmcp's
/// `400 Bad Request: Unsupported MCP-Protocol-Version: <the header>`).
fn assert_clean(text: &str, sent: &[u8]) {
    for marker in ["panicked at", "stack backtrace"] {
        let quoted = sent
            .windows(marker.len())
            .any(|window| window == marker.as_bytes());
        assert!(quoted || !text.contains(marker), "{text}");
    }
}

fn check_body(status: u16, content_type: &str, body: &[u8], sent: &[u8]) {
    let text = String::from_utf8_lossy(body);
    assert_clean(&text, sent);
    if content_type == "application/json" {
        let value: Value = serde_json::from_slice(body)
            .unwrap_or_else(|e| panic!("a {status} JSON body that is not JSON ({e}): {text}"));
        check_json_rpc(&value, &text);
    } else if content_type == "application/jsonl" {
        for line in text.lines() {
            let _: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a JSON line that is not JSON ({e}): {line}"));
        }
    } else if content_type == "text/event-stream" {
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:") {
                let data = data.trim_start();
                if data.is_empty() {
                    continue;
                }
                let value: Value = serde_json::from_str(data)
                    .unwrap_or_else(|e| panic!("an event that is not JSON ({e}): {text}"));
                check_json_rpc(&value, &text);
            }
        }
    }
}

/// A JSON-RPC message (or a batch of them), unless it is one of the other
/// JSON documents the server answers: the protected resource metadata, a
/// review route's call record, the citation check.
fn check_json_rpc(value: &Value, text: &str) {
    if let Value::Array(batch) = value {
        assert!(!batch.is_empty(), "an empty batch: {text}");
        for message in batch {
            check_json_rpc(message, text);
        }
        return;
    }
    let object = value
        .as_object()
        .unwrap_or_else(|| panic!("a JSON body that is not an object: {text}"));
    let other_document = ["bearer_methods_supported", "cited", "run"]
        .iter()
        .any(|key| object.contains_key(*key))
        && !object.contains_key("jsonrpc");
    if other_document {
        return;
    }
    assert_eq!(object.get("jsonrpc"), Some(&Value::from("2.0")), "{text}");
    if object.contains_key("method") {
        // A message the server sends of its own.
        return;
    }
    assert!(
        object.contains_key("result") != object.contains_key("error"),
        "a response has exactly one of result and error: {text}"
    );
    let id = object.get("id");
    // rmcp refuses a message it cannot take as a request (a JSON-RPC
    // response sent to the stateless server) with an Invalid Request error
    // and no `id` at all, where JSON-RPC 2.0 asks for `"id": null`: a known
    // deviation of the library, accepted for that code only.
    let invalid_request_without_id = id.is_none()
        && object
            .get("error")
            .and_then(|e| e.get("code"))
            .is_some_and(|c| c == -32600);
    assert!(
        matches!(id, Some(Value::String(_) | Value::Number(_)))
            || (object.contains_key("error") && matches!(id, Some(Value::Null)))
            || invalid_request_without_id,
        "a response's id: {text}"
    );
    if let Some(error) = object.get("error") {
        assert!(
            error.get("code").is_some_and(Value::is_i64)
                && error.get("message").is_some_and(Value::is_string),
            "an error without an integer code and a message: {text}"
        );
    }
}

/// The body of a chunked message at the start of `bytes` and the bytes it
/// took; `None` when it is cut.
fn dechunk(bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + find_crlf(&bytes[at..])?;
        let line = std::str::from_utf8(&bytes[at..line_end])
            .unwrap_or_else(|_| panic!("a chunk size that is not text"));
        let size = line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16)
            .unwrap_or_else(|e| panic!("a chunk size {size:?}: {e}"));
        at = line_end + 2;
        if size == 0 {
            // Trailers, then the empty line.
            loop {
                let end = at + find_crlf(&bytes[at..])?;
                let empty = end == at;
                at = end + 2;
                if empty {
                    return Some((body, at));
                }
            }
        }
        if bytes.len() < at + size + 2 {
            return None;
        }
        body.extend_from_slice(&bytes[at..at + size]);
        assert_eq!(&bytes[at + size..at + size + 2], b"\r\n", "a chunk's end");
        at += size + 2;
    }
}

fn find_crlf(bytes: &[u8]) -> Option<usize> {
    bytes.windows(2).position(|w| w == b"\r\n")
}

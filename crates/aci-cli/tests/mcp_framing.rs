//! Every request to `aci serve` gets a reply: lines that do not parse, lines
//! over the size cap, bad envelopes and params, ids reused while in flight,
//! and arguments that are not an object. Real `aci serve` processes, raw
//! JSON-RPC lines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::contract::call_id;
use support::stdio::{RawSession, SilentServer, assert_abandoned, mysql_arguments, rpc_error};

/// The session still serves after whatever came before.
async fn assert_alive(session: &mut RawSession, id: &str) {
    session
        .send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}))
        .await;
    let pong = session.response(&json!(id)).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unparsable_lines_get_a_parse_error() {
    let mut session = RawSession::start(&[]).await;

    // Nesting over serde_json's 128 levels, with the id before the damage:
    // the reply carries the id.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{{"name":"lookup_knowledge","arguments":{{"query":{}1{}}}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    session.send_raw(format!("{deep}\n").as_bytes()).await;
    let reply = session.response(&json!("deep")).await;
    assert_eq!(rpc_error(&reply), -32_700, "{reply}");
    assert_eq!(reply["error"]["message"], "Parse error");
    assert!(reply.get("result").is_none());

    // A lone surrogate.
    session
        .send_raw(
            br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"lookup_knowledge","arguments":{"query":"pool \ud800 timeout"}}}
"#,
        )
        .await;
    let reply = session.response(&json!(11)).await;
    assert_eq!(rpc_error(&reply), -32_700, "{reply}");

    // Invalid UTF-8.
    let mut line = br#"{"jsonrpc":"2.0","id":"utf8","method":"tools/call","params":{"name":"lookup_knowledge","arguments":{"query":"pool "#.to_vec();
    line.extend_from_slice(b"\xff\xfe");
    line.extend_from_slice(b"\"}}}\n");
    session.send_raw(&line).await;
    let reply = session.response(&json!("utf8")).await;
    assert_eq!(rpc_error(&reply), -32_700, "{reply}");

    // No id readable before the damage: id null, as JSON-RPC says.
    session
        .send_raw(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"a\":\xff},\"id\":5}\n",
        )
        .await;
    let reply = session.response(&Value::Null).await;
    assert_eq!(rpc_error(&reply), -32_700, "{reply}");
    session.send_raw(b"this is not json\n").await;
    let reply = session.response(&Value::Null).await;
    assert_eq!(rpc_error(&reply), -32_700, "{reply}");
    // The reply never echoes the line.
    assert!(!reply.to_string().contains("not json"), "{reply}");

    // Blank lines are nothing at all.
    session.send_raw(b"\n   \r\n").await;
    assert_alive(&mut session, "after-parse-errors").await;
    let (status, rest, _) = session.close().await;
    assert!(status.success(), "{status}");
    assert!(rest.is_empty(), "nothing unanswered or extra: {rest:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_line_over_the_cap_gets_invalid_request_with_its_id() {
    let mut session = RawSession::start(&[]).await;
    let mut line = br#"{"jsonrpc":"2.0","id":"huge","method":"tools/call","params":{"name":"lookup_knowledge","arguments":{"query":""#.to_vec();
    line.extend(std::iter::repeat_n(b'a', 17 * 1024 * 1024));
    line.extend_from_slice(b"\"}}}\n");
    session.send_raw(&line).await;
    drop(line);
    let reply = session.response(&json!("huge")).await;
    assert_eq!(rpc_error(&reply), -32_600, "{reply}");
    assert!(reply.to_string().len() < 200, "no echo of the line");
    // The rest of the huge line was skipped, not read as a new message.
    assert_alive(&mut session, "after-huge").await;
    let (status, rest, _) = session.close().await;
    assert!(status.success(), "{status}");
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_envelopes_and_params_get_invalid_request_or_params() {
    let mut session = RawSession::start(&[]).await;
    let cases = [
        // Not a request, a notification or a response.
        (json!({"jsonrpc": "2.0", "id": 21}), json!(21), -32_600),
        (
            json!({"jsonrpc": "1.0", "id": 22, "method": "ping"}),
            json!(22),
            -32_600,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 23, "method": 7}),
            json!(23),
            -32_600,
        ),
        (
            json!({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"}),
            Value::Null,
            -32_600,
        ),
        (
            json!([{"jsonrpc": "2.0", "id": 24, "method": "ping"}]),
            Value::Null,
            -32_600,
        ),
        (json!("ping"), Value::Null, -32_600),
        // A known method whose params do not fit it.
        (
            json!({"jsonrpc": "2.0", "id": 25, "method": "tools/call", "params": {"name": 5}}),
            json!(25),
            -32_602,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 26, "method": "tools/call", "params": {"arguments": {}}}),
            json!(26),
            -32_602,
        ),
    ];
    for (message, id, code) in cases {
        session.send(&message).await;
        let reply = session.response(&id).await;
        assert_eq!(rpc_error(&reply), code, "{message} -> {reply}");
    }
    // A notification never gets a reply, even a broken one.
    session
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": 5}))
        .await;
    session
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/whatever"}))
        .await;
    // An unknown method is rmcp's answer: method not found.
    session
        .send(&json!({"jsonrpc": "2.0", "id": 27, "method": "no/such/method"}))
        .await;
    let reply = session.response(&json!(27)).await;
    assert_eq!(rpc_error(&reply), -32_601, "{reply}");
    assert_alive(&mut session, "after-bad-envelopes").await;
    let (status, rest, _) = session.close().await;
    assert!(status.success(), "{status}");
    assert!(rest.is_empty(), "no reply to notifications: {rest:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn arguments_that_are_not_an_object_are_invalid_input_results() {
    let mut session = RawSession::start(&[]).await;
    for (n, arguments) in [json!("query=pool"), json!([1, 2]), json!(null), json!(42)]
        .into_iter()
        .enumerate()
    {
        let id = json!(format!("args-{n}"));
        let observation = session
            .call(
                &id,
                "lookup_knowledge",
                arguments.clone(),
                Some(call_id(&format!("call-args-{n}"))),
            )
            .await;
        assert_eq!(
            observation["evidence_status"], "ERROR",
            "{arguments}: {observation}"
        );
        assert_eq!(
            observation["error_code"], "INVALID_INPUT",
            "{arguments}: {observation}"
        );
        assert_eq!(observation["tool_call_id"], format!("call-args-{n}"));
    }
    // An object still works.
    let fine = session
        .call(
            &json!("args-ok"),
            "lookup_knowledge",
            json!({"query": "connection pool"}),
            None,
        )
        .await;
    assert_eq!(fine["evidence_status"], "EVIDENCE_FOUND", "{fine}");
    let (status, _, _) = session.close().await;
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_id_in_flight_cannot_be_reused_and_is_free_again_after_its_reply() {
    let silent = SilentServer::start().await;
    let config = silent.config("dup", 1);
    let mut session = RawSession::start(&["--config", config.to_str().unwrap()]).await;
    // The call waits for a MySQL greeting that never comes: it stays in flight.
    session
        .send_call(
            &json!(5),
            "query_mysql",
            Some(mysql_arguments()),
            Some(call_id("call-slow")),
        )
        .await;
    // The same id again while the first is in flight.
    session
        .send_call(
            &json!(5),
            "lookup_knowledge",
            Some(json!({"query": "pool"})),
            Some(call_id("call-dup")),
        )
        .await;
    let reply = session.response(&json!(5)).await;
    assert_eq!(rpc_error(&reply), -32_600, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in flight"),
        "{reply}"
    );
    // Another id is served meanwhile.
    let other = session
        .call(
            &json!(6),
            "lookup_knowledge",
            json!({"query": "connection pool"}),
            None,
        )
        .await;
    assert_eq!(other["evidence_status"], "EVIDENCE_FOUND", "{other}");
    // Closing stdin drains for 1 s, then abandons the slow call, which
    // answers with its error result.
    session.close_stdin();
    let abandoned = session.response(&json!(5)).await;
    assert_abandoned(&abandoned, "call-slow");
    let (status, rest, _) = session.finish().await;
    assert!(status.success(), "{status}");
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answered_id_can_be_used_again() {
    let mut session = RawSession::start(&[]).await;
    for n in 0..3 {
        let observation = session
            .call(
                &json!(1),
                "lookup_knowledge",
                json!({"query": "connection pool"}),
                Some(call_id(&format!("call-again-{n}"))),
            )
            .await;
        assert_eq!(
            observation["evidence_status"], "EVIDENCE_FOUND",
            "{observation}"
        );
    }
    let (status, _, _) = session.close().await;
    assert!(status.success());
}

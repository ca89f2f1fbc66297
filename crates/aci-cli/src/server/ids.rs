//! The ids of one `tools/call`, from the facts its transport supplies: one
//! resolver and one session-name rule for every transport.
//!
//! The boundary never invents an id, and neither does the server:
//!
//! - **Tool call id**: `_meta["aci/tool_call_id"]`, else the
//!   `Aci-Tool-Call-Id` header (HTTP), used exactly. Otherwise the server
//!   composes one from transport facts only: **`mcp:<session>:<JSON-RPC
//!   id>`** (a numeric id as its decimal text), where `<session>` is the
//!   client's declared `Mcp-Session-Id` when it is a valid session name, else
//!   the session the transport names: on stdio the server process (`stdio-`
//!   and 16 random hex digits), over HTTP the TCP connection (`http-` and 16
//!   random hex digits). A JSON-RPC id is unique only within its session, so
//!   two sessions of one run sending id `1` make two calls, not a duplicate.
//! - **Run id**: `_meta["aci/run_id"]`, else the `Aci-Run-Id` header, else
//!   the `<run_id>` of a `/runs/<run_id>/mcp` URL (both HTTP), else the
//!   server's run (stdio only: HTTP has none). With none of them the call is
//!   refused `RUN_MISMATCH` before anything runs or is recorded.
//! - A valid run id other than the server's is served as a run of its own.
//!   An invalid one is checked against the server's run, which it cannot
//!   match (the boundary answers `RUN_MISMATCH`); without a server run it is
//!   refused `RUN_MISMATCH` like a missing one.
//! - An id that is not text (a `_meta` value that is not a JSON string, a
//!   header value that is not visible ASCII) is no id at all: the boundary
//!   gets empty text, which no id rule accepts. Nothing is ever substituted.
//!
//! `_meta` is read from the request's `_meta` as rmcp hands it to the
//! handler, then from whatever was left in the params.

use std::sync::Arc;

use aci_contracts::RunId;
use rmcp::model::{RequestId, RequestMetaObject};
use serde_json::Value;

/// The `_meta` key of the run id.
pub(crate) const META_RUN_ID: &str = "aci/run_id";
/// The `_meta` key of the tool call id.
pub(crate) const META_TOOL_CALL_ID: &str = "aci/tool_call_id";

/// The MCP session a call arrived in, as its transport names it: the part of
/// a composed tool call id that keeps one session's JSON-RPC ids apart from
/// another's. Cloning shares the name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct McpSession(Arc<str>);

impl McpSession {
    /// Longest session name, in bytes (the composed id must stay a valid id).
    pub(crate) const MAX_BYTES: usize = 64;

    /// A fresh session for one stdio server process: `stdio-` and 16 random
    /// hex digits.
    pub(crate) fn stdio() -> Self {
        Self::fresh("stdio")
    }

    /// A fresh session for one HTTP connection: `http-` and 16 random hex
    /// digits.
    pub(crate) fn connection() -> Self {
        Self::fresh("http")
    }

    fn fresh(prefix: &str) -> Self {
        let random = uuid::Uuid::new_v4().simple().to_string();
        Self(Arc::from(format!("{prefix}-{}", &random[..16])))
    }

    /// A session named by a client or a transport, when `name` is a valid
    /// session name (see [`is_valid`](Self::is_valid)).
    pub(crate) fn new(name: &str) -> Option<Self> {
        Self::is_valid(name).then(|| Self(Arc::from(name)))
    }

    /// The one session-name rule: 1 to [`Self::MAX_BYTES`] bytes of ASCII
    /// letters, digits and `_ - .` (no `:`, which separates the parts of a
    /// composed id).
    pub(crate) fn is_valid(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= Self::MAX_BYTES
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The tool call id of a call that brought no framework id:
/// `mcp:<session>:<JSON-RPC id>`.
fn compose(session: &str, request_id: &RequestId) -> String {
    format!("mcp:{session}:{request_id}")
}

/// What one `tools/call` brings that its ids are made of.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IdFacts<'a> {
    /// The request's `_meta`, as rmcp hands it to the handler.
    pub(crate) context_meta: &'a RequestMetaObject,
    /// Whatever `_meta` was left in the params (looked at second).
    pub(crate) params_meta: Option<&'a RequestMetaObject>,
    /// The JSON-RPC id.
    pub(crate) request_id: &'a RequestId,
    /// The `Aci-Tool-Call-Id` header's text (empty when it is not text).
    pub(crate) tool_call_id_header: Option<&'a str>,
    /// The `Aci-Run-Id` header's text (empty when it is not text).
    pub(crate) run_id_header: Option<&'a str>,
    /// The `<run_id>` of a `/runs/<run_id>/mcp` URL.
    pub(crate) path_run: Option<&'a str>,
    /// The client's declared `Mcp-Session-Id`, as text.
    pub(crate) declared_session: Option<&'a str>,
    /// The session the transport names (the stdio process, the HTTP
    /// connection).
    pub(crate) session: &'a McpSession,
    /// The server's run, of calls that name none (stdio).
    pub(crate) server_run: Option<&'a RunId>,
}

/// The ids of one `tools/call`, as the boundary gets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallIds {
    /// The tool call id text.
    pub(crate) tool_call_id: String,
    /// The run id text of the envelope, when the call has a run at all.
    pub(crate) run_id: Option<String>,
    /// The run whose context the call runs in: the named run when it is a
    /// valid run id, else the server's (which an invalid one cannot match).
    pub(crate) context_run: Option<RunId>,
    /// Where the tool call id came from (for logs).
    pub(crate) tool_call_id_from: &'static str,
    /// Where the run id came from (for logs).
    pub(crate) run_id_from: &'static str,
}

impl CallIds {
    /// Applies the id rules of the module docs.
    pub(crate) fn resolve(facts: &IdFacts<'_>) -> Self {
        let meta = |key: &str| {
            facts
                .context_meta
                .get(key)
                .or_else(|| facts.params_meta.and_then(|meta| meta.get(key)))
                .map(meta_text)
        };
        let (tool_call_id, tool_call_id_from) = if let Some(id) = meta(META_TOOL_CALL_ID) {
            (id, "_meta")
        } else if let Some(id) = facts.tool_call_id_header {
            (id.to_owned(), "header")
        } else {
            let session = facts
                .declared_session
                .filter(|name| McpSession::is_valid(name))
                .unwrap_or(facts.session.as_str());
            (compose(session, facts.request_id), "session+jsonrpc_id")
        };
        let (run_id, run_id_from) = if let Some(run) = meta(META_RUN_ID) {
            (Some(run), "_meta")
        } else if let Some(run) = facts.run_id_header {
            (Some(run.to_owned()), "header")
        } else if let Some(run) = facts.path_run {
            (Some(run.to_owned()), "path")
        } else if let Some(run) = facts.server_run {
            (Some(run.as_str().to_owned()), "server")
        } else {
            (None, "none")
        };
        let context_run = run_id
            .as_deref()
            .and_then(|text| RunId::new(text).ok())
            .or_else(|| facts.server_run.cloned());
        Self {
            tool_call_id,
            run_id,
            context_run,
            tool_call_id_from,
            run_id_from,
        }
    }
}

/// The text of a `_meta` id: a JSON string as given; anything else is not an
/// id, so the boundary gets empty text (which no id rule accepts).
fn meta_text(value: &Value) -> String {
    value.as_str().map(str::to_owned).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use aci_contracts::ToolCallId;
    use serde_json::json;

    use super::*;

    fn meta(value: Value) -> RequestMetaObject {
        match value {
            Value::Object(object) => RequestMetaObject::from(object),
            _ => RequestMetaObject::new(),
        }
    }

    fn server_run() -> RunId {
        RunId::new("run-server").unwrap()
    }

    /// The facts of a call with JSON-RPC id `request_id` in `session` and
    /// nothing else.
    fn bare<'a>(request_id: &'a RequestId, session: &'a McpSession) -> IdFacts<'a> {
        static NO_META: std::sync::LazyLock<RequestMetaObject> =
            std::sync::LazyLock::new(RequestMetaObject::new);
        IdFacts {
            context_meta: &NO_META,
            params_meta: None,
            request_id,
            tool_call_id_header: None,
            run_id_header: None,
            path_run: None,
            declared_session: None,
            session,
            server_run: None,
        }
    }

    fn session(name: &str) -> McpSession {
        McpSession::new(name).unwrap()
    }

    // stdio: `_meta`, else the process session's composed id and the
    // server's run.

    #[test]
    fn stdio_ids_default_to_the_jsonrpc_id_and_the_server_run() {
        let run = server_run();
        let s1 = session("s-1");
        let seven = RequestId::Number(7);
        let ids = CallIds::resolve(&IdFacts {
            server_run: Some(&run),
            ..bare(&seven, &s1)
        });
        assert_eq!(ids.tool_call_id, "mcp:s-1:7");
        assert_eq!(ids.run_id.as_deref(), Some("run-server"));
        assert_eq!(ids.context_run, Some(run.clone()));
        assert_eq!(
            (ids.tool_call_id_from, ids.run_id_from),
            ("session+jsonrpc_id", "server")
        );
        let text = RequestId::String(Arc::from("req-1"));
        let ids = CallIds::resolve(&bare(&text, &s1));
        assert_eq!(ids.tool_call_id, "mcp:s-1:req-1");
        // Another session's id 7 is another call.
        let s2 = session("s-2");
        assert_eq!(
            CallIds::resolve(&bare(&seven, &s2)).tool_call_id,
            "mcp:s-2:7"
        );
    }

    #[test]
    fn meta_ids_are_used_as_given_and_a_valid_run_is_its_own() {
        let run = server_run();
        let s = session("s-1");
        let one = RequestId::Number(1);
        let m = meta(json!({"aci/tool_call_id": "call_01", "aci/run_id": "run-other"}));
        let ids = CallIds::resolve(&IdFacts {
            context_meta: &m,
            server_run: Some(&run),
            ..bare(&one, &s)
        });
        assert_eq!(ids.tool_call_id, "call_01");
        assert_eq!(ids.run_id.as_deref(), Some("run-other"));
        assert_eq!(ids.context_run, Some(RunId::new("run-other").unwrap()));
        assert_eq!((ids.tool_call_id_from, ids.run_id_from), ("_meta", "_meta"));

        // Ids left in the params are read too, after the context's.
        let params = meta(json!({"aci/tool_call_id": "call_02", "aci/run_id": "run-p"}));
        let context = meta(json!({"aci/run_id": "run-c"}));
        let ids = CallIds::resolve(&IdFacts {
            context_meta: &context,
            params_meta: Some(&params),
            ..bare(&one, &s)
        });
        assert_eq!(ids.tool_call_id, "call_02");
        assert_eq!(ids.run_id.as_deref(), Some("run-c"));
    }

    #[test]
    fn invalid_ids_are_never_replaced() {
        let run = server_run();
        let s = session("s-1");
        let one = RequestId::Number(1);
        let m = meta(json!({"aci/tool_call_id": "bad id", "aci/run_id": "bad run"}));
        let ids = CallIds::resolve(&IdFacts {
            context_meta: &m,
            server_run: Some(&run),
            ..bare(&one, &s)
        });
        assert_eq!(ids.tool_call_id, "bad id");
        assert_eq!(ids.run_id.as_deref(), Some("bad run"));
        // Checked against the server's run, which it cannot match.
        assert_eq!(ids.context_run, Some(run.clone()));
        // Without a server run (HTTP) there is no context: refused.
        let ids = CallIds::resolve(&IdFacts {
            context_meta: &m,
            ..bare(&one, &s)
        });
        assert_eq!(ids.run_id.as_deref(), Some("bad run"));
        assert_eq!(ids.context_run, None);

        for value in [json!(42), json!(true), json!(null), json!({"a": 1})] {
            let m = meta(json!({"aci/tool_call_id": value.clone(), "aci/run_id": value}));
            let ids = CallIds::resolve(&IdFacts {
                context_meta: &m,
                server_run: Some(&run),
                ..bare(&one, &s)
            });
            assert_eq!(ids.tool_call_id, "");
            assert_eq!(ids.run_id.as_deref(), Some(""));
            assert_eq!(ids.context_run, Some(run.clone()));
        }
    }

    // HTTP: `_meta`, else the headers, else the path (run) or the composed id
    // of the declared session or the connection (tool call); no server run.

    #[test]
    fn http_meta_wins_then_headers_then_the_path() {
        let connection = session("http-c1");
        let three = RequestId::Number(3);
        let m = meta(json!({"aci/tool_call_id": "call_M", "aci/run_id": "run-m"}));
        let headers = IdFacts {
            tool_call_id_header: Some("call_H"),
            run_id_header: Some("run-h"),
            path_run: Some("run-path"),
            ..bare(&three, &connection)
        };
        let ids = CallIds::resolve(&IdFacts {
            context_meta: &m,
            ..headers
        });
        assert_eq!(ids.tool_call_id, "call_M");
        assert_eq!(ids.run_id.as_deref(), Some("run-m"));
        let ids = CallIds::resolve(&headers);
        assert_eq!(ids.tool_call_id, "call_H");
        assert_eq!(ids.run_id.as_deref(), Some("run-h"));
        assert_eq!(
            (ids.tool_call_id_from, ids.run_id_from),
            ("header", "header")
        );
        let ids = CallIds::resolve(&IdFacts {
            path_run: Some("run-path"),
            ..bare(&three, &connection)
        });
        assert_eq!(ids.tool_call_id, "mcp:http-c1:3");
        assert_eq!(ids.run_id.as_deref(), Some("run-path"));
        assert_eq!(ids.context_run, Some(RunId::new("run-path").unwrap()));
        assert_eq!(ids.run_id_from, "path");
        // No run at all: refused.
        let ids = CallIds::resolve(&bare(&three, &connection));
        assert_eq!((ids.run_id, ids.context_run), (None, None));
    }

    #[test]
    fn http_the_composed_id_is_qualified_by_the_declared_session_when_valid() {
        let connection = session("http-c1");
        let one = RequestId::Number(1);
        let ids = CallIds::resolve(&IdFacts {
            declared_session: Some("s-1"),
            ..bare(&one, &connection)
        });
        assert_eq!(ids.tool_call_id, "mcp:s-1:1");
        let too_long = "x".repeat(McpSession::MAX_BYTES + 1);
        for bad in ["a:b", "", "a b", too_long.as_str()] {
            let ids = CallIds::resolve(&IdFacts {
                declared_session: Some(bad),
                ..bare(&one, &connection)
            });
            assert_eq!(ids.tool_call_id, "mcp:http-c1:1", "{bad:?}");
        }
        let text = RequestId::String(Arc::from("req-9"));
        let c2 = session("http-c2");
        assert_eq!(
            CallIds::resolve(&bare(&text, &c2)).tool_call_id,
            "mcp:http-c2:req-9"
        );
    }

    #[test]
    fn http_ids_that_are_not_text_are_no_ids() {
        let connection = session("http-c1");
        let one = RequestId::Number(1);
        let m = meta(json!({"aci/tool_call_id": 5, "aci/run_id": null}));
        let ids = CallIds::resolve(&IdFacts {
            context_meta: &m,
            ..bare(&one, &connection)
        });
        assert_eq!(ids.tool_call_id, "");
        assert_eq!(ids.run_id.as_deref(), Some(""));
        assert_eq!(ids.context_run, None);
    }

    #[test]
    fn sessions_are_id_safe() {
        for fresh in [McpSession::stdio(), McpSession::connection()] {
            let (prefix, random) = fresh.as_str().split_once('-').unwrap();
            assert!(prefix == "stdio" || prefix == "http", "{fresh:?}");
            assert_eq!(random.len(), 16);
            assert!(McpSession::is_valid(fresh.as_str()));
        }
        assert_ne!(McpSession::stdio(), McpSession::stdio());
        let stdio = McpSession::stdio();
        let composed = compose(stdio.as_str(), &RequestId::Number(i64::MAX));
        assert!(ToolCallId::new(composed).is_ok());
        for bad in ["", "a:b", "a b", "{x}", &"x".repeat(65)] {
            assert!(McpSession::new(bad).is_none(), "{bad:?}");
        }
        let longest = McpSession::new(&"x".repeat(McpSession::MAX_BYTES)).unwrap();
        assert!(ToolCallId::new(compose(longest.as_str(), &RequestId::Number(i64::MIN))).is_ok());
    }
}

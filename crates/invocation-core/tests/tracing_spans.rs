//! Each invocation is one span with its identity, outcome and durations, and
//! no payload, panic text or raw data ever reaches a log line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use aci_contracts::RunId;
use invocation_core::{Limits, RunContext, ToolEnvelope};
use support::*;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn one_span_per_invocation_without_payloads() {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let f = fixture(Limits::default());
    let ctx = RunContext::new(
        RunId::new("run-trace").unwrap(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let secret_args = args(Mode::Found, SENTINEL);
    f.boundary
        .invoke(
            &ctx,
            ToolEnvelope::new("call-ok", "run-trace", TOOL, secret_args),
        )
        .await;
    for (id, mode) in [
        ("call-panic", Mode::ExecPanic),
        ("call-err", Mode::ProjError),
    ] {
        f.boundary
            .invoke(
                &ctx,
                ToolEnvelope::new(id, "run-trace", TOOL, args(mode, "x")),
            )
            .await;
    }
    f.boundary
        .invoke(
            &ctx,
            ToolEnvelope::new("bad id", "run-trace", TOOL, args(Mode::Found, "x")),
        )
        .await;

    let logs = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let finished: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("tool call finished"))
        .collect();
    assert_eq!(finished.len(), 4, "{logs}");
    let ok = finished[0];
    for field in [
        "aci.invoke",
        "run_id=run-trace",
        "tool_call_id=call-ok",
        "tool_name=\"probe\"",
        "status=\"READY\"",
        "evidence_status=\"EVIDENCE_FOUND\"",
        "execute_ms=",
        "total_ms=",
    ] {
        assert!(ok.contains(field), "{field} missing in {ok}");
    }
    assert!(
        finished[1].contains("error_code=\"EXECUTION_FAILED\""),
        "{}",
        finished[1]
    );
    assert!(
        finished[2].contains("error_code=\"PROJECTION_FAILED\""),
        "{}",
        finished[2]
    );
    assert!(
        finished[3].contains("error_code=\"INVALID_TOOL_CALL_ID\""),
        "{}",
        finished[3]
    );
    assert!(
        !logs.contains(SENTINEL),
        "payload or raw data in logs:\n{logs}"
    );
    assert!(!logs.contains("exploded"), "panic text in logs:\n{logs}");
}

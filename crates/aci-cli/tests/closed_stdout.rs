//! `aci … | head`: a reader that stops reading ends the command quietly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read as _;
use std::process::{Command, Stdio};

/// Runs `aci args` with a stdout whose reader is already gone (every write
/// fails with a broken pipe): (exit status code, stderr).
fn with_stdout_closed(args: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(env!("CARGO_BIN_EXE_aci"))
        .args(args)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (child.wait().unwrap().code(), stderr)
}

#[test]
fn a_closed_stdout_is_a_quiet_end() {
    for args in [
        &["tools"][..],
        &["call", "lookup_knowledge", r#"{"query":"connection pool"}"#][..],
        &["call", "lookup_knowledge", r#"{"query":7}"#][..],
    ] {
        let (code, stderr) = with_stdout_closed(args);
        assert_eq!(code, Some(141), "{args:?}: stderr: {stderr}");
        assert!(!stderr.contains("panic"), "{args:?}: {stderr}");
        assert_eq!(stderr, "", "{args:?}: no message at all");
    }
}

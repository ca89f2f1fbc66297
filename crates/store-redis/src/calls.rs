//! The create and finalize script calls, built straight into one [`Cmd`].
//!
//! Every argument (keys, numbers, the fingerprint's hex, the record's
//! field/value pairs) is written into the command's own buffer, sized up
//! front: no intermediate `String` per argument, no `core::fmt`, and each
//! payload is copied exactly once before redis-rs packs the command for the
//! socket.
//!
//! The argument order is the scripts' contract (see `scripts.rs`).

use aci_contracts::{ErrorCode, InvocationStatus, Timestamp};
use invocation_core::{Finalization, InvocationKey, NewInvocation, Unsettled};
use redis::{Arg, Cmd, RedisWrite};

use crate::codec::{self, REDACTIONS, STATUS};
use crate::keys;
use crate::scripts::LuaScript;

/// How a script is named in the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Invoke {
    /// `EVALSHA <sha>`: the normal call.
    Sha,
    /// `EVAL <source>`: once, after the server answered `NOSCRIPT`.
    Source,
}

fn head(script: &LuaScript, invoke: Invoke, args: usize, bytes: usize) -> Cmd {
    let (command, text): (&[u8], &str) = match invoke {
        Invoke::Sha => (b"EVALSHA", &script.sha),
        Invoke::Source => (b"EVAL", script.source),
    };
    let mut cmd = Cmd::with_capacity(args + 3, bytes + text.len() + 16);
    cmd.write_arg(command);
    cmd.write_arg(text.as_bytes());
    cmd
}

/// Builds the small arguments (keys, numbers) byte by byte: `core::fmt`
/// costs more than the rest of the argument building together (callgrind).
struct Scratch(Vec<u8>);

impl Scratch {
    fn with_capacity(capacity: usize) -> Self {
        Self(Vec::with_capacity(capacity))
    }

    fn text(&mut self, text: &str) -> &mut Self {
        self.0.extend_from_slice(text.as_bytes());
        self
    }

    fn number(&mut self, value: u64) -> &mut Self {
        let mut digits = [0_u8; 20];
        let mut at = digits.len();
        let mut rest = value;
        loop {
            at -= 1;
            // `rest % 10` is below 10: the cast keeps every bit.
            #[allow(clippy::cast_possible_truncation)]
            let digit = (rest % 10) as u8;
            digits[at] = b'0' + digit;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        self.0.extend_from_slice(&digits[at..]);
        self
    }

    fn signed(&mut self, value: i64) -> &mut Self {
        if value < 0 {
            self.0.push(b'-');
        }
        self.number(value.unsigned_abs())
    }

    /// `<prefix>:{<run_id>}:` (the layout of `keys`).
    fn run(&mut self, prefix: &str, key: &InvocationKey) -> &mut Self {
        self.text(prefix)
            .text(keys::TAG_OPEN)
            .text(key.run_id.as_str())
            .text(keys::TAG_CLOSE)
    }

    /// Writes what was built as one argument and starts over.
    fn emit(&mut self, cmd: &mut Cmd) {
        cmd.write_arg(&self.0);
        self.0.clear();
    }
}

fn run_key(cmd: &mut Cmd, scratch: &mut Scratch, prefix: &str, key: &InvocationKey, suffix: &str) {
    scratch.run(prefix, key).text(suffix).emit(cmd);
}

fn record_key(cmd: &mut Cmd, scratch: &mut Scratch, prefix: &str, key: &InvocationKey) {
    scratch
        .run(prefix, key)
        .text(keys::RECORD)
        .text(key.tool_call_id.as_str())
        .emit(cmd);
}

/// The outbox keys a finalizing script is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutboxKeys {
    /// The store keeps no outbox.
    Off,
    /// The run slot's stream only (a cluster).
    Stream,
    /// The stream and the set of busy streams (a single node).
    StreamAndBusy,
}

impl OutboxKeys {
    /// `numkeys` with record and scopes before them.
    const fn numkeys(self) -> &'static [u8] {
        match self {
            Self::Off => b"2",
            Self::Stream => b"3",
            Self::StreamAndBusy => b"4",
        }
    }

    /// Writes the outbox keys (after record and scopes).
    fn write(self, cmd: &mut Cmd, scratch: &mut Scratch, prefix: &str, key: &InvocationKey) {
        if self == Self::Off {
            return;
        }
        outbox_key(cmd, scratch, prefix, key);
        if self == Self::StreamAndBusy {
            scratch.text(prefix).text(keys::OUTBOX_BUSY).emit(cmd);
        }
    }
}

/// `<prefix>:outbox:{<tag>}`, the outbox stream of the run's slot.
fn outbox_key(cmd: &mut Cmd, scratch: &mut Scratch, prefix: &str, key: &InvocationKey) {
    let tag = keys::outbox_tag(keys::slot(key.run_id.as_str().as_bytes()));
    scratch
        .text(prefix)
        .text(keys::OUTBOX)
        .text("{")
        .number(u64::from(tag))
        .text("}")
        .emit(cmd);
}

fn pair(cmd: &mut Cmd, field: &str, value: &[u8]) {
    cmd.write_arg(field.as_bytes());
    cmd.write_arg(value);
}

fn number_pair(cmd: &mut Cmd, scratch: &mut Scratch, field: &str, value: u64) {
    cmd.write_arg(field.as_bytes());
    scratch.number(value).emit(cmd);
}

fn time_pair(cmd: &mut Cmd, scratch: &mut Scratch, field: &str, value: i64) {
    cmd.write_arg(field.as_bytes());
    scratch.signed(value).emit(cmd);
}

fn optional_number(cmd: &mut Cmd, scratch: &mut Scratch, value: Option<u32>) {
    if let Some(value) = value {
        scratch.number(u64::from(value));
    }
    scratch.emit(cmd);
}

fn size(bytes: usize) -> u64 {
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// The create call. KEYS: record, run (state and budget counters), index,
/// scopes. ARGV: ttl ms, tool budget, run budget, tool counter field, tool
/// call id, fingerprint hex, claim flag, created-at ms, the deadline ms this
/// create would give the run (or empty), owner (or empty), then the new
/// record's field/value pairs.
pub(crate) fn create(
    script: &LuaScript,
    invoke: Invoke,
    prefix: &str,
    new: &NewInvocation,
    ttl_millis: u64,
) -> Cmd {
    let key = &new.key;
    let id = key.tool_call_id.as_str();
    let payload = new.request_json.len() + new.scope_json.len();
    let small = 4 * (prefix.len() + key.run_id.as_str().len() + 16) + 3 * id.len() + 384;
    let mut cmd = head(script, invoke, 4 + 10 + 20, payload + small);
    let mut scratch = Scratch::with_capacity(prefix.len() + key.run_id.as_str().len() + 96);
    cmd.write_arg(b"4");
    record_key(&mut cmd, &mut scratch, prefix, key);
    run_key(&mut cmd, &mut scratch, prefix, key, keys::BUDGET);
    run_key(&mut cmd, &mut scratch, prefix, key, keys::INDEX);
    run_key(&mut cmd, &mut scratch, prefix, key, keys::SCOPES);
    scratch.number(ttl_millis).emit(&mut cmd);
    optional_number(&mut cmd, &mut scratch, new.budgets.tool);
    optional_number(&mut cmd, &mut scratch, new.budgets.run);
    scratch
        .text(keys::TOOL_COUNTER)
        .text(&new.tool_name)
        .emit(&mut cmd);
    cmd.write_arg(id.as_bytes());
    let fingerprint = hex(new.scope_fingerprint.as_bytes());
    cmd.write_arg(&fingerprint);
    cmd.write_arg(if new.claim_scope { b"1" } else { b"0" });
    scratch.signed(new.created_at.unix_millis()).emit(&mut cmd);
    if let Some(max_duration) = new.run.max_duration {
        let deadline = invocation_core::clock::add(new.created_at, max_duration);
        scratch.signed(deadline.unix_millis());
    }
    scratch.emit(&mut cmd);
    cmd.write_arg(new.run.owner.as_deref().unwrap_or("").as_bytes());
    // The new record (see `codec`).
    pair(&mut cmd, "run_id", key.run_id.as_str().as_bytes());
    pair(&mut cmd, "tool_call_id", id.as_bytes());
    pair(&mut cmd, "tool_name", new.tool_name.as_bytes());
    pair(
        &mut cmd,
        STATUS,
        InvocationStatus::Projecting.as_str().as_bytes(),
    );
    pair(&mut cmd, "scope_fp", &fingerprint);
    time_pair(
        &mut cmd,
        &mut scratch,
        "created_at",
        new.created_at.unix_millis(),
    );
    number_pair(
        &mut cmd,
        &mut scratch,
        "request_bytes",
        size(new.request_json.len()),
    );
    number_pair(&mut cmd, &mut scratch, "attempt", new.attempt);
    pair(&mut cmd, "request", new.request_json.as_bytes());
    pair(&mut cmd, "scope", new.scope_json.as_bytes());
    cmd
}

/// Lower-case hex of a fingerprint, as `ScopeFingerprint`'s `Display`.
fn hex(bytes: &[u8; 32]) -> [u8; 64] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0_u8; 64];
    for (i, byte) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(byte >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(byte & 0x0f)];
    }
    out
}

/// The finalize call. KEYS: record, scopes, then `outbox`'s keys (the run
/// slot's outbox stream, and on a single node the set of busy streams). ARGV: new status, tool call id, then the outcome's
/// field/value pairs.
pub(crate) fn finalize(
    script: &LuaScript,
    invoke: Invoke,
    prefix: &str,
    key: &InvocationKey,
    finalization: &Finalization,
    outbox: OutboxKeys,
) -> Cmd {
    let id = key.tool_call_id.as_str();
    let fields = finalization.fields();
    let payload =
        fields.raw_json.map_or(0, str::len) + fields.agent_result_json.map_or(0, str::len);
    let small = 2 * (prefix.len() + key.run_id.as_str().len() + 16) + 3 * id.len() + 256;
    let mut cmd = head(script, invoke, 2 + 2 + 18, payload + small);
    let mut scratch = Scratch::with_capacity(prefix.len() + key.run_id.as_str().len() + 96);
    cmd.write_arg(outbox.numkeys());
    record_key(&mut cmd, &mut scratch, prefix, key);
    run_key(&mut cmd, &mut scratch, prefix, key, keys::SCOPES);
    outbox.write(&mut cmd, &mut scratch, prefix, key);
    cmd.write_arg(finalization.status().as_str().as_bytes());
    cmd.write_arg(id.as_bytes());
    outcome(&mut cmd, &mut scratch, finalization);
    cmd
}

/// The outcome's field/value pairs (see `codec`), as
/// [`Finalization::fields`] maps them.
fn outcome(cmd: &mut Cmd, scratch: &mut Scratch, finalization: &Finalization) {
    let fields = finalization.fields();
    pair(cmd, STATUS, fields.status.as_str().as_bytes());
    pair(
        cmd,
        "evidence_status",
        fields.evidence_status.as_str().as_bytes(),
    );
    if let Some(code) = fields.error_code {
        pair(cmd, "error_code", code.as_str().as_bytes());
    }
    if let Some(retryable) = fields.retryable {
        pair(cmd, "retryable", codec::flag(retryable));
    }
    time_pair(
        cmd,
        scratch,
        "finished_at",
        fields.finished_at.unix_millis(),
    );
    if let Some(raw) = fields.raw_json {
        number_pair(cmd, scratch, "raw_bytes", size(raw.len()));
    }
    if let Some(result) = fields.agent_result_json {
        number_pair(cmd, scratch, "result_bytes", size(result.len()));
    }
    if let Some(raw) = fields.raw_json {
        pair(cmd, "raw", raw.as_bytes());
    }
    if let Some(result) = fields.agent_result_json {
        pair(cmd, "result", result.as_bytes());
    }
    if let Some(source) = fields.replayed_from {
        pair(cmd, "replayed_from", source.as_str().as_bytes());
    }
    if let Some(redactions) = fields.redactions {
        pair(
            cmd,
            REDACTIONS,
            codec::encode_redactions(redactions).as_bytes(),
        );
    }
    if let Some(timings) = &fields.timings {
        pair(
            cmd,
            codec::TIMINGS,
            codec::encode_timings(timings).as_bytes(),
        );
    }
}

/// The `busy` call (single node): see `scripts::BUSY_SOURCE`. KEYS: the set
/// of busy outbox streams.
pub(crate) fn busy(script: &LuaScript, invoke: Invoke, set: &str) -> Cmd {
    let mut cmd = head(script, invoke, 2, set.len() + 8);
    cmd.write_arg(b"1");
    cmd.write_arg(set.as_bytes());
    cmd
}

/// The `note_refusal` call: see `scripts::NOTE_REFUSAL_SOURCE`.
pub(crate) fn note_refusal(
    script: &LuaScript,
    invoke: Invoke,
    keys: [&str; 2],
    principal: &str,
    refusal_json: &str,
    ttl_ms: u64,
    most: usize,
) -> Cmd {
    let mut cmd = head(script, invoke, 9, refusal_json.len() + 256);
    cmd.write_arg(b"2");
    for key in keys {
        cmd.write_arg(key.as_bytes());
    }
    cmd.write_arg(principal.as_bytes());
    cmd.write_arg(refusal_json.as_bytes());
    cmd.write_arg(ttl_ms.to_string().as_bytes());
    cmd.write_arg(most.to_string().as_bytes());
    cmd
}

/// The settle call. KEYS: record, scopes, then `outbox`'s keys (the run
/// slot's outbox stream, and on a single node the set of busy streams). ARGV: attempt token, ttl ms, tool call id, the number N of
/// outcome arguments, the ERROR outcome's N arguments, then the tombstone's
/// field/value pairs.
// One parameter per part of the script's contract, as `create` and `finalize`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn settle(
    script: &LuaScript,
    invoke: Invoke,
    prefix: &str,
    call: &Unsettled,
    error_code: ErrorCode,
    finished_at: Timestamp,
    ttl_millis: u64,
    outbox: OutboxKeys,
) -> Cmd {
    let key = &call.key;
    let mut cmd = head(script, invoke, 48, 1024);
    let mut scratch = Scratch::with_capacity(prefix.len() + key.run_id.as_str().len() + 96);
    cmd.write_arg(outbox.numkeys());
    record_key(&mut cmd, &mut scratch, prefix, key);
    run_key(&mut cmd, &mut scratch, prefix, key, keys::SCOPES);
    outbox.write(&mut cmd, &mut scratch, prefix, key);
    scratch.number(call.attempt).emit(&mut cmd);
    scratch.number(ttl_millis).emit(&mut cmd);
    cmd.write_arg(key.tool_call_id.as_str().as_bytes());
    let finalization = Finalization::Error {
        error_code,
        retryable: error_code.is_transient(),
        raw_json: None,
        finished_at,
        timings: None,
    };
    let mut written = Cmd::new();
    outcome(&mut written, &mut scratch, &finalization);
    scratch
        .number(size(written.args_iter().len()))
        .emit(&mut cmd);
    for arg in written.args_iter() {
        if let Arg::Simple(bytes) = arg {
            cmd.write_arg(bytes);
        }
    }
    for (field, value) in codec::tombstone(call, error_code, finished_at) {
        pair(&mut cmd, field, value.as_bytes());
    }
    cmd
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use aci_contracts::{ErrorCode, RunId, Timestamp, ToolCallId};
    use invocation_core::{Budgets, ReadyEvidence, ScopeFingerprint};
    use redis::Arg;

    use super::*;
    use crate::scripts::{CREATE, FINALIZE};

    fn words(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                Arg::Simple(bytes) => String::from_utf8(bytes.to_vec()).unwrap(),
                _ => panic!("no cursor in a script call"),
            })
            .collect()
    }

    fn key() -> InvocationKey {
        InvocationKey::new(RunId::new("r1").unwrap(), ToolCallId::new("c1").unwrap())
    }

    #[test]
    fn numbers_and_hex_are_written_as_display_would() {
        let mut cmd = Cmd::new();
        let mut scratch = Scratch::with_capacity(8);
        for value in [0, 7, 10, 1_234_567_890, u64::MAX] {
            scratch.number(value).emit(&mut cmd);
        }
        for value in [0, -1, -1_700_000_000_000, i64::MIN, i64::MAX] {
            scratch.signed(value).emit(&mut cmd);
        }
        let expected: Vec<String> = [0, 7, 10, 1_234_567_890, u64::MAX]
            .iter()
            .map(u64::to_string)
            .chain(
                [0, -1, -1_700_000_000_000, i64::MIN, i64::MAX]
                    .iter()
                    .map(i64::to_string),
            )
            .collect();
        assert_eq!(words(&cmd), expected);
        let fingerprint = ScopeFingerprint::of("t", &serde_json::json!({"q": 1}));
        assert_eq!(
            hex(fingerprint.as_bytes()).to_vec(),
            fingerprint.to_hex().into_bytes()
        );
    }

    #[test]
    fn create_follows_the_script_contract() {
        let scope = serde_json::json!({"q": "x"});
        let fingerprint = ScopeFingerprint::of("t", &scope);
        let new = NewInvocation {
            key: key(),
            tool_name: "t".to_owned(),
            request_json: r#"{"q":"x"}"#.to_owned(),
            scope_json: r#"{"q":"x"}"#.to_owned(),
            scope_fingerprint: fingerprint,
            created_at: Timestamp::from_unix_millis(1700),
            ttl: Duration::from_secs(1),
            budgets: Budgets {
                run: Some(5),
                tool: None,
            },
            claim_scope: true,
            run: invocation_core::RunTerms {
                max_duration: Some(Duration::from_millis(500)),
                owner: Some("alice".to_owned()),
            },
            attempt: 77,
        };
        let fp = fingerprint.to_hex();
        let expected: Vec<String> = [
            "EVALSHA",
            CREATE.sha.as_str(),
            "4",
            "p:{r1}:inv:c1",
            "p:{r1}:budget",
            "p:{r1}:index",
            "p:{r1}:scopes",
            "1000",
            "",
            "5",
            "tool:t",
            "c1",
            &fp,
            "1",
            "1700",
            "2200",
            "alice",
            "run_id",
            "r1",
            "tool_call_id",
            "c1",
            "tool_name",
            "t",
            "status",
            "PROJECTING",
            "scope_fp",
            &fp,
            "created_at",
            "1700",
            "request_bytes",
            "9",
            "attempt",
            "77",
            "request",
            r#"{"q":"x"}"#,
            "scope",
            r#"{"q":"x"}"#,
        ]
        .map(str::to_owned)
        .to_vec();
        assert_eq!(
            words(&create(&CREATE, Invoke::Sha, "p", &new, 1000)),
            expected
        );
        let eval = words(&create(&CREATE, Invoke::Source, "p", &new, 1000));
        assert_eq!(eval[0], "EVAL");
        assert_eq!(eval[1], CREATE.source);
        assert_eq!(eval[2..], expected[2..]);
    }

    #[test]
    fn finalize_follows_the_script_contract() {
        let ready = Finalization::Ready {
            evidence: ReadyEvidence::Found,
            raw_json: "RAW".to_owned(),
            agent_result_json: "RES".to_owned(),
            redactions: {
                let mut r = invocation_core::redact::Redactions::new();
                r.add("jwt", 2);
                r
            },
            replayed_from: Some(ToolCallId::new("c0").unwrap()),
            finished_at: Timestamp::from_unix_millis(42),
            timings: None,
        };
        let outbox = keys::outbox("p", "r1");
        assert_eq!(
            words(&finalize(
                &FINALIZE,
                Invoke::Sha,
                "p",
                &key(),
                &ready,
                OutboxKeys::Stream
            )),
            [
                "EVALSHA",
                FINALIZE.sha.as_str(),
                "3",
                "p:{r1}:inv:c1",
                "p:{r1}:scopes",
                &outbox,
                "READY",
                "c1",
                "status",
                "READY",
                "evidence_status",
                "EVIDENCE_FOUND",
                "finished_at",
                "42",
                "raw_bytes",
                "3",
                "result_bytes",
                "3",
                "raw",
                "RAW",
                "result",
                "RES",
                "replayed_from",
                "c0",
                "redactions",
                r#"{"jwt":2}"#,
            ]
        );
        // On a single node the set of busy streams is the fourth key.
        let single = words(&finalize(
            &FINALIZE,
            Invoke::Sha,
            "p",
            &key(),
            &ready,
            OutboxKeys::StreamAndBusy,
        ));
        assert_eq!(
            single[2..7],
            [
                "4",
                "p:{r1}:inv:c1",
                "p:{r1}:scopes",
                &outbox,
                "p:outbox-busy"
            ]
        );
        assert_eq!(single[7], "READY");
        let error = Finalization::Error {
            error_code: ErrorCode::ExecutionTimeout,
            retryable: false,
            raw_json: None,
            finished_at: Timestamp::from_unix_millis(43),
            timings: None,
        };
        assert_eq!(
            words(&finalize(
                &FINALIZE,
                Invoke::Sha,
                "p",
                &key(),
                &error,
                OutboxKeys::Off
            ))[5..],
            [
                "ERROR",
                "c1",
                "status",
                "ERROR",
                "evidence_status",
                "ERROR",
                "error_code",
                "EXECUTION_TIMEOUT",
                "retryable",
                "0",
                "finished_at",
                "43",
            ]
        );
    }
}

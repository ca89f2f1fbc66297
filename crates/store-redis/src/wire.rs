//! The exact script calls the store sends, for benchmarks that replay them
//! with another client (`redis-benchmark` in `cargo xtask bench redis`).
//!
//! Built by the same code as the store's own calls, so a replay follows any
//! change to the scripts, their keys or their arguments.

use invocation_core::{Finalization, InvocationKey, NewInvocation};
use redis::Arg;

use crate::calls::{self, Invoke};
use crate::scripts::{CREATE, FINALIZE, LuaScript};

/// One of the store's Lua scripts.
#[derive(Debug, Clone, Copy)]
pub struct Script {
    /// `create` or `finalize`.
    pub name: &'static str,
    /// Its SHA1, as `EVALSHA` names it.
    pub sha: &'static str,
    /// Its source, as `SCRIPT LOAD` takes it.
    pub source: &'static str,
}

fn script(name: &'static str, script: &'static LuaScript) -> Script {
    Script {
        name,
        sha: &script.sha,
        source: script.source,
    }
}

/// The create and finalize scripts.
#[must_use]
pub fn scripts() -> [Script; 2] {
    [script("create", &CREATE), script("finalize", &FINALIZE)]
}

fn argv(cmd: &redis::Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .filter_map(|arg| match arg {
            Arg::Simple(bytes) => Some(bytes.to_vec()),
            // Script calls carry no cursor.
            _ => None,
        })
        .collect()
}

/// The `EVALSHA` command, word by word, that a store with key prefix
/// `prefix` sends to create `new`.
#[must_use]
pub fn create_call(prefix: &str, new: &NewInvocation) -> Vec<Vec<u8>> {
    argv(&calls::create(
        &CREATE,
        Invoke::Sha,
        prefix,
        new,
        crate::ttl_millis(new.ttl),
    ))
}

/// The `EVALSHA` command, word by word, that a store with key prefix
/// `prefix` sends to finalize `key` with `finalization`.
#[must_use]
pub fn finalize_call(
    prefix: &str,
    key: &InvocationKey,
    finalization: &Finalization,
) -> Vec<Vec<u8>> {
    argv(&calls::finalize(
        &FINALIZE,
        Invoke::Sha,
        prefix,
        key,
        finalization,
        calls::OutboxKeys::Off,
    ))
}

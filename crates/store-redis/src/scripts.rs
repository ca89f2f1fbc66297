//! The Lua scripts: one round trip each for create, finalize, settle and
//! noting a refusal.
//!
//! Both are sent as `EVALSHA` with every key in `KEYS` (all of them carry the
//! run's hash tag, so Redis Cluster runs them on one node). When the server
//! answers `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`, a node that never
//! saw the script) the store sends the same call once as `EVAL`, which runs
//! the script and caches it on that node; the next call is `EVALSHA` again.
//!
//! Every branch that makes a record `READY` or `ERROR` (finalize, settle's
//! finalization and its tombstone) appends `run`, `call` to the outbox
//! stream of the run's slot (`XADD`, never trimmed) in the same script, when
//! the call passes that stream as `KEYS[3]` (a store with its outbox on): the
//! transition and its outbox entry happen together or not at all. On a single
//! node the call also passes the set of busy streams as `KEYS[4]`, and the
//! same branch adds the stream to it (`SADD`), so that a stream holding an
//! entry is always in that set (see `outbox.rs` and [`BUSY_SOURCE`]).

use std::sync::LazyLock;

/// `create`: KEYS = record, run (state and budget counters), index, scopes.
/// ARGV = ttl ms, tool budget (or empty), run budget (or empty), tool
/// counter field, tool call id, fingerprint hex, claim flag (`1`/`0`),
/// created-at ms, the deadline ms if this create starts the run (or empty),
/// owner (or empty), then the record's field/value pairs.
///
/// Checks in order: ttl, run owner, run deadline, duplicate, tool budget, run
/// budget; a refusal writes nothing. The run's first create stores
/// `started_at`, `deadline` and `owner` in the run hash.
///
/// Returns `{INVALID_TTL}`, `{RUN_OWNER}`, `{RUN_DEADLINE}`, `{DUPLICATE}`,
/// `{TOOL_BUDGET}`, `{RUN_BUDGET}` or `{CREATED, duplicate_of,
/// same_scope_kind, same_scope_id, started_at, deadline, owner}` (empty
/// strings for none).
pub(crate) const CREATE_SOURCE: &str = r"
local ttl = tonumber(ARGV[1])
if not ttl or ttl <= 0 then return {'INVALID_TTL'} end
local run = redis.call('HMGET', KEYS[2], 'started_at', 'deadline', 'owner')
local started, deadline, owner = run[1], run[2] or '', run[3] or ''
if started then
  if owner ~= ARGV[10] then return {'RUN_OWNER'} end
  if deadline ~= '' and tonumber(ARGV[8]) >= tonumber(deadline) then return {'RUN_DEADLINE'} end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'DUPLICATE'} end
local tool_budget = tonumber(ARGV[2])
if tool_budget and tonumber(redis.call('HGET', KEYS[2], ARGV[4]) or '0') >= tool_budget then
  return {'TOOL_BUDGET'}
end
local run_budget = tonumber(ARGV[3])
if run_budget and tonumber(redis.call('HGET', KEYS[2], 'run') or '0') >= run_budget then
  return {'RUN_BUDGET'}
end
if not started then
  started, deadline, owner = ARGV[8], ARGV[9], ARGV[10]
  redis.call('HSET', KEYS[2], 'started_at', started, 'deadline', deadline, 'owner', owner)
end
redis.call('HSET', KEYS[1], unpack(ARGV, 11))
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('HINCRBY', KEYS[2], 'run', 1)
redis.call('HINCRBY', KEYS[2], ARGV[4], 1)
if redis.call('PTTL', KEYS[2]) == -1 then redis.call('PEXPIRE', KEYS[2], ttl) end
redis.call('RPUSH', KEYS[3], ARGV[5])
if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
local first = ARGV[6] .. ':first'
local duplicate_of = redis.call('HGET', KEYS[4], first)
if not duplicate_of then redis.call('HSET', KEYS[4], first, ARGV[5]) end
local same_kind, same_id = '', ''
if ARGV[7] == '1' then
  local ready = redis.call('HGET', KEYS[4], ARGV[6] .. ':first_ready')
  if ready then
    same_kind, same_id = 'READY', ready
  else
    local claim = ARGV[6] .. ':claim'
    local holder = redis.call('HGET', KEYS[4], claim)
    if holder then
      same_kind, same_id = 'IN_FLIGHT', holder
    else
      redis.call('HSET', KEYS[4], claim, ARGV[5])
    end
  end
end
if redis.call('PTTL', KEYS[4]) < ttl then redis.call('PEXPIRE', KEYS[4], ttl) end
return {'CREATED', duplicate_of or '', same_kind, same_id, started, deadline, owner}
";

/// `finalize`: KEYS = record, scopes, and the outbox when the store keeps
/// one (and on a single node the set of busy streams). ARGV = new status, tool call
/// id, then the outcome's field/value pairs. Never touches a TTL.
///
/// Returns `{NOT_FOUND}`, `{NOT_PROJECTING, current}`, `{CORRUPT}` or
/// `{FINALIZED}`.
pub(crate) const FINALIZE_SOURCE: &str = r"
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {'CORRUPT'} end
  return {'NOT_FOUND'}
end
if status ~= 'PROJECTING' then return {'NOT_PROJECTING', status} end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if KEYS[3] then
  redis.call('XADD', KEYS[3], '*', 'run', redis.call('HGET', KEYS[1], 'run_id'), 'call', ARGV[2])
  if KEYS[4] then redis.call('SADD', KEYS[4], KEYS[3]) end
end
local fp = redis.call('HGET', KEYS[1], 'scope_fp')
if fp and redis.call('EXISTS', KEYS[2]) == 1 then
  if ARGV[1] == 'READY' then redis.call('HSETNX', KEYS[2], fp .. ':first_ready', ARGV[2]) end
  local claim = fp .. ':claim'
  if redis.call('HGET', KEYS[2], claim) == ARGV[2] then redis.call('HDEL', KEYS[2], claim) end
end
return {'FINALIZED'}
";

/// `settle`: KEYS = record, scopes, and the outbox when the store keeps one
/// (and on a single node the set of busy streams).
/// ARGV = attempt token, ttl ms, tool call
/// id, number N of outcome arguments, the outcome's N field/value arguments,
/// then the tombstone's field/value pairs.
///
/// Returns `{INVALID_TTL}`, `{OTHER_ATTEMPT}`, `{ALREADY_FINAL, status}`,
/// `{FINALIZED}`, `{TOMBSTONED}` or `{CORRUPT}`. Only the tombstone branch
/// sets a TTL: it creates the key (as a create would), with the record TTL.
pub(crate) const SETTLE_SOURCE: &str = r"
local ttl = tonumber(ARGV[2])
if not ttl or ttl <= 0 then return {'INVALID_TTL'} end
local n = tonumber(ARGV[4])
local current = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if current[1] then
  if current[2] ~= ARGV[1] then return {'OTHER_ATTEMPT'} end
  if current[1] ~= 'PROJECTING' then return {'ALREADY_FINAL', current[1]} end
  redis.call('HSET', KEYS[1], unpack(ARGV, 5, 4 + n))
  if KEYS[3] then
    redis.call('XADD', KEYS[3], '*', 'run', redis.call('HGET', KEYS[1], 'run_id'), 'call', ARGV[3])
    if KEYS[4] then redis.call('SADD', KEYS[4], KEYS[3]) end
  end
  local fp = redis.call('HGET', KEYS[1], 'scope_fp')
  if fp then
    local claim = fp .. ':claim'
    if redis.call('HGET', KEYS[2], claim) == ARGV[3] then redis.call('HDEL', KEYS[2], claim) end
  end
  return {'FINALIZED'}
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'CORRUPT'} end
redis.call('HSET', KEYS[1], unpack(ARGV, 5 + n))
redis.call('PEXPIRE', KEYS[1], ttl)
if KEYS[3] then
  redis.call('XADD', KEYS[3], '*', 'run', redis.call('HGET', KEYS[1], 'run_id'), 'call', ARGV[3])
  if KEYS[4] then redis.call('SADD', KEYS[4], KEYS[3]) end
end
return {'TOMBSTONED'}
";

/// `note_refusal`: KEYS = run (state) hash, refusals list. ARGV =
/// principal (or empty), the refusal's JSON, ttl ms, the most kept.
///
/// Drops the note (returns 0) when the run has a state whose owner is not
/// the principal (no owner and no principal are equal); else appends it,
/// keeps the newest ARGV[4], sets the list's TTL and returns 1.
pub(crate) const NOTE_REFUSAL_SOURCE: &str = r"
local ttl = tonumber(ARGV[3])
if not ttl or ttl <= 0 then return 0 end
local run = redis.call('HMGET', KEYS[1], 'started_at', 'owner')
if run[1] and (run[2] or '') ~= ARGV[1] then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[4]), -1)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
";

/// A script's source and SHA1 (computed by `redis::Script`).
#[derive(Debug)]
pub(crate) struct LuaScript {
    pub(crate) source: &'static str,
    pub(crate) sha: String,
}

impl LuaScript {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            sha: redis::Script::new(source).get_hash().to_owned(),
        }
    }
}

/// `busy` (single node only): KEYS = the set of busy outbox streams. Returns
/// `{stream, length, …}` for each member holding entries, and removes the
/// members that hold none, in the same atomic step: a finalizing script
/// that appends to a stream adds it to the set in its own atomic step, and
/// only this script removes members, each only when its stream is empty, so
/// a stream holding entries is never missing from the set. (It reads the
/// streams it finds in the set, which a script on a cluster could not: it is
/// never run there.)
pub(crate) const BUSY_SOURCE: &str = r"
local busy = {}
for _, stream in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local length = redis.call('XLEN', stream)
  if length == 0 then
    redis.call('SREM', KEYS[1], stream)
  else
    busy[#busy + 1] = stream
    busy[#busy + 1] = tostring(length)
  end
end
return busy
";

pub(crate) static CREATE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(CREATE_SOURCE));
pub(crate) static FINALIZE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(FINALIZE_SOURCE));
pub(crate) static SETTLE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(SETTLE_SOURCE));
pub(crate) static BUSY: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(BUSY_SOURCE));
pub(crate) static NOTE_REFUSAL: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(NOTE_REFUSAL_SOURCE));

/// Commands the scripts run inside Redis. `INFO commandstats` counts these
/// too; they are not round trips.
#[cfg(any(test, feature = "testing"))]
pub(crate) const SCRIPT_INTERNAL_COMMANDS: &[&str] = &[
    "exists", "hget", "hmget", "hset", "pexpire", "hincrby", "pttl", "rpush", "hsetnx", "hdel",
    "xadd", "ltrim", "sadd", "smembers", "xlen", "srem",
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn calls(sources: &[&str]) -> BTreeSet<String> {
        sources
            .iter()
            .flat_map(|source| source.split("redis.call('").skip(1))
            .filter_map(|rest| rest.split('\'').next())
            .map(str::to_ascii_lowercase)
            .collect()
    }

    #[test]
    fn internal_command_list_matches_the_scripts() {
        let listed: BTreeSet<String> = SCRIPT_INTERNAL_COMMANDS
            .iter()
            .map(|c| (*c).to_owned())
            .collect();
        assert_eq!(
            calls(&[
                CREATE_SOURCE,
                FINALIZE_SOURCE,
                SETTLE_SOURCE,
                NOTE_REFUSAL_SOURCE,
                BUSY_SOURCE
            ]),
            listed
        );
    }

    #[test]
    fn finalize_only_reads_and_updates_fields() {
        let expected: BTreeSet<String> =
            ["exists", "hdel", "hget", "hset", "hsetnx", "sadd", "xadd"]
                .iter()
                .map(|c| (*c).to_owned())
                .collect();
        assert_eq!(
            calls(&[FINALIZE_SOURCE]),
            expected,
            "no TTL command in finalize"
        );
    }

    #[test]
    fn every_terminal_branch_appends_to_the_outbox() {
        // finalize's one success branch; settle's finalization and tombstone.
        assert_eq!(FINALIZE_SOURCE.matches("'XADD', KEYS[3]").count(), 1);
        assert_eq!(SETTLE_SOURCE.matches("'XADD', KEYS[3]").count(), 2);
        // Each append marks its stream busy (single node), right after it.
        for source in [FINALIZE_SOURCE, SETTLE_SOURCE] {
            let lines: Vec<&str> = source.lines().map(str::trim).collect();
            for (at, line) in lines.iter().enumerate() {
                if line.contains("'XADD', KEYS[3]") {
                    assert_eq!(
                        lines[at + 1],
                        "if KEYS[4] then redis.call('SADD', KEYS[4], KEYS[3]) end"
                    );
                }
            }
        }
        // Only the busy script removes a member, and only an empty stream.
        for source in [FINALIZE_SOURCE, SETTLE_SOURCE, CREATE_SOURCE] {
            assert!(!source.contains("SREM"));
        }
        assert!(
            BUSY_SOURCE.contains("if length == 0 then\n    redis.call('SREM', KEYS[1], stream)")
        );
        for source in [FINALIZE_SOURCE, SETTLE_SOURCE, CREATE_SOURCE] {
            for trim in ["XTRIM", "MAXLEN", "MINID", "XDEL"] {
                assert!(!source.contains(trim), "no script trims the outbox");
            }
        }
    }
}

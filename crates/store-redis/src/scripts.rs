//! The two Lua scripts: one round trip each for create and finalize.
//!
//! Both are sent as `EVALSHA` with every key in `KEYS` (all of them carry the
//! run's hash tag, so Redis Cluster runs them on one node). When the server
//! answers `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`, a node that never
//! saw the script) the store sends the same call once as `EVAL`, which runs
//! the script and caches it on that node; the next call is `EVALSHA` again.

use std::sync::LazyLock;

/// `create`: KEYS = record, budget, index, scopes. ARGV = ttl ms, tool budget
/// (or empty), run budget (or empty), tool counter field, tool call id,
/// fingerprint hex, claim flag (`1`/`0`), then the record's field/value pairs.
///
/// Returns `{DUPLICATE}`, `{TOOL_BUDGET}`, `{RUN_BUDGET}` or
/// `{CREATED, duplicate_of, same_scope_kind, same_scope_id}` (empty strings
/// for none).
pub(crate) const CREATE_SOURCE: &str = r"
local ttl = tonumber(ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then return {'DUPLICATE'} end
local tool_budget = tonumber(ARGV[2])
if tool_budget and tonumber(redis.call('HGET', KEYS[2], ARGV[4]) or '0') >= tool_budget then
  return {'TOOL_BUDGET'}
end
local run_budget = tonumber(ARGV[3])
if run_budget and tonumber(redis.call('HGET', KEYS[2], 'run') or '0') >= run_budget then
  return {'RUN_BUDGET'}
end
redis.call('HSET', KEYS[1], unpack(ARGV, 8))
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
return {'CREATED', duplicate_of or '', same_kind, same_id}
";

/// `finalize`: KEYS = record, scopes. ARGV = new status, tool call id, then
/// the outcome's field/value pairs. Never touches a TTL.
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
local fp = redis.call('HGET', KEYS[1], 'scope_fp')
if fp and redis.call('EXISTS', KEYS[2]) == 1 then
  if ARGV[1] == 'READY' then redis.call('HSETNX', KEYS[2], fp .. ':first_ready', ARGV[2]) end
  local claim = fp .. ':claim'
  if redis.call('HGET', KEYS[2], claim) == ARGV[2] then redis.call('HDEL', KEYS[2], claim) end
end
return {'FINALIZED'}
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

pub(crate) static CREATE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(CREATE_SOURCE));
pub(crate) static FINALIZE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(FINALIZE_SOURCE));

/// Commands the scripts run inside Redis. `INFO commandstats` counts these
/// too; they are not round trips.
#[cfg(any(test, feature = "testing"))]
pub(crate) const SCRIPT_INTERNAL_COMMANDS: &[&str] = &[
    "exists", "hget", "hset", "pexpire", "hincrby", "pttl", "rpush", "hsetnx", "hdel",
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
        assert_eq!(calls(&[CREATE_SOURCE, FINALIZE_SOURCE]), listed);
    }

    #[test]
    fn finalize_only_reads_and_updates_fields() {
        let expected: BTreeSet<String> = ["exists", "hdel", "hget", "hset", "hsetnx"]
            .iter()
            .map(|c| (*c).to_owned())
            .collect();
        assert_eq!(
            calls(&[FINALIZE_SOURCE]),
            expected,
            "no TTL command in finalize"
        );
    }
}

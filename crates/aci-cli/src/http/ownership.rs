//! Runs belong to principals: the authenticated principal goes into the run
//! context, and the store records it as the run's owner atomically with the
//! run's first create, then refuses every other principal's create of that
//! run (`UNAUTHORIZED`) before anything runs or is recorded, whichever replica
//! the call reaches.

use invocation_core::RunContext;

use super::auth::Principal;

/// `ctx` carrying `principal` (none with `--insecure-no-auth`: anonymous
/// calls claim no run).
pub(crate) fn bind(ctx: RunContext, principal: Option<&Principal>) -> RunContext {
    match principal {
        Some(principal) => ctx.with_principal(principal.name()),
        None => ctx,
    }
}

//! Work per READY call on the memory store, for `cargo xtask bench
//! instructions` (which runs this under `valgrind --tool=callgrind` or
//! `perf stat`, twice with different counts; the difference over the
//! difference in calls is the instructions per call).
//!
//! `instructions_memory boundary <calls>`: warms up, then makes `<calls>` READY
//! calls one after another through the `ToolBoundary` with the fake tool of
//! `invocation-core`, on a current-thread runtime.

use std::error::Error;
use std::sync::Arc;

use aci_contracts::{InvocationStatus, RunId};
use invocation_core::testing::fake::{self, FakeExecutor, Mode, fake_tool};
use invocation_core::{RunContext, ToolBoundary, ToolEnvelope};
use store_memory::MemoryStore;

type Outcome<T> = Result<T, Box<dyn Error>>;

const TOOL: &str = "lookup_fake";
const WARM_UP: usize = 50;

fn main() -> Outcome<()> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("boundary") {
        return Err("usage: instructions_memory boundary <calls>".into());
    }
    let calls: usize = args.next().unwrap_or_default().parse()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let boundary = ToolBoundary::builder(Arc::new(MemoryStore::new()))
        .tool(fake_tool(TOOL, FakeExecutor::new()))
        .build()?;
    let run = RunId::new("instructions-run")?;
    let ctx = RunContext::new(
        run.clone(),
        invocation_core::CallPolicy::AUTHORIZED_READ_ONLY,
    );
    let arguments = fake::args(Mode::Found, "lookup timeout");
    runtime.block_on(async {
        for i in 0..WARM_UP + calls {
            let envelope =
                ToolEnvelope::new(format!("c{i}"), run.as_str(), TOOL, arguments.clone());
            let outcome = boundary.invoke(&ctx, envelope).await;
            if outcome.control.status != InvocationStatus::Ready {
                return Err(format!("call {i}: {:?}", outcome.control.error_code).into());
            }
        }
        Ok(())
    })
}

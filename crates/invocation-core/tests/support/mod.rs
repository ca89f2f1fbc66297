//! The boundary fixture of the core tests: the workspace's fake tool
//! ([`invocation_core::testing::fake`]) on an in-memory store with a manual
//! clock. Each behaviour is picked by the request's `mode`; counters prove
//! whether the executor and the projector ran.

#![allow(dead_code, unused_imports, unreachable_pub)]

use std::sync::Arc;
use std::time::Duration;

use invocation_core::testing::fake::{self, Counters, FakeExecutor, FakeProjector, FakeRequest};
use invocation_core::{Clock, Limits, ManualClock, ToolBoundary, ToolSpec};
use store_memory::MemoryStore;

pub use invocation_core::testing::fake::{Mode, SENTINEL, utf8_fill};

/// The fake tool's request, under the name these tests use.
pub type ProbeRequest = FakeRequest;

pub const TOOL: &str = "probe";

pub struct Fixture {
    pub boundary: ToolBoundary,
    pub store: MemoryStore,
    pub clock: ManualClock,
    pub counters: Counters,
    /// The fixture's executor; clones share its counters.
    pub executor: FakeExecutor,
}

pub fn fixture(limits: Limits) -> Fixture {
    fixture_with(limits, |spec| spec)
}

pub fn fixture_with(
    limits: Limits,
    customize: impl FnOnce(
        ToolSpec<FakeExecutor, FakeProjector>,
    ) -> ToolSpec<FakeExecutor, FakeProjector>,
) -> Fixture {
    let clock = ManualClock::at_default_start();
    let store = MemoryStore::with_clock(Arc::new(clock.clone()));
    let executor = FakeExecutor::new().advancing(clock.clone(), Duration::ZERO);
    let counters = executor.counters().clone();
    let spec = customize(
        ToolSpec::new(
            TOOL,
            "A probe tool.",
            executor.clone(),
            executor.projector(),
        )
        .read_only(true)
        .validate_with(|r: &ProbeRequest| r.text != "invalid"),
    );
    let boundary = ToolBoundary::builder(Arc::new(store.clone()))
        .clock(Arc::new(clock.clone()) as Arc<dyn Clock>)
        .limits(limits)
        .tool(spec)
        .build()
        .unwrap();
    Fixture {
        boundary,
        store,
        clock,
        counters,
        executor,
    }
}

pub fn args(mode: Mode, text: &str) -> String {
    fake::args(mode, text)
}

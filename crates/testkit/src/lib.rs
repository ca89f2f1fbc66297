//! Test support shared by every crate of the workspace, one job per module:
//!
//! - [`golden`](mod@golden): compare output with a committed golden file; a mismatch
//!   fails with a unified diff and the regenerate command, and
//!   `UPDATE_GOLDEN=1` rewrites the file (only when its content changed);
//! - [`proptest_config`]: property tests take their case count from
//!   `PROPTEST_CASES`, with a small default so CI stays fast;
//! - [`embedder_files`]: the local embedder's library and model, when
//!   fetched (tests that need them skip loudly, or fail under
//!   `ACI_E5_REQUIRED=1`).
//!
//! It depends on no workspace crate, so even `aci-contracts` (the bottom
//! layer) uses it. The one fake tool lives in `invocation-core`'s `testing`
//! feature (`invocation_core::testing::fake`), beside the conformance suite
//! that runs it.

mod embedder;
pub mod golden;
mod properties;

pub use embedder::{EmbedderFiles, embedder_files};
pub use golden::Golden;
pub use properties::{DEFAULT_PROPTEST_CASES, proptest_config, proptest_config_with_default};

//! Test support for tools and stores (feature `testing`).
//!
//! - [`fake`]: the one fake tool of the workspace, a counting executor and
//!   projector whose behaviour each request picks (found, no evidence,
//!   failures, panics, sleeps, sizes). Core tests, the conformance suite
//!   ([`conformance`](crate::conformance)), adapter tests, the example and the
//!   benchmark all run it.
//! - [`faults`]: [`FaultyStore`](faults::FaultyStore), a decorator over a real
//!   store whose writes stall or lose their answer (after or before the inner
//!   write ran), as planned by the test.
//! - [`secrets`]: planted secrets, an example of every built-in redaction
//!   rule, for the redaction tests of the tool crates.
//!
//! Golden files and the proptest configuration are in the `testkit` crate,
//! which every crate (even `aci-contracts`) can use.

pub mod fake;
pub mod faults;
pub mod secrets;

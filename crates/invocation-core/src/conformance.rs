//! The store conformance suite (feature `testing`).

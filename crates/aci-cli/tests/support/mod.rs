//! Test support of the `aci` binary's integration tests, one job per module
//! (as apalis' `test_utils` and OpenDAL's `testkit` split theirs):
//!
//! - [`browser`]: a headless Chromium over WebDriver (chromedriver), for
//!   the review page's tests;
//! - [`command`]: one-shot `aci` runs to their end, blocking or async, what
//!   they printed, and the records `aci inspect` shows;
//! - [`embeddings_server`]: an OpenAI-compatible `/v1/embeddings` server
//!   backed by the local model, or answering an error status;
//! - [`files`]: temporary files, directories and config files, unique ids;
//! - [`stdio`]: a raw JSON-RPC session with an `aci serve` child over its
//!   stdio, and a data source that never answers;
//! - [`contract`]: every `structuredContent` against the frozen schemas, and
//!   rmcp client calls checked that way, over stdio and HTTP alike;
//! - [`otlp`]: an OTLP/HTTP trace receiver that decodes what it gets;
//! - [`http`]: `aci serve --http` replicas and raw HTTP requests, JWT keys,
//!   and counting what MariaDB executed.
//!
//! Each test binary declares `mod support;` and imports the parts it needs.

#![allow(dead_code, reason = "each test binary uses part of the support")]

pub(crate) mod browser;
pub(crate) mod command;
pub(crate) mod contract;
pub(crate) mod embeddings_server;
pub(crate) mod files;
pub(crate) mod http;
pub(crate) mod otlp;
pub(crate) mod stdio;

use std::time::Duration;

/// A guard against a hung server or command, not a timing assertion.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(120);

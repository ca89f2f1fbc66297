//! One projection's redaction pass: the redactor and the counts of what it
//! replaced.

use std::borrow::Cow;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use super::{Redactions, Redactor};

/// The redaction pass of one projection: every text a projector puts in the
/// Model Observation goes through it **before** it is bounded, and it counts
/// what it replaced, per rule. A [`ProjectionContext`](crate::ProjectionContext)
/// holds the boundary's ([`ProjectionContext::redaction`](crate::ProjectionContext::redaction)).
///
/// `Sync`: the counts are behind a lock, taken once per text that had a
/// secret.
#[derive(Debug)]
pub struct RedactionPass<'r> {
    redactor: Option<&'r Redactor>,
    counts: Mutex<Redactions>,
}

impl<'r> RedactionPass<'r> {
    /// A pass with `redactor`.
    #[must_use]
    pub const fn new(redactor: &'r Redactor) -> Self {
        Self {
            redactor: Some(redactor),
            counts: Mutex::new(Redactions::new()),
        }
    }

    /// A pass that redacts nothing: for measuring what redaction costs, never
    /// for a boundary.
    #[must_use]
    pub const fn disabled() -> Self {
        Self {
            redactor: None,
            counts: Mutex::new(Redactions::new()),
        }
    }

    /// `text` with every secret replaced by `<redacted:RULE>`, counted
    /// ([`Redactor::redact_counting`]); borrowed when there is none.
    pub fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let Some(redactor) = self.redactor else {
            return Cow::Borrowed(text);
        };
        let mut counts = Redactions::new();
        let redacted = redactor.redact_counting(text, &mut counts);
        self.count(&counts);
        redacted
    }

    /// The value of a field named `key` (a SQL column, a JSON member),
    /// counted ([`Redactor::redact_field`]): replaced whole when the key
    /// names a secret.
    pub fn redact_field<'t>(&self, key: &str, value: &'t str) -> Cow<'t, str> {
        let Some(redactor) = self.redactor else {
            return Cow::Borrowed(value);
        };
        let mut counts = Redactions::new();
        let redacted = redactor.redact_field(key, value, &mut counts);
        self.count(&counts);
        redacted
    }

    /// [`Redactor::may_hold_secrets`]; false when the pass is disabled.
    #[must_use]
    pub fn may_hold_secrets(&self, text: &str) -> bool {
        self.redactor.is_some_and(|r| r.may_hold_secrets(text))
    }

    /// True when a field named `key` holds a secret ([`Redactor::names_secret`]).
    #[must_use]
    pub fn names_secret(&self, key: &str) -> bool {
        self.redactor.is_some_and(|r| r.names_secret(key))
    }

    /// Every string inside `value` redacted in place, counted
    /// ([`Redactor::redact_json`]); true when anything was replaced.
    pub fn redact_json(&self, value: &mut Value) -> bool {
        let Some(redactor) = self.redactor else {
            return false;
        };
        let mut counts = Redactions::new();
        redactor.redact_json(value, &mut counts);
        self.count(&counts);
        !counts.is_empty()
    }

    /// A pass with the same redactor and no counts yet: for a part of the
    /// observation that may still be left out (a row past the byte bound);
    /// [`add`](Self::add) its counts once it is kept.
    #[must_use]
    pub const fn fresh(&self) -> Self {
        Self {
            redactor: self.redactor,
            counts: Mutex::new(Redactions::new()),
        }
    }

    /// Adds `counts` (of a [`fresh`](Self::fresh) pass whose text was kept).
    pub fn add(&self, counts: &Redactions) {
        self.count(counts);
    }

    /// What was replaced so far, per rule.
    #[must_use]
    pub fn redactions(&self) -> Redactions {
        self.lock().clone()
    }

    /// What was replaced, per rule.
    #[must_use]
    pub fn into_redactions(self) -> Redactions {
        self.counts
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn count(&self, counts: &Redactions) {
        if !counts.is_empty() {
            self.lock().merge(counts);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Redactions> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

//! How many calls a replica runs at once: per replica and per principal.
//!
//! Admission never waits: a call over either limit is refused at once
//! (`OVERLOADED`), so a burst cannot queue without bound in the replica. The
//! per-principal counts live in a map that holds only principals with calls
//! in flight (an entry goes when its count reaches zero), so it is bounded by
//! the replica's limit, not by how many principals were ever seen.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The limits and the current counts.
#[derive(Debug)]
pub(crate) struct Admission {
    max_in_flight: usize,
    max_per_principal: Option<usize>,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    by_principal: HashMap<Arc<str>, usize>,
}

/// A call's place among those in flight; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Permit {
    admission: Arc<Admission>,
    principal: Option<Arc<str>>,
}

impl Admission {
    /// At most `max_in_flight` calls at once, and at most `max_per_principal`
    /// of one principal.
    pub(crate) fn new(max_in_flight: usize, max_per_principal: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            max_in_flight,
            max_per_principal,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// A place for one call of `principal`, or `None` when a limit is reached.
    pub(crate) fn try_admit(self: &Arc<Self>, principal: Option<&str>) -> Option<Permit> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if counts.total >= self.max_in_flight {
            return None;
        }
        let principal = match principal {
            Some(name) => {
                let key: Arc<str> = counts
                    .by_principal
                    .get_key_value(name)
                    .map_or_else(|| Arc::from(name), |(key, _)| Arc::clone(key));
                let count = counts.by_principal.get(name).copied().unwrap_or(0);
                if self.max_per_principal.is_some_and(|max| count >= max) {
                    return None;
                }
                counts.by_principal.insert(Arc::clone(&key), count + 1);
                Some(key)
            }
            None => None,
        };
        counts.total += 1;
        Some(Permit {
            admission: Arc::clone(self),
            principal,
        })
    }

    /// Calls in flight now.
    pub(crate) fn total(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    /// Calls in flight now, and principals with calls in flight.
    #[cfg(test)]
    fn in_flight(&self) -> (usize, usize) {
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        (counts.total, counts.by_principal.len())
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut counts = self
            .admission
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        counts.total = counts.total.saturating_sub(1);
        if let Some(principal) = &self.principal
            && let Some(count) = counts.by_principal.get_mut(principal)
        {
            *count = count.saturating_sub(1);
            if *count == 0 {
                counts.by_principal.remove(principal);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_limit_refuses_at_once_and_frees_on_drop() {
        let admission = Admission::new(2, None);
        let a = admission.try_admit(Some("a")).unwrap();
        let b = admission.try_admit(None).unwrap();
        assert!(admission.try_admit(Some("c")).is_none());
        drop(a);
        let c = admission.try_admit(Some("c")).unwrap();
        assert_eq!(admission.in_flight(), (2, 1));
        drop((b, c));
        assert_eq!(admission.in_flight(), (0, 0));
    }

    #[test]
    fn the_principal_limit_is_per_principal_and_its_map_shrinks() {
        let admission = Admission::new(10, Some(2));
        let permits: Vec<_> = (0..2)
            .map(|_| admission.try_admit(Some("a")).unwrap())
            .collect();
        assert!(admission.try_admit(Some("a")).is_none());
        let other = admission.try_admit(Some("b")).unwrap();
        assert_eq!(admission.in_flight(), (3, 2));
        drop(permits);
        drop(other);
        assert_eq!(admission.in_flight(), (0, 0));
        for i in 0..1000 {
            drop(admission.try_admit(Some(&format!("p{i}"))).unwrap());
        }
        assert_eq!(admission.in_flight(), (0, 0));
    }
}

//! Time as a port, so TTLs, deadlines and timestamps are testable without sleeping.

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aci_contracts::Timestamp;

/// A source of the current instant.
///
/// # Behavior
/// - `now` never fails; it may stand still (a manual clock) but a store or the
///   boundary never assumes it moves between two calls.
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Timestamp::from_unix_millis(millis)
    }
}

/// A clock that moves only when told to. Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock standing at `start`.
    #[must_use]
    pub fn new(start: Timestamp) -> Self {
        Self {
            millis: Arc::new(AtomicI64::new(start.unix_millis())),
        }
    }

    /// A clock standing at 2026-01-01T00:00:00Z.
    #[must_use]
    pub fn at_default_start() -> Self {
        Self::new(Timestamp::from_unix_millis(1_767_225_600_000))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.millis.fetch_add(by, Ordering::SeqCst);
    }

    /// Sets the clock to `to` (which may be earlier).
    pub fn set(&self, to: Timestamp) {
        self.millis.store(to.unix_millis(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_unix_millis(self.millis.load(Ordering::SeqCst))
    }
}

/// `t + d`, saturating.
#[must_use]
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    let d = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_unix_millis(t.unix_millis().saturating_add(d))
}

/// `t - d`, saturating.
#[must_use]
pub fn sub(t: Timestamp, d: Duration) -> Timestamp {
    let d = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_unix_millis(t.unix_millis().saturating_sub(d))
}

/// `later - earlier`, or zero when `later` is not after `earlier`.
#[must_use]
pub fn between(earlier: Timestamp, later: Timestamp) -> Duration {
    let millis = later.unix_millis().saturating_sub(earlier.unix_millis());
    Duration::from_millis(u64::try_from(millis).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::at_default_start();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_secs(90));
        assert_eq!(between(t0, clock.now()), Duration::from_secs(90));
        let shared = clock.clone();
        shared.advance(Duration::from_millis(1));
        assert_eq!(clock.now().unix_millis(), t0.unix_millis() + 90_001);
        assert_eq!(between(clock.now(), t0), Duration::ZERO);
    }

    #[test]
    fn system_clock_is_after_2025() {
        assert!(SystemClock.now().unix_millis() > 1_735_689_600_000);
    }
}

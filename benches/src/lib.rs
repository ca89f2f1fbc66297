//! The workspace's benchmarks, in one crate: each measures a figure against a
//! baseline measured in the same run and prints their ratio, with a
//! machine-readable last line. `cargo xtask bench <name>` runs one (and,
//! with `--record`, writes its last line into docs/benchmarks.md); that guide
//! says what each ratio means and its goal.
//!
//! - bench targets (`benches/`, `harness = false`): `redis`, `http`,
//!   `knowledge`, `logs`, `log_projection`, `boundary`, `redaction`,
//!   `redaction_mysql`, `redaction_rag`, `traces`, `archive`. Built
//!   by `cargo clippy --all-targets`; the heavy ones measure only when
//!   `cargo bench` passes `--bench` ([`full_run`]).
//! - binaries (`src/bin/`): `instructions_memory` and `instructions_redis`,
//!   the workloads `cargo xtask bench instructions` counts instructions of;
//!   `redact_scan`, the redaction rules over files of your own (false
//!   positives and misses, by rule).
//!
//! This library holds what several benches share: rounds in a rotated
//! order and medians over them.

/// Whether this is a measuring run: `cargo bench` passes `--bench`, while
/// `cargo test --benches` runs a bench target without it (then a heavy bench
/// returns at once).
#[must_use]
pub fn full_run() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// The median of `values` (the upper one of an even count); NaN when empty.
#[must_use]
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Median, lowest and highest of `values`; NaNs when empty.
#[must_use]
pub fn spread(values: &[f64]) -> (f64, f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let lowest = values.iter().copied().fold(f64::INFINITY, f64::min);
    let highest = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(values.to_vec()), lowest, highest)
}

/// The order of `rows` rows in round `round`: rotated by one each round, so
/// that no row always runs first (on a warm cache) or last (after the others'
/// garbage), and a slow spell of the machine falls on different rows.
pub fn rotated(rows: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..rows).map(move |k| (round + k) % rows.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spreads() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 3.0);
        assert!(median(Vec::new()).is_nan());
        assert_eq!(spread(&[0.9, 1.2, 1.0]), (1.0, 0.9, 1.2));
    }

    #[test]
    fn every_row_runs_once_per_round_and_first_in_turn() {
        for round in 0..4 {
            let mut order: Vec<usize> = rotated(3, round).collect();
            assert_eq!(order[0], round % 3);
            order.sort_unstable();
            assert_eq!(order, [0, 1, 2]);
        }
    }
}

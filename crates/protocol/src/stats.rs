//! Fixed-bucket histograms for metrics taken on hot paths (request latency, fsync time, batch
//! sizes): recording is a short scan of a static bound list and two relaxed atomic adds, with
//! no lock and no allocation. The HTTP listener reads a [`HistogramSnapshot`] at scrape time.
//!
//! It lives here, the one crate every other depends on, so that the network front end, the
//! log and the broker record into the same type.

use std::sync::atomic::{AtomicU64, Ordering};

/// Most buckets a histogram has (its bounds plus the overflow bucket).
pub const HISTOGRAM_BUCKETS_MAX: usize = 24;

/// Upper bounds (inclusive) in nanoseconds for latencies: 50 µs to 10 s.
pub const LATENCY_BOUNDS_NANOS: &[u64] = &[
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// A histogram of `u64` values over fixed bounds; values above the last bound fall in an
/// overflow bucket.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    buckets: [AtomicU64; HISTOGRAM_BUCKETS_MAX],
    sum: AtomicU64,
}

/// A histogram's counts at one moment: per bucket (not cumulative), the last being the
/// overflow bucket, so `counts.len() == bounds.len() + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub bounds: &'static [u64],
    pub counts: Vec<u64>,
    /// The sum of every value recorded (wrapping; a real count never gets there).
    pub sum: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, c| a.wrapping_add(*c))
    }
}

impl Histogram {
    /// `bounds` must be increasing and fewer than [`HISTOGRAM_BUCKETS_MAX`]: a programmer's
    /// constant, checked at compile time where the histogram is a `static`.
    pub const fn new(bounds: &'static [u64]) -> Histogram {
        assert!(
            bounds.len() < HISTOGRAM_BUCKETS_MAX,
            "too many histogram bounds"
        );
        Histogram {
            bounds,
            buckets: [const { AtomicU64::new(0) }; HISTOGRAM_BUCKETS_MAX],
            sum: AtomicU64::new(0),
        }
    }

    pub fn record(&self, value: u64) {
        let i = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// Records a duration in nanoseconds (saturating past `u64::MAX` ns, 584 years).
    pub fn record_duration(&self, elapsed: std::time::Duration) {
        self.record(u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let counts = self.buckets[..=self.bounds.len()]
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        HistogramSnapshot {
            bounds: self.bounds,
            counts,
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_that_holds_them() {
        static BOUNDS: &[u64] = &[1, 10, 100];
        let h = Histogram::new(BOUNDS);
        for v in [0, 1, 2, 10, 11, 100, 101, u64::MAX / 2] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 2, 2]);
        assert_eq!(s.count(), 8);
        assert_eq!(s.sum, 225 + u64::MAX / 2);
    }
}

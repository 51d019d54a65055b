//! Quotas: the rates a principal may use on each broker ([`QuotaConfig`], stored in the
//! MetaServer image under the principal or `<default>`), and the token-bucket arithmetic
//! ([`RateLimiter`]) a broker uses to decide how long to delay a principal's responses.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tinymq_protocol::messages as m;

use crate::error::AuthError;
use crate::principal::{Principal, PrincipalKind};

/// The quota key that applies to every user without a quota of its own.
pub const QUOTA_DEFAULT_PRINCIPAL: &str = "<default>";

/// Rates per second on one broker; 0 means unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QuotaConfig {
    pub produce_bytes_per_sec: u64,
    pub fetch_bytes_per_sec: u64,
    pub requests_per_sec: u64,
}

impl QuotaConfig {
    pub fn unlimited() -> QuotaConfig {
        QuotaConfig::default()
    }

    pub fn is_unlimited(&self) -> bool {
        *self == QuotaConfig::default()
    }

    /// The wire `Quota` of this config for `principal` (a principal string or `<default>`).
    pub fn to_wire(&self, principal: &str) -> m::Quota {
        m::Quota {
            principal: principal.to_string(),
            produce_bytes_per_sec: self.produce_bytes_per_sec,
            fetch_bytes_per_sec: self.fetch_bytes_per_sec,
            requests_per_sec: self.requests_per_sec,
        }
    }

    /// The principal key (checked: `<default>` or a `User:NAME` without wildcard) and the
    /// config of a wire `Quota`.
    pub fn from_wire(q: &m::Quota) -> Result<(String, QuotaConfig), AuthError> {
        check_quota_principal(&q.principal)?;
        let config = QuotaConfig {
            produce_bytes_per_sec: q.produce_bytes_per_sec,
            fetch_bytes_per_sec: q.fetch_bytes_per_sec,
            requests_per_sec: q.requests_per_sec,
        };
        Ok((q.principal.clone(), config))
    }
}

/// Refuses a quota key other than `<default>` or one user (`User:*` is what `<default>` says).
pub fn check_quota_principal(principal: &str) -> Result<(), AuthError> {
    if principal == QUOTA_DEFAULT_PRINCIPAL {
        return Ok(());
    }
    let p = Principal::parse(principal)?;
    if p.kind != PrincipalKind::User || p.name == "*" {
        return Err(AuthError::InvalidQuota(format!(
            "a quota names one user (User:NAME) or '{QUOTA_DEFAULT_PRINCIPAL}'"
        )));
    }
    Ok(())
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The longest delay [`RateLimiter::record`] asks for, and the most debt it keeps: one huge
/// request (or a rate lowered to almost nothing) throttles its principal for at most this
/// long instead of for hours, and a broker never holds a response (or a connection) for
/// longer than this. A principal that keeps sending is still held to its rate: each
/// request past the cap waits the full cap again.
pub const QUOTA_DELAY_MAX: Duration = Duration::from_secs(30);

/// A token bucket refilled at `rate_per_sec` holding at most one second's worth (the burst).
/// Each [`RateLimiter::record`] takes `amount` from it, going into debt if needed, and answers
/// how long the caller must wait before its next use so that the long-run rate stays at the
/// quota. Time is whatever `Instant`s the caller passes, so tests need no clock.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    rate_per_sec: u64,
    anchor: Option<Instant>,
    /// The "theoretical arrival time" of GCRA, in ns after `anchor` plus one second: the bucket
    /// is full while it is at or before `now - 1 s`, and owes `tat - now` while after `now`.
    tat_nanos: u128,
}

impl RateLimiter {
    /// A limiter at `rate_per_sec` (0 = unlimited), starting with a full bucket.
    pub fn new(rate_per_sec: u64) -> RateLimiter {
        RateLimiter {
            rate_per_sec,
            anchor: None,
            tat_nanos: 0,
        }
    }

    pub fn rate_per_sec(&self) -> u64 {
        self.rate_per_sec
    }

    /// Changes the rate; debt already owed stays owed.
    pub fn set_rate(&mut self, rate_per_sec: u64) {
        self.rate_per_sec = rate_per_sec;
    }

    /// Takes `amount` at `now` and returns the delay owed (zero while within the burst), at
    /// most [`QUOTA_DELAY_MAX`]: debt beyond it is forgiven.
    pub fn record(&mut self, now: Instant, amount: u64) -> Duration {
        if self.rate_per_sec == 0 {
            return Duration::ZERO;
        }
        let anchor = *self.anchor.get_or_insert(now);
        // Offsetting by one second makes a fresh bucket full without negative numbers.
        let now_nanos = now
            .saturating_duration_since(anchor)
            .as_nanos()
            .saturating_add(NANOS_PER_SEC);
        let cost = u128::from(amount).saturating_mul(NANOS_PER_SEC) / u128::from(self.rate_per_sec);
        let base = self.tat_nanos.max(now_nanos.saturating_sub(NANOS_PER_SEC));
        let cap = now_nanos.saturating_add(QUOTA_DELAY_MAX.as_nanos());
        self.tat_nanos = base.saturating_add(cost).min(cap);
        let owed = self.tat_nanos.saturating_sub(now_nanos);
        Duration::from_nanos(u64::try_from(owed).unwrap_or(u64::MAX))
    }

    /// The delay owed at `now` without taking anything.
    pub fn owed(&self, now: Instant) -> Duration {
        let Some(anchor) = self.anchor else {
            return Duration::ZERO;
        };
        let now_nanos = now
            .saturating_duration_since(anchor)
            .as_nanos()
            .saturating_add(NANOS_PER_SEC);
        let owed = self.tat_nanos.saturating_sub(now_nanos);
        Duration::from_nanos(u64::try_from(owed).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip_and_principal_check() {
        let q = QuotaConfig {
            produce_bytes_per_sec: 1,
            fetch_bytes_per_sec: u64::MAX,
            requests_per_sec: 0,
        };
        for key in ["User:alice", QUOTA_DEFAULT_PRINCIPAL] {
            assert_eq!(
                QuotaConfig::from_wire(&q.to_wire(key)).unwrap(),
                (key.to_string(), q)
            );
        }
        for bad in ["", "alice", "User:*", "Node:broker-1", "<Default>"] {
            assert!(QuotaConfig::from_wire(&q.to_wire(bad)).is_err(), "{bad}");
        }
        assert!(QuotaConfig::unlimited().is_unlimited());
        assert!(!q.is_unlimited());
    }

    #[test]
    fn burst_of_one_second_then_delays() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(1000);
        assert_eq!(r.record(t0, 600), Duration::ZERO);
        assert_eq!(r.record(t0, 400), Duration::ZERO);
        assert_eq!(r.record(t0, 500), Duration::from_millis(500));
        assert_eq!(r.owed(t0), Duration::from_millis(500));
        assert_eq!(r.owed(t0 + Duration::from_secs(1)), Duration::ZERO);
        // After a long idle time the bucket is full again, never fuller.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(r.record(later, 1000), Duration::ZERO);
        assert_eq!(r.record(later, 1), Duration::from_millis(1));
    }

    #[test]
    fn long_run_rate_is_held() {
        // A caller that always waits what it owes moves `rate` units per second, plus the
        // one-second burst.
        let rate = 10_000u64;
        let t0 = Instant::now();
        let mut now = t0;
        let mut r = RateLimiter::new(rate);
        let mut sent = 0u64;
        while now.duration_since(t0) < Duration::from_secs(60) {
            let amount = 1 + (sent % 3000);
            now += r.record(now, amount);
            sent += amount;
        }
        let secs = now.duration_since(t0).as_secs_f64();
        let achieved = (sent - rate) as f64 / secs;
        assert!(
            (achieved - rate as f64).abs() / (rate as f64) < 0.01,
            "{achieved}"
        );
    }

    #[test]
    fn unlimited_and_extremes_do_not_overflow() {
        let t0 = Instant::now();
        let mut unlimited = RateLimiter::new(0);
        assert_eq!(unlimited.record(t0, u64::MAX), Duration::ZERO);

        let mut huge = RateLimiter::new(u64::MAX);
        assert_eq!(huge.record(t0, u64::MAX), Duration::ZERO);
        assert_eq!(huge.record(t0, u64::MAX), Duration::from_secs(1));
        assert_eq!(huge.record(t0, 1000), Duration::from_secs(1));

        let mut slow = RateLimiter::new(1);
        for _ in 0..10 {
            assert_eq!(slow.record(t0, u64::MAX), QUOTA_DELAY_MAX);
        }

        // An Instant before the first one counts as the first.
        let mut r = RateLimiter::new(10);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(r.record(later, 10), Duration::ZERO);
        assert_eq!(r.record(t0, 10), Duration::from_secs(1));
    }

    #[test]
    fn delay_and_debt_are_capped() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(1000);
        // One second of burst, then an hour's worth: the delay asked is the cap.
        assert_eq!(r.record(t0, 1000 + 3_600_000), QUOTA_DELAY_MAX);
        assert_eq!(r.owed(t0), QUOTA_DELAY_MAX);
        // The debt kept is the cap too: once it has been waited out, the principal may go on.
        let after = t0 + QUOTA_DELAY_MAX;
        assert_eq!(r.owed(after), Duration::ZERO);
        assert_eq!(r.record(after, 500), Duration::from_millis(500));
        // Still held to the rate: more debt at once waits the cap again.
        assert_eq!(r.record(after, 1_000_000), QUOTA_DELAY_MAX);
        // Below the cap nothing changes.
        let mut r = RateLimiter::new(1000);
        assert_eq!(r.record(t0, 1000 + 29_000), Duration::from_secs(29));
    }

    #[test]
    fn rate_change_keeps_debt() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(100);
        r.record(t0, 300);
        assert_eq!(r.owed(t0), Duration::from_secs(2));
        r.set_rate(1000);
        assert_eq!(r.owed(t0), Duration::from_secs(2));
        assert_eq!(r.rate_per_sec(), 1000);
    }
}

//! Failed logins counted per source address, shared by every connection of a listener: the
//! per-connection delays and closes do nothing against a guesser that opens connection after
//! connection, so an address with [`LOGIN_FAILURES_PER_IP_MAX`] failures within
//! [`LOGIN_FAILURE_WINDOW`] is refused further attempts (good passwords too: a lockout) until
//! that window, which starts at its first failure, has passed.
//!
//! IPv6 addresses count by their /64 (one host usually holds the whole prefix), IPv4-mapped
//! ones as IPv4. At most `ips_max` addresses are tracked; a new one beyond it evicts the
//! oldest window. The lock is a plain mutex taken for a lookup, never across an await.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failed logins one address may make within [`LOGIN_FAILURE_WINDOW`]
/// (`login_failures_per_ip_max`).
pub const LOGIN_FAILURES_PER_IP_MAX: u32 = 10;
/// The window failures are counted in, from an address's first failure.
pub const LOGIN_FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Addresses whose failures are tracked at once (`login_limiter_ips_max`).
pub const LOGIN_LIMITER_IPS_MAX: usize = 10_000;

/// Whether an address may try to log in now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Allowed,
    /// Over its budget; `first` on the first refusal of the window (log that one).
    Refused {
        first: bool,
    },
}

struct Window {
    started: Instant,
    failures: u32,
    refusal_logged: bool,
}

/// The shared failure counts of one listener.
pub struct LoginLimiter {
    failures_max: u32,
    window: Duration,
    ips_max: usize,
    windows: Mutex<HashMap<IpAddr, Window>>,
}

impl Default for LoginLimiter {
    fn default() -> LoginLimiter {
        LoginLimiter::new(
            LOGIN_FAILURES_PER_IP_MAX,
            LOGIN_FAILURE_WINDOW,
            LOGIN_LIMITER_IPS_MAX,
        )
    }
}

impl LoginLimiter {
    pub fn new(failures_max: u32, window: Duration, ips_max: usize) -> LoginLimiter {
        LoginLimiter {
            failures_max,
            window,
            ips_max: ips_max.max(1),
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `ip` may attempt a login at `now`.
    pub fn admit(&self, ip: IpAddr, now: Instant) -> Admission {
        let Ok(mut windows) = self.windows.lock() else {
            return Admission::Allowed;
        };
        let key = source(ip);
        let Some(w) = windows.get_mut(&key) else {
            return Admission::Allowed;
        };
        if now.saturating_duration_since(w.started) >= self.window {
            windows.remove(&key);
            return Admission::Allowed;
        }
        if w.failures < self.failures_max {
            return Admission::Allowed;
        }
        let first = !w.refusal_logged;
        w.refusal_logged = true;
        Admission::Refused { first }
    }

    /// Counts a failed login from `ip` at `now`.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        let Ok(mut windows) = self.windows.lock() else {
            return;
        };
        let key = source(ip);
        if let Some(w) = windows.get_mut(&key) {
            if now.saturating_duration_since(w.started) < self.window {
                w.failures = w.failures.saturating_add(1);
                return;
            }
            windows.remove(&key);
        }
        if windows.len() >= self.ips_max {
            let window = self.window;
            windows.retain(|_, w| now.saturating_duration_since(w.started) < window);
        }
        if windows.len() >= self.ips_max {
            let oldest = windows
                .iter()
                .min_by_key(|(_, w)| w.started)
                .map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                windows.remove(&oldest);
            }
        }
        let fresh = Window {
            started: now,
            failures: 1,
            refusal_logged: false,
        };
        windows.insert(key, fresh);
    }

    /// Addresses tracked now.
    pub fn tracked(&self) -> usize {
        self.windows.lock().map(|w| w.len()).unwrap_or(0)
    }
}

/// What failures are counted under: IPv4 as is, IPv6 by its /64.
fn source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_over_its_budget_is_refused_until_the_window_passes() {
        let limiter = LoginLimiter::new(3, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        let a = ip("10.0.0.1");
        for _ in 0..3 {
            assert_eq!(limiter.admit(a, t0), Admission::Allowed);
            limiter.failed(a, t0);
        }
        assert_eq!(limiter.admit(a, t0), Admission::Refused { first: true });
        assert_eq!(limiter.admit(a, t0), Admission::Refused { first: false });
        // Another address is not affected.
        assert_eq!(limiter.admit(ip("10.0.0.2"), t0), Admission::Allowed);
        let later = t0 + Duration::from_secs(60);
        assert_eq!(limiter.admit(a, later), Admission::Allowed);
        assert_eq!(limiter.tracked(), 0);
    }

    #[test]
    fn ipv6_counts_by_prefix_and_mapped_ipv4_as_ipv4() {
        let limiter = LoginLimiter::new(2, Duration::from_secs(60), 100);
        let t0 = Instant::now();
        limiter.failed(ip("2001:db8::1"), t0);
        limiter.failed(ip("2001:db8::2"), t0);
        assert!(matches!(
            limiter.admit(ip("2001:db8::ffff"), t0),
            Admission::Refused { .. }
        ));
        assert_eq!(limiter.admit(ip("2001:db9::1"), t0), Admission::Allowed);
        limiter.failed(ip("::ffff:10.0.0.1"), t0);
        limiter.failed(ip("10.0.0.1"), t0);
        assert!(matches!(
            limiter.admit(ip("10.0.0.1"), t0),
            Admission::Refused { .. }
        ));
    }

    #[test]
    fn the_map_stays_bounded_and_evicts_the_oldest() {
        let limiter = LoginLimiter::new(1, Duration::from_secs(60), 10);
        let t0 = Instant::now();
        for i in 0..20u8 {
            let at = t0 + Duration::from_millis(u64::from(i));
            limiter.failed(IpAddr::from([10, 0, 0, i]), at);
        }
        assert_eq!(limiter.tracked(), 10);
        let at = t0 + Duration::from_millis(30);
        assert_eq!(limiter.admit(ip("10.0.0.0"), at), Admission::Allowed);
        assert!(matches!(
            limiter.admit(ip("10.0.0.19"), at),
            Admission::Refused { .. }
        ));
    }
}

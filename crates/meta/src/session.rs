//! Broker sessions as the MetaServer leader keeps them, in memory: when each broker was last
//! heard from, whether a MetaServer node saw its heartbeat connection closed from its side,
//! and which incarnations the leader has decided to fence. Pure bookkeeping on instants the
//! caller passes, so the rules are tested without a clock; [`crate::service`] drives it.
//!
//! Two ways a session ends:
//! - **Expiry**: no heartbeat for [`BROKER_SESSION_TIMEOUT`]. A broker trusts its own session
//!   for less than that after each heartbeat it sent and the leader answered, so a broker cut
//!   off (or paused) stops acknowledging writes before the leader fences it.
//! - **Disconnect**: a node saw the broker's heartbeat connection closed from the broker's
//!   side — the connection the newest heartbeat the leader recorded came over, as the
//!   broker's token for it says — and no heartbeat came within [`BROKER_DISCONNECT_GRACE`] of
//!   the leader hearing of it. A broker never trusts its session past the connection its confirming heartbeat used,
//!   so a live broker whose connection closed is not acting as a leader either.
//!
//! Deciding to fence and answering a heartbeat happen under one lock: once an incarnation is
//! marked, its heartbeats are answered "fenced" even before the fence is committed, so no
//! heartbeat renews a broker's trust in leaderships the leader is taking away.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

pub use crate::command::BROKER_SESSION_TIMEOUT;

/// How long after the leader hears that a broker's heartbeat connection closed it waits for a
/// heartbeat before fencing: a live broker reconnects and heartbeats within one
/// [heartbeat interval](BROKER_HEARTBEAT_INTERVAL) and a round trip.
pub const BROKER_DISCONNECT_GRACE: Duration = Duration::from_millis(300);
/// How often a broker heartbeats (the broker's loop uses this): several per session.
pub const BROKER_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(200);

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Not heard from for the session timeout.
    Expired,
    /// Its heartbeat connection closed and no heartbeat followed within the grace.
    Disconnected,
}

#[derive(Debug, Clone, Copy)]
struct Session {
    epoch: u64,
    /// The broker's token for the connection its newest heartbeat came over (0: none yet).
    connection: u64,
    last_seen: Instant,
    /// When the leader heard that the broker's heartbeat connection closed, if no heartbeat
    /// came since.
    left_at: Option<Instant>,
}

#[derive(Debug, Default)]
struct Inner {
    by_broker: HashMap<u32, Session>,
    /// Incarnations (id, epoch) the leader decided to fence; their heartbeats are refused.
    fencing: HashSet<(u32, u64)>,
}

#[derive(Debug, Default)]
pub struct Sessions {
    inner: parking_lot::Mutex<Inner>,
}

impl Sessions {
    /// Broker `id` of registration `epoch` was heard from at `now`, over the connection the
    /// broker calls `connection`. `false` when that incarnation is being fenced: its heartbeat
    /// must be answered "fenced".
    pub fn seen(&self, id: u32, epoch: u64, connection: u64, now: Instant) -> bool {
        let mut inner = self.inner.lock();
        if inner.fencing.contains(&(id, epoch)) {
            return false;
        }
        let session = Session {
            epoch,
            connection,
            last_seen: now,
            left_at: None,
        };
        match inner.by_broker.get_mut(&id) {
            // A late heartbeat of an older registration says nothing about the current one.
            Some(s) if s.epoch > epoch => {}
            Some(s) => *s = session,
            None => {
                inner.by_broker.insert(id, session);
            }
        }
        true
    }

    /// A node saw broker `id`'s heartbeat connection `connection` closed from its side;
    /// `epoch` is the registration current in the leader's image. Counts only when the
    /// newest heartbeat recorded came over that connection: a report about a connection the
    /// broker has since replaced (it timed out and reconnected elsewhere) ends nothing, since
    /// the broker may trust a heartbeat answered over its new connection.
    pub fn left(&self, id: u32, epoch: u64, connection: u64, now: Instant) {
        let mut inner = self.inner.lock();
        if let Some(s) = inner.by_broker.get_mut(&id) {
            if s.epoch == epoch && connection != 0 && s.connection == connection {
                s.left_at = Some(now);
            }
        }
    }

    /// Whether the session of broker `id`, registration `epoch`, has ended at `now`, counting
    /// no silence before `since` (when this node started leading, or last restarted sessions
    /// after a stall). When it has, the incarnation is marked for fencing in the same step.
    pub fn end_if_over(&self, id: u32, epoch: u64, since: Instant, now: Instant) -> Option<Ended> {
        let mut inner = self.inner.lock();
        let session = inner
            .by_broker
            .get(&id)
            .filter(|s| s.epoch == epoch)
            .copied();
        let last_seen = session.map_or(since, |s| s.last_seen.max(since));
        let left_at = session.and_then(|s| s.left_at);
        let ended = if now.saturating_duration_since(last_seen) > BROKER_SESSION_TIMEOUT {
            Ended::Expired
        } else if left_at.is_some_and(|at| {
            // A stall restarts the grace too: heartbeats sent meanwhile were not read yet.
            now.saturating_duration_since(at.max(since)) > BROKER_DISCONNECT_GRACE
        }) {
            Ended::Disconnected
        } else {
            return None;
        };
        inner.fencing.insert((id, epoch));
        Some(ended)
    }

    /// Forgets fencing marks of incarnations `current` no longer names (fenced and registered
    /// again, or removed): `current(id, epoch)` says whether `epoch` is still broker `id`'s.
    pub fn retain_fencing(&self, current: impl Fn(u32, u64) -> bool) {
        self.inner
            .lock()
            .fencing
            .retain(|(id, epoch)| current(*id, *epoch));
    }

    /// Forgets every session and fencing mark: this node stopped leading, and the next term
    /// it leads (if any) starts afresh, with no closed connection heard of in an earlier one.
    pub fn end_term(&self) {
        let mut inner = self.inner.lock();
        inner.fencing.clear();
        inner.by_broker.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_silent_broker_expires_after_the_session_timeout_counted_from_the_later_of_its_beat_and_since(
    ) {
        let (s, t0) = (Sessions::default(), Instant::now());
        assert!(s.seen(1, 5, 11, t0));
        let at = t0 + BROKER_SESSION_TIMEOUT;
        assert_eq!(s.end_if_over(1, 5, t0, at), None);
        assert_eq!(s.end_if_over(1, 5, t0, at + ms(1)), Some(Ended::Expired));
        // A broker never heard by this leader counts from `since`.
        let since = t0 + ms(500);
        assert_eq!(
            s.end_if_over(2, 1, since, since + BROKER_SESSION_TIMEOUT),
            None
        );
        assert_eq!(
            s.end_if_over(2, 1, since, at + ms(501)),
            Some(Ended::Expired)
        );
    }

    #[test]
    fn a_closed_connection_ends_the_session_after_the_grace_unless_a_heartbeat_follows() {
        let (s, t0) = (Sessions::default(), Instant::now());
        assert!(s.seen(1, 5, 11, t0));
        s.left(1, 5, 11, t0 + ms(10));
        let over = t0 + ms(10) + BROKER_DISCONNECT_GRACE;
        assert_eq!(s.end_if_over(1, 5, t0, over), None, "within the grace");
        assert_eq!(
            s.end_if_over(1, 5, t0, over + ms(1)),
            Some(Ended::Disconnected)
        );

        // Broker 2 reconnects and heartbeats within the grace: its session goes on.
        assert!(s.seen(2, 7, 11, t0));
        s.left(2, 7, 11, t0 + ms(10));
        assert!(s.seen(2, 7, 11, t0 + ms(100)));
        assert_eq!(s.end_if_over(2, 7, t0, t0 + ms(1000)), None);
    }

    #[test]
    fn a_heartbeat_after_the_decision_to_fence_is_refused_until_the_broker_registers_again() {
        let (s, t0) = (Sessions::default(), Instant::now());
        assert!(s.seen(1, 5, 11, t0));
        let late = t0 + BROKER_SESSION_TIMEOUT + ms(1);
        assert_eq!(s.end_if_over(1, 5, t0, late), Some(Ended::Expired));
        assert!(
            !s.seen(1, 5, 11, late),
            "the fenced incarnation's beat is refused"
        );
        // Registered again (epoch 6): heard, and the old mark goes once the image moved on.
        assert!(s.seen(1, 6, 11, late));
        s.retain_fencing(|_, epoch| epoch == 6);
        assert!(
            s.seen(1, 5, 11, late),
            "mark forgotten (the image refuses epoch 5 itself)"
        );
    }

    #[test]
    fn news_about_another_registration_does_not_touch_the_current_one() {
        let (s, t0) = (Sessions::default(), Instant::now());
        assert!(s.seen(1, 6, 11, t0));
        s.left(1, 5, 11, t0);
        assert_eq!(
            s.end_if_over(1, 6, t0, t0 + ms(1000)),
            None,
            "old epoch's close"
        );
        assert!(s.seen(1, 5, 11, t0 + ms(1000)), "a late beat of epoch 5");
        let at = t0 + BROKER_SESSION_TIMEOUT + ms(1);
        assert_eq!(
            s.end_if_over(1, 6, t0, at),
            Some(Ended::Expired),
            "not renewed by it"
        );
    }

    #[test]
    fn a_close_of_a_replaced_or_unknown_connection_ends_nothing() {
        let (s, t0) = (Sessions::default(), Instant::now());
        // Never heard from: a close says nothing; expiry covers it.
        s.left(3, 2, 11, t0);
        let after_grace = t0 + BROKER_DISCONNECT_GRACE + ms(1);
        assert_eq!(s.end_if_over(3, 2, t0, after_grace), None);
        // Broker 1 moved to connection 12; the late report about 11 is ignored.
        assert!(s.seen(1, 5, 11, t0));
        assert!(s.seen(1, 5, 12, t0 + ms(50)));
        s.left(1, 5, 11, t0 + ms(60));
        assert_eq!(s.end_if_over(1, 5, t0, t0 + ms(1000)), None);
        // A report without a token (an older broker) ends nothing either.
        s.left(1, 5, 0, t0 + ms(60));
        assert_eq!(s.end_if_over(1, 5, t0, t0 + ms(1000)), None);
        // The report about its current connection does.
        s.left(1, 5, 12, t0 + ms(60));
        assert_eq!(
            s.end_if_over(1, 5, t0, t0 + ms(61) + BROKER_DISCONNECT_GRACE),
            Some(Ended::Disconnected)
        );
    }

    #[test]
    fn a_new_term_forgets_closes_heard_of_in_an_earlier_one() {
        let (s, t0) = (Sessions::default(), Instant::now());
        assert!(s.seen(1, 5, 11, t0));
        s.left(1, 5, 11, t0 + ms(10));
        s.end_term();
        let since = t0 + ms(2000);
        assert_eq!(s.end_if_over(1, 5, since, since + ms(400)), None);
    }
}

//! Leader choice, made by the MetaServer: when a leader is fenced or shut down, when a
//! leaderless partition's replica comes back, and when leadership returns to the preferred
//! (first) replica. The MetaServer bumps the leader epoch whenever the leader changes.

use crate::BrokerId;

/// The new leader of a partition, or `None` (the partition is offline).
///
/// Clean choice: the first replica, in `replicas` order (so leadership spreads as placement
/// intended), that is `live` (registered and not fenced), in the `isr` and `eligible`. Only
/// in-sync replicas hold every acknowledged record.
///
/// `eligible` is the MetaServer's judgement that a replica still holds what it reported
/// (KIP-966's spirit): false for a replica that came back with a lost or corrupt log and has
/// not rejoined the ISR since. An ineligible replica is never chosen, clean or not.
///
/// With `unclean_allowed` (a topic's opt-in) and no clean choice, the first live, eligible
/// replica outside the ISR. **This may lose acknowledged records**: they may exist only on the
/// dead ISR members, and the new leader's epoch makes those members truncate them when they
/// return. Off by default.
///
/// ISR members missing from `replicas` are never chosen.
pub fn choose_leader(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    live: impl Fn(BrokerId) -> bool,
    unclean_allowed: bool,
    eligible: impl Fn(BrokerId) -> bool,
) -> Option<BrokerId> {
    let clean = replicas
        .iter()
        .copied()
        .find(|&id| isr.contains(&id) && live(id) && eligible(id));
    if clean.is_some() || !unclean_allowed {
        return clean;
    }
    replicas
        .iter()
        .copied()
        .find(|&id| live(id) && eligible(id))
}

/// The preferred leader, when leadership should return to it: the first replica, if it is live
/// and in the ISR. `None` when it is not (leave the current leader alone).
pub fn preferred_leader(
    replicas: &[BrokerId],
    isr: &[BrokerId],
    live: impl Fn(BrokerId) -> bool,
) -> Option<BrokerId> {
    let first = *replicas.first()?;
    (isr.contains(&first) && live(first)).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_choice_follows_replica_order() {
        let all = |_| true;
        assert_eq!(choose_leader(&[3, 1, 2], &[1, 2], all, false, all), Some(1));
        assert_eq!(
            choose_leader(&[3, 1, 2], &[1, 2], |id| id != 1, false, all),
            Some(2)
        );
        assert_eq!(
            choose_leader(&[3, 1, 2], &[1, 2], all, false, |id| id != 1),
            Some(2)
        );
        assert_eq!(choose_leader(&[3, 1, 2], &[9], all, false, all), None);
    }

    #[test]
    fn unclean_only_when_allowed_and_no_isr_member_is_live() {
        let live = |id| id == 3 || id == 2;
        assert_eq!(choose_leader(&[3, 1, 2], &[1], live, false, |_| true), None);
        assert_eq!(
            choose_leader(&[3, 1, 2], &[1], live, true, |_| true),
            Some(3)
        );
        assert_eq!(
            choose_leader(&[3, 1, 2], &[1], live, true, |id| id != 3),
            Some(2)
        );
        assert_eq!(
            choose_leader(&[3, 1, 2], &[1, 2], live, true, |_| true),
            Some(2)
        );
    }

    #[test]
    fn preferred_is_the_first_replica_when_in_sync() {
        assert_eq!(preferred_leader(&[2, 1], &[1, 2], |_| true), Some(2));
        assert_eq!(preferred_leader(&[2, 1], &[1], |_| true), None);
        assert_eq!(preferred_leader(&[2, 1], &[1, 2], |id| id != 2), None);
        assert_eq!(preferred_leader(&[], &[1], |_| true), None);
    }
}

//! Who leads a partition: [`choose_leader`], the one leader-choice rule every command uses
//! (fencing, registration, reassignment, preferred-leader election), kept a single pure
//! function so it can be swapped for the shared replication rule, and the partition changes
//! that fencing, registering and preferred-leader election make with it.

use crate::command::{MetaError, Outcome, Reply};
use crate::image::{MetadataImage, MetadataRecord, PartitionRecord, TopicRecord};

/// The leader among `replicas` (in their order, the preferred leader first): the first one
/// that is live and in the ISR. When none is and `unclean_allowed`, the first live replica at
/// all (an unclean election: records only the old ISR held are lost). `None`: offline.
/// The rule is [`tinymq_replication::election::choose_leader`], property-tested and stepped by
/// the replication simulation there; eligibility (a replica back from an unclean shutdown) is
/// already folded into `isr` by the callers here.
pub fn choose_leader(
    replicas: &[u32],
    isr: &[u32],
    live: &[u32],
    unclean_allowed: bool,
) -> Option<u32> {
    tinymq_replication::election::choose_leader(
        replicas,
        isr,
        |r| live.contains(&r),
        unclean_allowed,
        |_| true,
    )
}

/// The record that moves partition `index` of `name` from `p` to `next`, if anything changes.
pub(crate) fn update(
    name: &str,
    index: usize,
    p: &PartitionRecord,
    next: PartitionRecord,
) -> Option<MetadataRecord> {
    let mut after = p.clone();
    after.take_state(&next);
    (after != *p).then(|| MetadataRecord::UpdatePartition {
        name: name.into(),
        partition: index as u32,
        state: next,
    })
}

/// Every partition, with its topic's name and record and its index.
fn partitions(
    image: &MetadataImage,
) -> impl Iterator<Item = (&String, &TopicRecord, usize, &PartitionRecord)> {
    image.topics.iter().flat_map(|(name, t)| {
        t.partitions
            .iter()
            .enumerate()
            .map(move |(i, p)| (name, t, i, p))
    })
}

/// `p` led by the unclean-election choice among `live` (the old ISR is not trusted: the new
/// leader alone is in sync), or `None` when no replica is live.
fn unclean_election(p: &PartitionRecord, live: &[u32]) -> Option<PartitionRecord> {
    let leader = choose_leader(&p.replicas, &[], live, true)?;
    Some(PartitionRecord {
        leader: Some(leader),
        isr: vec![leader],
        needs_unclean_election: false,
        ..p.clone()
    })
}

/// Partition changes once broker `id` is fenced: it leaves each ISR that has another live
/// member, and a partition it led is led by the first live in-sync replica. Where it was the
/// last in-sync replica the partition goes offline keeping `isr = [id]` (it comes back with
/// the broker), unless the topic allows an unclean election and another replica is live.
pub(crate) fn after_fence(image: &MetadataImage, id: u32) -> Vec<MetadataRecord> {
    let live: Vec<u32> = image
        .live_brokers()
        .into_iter()
        .filter(|b| *b != id)
        .collect();
    let mut records = Vec::new();
    for (name, topic, i, p) in partitions(image) {
        if !p.isr.contains(&id) {
            continue;
        }
        let others: Vec<u32> = p.isr.iter().copied().filter(|b| live.contains(b)).collect();
        let next = if others.is_empty() {
            let unclean = topic.unclean_leader_election();
            match unclean.then(|| unclean_election(p, &live)).flatten() {
                Some(next) => next,
                None => PartitionRecord {
                    leader: None,
                    ..p.clone()
                },
            }
        } else {
            let leader = match p.leader {
                Some(l) if l != id => Some(l),
                _ => choose_leader(&p.replicas, &others, &live, false),
            };
            PartitionRecord {
                leader,
                isr: others,
                ..p.clone()
            }
        };
        records.extend(update(name, i, p, next));
    }
    records
}

/// Partition changes once broker `id` registers (a new epoch, unfenced).
///
/// After a clean shutdown its disk holds everything it acknowledged: offline partitions whose
/// ISR includes it come back with it as leader (and, where the topic allows unclean election,
/// offline partitions it is a replica of).
///
/// After an unclean shutdown (eligible leader replicas, simplified) its disk may lack
/// records it acknowledged but had not fsynced, so it leaves every ISR that has another live
/// member (the leader adds it back once it has caught up), and a partition it led moves to
/// them. A partition it is a replica of but not in sync for gets a new partition epoch, so
/// that no ISR proposal computed before the leader saw this registration applies. Where it
/// is the last in-sync replica it may lead only if that cannot lose an acknowledged record:
/// the topic flushes `always` (an acknowledgement needed an fsync on every in-sync replica),
/// or it is the partition's only replica (no other copy exists to prefer). Otherwise the
/// partition stays offline, flagged `needs_unclean_election`, unless the topic allows an
/// unclean election.
pub(crate) fn after_registration(
    image: &MetadataImage,
    id: u32,
    clean_shutdown: bool,
) -> Vec<MetadataRecord> {
    let others: Vec<u32> = image
        .live_brokers()
        .into_iter()
        .filter(|b| *b != id)
        .collect();
    let mut live = others.clone();
    live.push(id);
    let mut records = Vec::new();
    for (name, topic, i, p) in partitions(image) {
        let unclean = topic.unclean_leader_election();
        let next = if !clean_shutdown && p.isr.contains(&id) {
            restarted_unclean(topic, p, id, &others, &live)
        } else if p.leader.is_none() {
            back_online(p, &live, unclean)
        } else {
            None
        };
        let Some(next) = next else {
            if !clean_shutdown && p.replicas.contains(&id) {
                // Outside the ISR, it may have lost a tail it had reported to the leader; the
                // leader's image may not show this registration yet, and an ISR proposal made
                // from that image would add it back on the old report. Moving the partition
                // epoch makes such a proposal stale.
                records.push(MetadataRecord::BumpPartitionEpoch {
                    name: name.clone(),
                    partition: i as u32,
                    partition_epoch: p.partition_epoch,
                });
            }
            continue;
        };
        let keeps_leading = p.leader == Some(id) && next.leader == Some(id);
        if !clean_shutdown && keeps_leading {
            // A new incarnation that lost its unfsynced tail keeps leading: followers may have
            // copied that tail, so its epoch must move, or new records written at the same
            // offsets in the same epoch would look like the copied ones. Passing through
            // "no leader" in the same command bumps it (no image shows the gap).
            let gap = PartitionRecord {
                leader: None,
                ..p.clone()
            };
            let mut between = p.clone();
            between.take_state(&gap);
            records.extend(update(name, i, p, gap));
            records.extend(update(name, i, &between, next));
        } else {
            records.extend(update(name, i, p, next));
        }
    }
    records
}

/// An offline partition once `live` brokers are: led by a live in-sync replica, or, where
/// `unclean` allows, any live replica. Flagged partitions wait for an unclean election.
fn back_online(p: &PartitionRecord, live: &[u32], unclean: bool) -> Option<PartitionRecord> {
    if p.needs_unclean_election {
        return unclean.then(|| unclean_election(p, live)).flatten();
    }
    match choose_leader(&p.replicas, &p.isr, live, false) {
        Some(leader) => Some(PartitionRecord {
            leader: Some(leader),
            ..p.clone()
        }),
        None if unclean => unclean_election(p, live),
        None => None,
    }
}

/// Partition `p` (whose ISR holds `id`) once `id` registers after an unclean shutdown.
fn restarted_unclean(
    topic: &TopicRecord,
    p: &PartitionRecord,
    id: u32,
    others: &[u32],
    live: &[u32],
) -> Option<PartitionRecord> {
    let isr: Vec<u32> = p.isr.iter().copied().filter(|b| *b != id).collect();
    if isr.iter().any(|b| others.contains(b)) {
        let leader = match p.leader {
            Some(l) if l != id => Some(l),
            _ => choose_leader(&p.replicas, &isr, others, false),
        };
        return Some(PartitionRecord {
            leader,
            isr,
            ..p.clone()
        });
    }
    if topic.flushes_always() || p.replicas == [id] {
        return Some(PartitionRecord {
            leader: Some(id),
            isr: vec![id],
            needs_unclean_election: false,
            ..p.clone()
        });
    }
    if topic.unclean_leader_election() {
        return unclean_election(p, live);
    }
    Some(PartitionRecord {
        leader: None,
        isr: vec![id],
        needs_unclean_election: true,
        ..p.clone()
    })
}

/// `ElectPreferredLeaders`: each partition (of `topic`, or all) whose first replica is live,
/// in sync ([`tinymq_replication::preferred_leader`]), not in `except` and not leading gets it
/// as leader.
pub(crate) fn elect_preferred_leaders(
    image: &MetadataImage,
    topic: Option<&str>,
    except: &[u32],
) -> Outcome {
    if let Some(name) = topic {
        if !image.topics.contains_key(name) {
            return Err(MetaError::UnknownTopic(name.into()));
        }
    }
    let live = image.live_brokers();
    let mut records = Vec::new();
    for (name, _, i, p) in partitions(image) {
        if topic.is_some_and(|t| t != name.as_str()) || p.needs_unclean_election {
            continue;
        }
        let preferred =
            tinymq_replication::preferred_leader(&p.replicas, &p.isr, |b| live.contains(&b));
        let Some(preferred) = preferred else {
            continue;
        };
        if p.leader != Some(preferred) && !except.contains(&preferred) {
            let next = PartitionRecord {
                leader: Some(preferred),
                ..p.clone()
            };
            records.extend(update(name, i, p, next));
        }
    }
    Ok((records, Reply::Done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_live_in_sync_replica_leads_and_unclean_falls_back_to_any_live_one() {
        assert_eq!(
            choose_leader(&[1, 2, 3], &[3, 2], &[1, 2, 3], false),
            Some(2)
        );
        assert_eq!(choose_leader(&[1, 2, 3], &[1, 2], &[2, 3], false), Some(2));
        assert_eq!(choose_leader(&[1, 2, 3], &[1], &[2, 3], false), None);
        assert_eq!(choose_leader(&[1, 2, 3], &[1], &[3, 2], true), Some(2));
        assert_eq!(
            choose_leader(&[1, 2, 3], &[3], &[2, 3], true),
            Some(3),
            "unclean election still prefers an in-sync replica"
        );
        assert_eq!(choose_leader(&[1], &[1], &[], true), None);
    }
}

//! Where partitions go: replica lists for new partitions spread over the live brokers so that
//! leaders (the first replica) and replicas stay as even as possible, least-loaded brokers
//! first; and plans that move existing replicas (rebalance over the live brokers, drain one
//! broker). Pure.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::command::MetaError;
use crate::image::MetadataImage;

/// One reassignment of a plan: partition `partition` of `topic` moves from `from` to
/// `replicas` (preferred leader first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedMove {
    pub topic: String,
    pub partition: u32,
    pub replicas: Vec<u32>,
    /// The partition's (target) replicas when the plan was made, for people reading it.
    #[serde(default)]
    pub from: Vec<u32>,
}

impl PlannedMove {
    pub fn to_wire(&self) -> tinymq_protocol::messages::PartitionMove {
        tinymq_protocol::messages::PartitionMove {
            topic: self.topic.clone(),
            partition: self.partition,
            from_replicas: self.from.clone(),
            to_replicas: self.replicas.clone(),
        }
    }
}

/// Reassignments that spread each topic's replicas, and then its preferred leaders (first
/// replicas), evenly over the live brokers: every live broker ends within one of the mean,
/// where the placement allows it. Replicas on brokers that are not live move to live ones.
/// Few replicas move: only those above a broker's share (the brokers holding most keep the
/// larger shares), each to the broker furthest below its share; preferred leaders then change
/// by reordering replica lists, which moves no data. Partitions being reassigned, and ones
/// with more replicas than there are live brokers, stay as they are (their target counts).
/// Deterministic: the same image gives the same plan.
pub fn rebalance_plan(image: &MetadataImage) -> Vec<PlannedMove> {
    let live = image.live_brokers();
    let mut plan = Vec::new();
    if live.is_empty() {
        return plan;
    }
    for (name, topic) in &image.topics {
        let current: Vec<Vec<u32>> = topic
            .partitions
            .iter()
            .map(|p| p.target_replicas())
            .collect();
        let frozen: Vec<bool> = topic
            .partitions
            .iter()
            .zip(&current)
            .map(|(p, r)| p.is_reassigning() || r.len() > live.len() || r.is_empty())
            .collect();
        let mut placed = current.clone();
        spread_replicas(&mut placed, &frozen, &live);
        spread_leaders(&mut placed, &frozen, &live);
        for (i, (old, new)) in current.iter().zip(placed).enumerate() {
            if *old != new {
                plan.push(PlannedMove {
                    topic: name.clone(),
                    partition: i as u32,
                    replicas: new,
                    from: old.clone(),
                });
            }
        }
    }
    plan
}

/// Replicas per live broker in `placed`.
fn replica_counts(placed: &[Vec<u32>], live: &[u32]) -> BTreeMap<u32, usize> {
    let mut counts: BTreeMap<u32, usize> = live.iter().map(|b| (*b, 0)).collect();
    for b in placed.iter().flatten() {
        if let Some(n) = counts.get_mut(b) {
            *n += 1;
        }
    }
    counts
}

/// Moves replicas of the partitions not `frozen` so that each live broker holds its share.
fn spread_replicas(placed: &mut [Vec<u32>], frozen: &[bool], live: &[u32]) {
    let mut counts = replica_counts(placed, live);
    let total: usize = placed
        .iter()
        .zip(frozen)
        .map(|(r, f)| {
            if *f {
                r.iter().filter(|b| live.contains(b)).count()
            } else {
                r.len()
            }
        })
        .sum();
    // Shares: the mean, one more for the brokers already holding most.
    let mut by_count: Vec<u32> = live.to_vec();
    by_count.sort_by_key(|b| (std::cmp::Reverse(counts[b]), *b));
    let extra = total % live.len();
    let share: BTreeMap<u32, usize> = by_count
        .iter()
        .enumerate()
        .map(|(i, b)| (*b, total / live.len() + usize::from(i < extra)))
        .collect();
    let room = |counts: &BTreeMap<u32, usize>, b: u32| share[&b] as i64 - counts[&b] as i64;
    // Replicas on brokers that are not live go to the live broker with the most room.
    for (replicas, _) in placed.iter_mut().zip(frozen).filter(|(_, f)| !**f) {
        for slot in 0..replicas.len() {
            if live.contains(&replicas[slot]) {
                continue;
            }
            let to = live
                .iter()
                .copied()
                .filter(|b| !replicas.contains(b))
                .max_by_key(|b| (room(&counts, *b), std::cmp::Reverse(*b)));
            if let Some(to) = to {
                replicas[slot] = to;
                *counts.get_mut(&to).expect("live") += 1;
            }
        }
    }
    // Then from brokers above their share to brokers below it; a replica that is not the
    // preferred leader first, so leadership moves less.
    while let Some(from) = live.iter().copied().find(|b| room(&counts, *b) < 0) {
        let mut below: Vec<u32> = live
            .iter()
            .copied()
            .filter(|b| room(&counts, *b) > 0)
            .collect();
        below.sort_by_key(|b| (std::cmp::Reverse(room(&counts, *b)), *b));
        let found = below.iter().find_map(|to| {
            let candidates = || {
                placed
                    .iter()
                    .enumerate()
                    .filter(|(i, r)| !frozen[*i] && r.contains(&from) && !r.contains(to))
            };
            let pick = candidates()
                .find(|(_, r)| r[0] != from)
                .or_else(|| candidates().next());
            pick.map(|(i, _)| (i, *to))
        });
        let Some((i, to)) = found else {
            return; // Frozen partitions pin the rest: as even as it gets.
        };
        let slot = placed[i]
            .iter()
            .position(|b| *b == from)
            .expect("found holding it");
        placed[i][slot] = to;
        *counts.get_mut(&from).expect("live") -= 1;
        *counts.get_mut(&to).expect("live") += 1;
    }
}

/// Reorders replica lists (no data moves) so preferred leaders spread evenly: while a broker
/// leads at least two more than one it can hand leadership to along a chain of partitions
/// (each led by the previous broker and held by the next), leadership shifts along that chain.
/// Each shift lowers the sum of squared leader counts, so this ends, at the most even split.
fn spread_leaders(placed: &mut [Vec<u32>], frozen: &[bool], live: &[u32]) {
    let leads = |placed: &[Vec<u32>]| {
        let mut n: BTreeMap<u32, usize> = live.iter().map(|b| (*b, 0)).collect();
        for r in placed {
            if let Some(c) = r.first().and_then(|b| n.get_mut(b)) {
                *c += 1;
            }
        }
        n
    };
    'shift: loop {
        let n = leads(placed);
        let mut most: Vec<u32> = live.to_vec();
        most.sort_by_key(|b| (std::cmp::Reverse(n[b]), *b));
        for from in most {
            // Breadth-first over "leads a partition also held by": the partition used to
            // reach each broker.
            let mut via: BTreeMap<u32, (u32, usize)> = BTreeMap::new();
            let mut queue = VecDeque::from([from]);
            while let Some(a) = queue.pop_front() {
                for (i, r) in placed.iter().enumerate() {
                    if frozen[i] || r.first() != Some(&a) {
                        continue;
                    }
                    for b in &r[1..] {
                        if *b != from && n.contains_key(b) && !via.contains_key(b) {
                            via.insert(*b, (a, i));
                            queue.push_back(*b);
                        }
                    }
                }
            }
            let to = via
                .keys()
                .copied()
                .filter(|b| n[b] + 2 <= n[&from])
                .min_by_key(|b| (n[b], *b));
            if let Some(mut b) = to {
                while b != from {
                    let (a, i) = via[&b];
                    let slot = placed[i].iter().position(|x| *x == b).expect("on the path");
                    placed[i].swap(0, slot);
                    b = a;
                }
                continue 'shift;
            }
        }
        return;
    }
}

/// Reassignments that move every replica off broker `id`: each goes to the live broker (not
/// `id`, not already a replica) holding the fewest replicas of that topic, then overall. The
/// broker leaves the replica list and the new one is added last, so where `id` was the
/// preferred leader the next replica, which holds the data already, becomes preferred.
pub fn drain_plan(image: &MetadataImage, id: u32) -> Result<Vec<PlannedMove>, MetaError> {
    if !image.brokers.contains_key(&id) {
        return Err(MetaError::UnknownBroker(id));
    }
    let live: Vec<u32> = image
        .live_brokers()
        .into_iter()
        .filter(|b| *b != id)
        .collect();
    let mut overall: BTreeMap<u32, usize> = image
        .load()
        .into_iter()
        .map(|(b, (_, replicas))| (b, replicas))
        .collect();
    let mut plan = Vec::new();
    for (name, topic) in &image.topics {
        let targets: Vec<Vec<u32>> = topic
            .partitions
            .iter()
            .map(|p| p.target_replicas())
            .collect();
        let mut in_topic = replica_counts(&targets, &live);
        for (i, target) in targets.iter().enumerate() {
            if !target.contains(&id) {
                continue;
            }
            let to = live
                .iter()
                .copied()
                .filter(|b| !target.contains(b))
                .min_by_key(|b| (in_topic[b], overall.get(b).copied().unwrap_or(0), *b))
                .ok_or_else(|| MetaError::DrainLeavesTooFew {
                    id,
                    left: live.len(),
                    want: target.len() as u32,
                    topic: name.clone(),
                })?;
            *in_topic.get_mut(&to).expect("live") += 1;
            *overall.entry(to).or_default() += 1;
            let mut replicas: Vec<u32> = target.iter().copied().filter(|b| *b != id).collect();
            replicas.push(to);
            plan.push(PlannedMove {
                topic: name.clone(),
                partition: i as u32,
                replicas,
                from: target.clone(),
            });
        }
    }
    Ok(plan)
}

/// Replica lists for `count` new partitions of `replication_factor` copies over `live`
/// brokers. Each partition's leader (its first replica) is the broker leading the fewest
/// partitions so far, counting `leader_load` and the partitions placed before it; the other
/// replicas go to the brokers holding the fewest replicas. So a broker that just joined gets
/// the leaders of new partitions until it has caught up.
pub fn place(
    count: u32,
    replication_factor: u32,
    live: &[u32],
    leader_load: &BTreeMap<u32, usize>,
) -> Vec<Vec<u32>> {
    assert!(
        replication_factor as usize <= live.len() && replication_factor > 0,
        "checked by the caller"
    );
    let mut leaders: BTreeMap<u32, usize> = live
        .iter()
        .map(|b| (*b, leader_load.get(b).copied().unwrap_or(0)))
        .collect();
    let mut replicas_held: BTreeMap<u32, usize> = live.iter().map(|b| (*b, 0)).collect();
    (0..count)
        .map(|_| {
            let leader = *leaders
                .iter()
                .min_by_key(|(b, n)| (**n, **b))
                .expect("live brokers")
                .0;
            *leaders.get_mut(&leader).expect("live") += 1;
            let mut followers: Vec<u32> = live.iter().copied().filter(|b| *b != leader).collect();
            followers.sort_by_key(|b| (replicas_held[b], *b));
            let mut replicas = vec![leader];
            replicas.extend(followers.into_iter().take(replication_factor as usize - 1));
            for b in &replicas {
                *replicas_held.get_mut(b).expect("live") += 1;
            }
            replicas
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaders(placed: &[Vec<u32>]) -> BTreeMap<u32, usize> {
        let mut count = BTreeMap::new();
        for replicas in placed {
            *count.entry(replicas[0]).or_insert(0) += 1;
        }
        count
    }

    #[test]
    fn six_partitions_on_three_brokers_give_two_leaders_each() {
        let placed = place(6, 3, &[1, 2, 3], &BTreeMap::new());
        assert_eq!(leaders(&placed), [(1, 2), (2, 2), (3, 2)].into());
        for replicas in &placed {
            let mut distinct = replicas.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                3,
                "replicas of a partition are on different brokers"
            );
        }
    }

    use crate::image::{BrokerRecord, PartitionRecord, TopicRecord};
    use proptest::prelude::*;

    /// An image of `live` brokers (ids 1..), `dead` fenced ones after them, and topics whose
    /// partitions hold the replica lists given.
    fn image_of(live: u32, dead: u32, topics: &[Vec<Vec<u32>>]) -> MetadataImage {
        let mut image = MetadataImage::default();
        for id in 1..=live + dead {
            let broker = BrokerRecord {
                id,
                host: "h".into(),
                port: 1,
                epoch: u64::from(id),
                fenced: id > live,
                kafka: None,
            };
            image.brokers.insert(id, broker);
        }
        for (t, partitions) in topics.iter().enumerate() {
            let partitions = partitions
                .iter()
                .map(|r| PartitionRecord {
                    replicas: r.clone(),
                    leader: Some(r[0]),
                    isr: vec![r[0]],
                    ..PartitionRecord::default()
                })
                .collect();
            let topic = TopicRecord {
                id: t as u64 + 1,
                partitions,
                config: BTreeMap::new(),
            };
            image.topics.insert(format!("t{t}"), topic);
        }
        image
    }

    /// Random topics: replica lists of `rf` distinct brokers out of `brokers`, from `seeds`.
    fn topics_from(brokers: u32, rf: usize, seeds: &[Vec<u64>]) -> Vec<Vec<Vec<u32>>> {
        seeds
            .iter()
            .map(|partitions| {
                partitions
                    .iter()
                    .map(|seed| {
                        let mut pool: Vec<u32> = (1..=brokers).collect();
                        let mut seed = *seed;
                        let mut replicas = Vec::new();
                        for _ in 0..rf {
                            let i = (seed % pool.len() as u64) as usize;
                            seed /= pool.len() as u64;
                            replicas.push(pool.remove(i));
                        }
                        replicas
                    })
                    .collect()
            })
            .collect()
    }

    proptest! {
        #[test]
        fn a_rebalance_plan_evens_out_replicas_and_leaders_moving_only_the_excess(
            live in 1..=6u32,
            dead in 0..=2u32,
            rf in 1..=3usize,
            seeds in proptest::collection::vec(
                proptest::collection::vec(any::<u64>(), 1..=12), 1..=3),
        ) {
            prop_assume!(rf <= live as usize);
            let image = image_of(live, dead, &topics_from(live + dead, rf, &seeds));
            let plan = rebalance_plan(&image);
            let mut after = image.clone();
            for m in &plan {
                after.topics.get_mut(&m.topic).unwrap().partitions[m.partition as usize]
                    .replicas = m.replicas.clone();
            }
            let n = live as usize;
            for (name, topic) in &after.topics {
                let before = &image.topics[name];
                let mut replicas: BTreeMap<u32, usize> = (1..=live).map(|b| (b, 0)).collect();
                let mut leaders = replicas.clone();
                let mut moved = 0;
                for (p, old) in topic.partitions.iter().zip(&before.partitions) {
                    prop_assert_eq!(p.replicas.len(), rf, "replication factor kept");
                    let mut distinct = p.replicas.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    prop_assert_eq!(distinct.len(), rf, "no broker twice: {:?}", p.replicas);
                    for r in &p.replicas {
                        prop_assert!(*r <= live, "only live brokers: {:?}", p.replicas);
                        *replicas.get_mut(r).unwrap() += 1;
                    }
                    *leaders.get_mut(&p.replicas[0]).unwrap() += 1;
                    moved += p.replicas.iter().filter(|r| !old.replicas.contains(r)).count();
                }
                let total = rf * topic.partitions.len();
                for (b, count) in &replicas {
                    prop_assert!(count * n + n >= total && *count * n <= total + n,
                        "broker {} holds {} of {} replicas over {} brokers", b, count, total, n);
                }
                let partitions = topic.partitions.len();
                for (b, count) in &leaders {
                    prop_assert!(count * n + n >= partitions && *count * n <= partitions + n,
                        "broker {} leads {} of {} partitions over {} brokers: {:?}",
                        b, count, partitions, n, leaders);
                }
                // Only the excess moves: the replicas above the shares (the larger shares going
                // to the brokers holding most), the fewest possible; and replicas on dead
                // brokers, each of which may push one more broker over its share when the
                // brokers below theirs already hold that partition.
                let mut held: Vec<usize> = (1..=live)
                    .map(|b| before.partitions.iter().filter(|p| p.replicas.contains(&b)).count())
                    .collect();
                held.sort_unstable_by(|a, b| b.cmp(a));
                let dead_slots = before.partitions.iter().flat_map(|p| &p.replicas)
                    .filter(|r| **r > live).count();
                let excess: usize = held.iter().enumerate()
                    .map(|(i, h)| h.saturating_sub(total / n + usize::from(i < total % n)))
                    .sum();
                if dead_slots == 0 {
                    prop_assert_eq!(moved, excess);
                }
                prop_assert!(moved <= 2 * dead_slots + excess, "{} moved; {} dead, {} excess",
                    moved, dead_slots, excess);
            }
            prop_assert!(rebalance_plan(&after).is_empty(), "a balanced image needs no plan");
        }
    }

    #[test]
    fn the_least_loaded_broker_leads_first() {
        let load = [(1, 5), (2, 5), (4, 0)].into();
        let placed = place(1, 1, &[1, 2, 4], &load);
        assert_eq!(placed, vec![vec![4]]);
    }
}

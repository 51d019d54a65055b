//! Where new partitions go: replica lists spread over the live brokers so that leaders (the
//! first replica) and replicas stay as even as possible, least-loaded brokers first. Pure.

use std::collections::BTreeMap;

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

    #[test]
    fn the_least_loaded_broker_leads_first() {
        let load = [(1, 5), (2, 5), (4, 0)].into();
        let placed = place(1, 1, &[1, 2, 4], &load);
        assert_eq!(placed, vec![vec![4]]);
    }
}

//! Who consumes which partition: the assignment strategies, as pure functions of the members'
//! subscriptions, the topics' partition counts and (for sticky) the previous assignment.

use std::collections::{BTreeMap, BTreeSet};

/// A topic partition.
pub type Tp = (String, u32);
/// Member id → the partitions it is assigned.
pub type Assignment = BTreeMap<String, BTreeSet<Tp>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Strategy {
    /// Per topic, contiguous ranges of partitions, in member-id order.
    Range,
    /// All partitions of all topics dealt out one by one.
    RoundRobin,
    /// Balanced per topic like range, but every member keeps as many of its previous
    /// partitions as balance allows, so a change moves as few partitions as possible.
    #[default]
    Sticky,
}

impl Strategy {
    pub fn parse(name: &str) -> Option<Strategy> {
        match name {
            "range" => Some(Strategy::Range),
            "roundrobin" => Some(Strategy::RoundRobin),
            "sticky" | "" => Some(Strategy::Sticky),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Range => "range",
            Strategy::RoundRobin => "roundrobin",
            Strategy::Sticky => "sticky",
        }
    }
}

/// Computes the assignment. `subscriptions`: member → topics; `partitions`: topic → count
/// (topics missing there do not exist and are skipped); `previous` is used by sticky.
pub fn assign(
    strategy: Strategy,
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    partitions: &BTreeMap<String, u32>,
    previous: &Assignment,
) -> Assignment {
    let mut out: Assignment = subscriptions
        .keys()
        .map(|m| (m.clone(), BTreeSet::new()))
        .collect();
    let subscribers = |topic: &str| -> Vec<&String> {
        subscriptions
            .iter()
            .filter(|(_, t)| t.contains(topic))
            .map(|(m, _)| m)
            .collect()
    };
    match strategy {
        Strategy::Range => {
            for (topic, &count) in partitions {
                let members = subscribers(topic);
                if members.is_empty() {
                    continue;
                }
                let (base, extra) = (
                    count as usize / members.len(),
                    count as usize % members.len(),
                );
                let mut next = 0u32;
                for (i, member) in members.iter().enumerate() {
                    let take = base + usize::from(i < extra);
                    let set = out.get_mut(*member).expect("member");
                    for p in next..next + take as u32 {
                        set.insert((topic.clone(), p));
                    }
                    next += take as u32;
                }
            }
        }
        Strategy::RoundRobin => {
            let members: Vec<&String> = subscriptions.keys().collect();
            let mut turn = 0usize;
            for (topic, &count) in partitions {
                if subscribers(topic).is_empty() {
                    continue;
                }
                for p in 0..count {
                    // The next member (in turn) that subscribes to this topic.
                    loop {
                        let member = members[turn % members.len()];
                        turn += 1;
                        if subscriptions[member].contains(topic) {
                            out.get_mut(member)
                                .expect("member")
                                .insert((topic.clone(), p));
                            break;
                        }
                    }
                }
            }
        }
        Strategy::Sticky => {
            for (topic, &count) in partitions {
                let members = subscribers(topic);
                if members.is_empty() {
                    continue;
                }
                sticky_topic(topic, count, &members, previous, &mut out);
            }
        }
    }
    out
}

/// Sticky assignment of one topic's partitions over its subscribers.
fn sticky_topic(
    topic: &str,
    count: u32,
    members: &[&String],
    previous: &Assignment,
    out: &mut Assignment,
) {
    let held = |m: &String| -> Vec<u32> {
        previous
            .get(m)
            .map(|set| {
                set.iter()
                    .filter(|(t, p)| t == topic && *p < count)
                    .map(|(_, p)| *p)
                    .collect()
            })
            .unwrap_or_default()
    };
    // Members holding more of this topic get the larger quotas, so fewer partitions move;
    // among equals, those with fewer partitions of other topics, so totals stay balanced.
    let mut order: Vec<&String> = members.to_vec();
    order.sort_by_key(|m| {
        (
            std::cmp::Reverse(held(m).len()),
            out.get(*m).map_or(0, BTreeSet::len),
        )
    });
    let (base, extra) = (
        count as usize / members.len(),
        count as usize % members.len(),
    );
    let mut taken = BTreeSet::new();
    let mut quotas = Vec::new();
    for (i, member) in order.iter().enumerate() {
        let quota = base + usize::from(i < extra);
        let keep: Vec<u32> = held(member)
            .into_iter()
            .filter(|p| !taken.contains(p))
            .take(quota)
            .collect();
        for &p in &keep {
            taken.insert(p);
            out.get_mut(*member)
                .expect("member")
                .insert((topic.to_string(), p));
        }
        quotas.push((*member, quota - keep.len()));
    }
    let mut free = (0..count).filter(|p| !taken.contains(p));
    for (member, missing) in quotas {
        for p in free.by_ref().take(missing) {
            out.get_mut(member)
                .expect("member")
                .insert((topic.to_string(), p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(members: &[&str], topics: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
        members
            .iter()
            .map(|m| {
                (
                    m.to_string(),
                    topics.iter().map(|t| t.to_string()).collect(),
                )
            })
            .collect()
    }

    fn counts(a: &Assignment) -> Vec<usize> {
        a.values().map(BTreeSet::len).collect()
    }

    fn all_once(a: &Assignment, partitions: &BTreeMap<String, u32>) {
        let mut seen = BTreeSet::new();
        for set in a.values() {
            for tp in set {
                assert!(seen.insert(tp.clone()), "{tp:?} assigned twice");
            }
        }
        let total: u32 = partitions.values().sum();
        assert_eq!(seen.len() as u32, total, "every partition assigned");
    }

    #[test]
    fn every_strategy_assigns_each_partition_once_and_balances() {
        let partitions: BTreeMap<String, u32> = [("a".to_string(), 6), ("b".to_string(), 7)].into();
        for strategy in [Strategy::Range, Strategy::RoundRobin, Strategy::Sticky] {
            for n in 1..=8 {
                let names: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                let a = assign(
                    strategy,
                    &subs(&refs, &["a", "b"]),
                    &partitions,
                    &Assignment::new(),
                );
                all_once(&a, &partitions);
                let c = counts(&a);
                let spread = c.iter().max().unwrap() - c.iter().min().unwrap();
                // Range balances per topic, so over two topics it may differ by 2.
                let allowed = if strategy == Strategy::Range { 2 } else { 1 };
                assert!(spread <= allowed, "{strategy:?} with {n} members: {c:?}");
            }
        }
    }

    #[test]
    fn three_members_on_six_partitions_get_two_each() {
        let partitions: BTreeMap<String, u32> = [("t".to_string(), 6)].into();
        for strategy in [Strategy::Range, Strategy::RoundRobin, Strategy::Sticky] {
            let a = assign(
                strategy,
                &subs(&["x", "y", "z"], &["t"]),
                &partitions,
                &Assignment::new(),
            );
            assert_eq!(counts(&a), vec![2, 2, 2], "{strategy:?}");
        }
    }

    #[test]
    fn sticky_moves_only_what_balance_requires() {
        let partitions: BTreeMap<String, u32> = [("t".to_string(), 12)].into();
        let three = assign(
            Strategy::Sticky,
            &subs(&["a", "b", "c"], &["t"]),
            &partitions,
            &Assignment::new(),
        );
        let four = assign(
            Strategy::Sticky,
            &subs(&["a", "b", "c", "d"], &["t"]),
            &partitions,
            &three,
        );
        all_once(&four, &partitions);
        assert_eq!(counts(&four), vec![3, 3, 3, 3]);
        for m in ["a", "b", "c"] {
            assert!(
                four[m].is_subset(&three[m]),
                "{m} keeps its partitions and only gives some up"
            );
        }
        // A member leaves: the others keep everything they had.
        let back = assign(
            Strategy::Sticky,
            &subs(&["a", "b", "d"], &["t"]),
            &partitions,
            &four,
        );
        for m in ["a", "b", "d"] {
            assert!(four[m].is_subset(&back[m]));
        }
        assert_eq!(counts(&back), vec![4, 4, 4]);
    }

    #[test]
    fn members_only_get_topics_they_subscribe_to() {
        let partitions: BTreeMap<String, u32> = [
            ("a".to_string(), 2),
            ("b".to_string(), 2),
            ("gone".to_string(), 0),
        ]
        .into();
        let mut s = subs(&["x"], &["a"]);
        s.extend(subs(&["y"], &["a", "b", "missing"]));
        for strategy in [Strategy::Range, Strategy::RoundRobin, Strategy::Sticky] {
            let a = assign(strategy, &s, &partitions, &Assignment::new());
            assert!(a["x"].iter().all(|(t, _)| t == "a"), "{strategy:?}");
            assert!(a["y"].iter().any(|(t, _)| t == "b"));
            all_once(&a, &partitions);
        }
    }
}

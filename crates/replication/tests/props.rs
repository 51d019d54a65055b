//! Property tests of the replication rules: the high watermark, ISR changes, the epoch cache,
//! the truncation point and leader choice.

use proptest::prelude::*;
use tinymq_replication::{
    choose_leader, high_watermark, isr_expand_candidates, isr_shrink, truncation_point, Epoch,
    FollowerState, Followers, LeaderEpochCache, Offset,
};

const LEADER: u32 = 0;

/// Follower ends (None = unknown) for brokers 1..=4, and which of them are in the ISR.
fn followers_and_isr() -> impl Strategy<Value = (Followers, Vec<u32>)> {
    (
        prop::collection::vec(prop::option::weighted(0.9, 0i64..100), 4),
        prop::collection::vec(any::<bool>(), 4),
    )
        .prop_map(|(ends, in_isr)| {
            let followers = ends
                .iter()
                .enumerate()
                .map(|(i, end)| {
                    let state = FollowerState {
                        log_end: *end,
                        ..FollowerState::new(0)
                    };
                    (i as u32 + 1, state)
                })
                .collect();
            let mut isr = vec![LEADER];
            isr.extend((1..=4).filter(|id| in_isr[*id as usize - 1]));
            (followers, isr)
        })
}

proptest! {
    #[test]
    fn hw_is_monotone_and_at_most_every_isr_end(
        (followers, isr) in followers_and_isr(),
        leader_end in 0i64..100,
        current in 0i64..100,
    ) {
        let hw = high_watermark(current, LEADER, leader_end, &isr, &followers);
        prop_assert!(hw >= current);
        let ends: Option<Vec<Offset>> = isr
            .iter()
            .filter(|&&id| id != LEADER)
            .map(|id| followers[id].log_end)
            .collect();
        match ends {
            None => prop_assert_eq!(hw, current),
            Some(ends) => {
                let min = ends.into_iter().fold(leader_end, Offset::min);
                prop_assert_eq!(hw, current.max(min));
                if current <= min {
                    prop_assert!(hw <= leader_end);
                    for id in isr.iter().filter(|&&id| id != LEADER) {
                        prop_assert!(Some(hw) <= followers[id].log_end);
                    }
                }
            }
        }
    }

    #[test]
    fn isr_changes_keep_the_leader_and_never_lower_the_hw(
        (followers, isr) in followers_and_isr(),
        leader_end in 0i64..100,
        epoch_start in 0i64..100,
        now in 0u64..20_000,
    ) {
        let hw = high_watermark(0, LEADER, leader_end, &isr, &followers);
        let out = isr_shrink(now, LEADER, leader_end, &isr, &followers, 10_000);
        prop_assert!(!out.contains(&LEADER));
        prop_assert!(out.iter().all(|id| isr.contains(id)));
        let add = isr_expand_candidates(LEADER, &isr, &followers, hw, epoch_start);
        prop_assert!(add.iter().all(|id| !isr.contains(id) && *id != LEADER));
        let mut bigger = isr.clone();
        bigger.extend(&add);
        prop_assert!(high_watermark(0, LEADER, leader_end, &bigger, &followers) >= hw);
    }

    #[test]
    fn epoch_cache_stays_ordered_and_round_trips(
        ops in prop::collection::vec((-2i32..20, -2i64..60), 0..30),
        cut_end in -5i64..70,
        cut_start in -5i64..70,
    ) {
        let mut cache = LeaderEpochCache::new();
        for (epoch, start) in ops {
            let before = cache.clone();
            if cache.assign(epoch, start).is_err() {
                prop_assert_eq!(&cache, &before);
            }
            let e = cache.entries();
            prop_assert!(e.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
            prop_assert!(e.iter().all(|&(ep, s)| ep >= 0 && s >= 0));
        }
        let again = LeaderEpochCache::from_entries(cache.entries().to_vec());
        prop_assert_eq!(again.as_ref(), Ok(&cache));
        let log_end = cache.latest().map_or(0, |(_, s)| s + 3);
        for (i, &(epoch, _)) in cache.entries().iter().enumerate() {
            let end = cache.entries().get(i + 1).map_or(log_end, |&(_, s)| s);
            let answer = cache.end_offset_for(epoch, log_end).expect("a known epoch");
            prop_assert_eq!((answer.epoch, answer.end_offset), (epoch, end));
        }
        let mut ended = cache.clone();
        ended.truncate_from_end(cut_end);
        prop_assert!(ended.entries().iter().all(|&(_, s)| s < cut_end));
        prop_assert!(cache.entries().starts_with(ended.entries()));
        let mut started = cache.clone();
        started.truncate_from_start(cut_start);
        if let (Some(&(_, first)), Some(&(_, orig_first))) =
            (started.entries().first(), cache.entries().first())
        {
            prop_assert_eq!(first, cut_start.max(orig_first));
        }
        prop_assert!(LeaderEpochCache::from_entries(started.entries().to_vec()).is_ok());
    }

    #[test]
    fn truncation_finds_exactly_where_two_logs_part(
        (follower, leader, agreed) in diverged_logs(),
        leader_extra_epoch in any::<bool>(),
    ) {
        let f_end = follower.len() as Offset;
        let l_end = leader.len() as Offset;
        let mut f_cache = cache_of(&follower);
        let mut l_cache = cache_of(&leader);
        if leader_extra_epoch {
            // A leader that took office and has not written yet.
            let top = follower.iter().chain(&leader).copied().max().unwrap_or(0);
            l_cache.assign(top + 1, l_end).expect("a new epoch at the log end");
        }
        let mut end = f_end;
        let mut rounds = 0;
        loop {
            rounds += 1;
            prop_assert!(rounds <= follower.len() + 2, "truncation does not converge");
            let asked = f_cache.latest_epoch();
            let answer = asked.and_then(|e| l_cache.end_offset_for(e, l_end));
            let t = truncation_point(&f_cache, 0, end, answer).expect("a fresh answer");
            prop_assert!(t.offset <= end);
            prop_assert!(t.offset >= agreed as Offset, "cut {} below agreement {agreed}", t.offset);
            end = t.offset;
            f_cache.truncate_from_end(end);
            if t.done {
                break;
            }
        }
        prop_assert_eq!(end, agreed as Offset);
    }

    #[test]
    fn choose_leader_picks_isr_members_unless_unclean(
        replicas in prop::sample::subsequence((0u32..8).collect::<Vec<_>>(), 0..8).prop_shuffle(),
        isr in prop::sample::subsequence((0u32..10).collect::<Vec<_>>(), 0..10),
        live in prop::collection::vec(any::<bool>(), 10),
        eligible in prop::collection::vec(any::<bool>(), 10),
        unclean in any::<bool>(),
    ) {
        let is_live = |id: u32| live[id as usize];
        let is_eligible = |id: u32| eligible[id as usize];
        let chosen = choose_leader(&replicas, &isr, is_live, unclean, is_eligible);
        let ok = |id: &u32| is_live(*id) && is_eligible(*id);
        let clean = replicas.iter().copied().find(|id| isr.contains(id) && ok(id));
        match chosen {
            Some(id) => {
                prop_assert!(replicas.contains(&id) && ok(&id));
                if !unclean || clean.is_some() {
                    prop_assert_eq!(Some(id), clean);
                } else {
                    prop_assert_eq!(Some(id), replicas.iter().copied().find(ok));
                }
            }
            None => {
                prop_assert!(clean.is_none());
                prop_assert!(!unclean || !replicas.iter().any(ok));
            }
        }
    }
}

/// A log's epoch cache, built the way appends build it.
fn cache_of(log: &[Epoch]) -> LeaderEpochCache {
    let mut cache = LeaderEpochCache::new();
    for (offset, &epoch) in log.iter().enumerate() {
        cache
            .assign(epoch, offset as Offset)
            .expect("generated epochs never decrease");
    }
    cache
}

/// Two logs of record epochs that could come out of ISR replication, and the length of their
/// agreed prefix: a shared prefix, then tails whose epochs above the prefix's last epoch are
/// disjoint (one leader per epoch, and an epoch starts at the same offset wherever it exists),
/// one of which may first continue the prefix's last epoch.
fn diverged_logs() -> impl Strategy<Value = (Vec<Epoch>, Vec<Epoch>, usize)> {
    (
        prop::collection::vec((1i32..3, 1usize..4), 0..4),
        prop::collection::vec((0u8..3, 1usize..4), 0..8),
        0u8..3,
        1usize..4,
    )
        .prop_map(|(prefix_runs, tail_epochs, continues, cont_len)| {
            let mut prefix = Vec::new();
            let mut epoch = 0;
            for (step, len) in prefix_runs {
                epoch += step;
                prefix.extend(std::iter::repeat_n(epoch, len));
            }
            let last = prefix.last().copied();
            let (mut follower, mut leader) = (prefix.clone(), prefix.clone());
            if let Some(last) = last {
                match continues {
                    0 => follower.extend(std::iter::repeat_n(last, cont_len)),
                    1 => leader.extend(std::iter::repeat_n(last, cont_len)),
                    _ => {}
                }
            }
            let base = last.unwrap_or(0);
            for (i, (side, len)) in tail_epochs.into_iter().enumerate() {
                let e = base + 1 + i as Epoch;
                match side {
                    0 => follower.extend(std::iter::repeat_n(e, len)),
                    1 => leader.extend(std::iter::repeat_n(e, len)),
                    _ => {}
                }
            }
            let agreed = prefix.len();
            (follower, leader, agreed)
        })
}

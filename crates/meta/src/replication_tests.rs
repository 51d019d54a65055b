//! The replication commands as pure functions: partition epochs, `AlterPartition`'s
//! compare-and-set, replication topic settings, leader election on fence and controlled
//! shutdown, eligibility after an unclean restart, preferred leaders, reassignment,
//! rebalance and drain, the default replication factor, and old data loading; then random
//! command sequences checked against the invariants after every step.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tinymq_protocol::ErrorCode;

use crate::command::{default_replication_factor, DEFAULT_REPLICATION_FACTOR_MAX};
use crate::*;

fn register_as(
    image: &mut MetadataImage,
    id: u32,
    clean_shutdown: bool,
) -> Result<Reply, MetaError> {
    execute_and_apply(
        image,
        &Command::RegisterBroker {
            id,
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            clean_shutdown,
            kafka: None,
        },
    )
}

fn register(image: &mut MetadataImage, id: u32) {
    register_as(image, id, true).unwrap();
}

fn fence(image: &mut MetadataImage, id: u32) {
    let epoch = image.brokers[&id].epoch;
    execute_and_apply(image, &Command::FenceBroker { id, epoch }).unwrap();
}

fn create_with(
    image: &mut MetadataImage,
    name: &str,
    partitions: u32,
    rf: u32,
    config: &[(&str, &str)],
) -> Result<Reply, MetaError> {
    execute_and_apply(
        image,
        &Command::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: rf,
            config: config
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
    )
}

fn part<'a>(image: &'a MetadataImage, topic: &str, i: usize) -> &'a PartitionRecord {
    &image.topics[topic].partitions[i]
}

/// The AlterPartition the current leader of `topic/i` would send to set `isr`.
fn alter_by_leader(image: &MetadataImage, topic: &str, i: u32, isr: &[u32]) -> Command {
    let p = part(image, topic, i as usize);
    let leader = p.leader.expect("a leader");
    Command::AlterPartition {
        topic: topic.into(),
        partition: i,
        broker_id: leader,
        broker_epoch: image.brokers[&leader].epoch,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        isr: isr.to_vec(),
    }
}

/// Sends the `AlterPartition` the current leader of `topic/i` would send to set `isr`.
fn alter(image: &mut MetadataImage, topic: &str, i: u32, isr: &[u32]) -> Result<Reply, MetaError> {
    let command = alter_by_leader(image, topic, i, isr);
    execute_and_apply(image, &command)
}

/// Every follower of every partition of `topic` caught up: the leaders add them to the ISR.
fn all_in_sync(image: &mut MetadataImage, topic: &str) {
    for i in 0..image.topics[topic].partitions.len() {
        let p = part(image, topic, i).clone();
        let mut isr = vec![p.leader.unwrap()];
        isr.extend(p.replicas.iter().filter(|r| Some(**r) != p.leader));
        execute_and_apply(image, &alter_by_leader(image, topic, i as u32, &isr)).unwrap();
    }
}

fn cluster(brokers: u32) -> MetadataImage {
    let mut image = MetadataImage::default();
    for id in 1..=brokers {
        register(&mut image, id);
    }
    image
}

#[test]
fn an_image_and_commands_from_before_replication_still_load() {
    let old = r#"{"cluster_id":"tmq-x","brokers":{"1":{"id":1,"host":"127.0.0.1","port":9001,
        "epoch":0,"fenced":false}},"topics":{"t":{"id":1,"partitions":[{"replicas":[1],
        "leader":1,"leader_epoch":3,"isr":[1]}],"config":{"flush":"always"}}},
        "next_producer_id":1,"next_broker_epoch":1,"next_topic_id":2,"decommissioned_brokers":[]}"#;
    let image = MetadataImage::from_snapshot(old.as_bytes()).unwrap();
    let p = part(&image, "t", 0);
    assert_eq!((p.leader_epoch, p.partition_epoch), (3, 0));
    assert!(p.adding_replicas.is_empty() && p.removing_replicas.is_empty());
    assert!(!p.needs_unclean_election);
    assert_eq!(image.topics["t"].min_insync_replicas(), 1);
    assert!(!image.topics["t"].unclean_leader_election());
    // A registration from an old Raft log entry counts as after a clean shutdown.
    let command: Command =
        serde_json::from_str(r#"{"RegisterBroker":{"id":1,"host":"a","port":1}}"#).unwrap();
    assert!(matches!(
        command,
        Command::RegisterBroker {
            clean_shutdown: true,
            ..
        }
    ));
}

#[test]
fn every_change_of_leader_isr_or_replicas_bumps_the_partition_epoch() {
    let mut image = cluster(3);
    create_with(&mut image, "t", 1, 3, &[]).unwrap();
    let before = part(&image, "t", 0).clone();
    assert_eq!((before.leader_epoch, before.partition_epoch), (0, 0));
    all_in_sync(&mut image, "t");
    let p = part(&image, "t", 0).clone();
    assert_eq!((p.leader_epoch, p.partition_epoch), (0, 1), "ISR grew");
    // The same ISR again changes nothing, not even the epoch.
    let same = alter_by_leader(&image, "t", 0, &p.isr);
    let (records, reply) = execute(&image, &same).unwrap();
    assert!(records.is_empty());
    assert_eq!(reply, Reply::Partition(p.clone()));
    fence(&mut image, p.leader.unwrap());
    let q = part(&image, "t", 0);
    assert_eq!(
        (q.leader_epoch, q.partition_epoch),
        (1, 2),
        "leader and ISR changed"
    );
}

#[test]
fn alter_partition_is_accepted_only_from_the_current_leader_with_current_epochs() {
    let mut image = cluster(3);
    create_with(&mut image, "t", 1, 3, &[]).unwrap();
    let p = part(&image, "t", 0).clone();
    let leader = p.leader.unwrap();
    let full = {
        let mut isr = vec![leader];
        isr.extend(p.replicas.iter().filter(|r| **r != leader));
        isr
    };
    let valid = alter_by_leader(&image, "t", 0, &full);
    let with = |f: &dyn Fn(&mut Command)| {
        let mut c = valid.clone();
        f(&mut c);
        c
    };
    let follower = p.replicas.iter().copied().find(|r| *r != leader).unwrap();
    let cases: Vec<(Command, ErrorCode)> = vec![
        (
            with(&|c| {
                if let Command::AlterPartition { broker_epoch, .. } = c {
                    *broker_epoch += 100;
                }
            }),
            ErrorCode::STALE_BROKER_EPOCH,
        ),
        (
            with(&|c| {
                if let Command::AlterPartition {
                    broker_id,
                    broker_epoch,
                    ..
                } = c
                {
                    *broker_id = follower;
                    *broker_epoch = image.brokers[&follower].epoch;
                }
            }),
            ErrorCode::NOT_LEADER,
        ),
        (
            with(&|c| {
                if let Command::AlterPartition { leader_epoch, .. } = c {
                    *leader_epoch += 1;
                }
            }),
            ErrorCode::FENCED_LEADER_EPOCH,
        ),
        (
            with(&|c| {
                if let Command::AlterPartition {
                    partition_epoch, ..
                } = c
                {
                    *partition_epoch += 1;
                }
            }),
            ErrorCode::INVALID_UPDATE_VERSION,
        ),
        (
            with(&|c| {
                if let Command::AlterPartition { isr, .. } = c {
                    *isr = vec![follower];
                }
            }),
            ErrorCode::INVALID_REQUEST,
        ),
        (
            with(&|c| {
                if let Command::AlterPartition { isr, .. } = c {
                    isr.push(leader);
                }
            }),
            ErrorCode::INVALID_REQUEST,
        ),
        (
            with(&|c| {
                if let Command::AlterPartition { isr, .. } = c {
                    isr.push(99);
                }
            }),
            ErrorCode::INELIGIBLE_REPLICA,
        ),
        (
            with(&|c| {
                if let Command::AlterPartition { topic, .. } = c {
                    *topic = "nope".into();
                }
            }),
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ),
    ];
    for (command, code) in cases {
        let refused_at_current_epochs =
            code == ErrorCode::INVALID_REQUEST || code == ErrorCode::INELIGIBLE_REPLICA;
        if refused_at_current_epochs {
            // The current leader's bad proposal is refused by moving the partition epoch, so
            // that no delayed copy of it applies later.
            let (records, reply) = execute(&image, &command).unwrap();
            let Reply::Partition(after) = reply else {
                panic!("{command:?}: {reply:?}");
            };
            assert_eq!(after.isr, p.isr, "{command:?}");
            assert_eq!(after.partition_epoch, p.partition_epoch + 1, "{command:?}");
            assert_eq!(records.len(), 1, "{command:?}");
        } else {
            let e = execute(&image, &command).unwrap_err();
            assert_eq!(e.error_code(), code, "{command:?}: {e}");
        }
    }
    // A fenced follower cannot be added (the refusal moves the partition epoch); once
    // registered again it can.
    fence(&mut image, follower);
    let epoch_before = part(&image, "t", 0).partition_epoch;
    alter(&mut image, "t", 0, &full).unwrap();
    let refused = part(&image, "t", 0).clone();
    assert_ne!(refused.isr, full);
    assert_eq!(refused.partition_epoch, epoch_before + 1);
    register(&mut image, follower);
    let reply = alter(&mut image, "t", 0, &full).unwrap();
    let after = part(&image, "t", 0).clone();
    assert_eq!(reply, Reply::Partition(after.clone()));
    assert_eq!(after.isr, full);
    assert_eq!(after.partition_epoch, epoch_before + 2);
    // The old proposal, now stale, changes nothing; the leader may shrink the ISR.
    assert_eq!(
        execute(&image, &valid).unwrap_err().error_code(),
        ErrorCode::INVALID_UPDATE_VERSION
    );
    alter(&mut image, "t", 0, &[leader]).unwrap();
    assert_eq!(part(&image, "t", 0).isr, vec![leader]);
}

#[test]
fn replication_settings_have_defaults_by_replication_factor_and_are_checked() {
    let mut image = cluster(3);
    for (name, rf, min) in [("one", 1, "1"), ("two", 2, "1"), ("three", 3, "2")] {
        create_with(&mut image, name, 1, rf, &[]).unwrap();
        let t = &image.topics[name];
        assert_eq!(t.config["min_insync_replicas"], min, "{name}");
        assert_eq!(t.config["unclean_leader_election"], "false");
        assert_eq!(t.min_insync_replicas().to_string(), min);
    }
    create_with(
        &mut image,
        "set",
        1,
        3,
        &[
            ("min_insync_replicas", "3"),
            ("unclean_leader_election", "true"),
        ],
    )
    .unwrap();
    assert_eq!(image.topics["set"].min_insync_replicas(), 3);
    assert!(image.topics["set"].unclean_leader_election());
    for bad in [
        [("min_insync_replicas", "0")],
        [("min_insync_replicas", "4")],
        [("min_insync_replicas", "two")],
        [("unclean_leader_election", "yes")],
    ] {
        let e = create_with(&mut image, "bad", 1, 3, &bad).unwrap_err();
        assert_eq!(e.error_code(), ErrorCode::INVALID_CONFIG, "{bad:?}: {e}");
    }
    assert!(!image.topics.contains_key("bad"));
}

#[test]
fn a_controlled_shutdown_moves_leadership_to_the_isr_and_a_single_copy_waits() {
    let mut image = cluster(3);
    create_with(&mut image, "rf3", 1, 3, &[]).unwrap();
    all_in_sync(&mut image, "rf3");
    let p = part(&image, "rf3", 0).clone();
    let stopping = p.leader.unwrap();
    create_with(&mut image, "rf1", 3, 1, &[]).unwrap();
    let single = image.topics["rf1"]
        .partitions
        .iter()
        .position(|q| q.leader == Some(stopping))
        .unwrap();
    // A stopping broker fences its own registration.
    fence(&mut image, stopping);
    let q = part(&image, "rf3", 0);
    let expected = p.replicas.iter().copied().find(|r| *r != stopping);
    assert_eq!(
        q.leader, expected,
        "the first in-sync replica in replica order"
    );
    assert_eq!(q.leader_epoch, p.leader_epoch + 1);
    assert!(!q.isr.contains(&stopping) && q.isr.len() == 2);
    let offline = part(&image, "rf1", single).clone();
    assert_eq!(
        (offline.leader, offline.isr.clone()),
        (None, vec![stopping])
    );
    register(&mut image, stopping);
    let back = part(&image, "rf1", single);
    assert_eq!(back.leader, Some(stopping));
    assert!(back.leader_epoch > offline.leader_epoch);
    assert_eq!(
        part(&image, "rf3", 0).leader,
        expected,
        "the new leader keeps it"
    );
}

#[test]
fn unclean_election_only_where_the_topic_allows_it() {
    let mut image = cluster(3);
    create_with(&mut image, "clean", 1, 3, &[]).unwrap();
    create_with(
        &mut image,
        "unclean",
        1,
        3,
        &[("unclean_leader_election", "true")],
    )
    .unwrap();
    // Followers never caught up: each ISR is the leader alone.
    let leader = part(&image, "unclean", 0).leader.unwrap();
    let clean_leader = part(&image, "clean", 0).leader.unwrap();
    fence(&mut image, leader);
    let p = part(&image, "unclean", 0);
    let first_live = p.replicas.iter().copied().find(|r| *r != leader);
    assert_eq!(p.leader, first_live);
    assert_eq!(
        p.isr,
        vec![first_live.unwrap()],
        "the new leader alone is in sync"
    );
    if clean_leader == leader {
        assert_eq!(part(&image, "clean", 0).leader, None);
    }
}

#[test]
fn a_broker_back_from_an_unclean_shutdown_leaves_the_isr_and_leads_only_what_it_cannot_have_lost() {
    let mut image = cluster(3);
    create_with(&mut image, "shared", 1, 3, &[("flush", "os")]).unwrap();
    all_in_sync(&mut image, "shared");
    let leader = part(&image, "shared", 0).leader.unwrap();
    // Restarted before its session expired: it is not fenced yet.
    register_as(&mut image, leader, false).unwrap();
    let p = part(&image, "shared", 0);
    assert!(!p.isr.contains(&leader), "it rejoins once it catches up");
    assert_ne!(p.leader, Some(leader));
    assert!(p.leader.is_some());

    let mut image = cluster(3);
    for (name, flush, unclean) in [
        ("always", "always", "false"),
        ("os", "os", "false"),
        ("os-unclean", "os", "true"),
    ] {
        let config = [("flush", flush), ("unclean_leader_election", unclean)];
        create_with(&mut image, name, 1, 3, &config).unwrap();
    }
    create_with(&mut image, "single", 1, 1, &[("flush", "os")]).unwrap();
    // Make broker 1 the last in-sync replica of every partition: each leader drops its
    // followers, then is fenced until 1 leads with ISR [1]; for simplicity, reassign first.
    for name in ["always", "os", "os-unclean"] {
        execute_and_apply(
            &mut image,
            &Command::ReassignPartition {
                topic: name.into(),
                partition: 0,
                target_replicas: vec![1, 2, 3],
            },
        )
        .unwrap();
        let p = part(&image, name, 0).clone();
        if p.leader != Some(1) {
            all_in_sync(&mut image, name);
            execute_and_apply(
                &mut image,
                &Command::ElectPreferredLeaders {
                    topic: Some(name.into()),
                    except_brokers: vec![],
                },
            )
            .unwrap();
            alter(&mut image, name, 0, &[1]).unwrap();
        }
        assert_eq!(part(&image, name, 0).isr, vec![1], "{name}");
    }
    let single_owner = part(&image, "single", 0).leader.unwrap();
    fence(&mut image, 1);
    if single_owner != 1 {
        fence(&mut image, single_owner);
    }
    register_as(&mut image, 1, false).unwrap();
    if single_owner != 1 {
        register_as(&mut image, single_owner, false).unwrap();
    }
    assert_eq!(
        part(&image, "always", 0).leader,
        Some(1),
        "every ack was fsynced"
    );
    assert_eq!(
        part(&image, "single", 0).leader,
        Some(single_owner),
        "no other copy"
    );
    let os = part(&image, "os", 0).clone();
    assert_eq!((os.leader, os.isr.clone()), (None, vec![1]));
    assert!(os.needs_unclean_election);
    // There the fence already elected the first live replica, out of sync.
    let p = part(&image, "os-unclean", 0);
    assert_eq!((p.leader, p.isr.clone()), (Some(2), vec![2]));
    // A later clean restart does not bring back what the unclean one may have lost.
    fence(&mut image, 1);
    register(&mut image, 1);
    assert_eq!(part(&image, "os", 0).leader, None);
    let (records, _) = execute(
        &image,
        &Command::ElectPreferredLeaders {
            topic: None,
            except_brokers: vec![],
        },
    )
    .unwrap();
    assert!(records.is_empty(), "{records:?}");
}

/// Issue 28 (the broker's production simulation, seed 15913): a follower outside the ISR
/// that restarts uncleanly may have lost a tail it reported; a leader whose image does not
/// show the new registration yet would propose it back on the old report. The registration
/// moves the partition epoch, so that proposal is stale.
#[test]
fn an_unclean_restart_outside_the_isr_makes_older_isr_proposals_stale() {
    let mut image = cluster(3);
    create_with(&mut image, "t", 1, 3, &[]).unwrap();
    let leader = part(&image, "t", 0).leader.unwrap();
    let follower = part(&image, "t", 0)
        .replicas
        .iter()
        .copied()
        .find(|r| *r != leader)
        .unwrap();
    let stale = alter_by_leader(&image, "t", 0, &[leader, follower]);
    let before = part(&image, "t", 0).clone();
    assert!(!before.isr.contains(&follower), "{before:?}");
    register_as(&mut image, follower, false).unwrap();
    let after = part(&image, "t", 0).clone();
    assert_eq!(after.partition_epoch, before.partition_epoch + 1);
    assert_eq!((after.leader, &after.isr), (before.leader, &before.isr));
    assert!(execute_and_apply(&mut image, &stale).is_err());
    // A clean restart (its data is as it left it) changes nothing.
    let clean = part(&image, "t", 0).clone();
    register_as(&mut image, follower, true).unwrap();
    assert_eq!(part(&image, "t", 0), &clean);
}

#[test]
fn leadership_returns_to_the_preferred_replica_once_it_is_back_in_sync() {
    let mut image = cluster(3);
    create_with(&mut image, "t", 3, 3, &[]).unwrap();
    all_in_sync(&mut image, "t");
    fence(&mut image, 1);
    register(&mut image, 1);
    let elect = |except: Vec<u32>| Command::ElectPreferredLeaders {
        topic: None,
        except_brokers: except,
    };
    let (records, _) = execute(&image, &elect(vec![])).unwrap();
    assert!(records.is_empty(), "broker 1 is not in sync yet");
    all_in_sync(&mut image, "t");
    let (records, _) = execute(&image, &elect(vec![1])).unwrap();
    assert!(records.is_empty(), "broker 1 registered too recently");
    let before = image.topics["t"].clone();
    execute_and_apply(&mut image, &elect(vec![])).unwrap();
    for (p, old) in image.topics["t"].partitions.iter().zip(&before.partitions) {
        assert_eq!(p.leader, Some(p.replicas[0]));
        if old.leader != p.leader {
            assert_eq!(p.leader_epoch, old.leader_epoch + 1);
        }
    }
    assert!(before
        .partitions
        .iter()
        .any(|p| p.leader != Some(p.replicas[0])));
    let (records, _) = execute(&image, &elect(vec![])).unwrap();
    assert!(records.is_empty(), "nothing more to move");
}

#[test]
fn a_reassignment_adds_replicas_then_removes_the_old_ones_once_they_are_in_sync() {
    let mut image = cluster(4);
    create_with(&mut image, "t", 1, 2, &[]).unwrap();
    all_in_sync(&mut image, "t");
    let p = part(&image, "t", 0).clone();
    let old_leader = p.leader.unwrap();
    let kept = p
        .replicas
        .iter()
        .copied()
        .find(|r| *r != old_leader)
        .unwrap();
    let new: Vec<u32> = (1..=4).filter(|b| !p.replicas.contains(b)).collect();
    let target = vec![new[0], kept];
    let reply = execute_and_apply(
        &mut image,
        &Command::ReassignPartition {
            topic: "t".into(),
            partition: 0,
            target_replicas: target.clone(),
        },
    )
    .unwrap();
    let moving = part(&image, "t", 0).clone();
    assert_eq!(reply, Reply::Partition(moving.clone()));
    assert_eq!(moving.replicas, vec![new[0], kept, old_leader]);
    assert_eq!(moving.adding_replicas, vec![new[0]]);
    assert_eq!(moving.removing_replicas, vec![old_leader]);
    assert_eq!(moving.leader, Some(old_leader), "writable throughout");
    // Cancelled: back to the replicas before the move, the leader first; a second cancel is
    // refused. Then started again.
    let cancel = Command::CancelReassignment {
        topic: "t".into(),
        partition: 0,
    };
    execute_and_apply(&mut image, &cancel).unwrap();
    let cancelled = part(&image, "t", 0).clone();
    assert_eq!(cancelled.replicas, vec![old_leader, kept]);
    assert!(!cancelled.is_reassigning());
    assert_eq!(cancelled.leader, Some(old_leader));
    assert!(matches!(
        crate::execute(&image, &cancel),
        Err(MetaError::Invalid(_))
    ));
    execute_and_apply(
        &mut image,
        &Command::ReassignPartition {
            topic: "t".into(),
            partition: 0,
            target_replicas: vec![new[0], kept],
        },
    )
    .unwrap();
    // Replaced by another reassignment before it completes.
    let target = vec![new[1], kept];
    execute_and_apply(
        &mut image,
        &Command::ReassignPartition {
            topic: "t".into(),
            partition: 0,
            target_replicas: target.clone(),
        },
    )
    .unwrap();
    let moving = part(&image, "t", 0).clone();
    assert_eq!(moving.adding_replicas, vec![new[1]]);
    assert_eq!(moving.removing_replicas, vec![new[0], old_leader]);
    // The leader reports the new replica in sync: the move completes in that step.
    let isr = vec![old_leader, kept, new[1]];
    let reply = alter(&mut image, "t", 0, &isr).unwrap();
    let done = part(&image, "t", 0).clone();
    assert_eq!(reply, Reply::Partition(done.clone()));
    assert_eq!(done.replicas, target);
    assert_eq!(done.isr, vec![kept, new[1]]);
    assert_eq!(
        done.leader,
        Some(new[1]),
        "the first in-sync target replica"
    );
    assert_eq!(done.leader_epoch, moving.leader_epoch + 1);
    assert!(!done.is_reassigning());
    // Shrinking to replicas already in sync completes at once.
    execute_and_apply(
        &mut image,
        &Command::ReassignPartition {
            topic: "t".into(),
            partition: 0,
            target_replicas: vec![kept],
        },
    )
    .unwrap();
    let shrunk = part(&image, "t", 0);
    assert_eq!(
        (shrunk.replicas.clone(), shrunk.leader),
        (vec![kept], Some(kept))
    );
    // Refusals.
    fence(&mut image, new[0]);
    for target in [vec![], vec![kept, kept], vec![kept, 9], vec![kept, new[0]]] {
        let e = execute(
            &image,
            &Command::ReassignPartition {
                topic: "t".into(),
                partition: 0,
                target_replicas: target.clone(),
            },
        )
        .unwrap_err();
        assert_eq!(
            e.error_code(),
            ErrorCode::INVALID_REQUEST,
            "{target:?}: {e}"
        );
    }
}

fn replicas_per_broker(topic: &TopicRecord) -> BTreeMap<u32, usize> {
    let mut n = BTreeMap::new();
    for r in topic.partitions.iter().flat_map(|p| &p.replicas) {
        *n.entry(*r).or_default() += 1;
    }
    n
}

#[test]
fn rebalance_spreads_a_topic_over_a_new_broker_and_drain_empties_one() {
    let mut image = cluster(2);
    create_with(&mut image, "t", 6, 2, &[]).unwrap();
    all_in_sync(&mut image, "t");
    register(&mut image, 3);
    let (records, reply) = execute(&image, &Command::Rebalance { dry_run: true }).unwrap();
    assert!(records.is_empty(), "a dry run changes nothing");
    let Reply::Plan(plan) = reply else {
        panic!("{reply:?}")
    };
    assert!(!plan.is_empty());
    execute_and_apply(&mut image, &Command::Rebalance { dry_run: false }).unwrap();
    assert!(image.topics["t"]
        .partitions
        .iter()
        .any(|p| p.is_reassigning()));
    // The leaders bring the new replicas in sync; each move completes.
    all_in_sync(&mut image, "t");
    let t = &image.topics["t"];
    assert!(t.partitions.iter().all(|p| !p.is_reassigning()));
    assert_eq!(replicas_per_broker(t), [(1, 4), (2, 4), (3, 4)].into());
    let again = execute(&image, &Command::Rebalance { dry_run: true })
        .unwrap()
        .1;
    assert_eq!(again, Reply::Plan(vec![]), "balanced: nothing more to do");

    execute_and_apply(
        &mut image,
        &Command::DrainBroker {
            id: 3,
            dry_run: false,
        },
    )
    .unwrap();
    all_in_sync(&mut image, "t");
    let t = &image.topics["t"];
    assert!(t
        .partitions
        .iter()
        .all(|p| !p.replicas.contains(&3) && p.leader != Some(3)));
    assert_eq!(replicas_per_broker(t), [(1, 6), (2, 6)].into());
    let unknown = execute(
        &image,
        &Command::DrainBroker {
            id: 9,
            dry_run: true,
        },
    )
    .unwrap_err();
    assert_eq!(unknown, MetaError::UnknownBroker(9));
    fence(&mut image, 3);
    let no_room = execute(
        &image,
        &Command::DrainBroker {
            id: 1,
            dry_run: true,
        },
    )
    .unwrap_err();
    assert!(
        matches!(no_room, MetaError::DrainLeavesTooFew { id: 1, .. }),
        "{no_room}"
    );
}

#[test]
fn the_default_replication_factor_is_three_at_most_and_min_insync_follows_it() {
    assert_eq!(DEFAULT_REPLICATION_FACTOR_MAX, 3);
    assert_eq!(default_replication_factor(5, 3), 3);
    assert_eq!(default_replication_factor(2, 3), 2);
    assert_eq!(default_replication_factor(1, 3), 1);
    // (live brokers, replication factor and min_insync_replicas a topic gets by default)
    for (live, rf, min_insync) in [(1, 1, "1"), (2, 2, "1"), (3, 3, "2"), (5, 3, "2")] {
        let mut image = cluster(live);
        create_with(&mut image, "t", 2, 0, &[]).unwrap();
        let t = &image.topics["t"];
        assert!(
            t.partitions.iter().all(|p| p.replicas.len() as u32 == rf),
            "{live} live brokers: {t:?}"
        );
        assert_eq!(t.config[crate::image::MIN_INSYNC_REPLICAS], min_insync);
        assert_eq!(t.config[crate::image::UNCLEAN_LEADER_ELECTION], "false");
    }
}

/// One step of a random scenario.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Register {
        id: u32,
        clean: bool,
    },
    Fence {
        id: u32,
    },
    Create {
        partitions: u32,
        rf: u32,
        flush_always: bool,
        unclean: bool,
    },
    /// `stale`: 0 valid, 1 old broker epoch, 2 a follower, 3 old leader epoch, 4 old
    /// partition epoch.
    Alter {
        topic: usize,
        partition: usize,
        members: u8,
        stale: u8,
    },
    Reassign {
        topic: usize,
        partition: usize,
        seed: u32,
        rf: usize,
    },
    Rebalance,
    Drain {
        id: u32,
    },
    ElectPreferred,
}

pub(crate) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1..=5u32, any::<bool>()).prop_map(|(id, clean)| Step::Register { id, clean }),
        (1..=5u32).prop_map(|id| Step::Fence { id }),
        (1..=4u32, 1..=3u32, any::<bool>(), any::<bool>()).prop_map(
            |(partitions, rf, flush_always, unclean)| Step::Create {
                partitions,
                rf,
                flush_always,
                unclean
            }
        ),
        (0..4usize, 0..4usize, any::<u8>(), 0..5u8).prop_map(
            |(topic, partition, members, stale)| Step::Alter {
                topic,
                partition,
                members,
                stale
            }
        ),
        (0..4usize, 0..4usize, any::<u32>(), 1..=3usize).prop_map(
            |(topic, partition, seed, rf)| Step::Reassign {
                topic,
                partition,
                seed,
                rf
            }
        ),
        Just(Step::Rebalance),
        (1..=5u32).prop_map(|id| Step::Drain { id }),
        Just(Step::ElectPreferred),
    ]
}

/// The partition a step names, if the image has it.
fn pick(image: &MetadataImage, topic: usize, partition: usize) -> Option<(String, u32)> {
    let (name, t) = image.topics.iter().nth(topic % image.topics.len().max(1))?;
    let i = partition % t.partitions.len().max(1);
    Some((name.clone(), i as u32))
}

/// Runs `step`; returns whether it was a stale `AlterPartition` (which must be refused).
pub(crate) fn command_for(
    image: &MetadataImage,
    step: &Step,
    topics: &mut u32,
) -> Option<(Command, bool)> {
    Some(match step {
        Step::Register { id, clean } => (
            Command::RegisterBroker {
                id: *id,
                host: "h".into(),
                port: *id as u16,
                clean_shutdown: *clean,
                kafka: None,
            },
            false,
        ),
        Step::Fence { id } => (
            Command::FenceBroker {
                id: *id,
                epoch: image.brokers.get(id)?.epoch,
            },
            false,
        ),
        Step::Create {
            partitions,
            rf,
            flush_always,
            unclean,
        } => {
            *topics += 1;
            let config = [
                ("flush", if *flush_always { "always" } else { "os" }),
                (
                    "unclean_leader_election",
                    if *unclean { "true" } else { "false" },
                ),
            ];
            (
                Command::CreateTopic {
                    name: format!("t{topics}"),
                    partitions: *partitions,
                    replication_factor: *rf,
                    config: config
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                },
                false,
            )
        }
        Step::Alter {
            topic,
            partition,
            members,
            stale,
        } => {
            let (name, i) = pick(image, *topic, *partition)?;
            let p = part(image, &name, i as usize);
            let leader = p.leader?;
            let mut isr = vec![leader];
            for (bit, r) in p.replicas.iter().enumerate() {
                if *r != leader && members & (1 << bit) != 0 {
                    isr.push(*r);
                }
            }
            let follower = p.replicas.iter().copied().find(|r| *r != leader);
            let mut broker_id = leader;
            let mut broker_epoch = image.brokers[&leader].epoch;
            let mut leader_epoch = p.leader_epoch;
            let mut partition_epoch = p.partition_epoch;
            match stale {
                1 => broker_epoch = broker_epoch.wrapping_sub(1),
                2 => {
                    broker_id = follower?;
                    broker_epoch = image.brokers.get(&broker_id)?.epoch;
                }
                3 => leader_epoch = leader_epoch.checked_sub(1)?,
                4 => partition_epoch = partition_epoch.checked_sub(1)?,
                _ => {}
            }
            (
                Command::AlterPartition {
                    topic: name,
                    partition: i,
                    broker_id,
                    broker_epoch,
                    leader_epoch,
                    partition_epoch,
                    isr,
                },
                *stale != 0,
            )
        }
        Step::Reassign {
            topic,
            partition,
            seed,
            rf,
        } => {
            let (name, i) = pick(image, *topic, *partition)?;
            let mut brokers: Vec<u32> = image.brokers.keys().copied().collect();
            let n = brokers.len();
            brokers.rotate_left(*seed as usize % n.max(1));
            if seed % 2 == 1 {
                brokers.reverse();
            }
            brokers.truncate(*rf);
            (
                Command::ReassignPartition {
                    topic: name,
                    partition: i,
                    target_replicas: brokers,
                },
                false,
            )
        }
        Step::Rebalance => (Command::Rebalance { dry_run: false }, false),
        Step::Drain { id } => (
            Command::DrainBroker {
                id: *id,
                dry_run: false,
            },
            false,
        ),
        Step::ElectPreferred => (
            Command::ElectPreferredLeaders {
                topic: None,
                except_brokers: vec![],
            },
            false,
        ),
    })
}

fn distinct(v: &[u32]) -> bool {
    v.iter().enumerate().all(|(i, b)| !v[..i].contains(b))
}

fn check_invariants(
    image: &MetadataImage,
    epochs: &mut BTreeMap<(u64, usize), (u32, u32)>,
) -> Result<(), TestCaseError> {
    for (name, t) in &image.topics {
        for (i, p) in t.partitions.iter().enumerate() {
            let at = format!("{name}/{i}: {p:?}");
            prop_assert!(distinct(&p.replicas) && distinct(&p.isr), "{}", at);
            prop_assert!(!p.isr.is_empty(), "{}", at);
            prop_assert!(p.isr.iter().all(|r| p.replicas.contains(r)), "{}", at);
            if let Some(l) = p.leader {
                prop_assert!(p.isr.contains(&l), "{}", at);
                prop_assert!(!image.brokers[&l].fenced, "a fenced leader: {}", at);
            }
            prop_assert!(!p.needs_unclean_election || p.leader.is_none(), "{}", at);
            for r in p.adding_replicas.iter().chain(&p.removing_replicas) {
                prop_assert!(p.replicas.contains(r), "{}", at);
            }
            prop_assert!(
                p.adding_replicas
                    .iter()
                    .all(|r| !p.removing_replicas.contains(r)),
                "{}",
                at
            );
            let now = (p.leader_epoch, p.partition_epoch);
            let before = epochs.insert((t.id, i), now).unwrap_or((0, 0));
            prop_assert!(
                now.0 >= before.0 && now.1 >= before.1,
                "epochs went back: {}",
                at
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_command_sequences_keep_the_partition_invariants(
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        let mut image = MetadataImage::default();
        let mut epochs = BTreeMap::new();
        let mut topics = 0;
        for step in &steps {
            let Some((command, stale)) = command_for(&image, step, &mut topics) else {
                continue;
            };
            let before = image.clone();
            let result = execute_and_apply(&mut image, &command);
            if stale {
                prop_assert!(result.is_err(), "a stale {:?} was accepted", command);
                prop_assert_eq!(&image, &before, "a stale proposal changed the image");
            }
            if result.is_err() {
                prop_assert_eq!(&image, &before, "a refused command changed the image");
            }
            check_invariants(&image, &mut epochs)?;
        }
    }
}

#[test]
fn a_leader_back_from_an_unclean_restart_that_keeps_leading_gets_a_new_leader_epoch() {
    let mut image = cluster(3);
    create_with(&mut image, "t", 1, 3, &[("flush", "always")]).unwrap();
    let leader = part(&image, "t", 0).leader.unwrap();
    // Its followers are out of sync (they may still have copied its unfsynced tail).
    alter(&mut image, "t", 0, &[leader]).unwrap();
    let before = part(&image, "t", 0).clone();
    // Restarted (power loss) before its session expired: not fenced, still the leader.
    register_as(&mut image, leader, false).unwrap();
    let after = part(&image, "t", 0);
    assert_eq!(
        after.leader,
        Some(leader),
        "flush always: it may keep leading"
    );
    assert!(
        after.leader_epoch > before.leader_epoch,
        "a new incarnation leads in a new epoch: {} -> {}",
        before.leader_epoch,
        after.leader_epoch
    );
    // A clean restart keeps the epoch: nothing it wrote was lost.
    let before = after.clone();
    register_as(&mut image, leader, true).unwrap();
    assert_eq!(part(&image, "t", 0).leader_epoch, before.leader_epoch);
}

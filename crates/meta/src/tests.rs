//! The metadata commands as pure functions: placement, fencing and failover, re-registration,
//! growth, producer ids, and that replaying the records rebuilds the same image.

use std::collections::BTreeMap;

use crate::*;

fn register(image: &mut MetadataImage, id: u32) -> u64 {
    match execute_and_apply(
        image,
        &Command::RegisterBroker {
            id,
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
            clean_shutdown: true,
            kafka: None,
        },
    )
    .unwrap()
    {
        Reply::BrokerRegistered { epoch } => epoch,
        other => panic!("{other:?}"),
    }
}

fn create(
    image: &mut MetadataImage,
    name: &str,
    partitions: u32,
    rf: u32,
) -> Result<Reply, MetaError> {
    execute_and_apply(
        image,
        &Command::CreateTopic {
            name: name.into(),
            partitions,
            replication_factor: rf,
            config: BTreeMap::new(),
        },
    )
}

fn leader_counts(image: &MetadataImage, topic: &str) -> BTreeMap<u32, usize> {
    let mut counts = BTreeMap::new();
    for p in &image.topics[topic].partitions {
        *counts.entry(p.leader.unwrap()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn a_six_partition_topic_on_three_brokers_has_two_leaders_per_broker() {
    let mut image = MetadataImage::default();
    for id in 1..=3 {
        register(&mut image, id);
    }
    create(&mut image, "orders", 6, 3).unwrap();
    assert_eq!(
        leader_counts(&image, "orders"),
        [(1, 2), (2, 2), (3, 2)].into()
    );
    for p in &image.topics["orders"].partitions {
        assert_eq!(p.replicas.len(), 3);
        assert_eq!(p.leader, Some(p.replicas[0]));
        assert_eq!(p.isr, vec![p.replicas[0]], "followers hold no data yet");
    }
}

/// What partition replication will record once followers have caught up.
fn all_replicas_in_sync(image: &mut MetadataImage, topic: &str) {
    let partitions = image.topics[topic].partitions.clone();
    for (i, p) in partitions.iter().enumerate() {
        image.apply(&MetadataRecord::ChangePartition {
            name: topic.into(),
            partition: i as u32,
            leader: p.leader,
            isr: p.replicas.clone(),
        });
    }
}

#[test]
fn a_broker_that_joins_later_leads_partitions_of_new_topics() {
    let mut image = MetadataImage::default();
    for id in 1..=2 {
        register(&mut image, id);
    }
    create(&mut image, "old", 4, 1).unwrap();
    register(&mut image, 3);
    create(&mut image, "new", 3, 1).unwrap();
    assert!(leader_counts(&image, "new").get(&3).copied().unwrap_or(0) >= 1);
    // Over both topics, leadership is as even as it can be.
    let load = image.load();
    let leaders: Vec<usize> = load.values().map(|(l, _)| *l).collect();
    assert!(
        leaders.iter().max().unwrap() - leaders.iter().min().unwrap() <= 1,
        "{load:?}"
    );
}

#[test]
fn fencing_moves_leadership_to_in_sync_replicas_or_takes_the_partition_offline() {
    let mut image = MetadataImage::default();
    let epochs: Vec<u64> = (1..=3).map(|id| register(&mut image, id)).collect();
    create(&mut image, "replicated", 3, 3).unwrap();
    all_replicas_in_sync(&mut image, "replicated");
    create(&mut image, "single", 3, 1).unwrap();
    execute_and_apply(
        &mut image,
        &Command::FenceBroker {
            id: 1,
            epoch: epochs[0],
        },
    )
    .unwrap();
    assert!(image.brokers[&1].fenced);
    for p in &image.topics["replicated"].partitions {
        assert_ne!(p.leader, Some(1), "no partition is led by a fenced broker");
        assert!(!p.isr.contains(&1));
        assert!(p.leader.is_some());
    }
    let offline: Vec<&PartitionRecord> = image.topics["single"]
        .partitions
        .iter()
        .filter(|p| p.leader.is_none())
        .collect();
    assert_eq!(
        offline.len(),
        1,
        "the single-replica partition of broker 1 waits for it"
    );
    assert_eq!(offline[0].isr, vec![1], "no unclean election");
    let epoch_before = offline[0].leader_epoch;

    // The broker comes back with a new epoch and leads its partition again.
    let new_epoch = register(&mut image, 1);
    assert!(new_epoch > epochs[2]);
    assert!(!image.brokers[&1].fenced);
    let back = image.topics["single"]
        .partitions
        .iter()
        .find(|p| p.replicas == vec![1])
        .unwrap();
    assert_eq!(back.leader, Some(1));
    assert!(
        back.leader_epoch > epoch_before,
        "every leader change bumps the epoch"
    );
    // A fence for the old incarnation changes nothing.
    let (records, _) = execute(
        &image,
        &Command::FenceBroker {
            id: 1,
            epoch: epochs[0],
        },
    )
    .unwrap();
    assert!(records.is_empty());
}

#[test]
fn a_broker_id_is_not_shared_by_two_live_brokers() {
    let mut image = MetadataImage::default();
    let epoch = register(&mut image, 1);
    let other_address = Command::RegisterBroker {
        id: 1,
        host: "10.0.0.9".into(),
        port: 1,
        clean_shutdown: true,
        kafka: None,
    };
    assert!(matches!(
        execute(&image, &other_address),
        Err(MetaError::BrokerIdInUse { id: 1, .. })
    ));
    // The same address again is the same broker restarting: a new epoch.
    assert!(register(&mut image, 1) > epoch);
    // Once fenced, the id may move to another address.
    let current = image.brokers[&1].epoch;
    execute_and_apply(
        &mut image,
        &Command::FenceBroker {
            id: 1,
            epoch: current,
        },
    )
    .unwrap();
    assert!(execute_and_apply(&mut image, &other_address).is_ok());
}

#[test]
fn the_cluster_id_is_set_once() {
    let mut image = MetadataImage::default();
    let set = |id: &str| Command::SetClusterId {
        cluster_id: id.into(),
    };
    execute_and_apply(&mut image, &set("first")).unwrap();
    execute_and_apply(&mut image, &set("second")).unwrap();
    assert_eq!(image.cluster_id, "first");
}

#[test]
fn topics_grow_but_never_shrink_and_bad_requests_are_refused() {
    let mut image = MetadataImage::default();
    register(&mut image, 1);
    register(&mut image, 2);
    create(&mut image, "t", 2, 2).unwrap();
    execute_and_apply(
        &mut image,
        &Command::AlterPartitions {
            name: "t".into(),
            partitions: 5,
        },
    )
    .unwrap();
    assert_eq!(image.topics["t"].partitions.len(), 5);
    assert!(image.topics["t"]
        .partitions
        .iter()
        .all(|p| p.replicas.len() == 2));
    let shrink = execute(
        &image,
        &Command::AlterPartitions {
            name: "t".into(),
            partitions: 3,
        },
    );
    assert!(matches!(shrink, Err(MetaError::InvalidPartitions(_))));
    assert_eq!(
        create(&mut image, "t", 1, 1),
        Err(MetaError::TopicExists("t".into()))
    );
    assert_eq!(
        create(&mut image, "x", 1, 3),
        Err(MetaError::NotEnoughBrokers { want: 3, live: 2 })
    );
    assert!(matches!(
        create(&mut image, "__x", 1, 1),
        Err(MetaError::InvalidTopic(_))
    ));
    assert!(matches!(
        create(&mut image, "y", 0, 1),
        Err(MetaError::InvalidPartitions(_))
    ));
    execute_and_apply(&mut image, &Command::DeleteTopic { name: "t".into() }).unwrap();
    assert!(image.topics.is_empty());
    assert_eq!(
        execute(&image, &Command::DeleteTopic { name: "t".into() })
            .unwrap_err()
            .error_code(),
        tinymq_protocol::ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
    );
}

#[test]
fn producer_id_blocks_never_overlap() {
    let mut image = MetadataImage::default();
    let mut seen = Vec::new();
    for count in [1000, 1, 500] {
        match execute_and_apply(&mut image, &Command::AllocateProducerIds { count }).unwrap() {
            Reply::ProducerIds { first, count } => seen.push((first, first + count)),
            other => panic!("{other:?}"),
        }
    }
    for w in seen.windows(2) {
        assert!(w[0].1 <= w[1].0, "{seen:?}");
    }
    assert_eq!(seen[0].0, 1, "id 0 (proto3's absent) is never handed out");
}

#[test]
fn replaying_the_records_or_the_snapshot_rebuilds_the_same_image() {
    let mut image = MetadataImage::default();
    let mut log = Vec::new();
    let mut run = |image: &mut MetadataImage, command: Command| {
        let (records, _) = execute(image, &command).unwrap();
        for r in &records {
            image.apply(r);
        }
        log.extend(records);
    };
    run(
        &mut image,
        Command::RegisterBroker {
            id: 1,
            host: "a".into(),
            port: 1,
            clean_shutdown: true,
            kafka: None,
        },
    );
    run(
        &mut image,
        Command::RegisterBroker {
            id: 2,
            host: "b".into(),
            port: 2,
            clean_shutdown: true,
            kafka: None,
        },
    );
    run(
        &mut image,
        Command::CreateTopic {
            name: "t".into(),
            partitions: 4,
            replication_factor: 2,
            config: [("flush".to_string(), "os".to_string())].into(),
        },
    );
    let epoch = image.brokers[&2].epoch;
    run(&mut image, Command::FenceBroker { id: 2, epoch });
    run(&mut image, Command::AllocateProducerIds { count: 10 });
    let mut replayed = MetadataImage::default();
    for r in &log {
        replayed.apply(r);
    }
    assert_eq!(replayed, image);
    assert_eq!(
        MetadataImage::from_snapshot(&image.to_snapshot()).unwrap(),
        image
    );
}

#[test]
fn the_offsets_topic_is_created_once_and_spread_over_the_brokers() {
    let mut image = MetadataImage::default();
    for id in 1..=2 {
        register(&mut image, id);
    }
    let ensure = Command::EnsureOffsetsTopic { partitions: 4 };
    execute_and_apply(&mut image, &ensure).unwrap();
    assert_eq!(
        leader_counts(&image, command::OFFSETS_TOPIC),
        [(1, 2), (2, 2)].into()
    );
    let (records, _) = execute(&image, &ensure).unwrap();
    assert!(records.is_empty(), "a second request changes nothing");
    // Users cannot create (or shadow) internal topics.
    assert!(matches!(
        create(&mut image, command::OFFSETS_TOPIC, 1, 1),
        Err(MetaError::InvalidTopic(_))
    ));
}

#[test]
fn the_offsets_topic_has_up_to_three_replicas_and_needs_two_in_sync_with_three() {
    for (brokers, rf, min_insync) in [(1, 1, "1"), (2, 2, "1"), (4, 3, "2")] {
        let mut image = MetadataImage::default();
        for id in 1..=brokers {
            register(&mut image, id);
        }
        execute_and_apply(&mut image, &Command::EnsureOffsetsTopic { partitions: 4 }).unwrap();
        let topic = &image.topics[command::OFFSETS_TOPIC];
        for p in &topic.partitions {
            assert_eq!(p.replicas.len(), rf, "{brokers} brokers");
            assert_eq!(
                p.isr,
                vec![p.replicas[0]],
                "followers join as they catch up"
            );
        }
        assert_eq!(topic.config["min_insync_replicas"], min_insync);
        assert!(
            topic.flushes_always(),
            "commits are fsynced on every replica"
        );
        assert!(!topic.unclean_leader_election());
    }
}

#[test]
fn a_topic_created_again_under_its_name_gets_a_new_id() {
    let mut image = MetadataImage::default();
    register(&mut image, 1);
    create(&mut image, "t", 1, 1).unwrap();
    let first = image.topics["t"].id;
    assert!(first > 0);
    execute_and_apply(&mut image, &Command::DeleteTopic { name: "t".into() }).unwrap();
    create(&mut image, "t", 1, 1).unwrap();
    assert!(image.topics["t"].id > first);
}

#[test]
fn a_broker_holds_a_bounded_number_of_partitions_and_internal_topics_are_not_for_clients() {
    let mut image = MetadataImage::default();
    register(&mut image, 1);
    for t in 0..11 {
        create(&mut image, &format!("t{t}"), 1024, 1).unwrap();
    }
    // 11,264 replicas on broker 1; 1,024 more would pass the bound of 12,000.
    let full = create(&mut image, "t11", 1024, 1).unwrap_err();
    assert!(matches!(full, MetaError::InvalidPartitions(_)), "{full:?}");
    assert_eq!(
        full.error_code(),
        tinymq_protocol::ErrorCode::INVALID_PARTITIONS
    );
    create(&mut image, "fits", 700, 1).unwrap();
    execute_and_apply(&mut image, &Command::EnsureOffsetsTopic { partitions: 4 }).unwrap();
    let delete = Command::DeleteTopic {
        name: crate::command::OFFSETS_TOPIC.into(),
    };
    assert!(matches!(
        execute(&image, &delete),
        Err(MetaError::InvalidTopic(_))
    ));
    let grow = Command::AlterPartitions {
        name: crate::command::OFFSETS_TOPIC.into(),
        partitions: 10,
    };
    assert!(matches!(
        execute(&image, &grow),
        Err(MetaError::InvalidTopic(_))
    ));
}

fn fence(image: &mut MetadataImage, id: u32) {
    let epoch = image.brokers[&id].epoch;
    execute_and_apply(image, &Command::FenceBroker { id, epoch }).unwrap();
}

fn decommission(
    image: &mut MetadataImage,
    id: u32,
    move_partitions: bool,
) -> Result<Reply, MetaError> {
    execute_and_apply(
        image,
        &Command::DecommissionBroker {
            id,
            move_partitions,
        },
    )
}

#[test]
fn a_stopped_broker_is_not_placed_on_and_returns_when_it_registers_again() {
    let mut image = MetadataImage::default();
    for id in 1..=3 {
        register(&mut image, id);
    }
    // A clean stop fences the broker's own epoch at once.
    fence(&mut image, 3);
    create(&mut image, "after-stop", 30, 1).unwrap();
    assert!(image.topics["after-stop"]
        .partitions
        .iter()
        .all(|p| !p.replicas.contains(&3)));
    assert!(matches!(
        create(&mut image, "three-copies", 1, 3),
        Err(MetaError::NotEnoughBrokers { want: 3, live: 2 })
    ));
    register(&mut image, 3);
    create(&mut image, "after-restart", 3, 1).unwrap();
    assert!(
        image.topics["after-restart"]
            .partitions
            .iter()
            .all(|p| p.replicas == vec![3]),
        "the returning broker, least loaded, leads every new partition"
    );
}

#[test]
fn decommission_needs_a_stopped_broker_and_its_partitions_moved_and_retires_the_id() {
    let mut image = MetadataImage::default();
    for id in 1..=3 {
        register(&mut image, id);
    }
    create(&mut image, "single", 6, 1).unwrap();
    create(&mut image, "copies", 3, 2).unwrap();
    assert!(matches!(
        decommission(&mut image, 3, true),
        Err(MetaError::BrokerLive { id: 3, .. })
    ));
    assert!(matches!(
        decommission(&mut image, 9, true),
        Err(MetaError::UnknownBroker(9))
    ));
    fence(&mut image, 3);
    let refused = decommission(&mut image, 3, false).unwrap_err();
    assert!(
        matches!(&refused, MetaError::BrokerHoldsPartitions { id: 3, .. }),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("--move-partitions"),
        "{refused}"
    );
    assert!(image.brokers.contains_key(&3), "a refusal changes nothing");

    let before = image.clone();
    decommission(&mut image, 3, true).unwrap();
    assert!(!image.brokers.contains_key(&3));
    for (name, topic) in &image.topics {
        for (i, p) in topic.partitions.iter().enumerate() {
            let old = &before.topics[name].partitions[i];
            assert!(
                !p.replicas.contains(&3) && !p.isr.contains(&3),
                "{name}/{i}: {p:?}"
            );
            assert_eq!(p.replicas.len(), old.replicas.len());
            let mut distinct = p.replicas.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), p.replicas.len(), "{name}/{i}: {p:?}");
            assert!(p.leader.is_some(), "{name}/{i} has a leader");
            // Fencing broker 3 took its partitions offline; moved, they lead again.
            if old.leader.is_none() {
                assert!(p.leader_epoch > old.leader_epoch, "{name}/{i}");
            } else {
                assert_eq!((p.leader, p.leader_epoch), (old.leader, old.leader_epoch));
            }
        }
    }
    // Deciding again is done; registering the id again is refused for good.
    assert_eq!(decommission(&mut image, 3, false), Ok(Reply::Done));
    let again = Command::RegisterBroker {
        id: 3,
        host: "127.0.0.1".into(),
        port: 9003,
        clean_shutdown: true,
        kafka: None,
    };
    assert!(matches!(
        execute(&image, &again),
        Err(MetaError::BrokerDecommissioned(3))
    ));
    // The image survives a snapshot with the retired id.
    let restored = MetadataImage::from_snapshot(&image.to_snapshot()).unwrap();
    assert_eq!(restored, image);
}

#[test]
fn a_broker_holding_nothing_is_decommissioned_without_moving_anything() {
    let mut image = MetadataImage::default();
    for id in 1..=2 {
        register(&mut image, id);
    }
    fence(&mut image, 2);
    create(&mut image, "t", 2, 1).unwrap();
    let before = image.topics.clone();
    decommission(&mut image, 2, false).unwrap();
    assert_eq!(image.topics, before);
    assert_eq!(image.decommissioned_brokers, [2].into());
}

/// Kafka listener addresses: registered with the broker, kept in the image, and absent (not
/// an error) in log entries and images written before brokers had them.
#[test]
fn a_broker_registers_its_kafka_address_and_old_logs_still_load() {
    let mut image = MetadataImage::default();
    let kafka = KafkaAddress {
        host: "kafka.example".into(),
        port: 9092,
    };
    let with_kafka = Command::RegisterBroker {
        id: 1,
        host: "127.0.0.1".into(),
        port: 9001,
        clean_shutdown: true,
        kafka: Some(kafka.clone()),
    };
    execute_and_apply(&mut image, &with_kafka).unwrap();
    assert_eq!(image.brokers[&1].kafka, Some(kafka));
    // Registering again without one (the listener was turned off) forgets it.
    register(&mut image, 2);
    assert_eq!(image.brokers[&2].kafka, None);

    let old_entry: Command =
        serde_json::from_str(r#"{"RegisterBroker":{"id":3,"host":"a","port":1}}"#).unwrap();
    assert!(matches!(
        old_entry,
        Command::RegisterBroker { kafka: None, .. }
    ));
    let old_record: MetadataRecord = serde_json::from_str(
        r#"{"RegisterBroker":{"broker":{"id":3,"host":"a","port":1,"epoch":7,"fenced":false}}}"#,
    )
    .unwrap();
    image.apply(&old_record);
    assert_eq!(image.brokers[&3].kafka, None);
    // Without a Kafka address the entry is written as before, for readers that predate it.
    let written = serde_json::to_string(&Command::RegisterBroker {
        id: 3,
        host: "a".into(),
        port: 1,
        clean_shutdown: true,
        kafka: None,
    })
    .unwrap();
    assert!(!written.contains("kafka"), "{written}");
    let snapshot = serde_json::to_vec(&image).unwrap();
    let reloaded = MetadataImage::from_snapshot(&snapshot).unwrap();
    assert_eq!(reloaded, image);
}

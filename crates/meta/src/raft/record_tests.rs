//! Records, not commands, in the metadata log: nodes fed the same record batches hold equal
//! images whatever the commands were; a batch executed against a changed image is skipped on
//! every node; a log written by the version before record batches (a fixture written by that
//! binary) still loads to the image it had; and a node that cannot apply an entry stops with
//! an error naming it while the others keep serving.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;
use tinymq_auth::{AclEntry, AclOperation, AclPermission, PatternType, QuotaConfig, ResourceType};

use super::entry::{EntryOutcome, MetaEntry, RecordBatch, RECORD_BATCH_VERSION};
use super::proposer::execute_all;
use super::state_machine::{apply_entry, Applied};
use super::tests::{leader_of, Router};
use super::MetaNode;
use crate::replication_tests::{command_for, step, Step};
use crate::{execute_and_apply, Command, MetadataImage, MetadataRecord, Reply};

/// Commands beyond the replication ones of [`step`]: topics, settings, security, routes.
#[derive(Debug, Clone)]
enum Other {
    Delete { topic: usize },
    Grow { topic: usize, by: u32 },
    Retention { topic: usize, ms: u32 },
    ProducerIds { count: i64 },
    Decommission { id: u32, move_partitions: bool },
    Offsets { partitions: u32 },
    Quota { user: u8, rate: u64 },
    RemoveQuota { user: u8 },
    Acl { user: u8, topic: usize },
    Route { name: u8, from: usize, to: usize },
    DeleteRoute { name: u8 },
}

fn other() -> impl Strategy<Value = Other> {
    prop_oneof![
        (0..4usize).prop_map(|topic| Other::Delete { topic }),
        (0..4usize, 1..3u32).prop_map(|(topic, by)| Other::Grow { topic, by }),
        (0..4usize, 1..100_000u32).prop_map(|(topic, ms)| Other::Retention { topic, ms }),
        (0..3i64).prop_map(|count| Other::ProducerIds { count: count * 500 }),
        (1..=5u32, any::<bool>()).prop_map(|(id, move_partitions)| Other::Decommission {
            id,
            move_partitions
        }),
        (1..4u32).prop_map(|partitions| Other::Offsets { partitions }),
        (0..3u8, 0..1000u64).prop_map(|(user, rate)| Other::Quota { user, rate }),
        (0..3u8).prop_map(|user| Other::RemoveQuota { user }),
        (0..3u8, 0..4usize).prop_map(|(user, topic)| Other::Acl { user, topic }),
        (0..3u8, 0..4usize, 0..4usize).prop_map(|(name, from, to)| Other::Route { name, from, to }),
        (0..3u8).prop_map(|name| Other::DeleteRoute { name }),
    ]
}

/// The name of the `i`th topic of `image` (modulo their count), or a name no topic has.
fn topic(image: &MetadataImage, i: usize) -> String {
    let names = image.user_topic_names();
    match names.len() {
        0 => "none".into(),
        n => names[i % n].clone(),
    }
}

fn other_command(image: &MetadataImage, other: &Other) -> Command {
    match other {
        Other::Delete { topic: t } => Command::DeleteTopic {
            name: topic(image, *t),
        },
        Other::Grow { topic: t, by } => {
            let name = topic(image, *t);
            let now = image
                .topics
                .get(&name)
                .map_or(0, |t| t.partitions.len() as u32);
            Command::AlterPartitions {
                name,
                partitions: now + by,
            }
        }
        Other::Retention { topic: t, ms } => Command::AlterTopicConfig {
            name: topic(image, *t),
            set: [("retention_ms".to_string(), ms.to_string())].into(),
            unset: vec![],
        },
        Other::ProducerIds { count } => Command::AllocateProducerIds { count: *count },
        Other::Decommission {
            id,
            move_partitions,
        } => Command::DecommissionBroker {
            id: *id,
            move_partitions: *move_partitions,
        },
        Other::Offsets { partitions } => Command::EnsureOffsetsTopic {
            partitions: *partitions,
        },
        Other::Quota { user, rate } => Command::SetQuota {
            principal: format!("User:u{user}"),
            quota: QuotaConfig {
                requests_per_sec: *rate,
                ..QuotaConfig::default()
            },
        },
        Other::RemoveQuota { user } => Command::RemoveQuota {
            principal: format!("User:u{user}"),
        },
        Other::Acl { user, topic: t } => Command::CreateAcls {
            acls: vec![AclEntry {
                principal: format!("User:u{user}"),
                resource_type: ResourceType::Topic,
                resource_name: topic(image, *t),
                pattern_type: PatternType::Literal,
                operation: AclOperation::Read,
                permission: AclPermission::Allow,
            }],
        },
        Other::Route { name, from, to } => Command::CreateRoute {
            name: format!("r{name}"),
            from: topic(image, *from),
            to: topic(image, *to),
            filter: String::new(),
        },
        Other::DeleteRoute { name } => Command::DeleteRoute {
            name: format!("r{name}"),
        },
    }
}

fn any_step() -> impl Strategy<Value = Result<Step, Other>> {
    prop_oneof![3 => step().prop_map(Ok), 2 => other().prop_map(Err)]
}

/// A batch as a follower gets it: through the JSON of the log and the network.
fn as_follower_reads_it(batch: &RecordBatch) -> MetaEntry {
    let json = serde_json::to_vec(&MetaEntry::Records(batch.clone())).unwrap();
    serde_json::from_slice(&json).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The leader executes groups of commands into one batch each (as its proposer does); a
    /// follower applies only the batches. Both hold the same image after every batch, which is
    /// also the image of executing the commands one by one, with the same replies.
    #[test]
    fn nodes_fed_the_same_record_batches_hold_equal_images(
        groups in proptest::collection::vec(proptest::collection::vec(any_step(), 1..4), 1..30)
    ) {
        let mut leader = Applied::default();
        let mut follower = Applied::default();
        let mut one_by_one = MetadataImage::default();
        let mut topics = 0;
        for (i, group) in groups.iter().enumerate() {
            let index = i as u64 + 1;
            let commands: Vec<Command> = group
                .iter()
                .filter_map(|s| match s {
                    Ok(step) => command_for(&leader.image, step, &mut topics).map(|(c, _)| c),
                    Err(other) => Some(other_command(&leader.image, other)),
                })
                .collect();
            let (records, replies) = execute_all(&leader.image, commands.iter());
            let sequential: Vec<_> = commands
                .iter()
                .map(|c| execute_and_apply(&mut one_by_one, c))
                .collect();
            prop_assert_eq!(&replies, &sequential);
            let batch = RecordBatch { version: RECORD_BATCH_VERSION, base_index: index - 1, records };
            let own = apply_entry(&mut leader, index, MetaEntry::Records(batch.clone()), RECORD_BATCH_VERSION);
            prop_assert_eq!(own, Ok(EntryOutcome::Applied));
            let theirs = apply_entry(&mut follower, index, as_follower_reads_it(&batch), RECORD_BATCH_VERSION);
            prop_assert_eq!(theirs, Ok(EntryOutcome::Applied));
            prop_assert_eq!(&leader.image, &follower.image);
            prop_assert_eq!(&leader.image, &one_by_one);
        }
    }
}

#[test]
fn a_batch_executed_against_an_image_changed_since_is_skipped_and_a_newer_version_refused() {
    let mut applied = Applied::default();
    let quota = |rate| MetadataRecord::SetQuota {
        principal: "User:a".into(),
        quota: QuotaConfig {
            requests_per_sec: rate,
            ..QuotaConfig::default()
        },
    };
    let batch = |base_index, rate| {
        MetaEntry::Records(RecordBatch {
            version: RECORD_BATCH_VERSION,
            base_index,
            records: vec![quota(rate)],
        })
    };
    assert_eq!(
        apply_entry(&mut applied, 5, batch(4, 1), RECORD_BATCH_VERSION),
        Ok(EntryOutcome::Applied)
    );
    // Executed against index 4 too, but entry 5 changed the image since.
    let before = applied.image.clone();
    assert_eq!(
        apply_entry(&mut applied, 6, batch(4, 2), RECORD_BATCH_VERSION),
        Ok(EntryOutcome::Stale)
    );
    assert_eq!(applied.image, before);
    let newer = MetaEntry::Records(RecordBatch {
        version: RECORD_BATCH_VERSION + 1,
        base_index: 5,
        records: vec![quota(3)],
    });
    let refused = apply_entry(&mut applied, 7, newer, RECORD_BATCH_VERSION).unwrap_err();
    assert!(refused.to_string().contains("log entry 7"), "{refused}");
    assert_eq!(applied.image, before, "a refused entry changes nothing");
}

const FIXTURE: &str = "tests/fixtures/legacy-command-log";
const FIXTURE_FILES: [&str; 4] = [
    "meta-snapshot.json",
    "node-id",
    "raft-log.jsonl",
    "raft-vote.json",
];
/// The index of the fixture log's last entry.
const FIXTURE_LAST_INDEX: u64 = 5259;

fn fixture_path(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(FIXTURE)
        .join(file)
}

/// Waits (bounded) until `node` applied entry `index`.
async fn applied_up_to(node: &MetaNode, index: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut version = node.version();
    while version < index {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {} applied only up to {version}, not {index}",
            node.id
        );
        version = node.wait_for_change(version, Duration::from_secs(1)).await;
    }
}

/// Writes `command` on whichever of `nodes` leads, again on the next leader while the one
/// asked no longer leads (a busy machine may re-elect); returns the node that took it.
async fn write_on_leader<'a>(nodes: &[&'a MetaNode], command: Command) -> &'a MetaNode {
    for _ in 0..200 {
        let id = leader_of(nodes, None).await;
        let node = nodes.iter().find(|n| n.id == id).expect("a listed leader");
        match node.write(command.clone()).await {
            Ok(_) => return node,
            Err(super::MetaNodeError::NotLeader { .. }) => continue,
            Err(e) => panic!("writing on node {id}: {e}"),
        }
    }
    panic!("no leader took the command");
}

fn snapshot_index(dir: &Path) -> u64 {
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("meta-snapshot.json")).unwrap()).unwrap();
    stored["meta"]["last_log_id"]["index"].as_u64().unwrap()
}

/// The fixture is the MetaServer data directory of a `tinymq server` of the version before
/// record batches (topics created, grown, reconfigured and deleted; users, ACLs, quotas and
/// routes; a broker registered, restarted and fenced; over 5000 entries, so a snapshot and
/// the log after it), and `expected-image.json` the image that version's code loaded from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_and_snapshot_written_before_record_batches_still_load_to_the_same_image() {
    let expected: MetadataImage =
        serde_json::from_slice(&std::fs::read(fixture_path("expected-image.json")).unwrap())
            .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("meta-1");
    std::fs::create_dir_all(&dir).unwrap();
    for file in FIXTURE_FILES {
        std::fs::copy(fixture_path(file), dir.join(file)).unwrap();
    }
    let router = Router::default();
    let node = super::tests::start(&router, 1, tmp.path()).await;
    applied_up_to(&node, FIXTURE_LAST_INDEX).await;
    assert_eq!(node.image(), expected);

    // The legacy entries are read once: the node snapshots past them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while snapshot_index(&dir) < FIXTURE_LAST_INDEX {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshot past the legacy entries"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // New commands go into the same log as record batches.
    leader_of(&[&node], None).await;
    let reply = node
        .write(Command::SetQuota {
            principal: "User:new".into(),
            quota: QuotaConfig::default(),
        })
        .await
        .unwrap();
    assert_eq!(reply, Reply::Done);
    let log = std::fs::read_to_string(dir.join("raft-log.jsonl")).unwrap();
    assert!(
        log.contains(r#"{"Normal":{"Records":{"version":1"#),
        "no record batch in the log"
    );
    let after = node.image();
    node.shutdown().await;

    let node = super::tests::start(&router, 1, tmp.path()).await;
    applied_up_to(&node, FIXTURE_LAST_INDEX + 1).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while node.image() != after {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restart lost the new batch"
        );
        node.wait_for_change(node.version(), Duration::from_secs(1))
            .await;
    }
    let mut without_new = node.image();
    without_new.quotas.remove("User:new");
    assert_eq!(without_new, expected);
    node.shutdown().await;
}

/// Three nodes; node 3 reads record batches only up to version 1 (an older binary), the
/// others up to 2. A version-2 batch stops node 3 with an error naming the entry, its image
/// as it was; nodes 1 and 2 apply it and keep accepting commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_cannot_apply_an_entry_stops_with_its_index_and_the_others_keep_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let router = Router::default();
    let start = |id: u64, version_max: u32| {
        let router = router.clone();
        let dir = tmp.path().join(format!("meta-{id}"));
        async move {
            let node =
                MetaNode::start_with(id, &dir, router.clone(), super::raft_config(), version_max)
                    .await
                    .unwrap();
            router.nodes.lock().unwrap().insert(id, node.raft.clone());
            node
        }
    };
    let (n1, n2) = (start(1, 2).await, start(2, 2).await);
    let members: BTreeMap<u64, String> = (1..=3).map(|id| (id, format!("node-{id}"))).collect();
    n1.initialize(members).await.unwrap();
    // Elected by 1 and 2 before 3 exists: the leader reads version 2.
    leader_of(&[&n1, &n2], None).await;
    let n3 = start(3, 1).await;
    let quota = |name: &str| Command::SetQuota {
        principal: format!("User:{name}"),
        quota: QuotaConfig::default(),
    };
    let leader = write_on_leader(&[&n1, &n2], quota("before")).await;
    let first = leader.version();
    applied_up_to(&n3, first).await;
    let image_before = n3.image();

    let newer = MetaEntry::Records(RecordBatch {
        version: 2,
        base_index: first,
        records: vec![MetadataRecord::RemoveQuota {
            principal: "User:before".into(),
        }],
    });
    // On whichever of 1 and 2 leads when it is written (a busy machine may re-elect).
    let mut written = None;
    for _ in 0..200 {
        let id = leader_of(&[&n1, &n2], None).await;
        let node = if n1.id == id { &n1 } else { &n2 };
        match node.raft.client_write(newer.clone()).await {
            Ok(w) => {
                written = Some(w);
                break;
            }
            Err(e) if e.forward_to_leader().is_some() => continue,
            Err(e) => panic!("writing the version-2 batch: {e}"),
        }
    }
    let index = written.expect("no leader took the batch").log_id.index;
    let fatal = tokio::time::timeout(Duration::from_secs(30), n3.fatal())
        .await
        .expect("node 3 did not stop");
    assert!(
        fatal.contains(&format!("log entry {index}")) && fatal.contains("version 2"),
        "{fatal}"
    );
    assert!(!fatal.contains("panic"), "{fatal}");
    assert_eq!(
        n3.image(),
        image_before,
        "node 3 applied part of what it cannot read"
    );
    assert!(n3.version() < index);

    // The others applied it and still serve.
    let leader = write_on_leader(&[&n1, &n2], quota("after")).await;
    let last = leader.version();
    for n in [&n1, &n2] {
        applied_up_to(n, last).await;
        let image = n.image();
        assert!(
            !image.quotas.contains_key("User:before") && image.quotas.contains_key("User:after")
        );
    }

    // Restarted on the same version, node 3 stops again at the same entry (at start when it
    // knows the entry is committed, else once told): a clear stop, not a panic loop.
    n3.shutdown().await;
    drop(n3);
    let dir = tmp.path().join("meta-3");
    let config = super::raft_config();
    let again = match MetaNode::start_with(3, &dir, router.clone(), config, 1).await {
        Err(e) => e.to_string(),
        Ok(n3) => {
            router.nodes.lock().unwrap().insert(3, n3.raft.clone());
            let fatal = tokio::time::timeout(Duration::from_secs(30), n3.fatal()).await;
            assert_eq!(n3.image(), image_before);
            n3.shutdown().await;
            fatal.expect("restarted node 3 did not stop")
        }
    };
    assert!(again.contains(&format!("log entry {index}")), "{again}");
    assert!(!again.contains("panic"), "{again}");
    for n in [&n1, &n2] {
        n.shutdown().await;
    }
}

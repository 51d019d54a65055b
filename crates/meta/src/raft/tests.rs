//! Three MetaServer nodes in one process, with their real on-disk storage, connected by an
//! in-process router (the TCP transport is exercised by the process tests): commands replicate,
//! a new leader is elected when the leader stops, and a restarted node catches up from disk;
//! snapshots and purges keep the Raft log file small, and a node far behind catches up from a
//! snapshot and restarts from it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use super::{MetaNode, MetaRaft, TypeConfig};
use crate::{Command, Reply};

#[derive(Clone, Default)]
pub(super) struct Router {
    pub(super) nodes: Arc<Mutex<HashMap<u64, MetaRaft>>>,
}

pub(super) struct Link {
    router: Router,
    target: u64,
}

impl Router {
    fn get(&self, id: u64) -> Option<MetaRaft> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }
}

fn unreachable<E: std::error::Error>(target: u64) -> RPCError<u64, BasicNode, E> {
    let e = std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("node {target} is down"),
    );
    RPCError::Network(NetworkError::new(&e))
}

impl RaftNetworkFactory<TypeConfig> for Router {
    type Network = Link;
    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Link {
        Link {
            router: self.clone(),
            target,
        }
    }
}

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let raft = self
            .router
            .get(self.target)
            .ok_or_else(|| unreachable(self.target))?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        let raft = self
            .router
            .get(self.target)
            .ok_or_else(|| unreachable(self.target))?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        let raft = self
            .router
            .get(self.target)
            .ok_or_else(|| unreachable(self.target))?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

pub(super) async fn start(router: &Router, id: u64, dir: &std::path::Path) -> MetaNode {
    let node = MetaNode::start(id, &dir.join(format!("meta-{id}")), router.clone())
        .await
        .unwrap();
    router.nodes.lock().unwrap().insert(id, node.raft.clone());
    node
}

/// Waits (bounded) until some node reports a leader other than `not`.
pub(super) async fn leader_of(nodes: &[&MetaNode], not: Option<u64>) -> u64 {
    for _ in 0..200 {
        for n in nodes {
            if let Some(l) = n.current_leader().filter(|l| Some(*l) != not) {
                if nodes.iter().any(|m| m.id == l) {
                    return l;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no leader elected");
}

async fn write(nodes: &[&MetaNode], leader: u64, command: Command) -> Reply {
    let node = nodes.iter().find(|n| n.id == leader).unwrap();
    node.write(command).await.unwrap()
}

async fn converged(nodes: &[&MetaNode], topics: usize) {
    for _ in 0..200 {
        if nodes.iter().all(|n| n.image().topics.len() == topics) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("images did not converge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_replicate_elect_a_new_leader_and_catch_up_after_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let router = Router::default();
    let n1 = start(&router, 1, tmp.path()).await;
    let n2 = start(&router, 2, tmp.path()).await;
    let n3 = start(&router, 3, tmp.path()).await;
    let members: BTreeMap<u64, String> = (1..=3).map(|i| (i, format!("node-{i}"))).collect();
    n1.initialize(members).await.unwrap();
    let all = [&n1, &n2, &n3];
    let leader = leader_of(&all, None).await;
    for id in 1..=3 {
        let reply = write(
            &all,
            leader,
            Command::RegisterBroker {
                id,
                host: "127.0.0.1".into(),
                port: 9000 + id as u16,
                clean_shutdown: true,
                kafka: None,
            },
        )
        .await;
        assert!(matches!(reply, Reply::BrokerRegistered { .. }));
    }
    write(
        &all,
        leader,
        Command::CreateTopic {
            name: "a".into(),
            partitions: 6,
            replication_factor: 3,
            config: BTreeMap::new(),
        },
    )
    .await;
    converged(&all, 1).await;
    assert_eq!(n2.image(), n3.image(), "followers hold the same image");

    // A follower refuses writes and names the leader.
    let follower = all.iter().find(|n| n.id != leader).unwrap();
    let refused = follower
        .write(Command::DeleteTopic { name: "a".into() })
        .await;
    assert!(
        matches!(refused, Err(super::MetaNodeError::NotLeader { leader: Some(l) }) if l == leader)
    );
    // A command error is an answer, not a Raft failure.
    let dup = all
        .iter()
        .find(|n| n.id == leader)
        .unwrap()
        .write(Command::CreateTopic {
            name: "a".into(),
            partitions: 1,
            replication_factor: 1,
            config: BTreeMap::new(),
        })
        .await;
    assert!(matches!(
        dup,
        Err(super::MetaNodeError::Command(
            crate::MetaError::TopicExists(_)
        ))
    ));

    // Stop the leader: the others elect a new one and keep accepting commands.
    let old = all.iter().find(|n| n.id == leader).unwrap();
    old.shutdown().await;
    router.nodes.lock().unwrap().remove(&leader);
    let rest: Vec<&MetaNode> = all.iter().copied().filter(|n| n.id != leader).collect();
    let new_leader = leader_of(&rest, Some(leader)).await;
    write(
        &rest,
        new_leader,
        Command::CreateTopic {
            name: "b".into(),
            partitions: 2,
            replication_factor: 2,
            config: BTreeMap::new(),
        },
    )
    .await;
    converged(&rest, 2).await;

    // The old leader restarts from its data directory and catches up.
    let restarted = start(&router, leader, tmp.path()).await;
    converged(&[&restarted], 2).await;
    assert_eq!(restarted.image(), rest[0].image());
}

/// Counts the lines of a node's Raft log file.
fn log_file_lines(dir: &std::path::Path) -> usize {
    let bytes = std::fs::read(dir.join(super::log_file::LOG_FILE)).unwrap();
    bytes.iter().filter(|b| **b == b'\n').count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_and_purges_keep_the_log_file_small_and_a_restart_recovers_every_live_entry() {
    use openraft::storage::{RaftLogReader, RaftLogStorage};

    const INTERVAL: u64 = 40;
    const KEPT: u64 = 10;
    const WRITES: u64 = 600;
    let config = || openraft::Config {
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(INTERVAL),
        max_in_snapshot_log_to_keep: KEPT,
        ..super::raft_config()
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("meta-1");
    let router = Router::default();
    let node = MetaNode::start_with(
        1,
        &dir,
        router.clone(),
        config(),
        super::RECORD_BATCH_VERSION,
    )
    .await
    .unwrap();
    router.nodes.lock().unwrap().insert(1, node.raft.clone());
    node.initialize(BTreeMap::from([(1, "node-1".to_string())]))
        .await
        .unwrap();
    leader_of(&[&node], None).await;
    let mut most_lines = 0;
    for _ in 0..WRITES {
        write(&[&node], 1, Command::AllocateProducerIds { count: 1 }).await;
        most_lines = most_lines.max(log_file_lines(&dir));
    }
    // Without the rewrite the file would hold a line per entry and per commit (> 1200). With
    // it: the entries since the last snapshot, those kept after it, and their commit hints
    // (snapshots are built in the background while writes go on, so allow for some lag).
    let bound = (8 * (INTERVAL + KEPT)) as usize;
    assert!(most_lines <= bound, "{most_lines} lines, bound {bound}");
    let image = node.image();
    // Ids start at 1 (0 is never handed out), one per write.
    assert_eq!(image.next_producer_id, 1 + WRITES as i64);

    // Once a snapshot covers the last entry, the file holds the kept entries and two lines.
    // (Both read from one metrics report: the log is purged only after the entries are in.)
    let log_and_purged = || {
        let metrics = node.raft.metrics().borrow().clone();
        (
            metrics.last_log_index.unwrap(),
            metrics.purged.map(|p| p.index),
        )
    };
    for _ in 0..200 {
        if let (last, Some(purged)) = log_and_purged() {
            if purged + KEPT >= last {
                break;
            }
        }
        node.raft.trigger().snapshot().await.unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (last_log, purged) = log_and_purged();
    let purged = purged.unwrap();
    assert_eq!(purged + KEPT, last_log, "the policy keeps {KEPT} entries");
    assert_eq!(log_file_lines(&dir) as u64, 1 + KEPT + 1);
    node.shutdown().await;
    router.nodes.lock().unwrap().clear();
    drop(node);

    // The log on disk holds every entry after the last purged one, up to the last.
    let mut store = super::LogStore::open(&dir).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id.unwrap().index, purged);
    assert_eq!(state.last_log_id.unwrap().index, last_log);
    let entries = store.try_get_log_entries(..).await.unwrap();
    let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
    assert_eq!(indexes, (purged + 1..=last_log).collect::<Vec<_>>());
    drop(store);

    // A restart rebuilds the same image from the snapshot and those entries.
    let node = MetaNode::start_with(
        1,
        &dir,
        router.clone(),
        config(),
        super::RECORD_BATCH_VERSION,
    )
    .await
    .unwrap();
    router.nodes.lock().unwrap().insert(1, node.raft.clone());
    for _ in 0..200 {
        if node.image() == image {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(node.image(), image);
    node.shutdown().await;
}

/// Starts node `id` again from `dir`, puts it on the router, and waits (bounded) until its
/// image is `image`; the caller asserts it is.
async fn rejoin(
    router: &Router,
    id: u64,
    dir: &std::path::Path,
    config: openraft::Config,
    image: &crate::MetadataImage,
) -> MetaNode {
    let node = MetaNode::start_with(id, dir, router.clone(), config, super::RECORD_BATCH_VERSION)
        .await
        .unwrap();
    router.nodes.lock().unwrap().insert(id, node.raft.clone());
    for _ in 0..200 {
        if node.image() == *image {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(node.image(), *image);
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_after_the_log_it_missed_was_purged_installs_a_snapshot_and_keeps_it() {
    let config = || openraft::Config {
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(20),
        max_in_snapshot_log_to_keep: 5,
        ..super::raft_config()
    };
    let tmp = tempfile::tempdir().unwrap();
    let router = Router::default();
    let mut nodes = Vec::new();
    for id in 1..=3 {
        let dir = tmp.path().join(format!("meta-{id}"));
        let node = MetaNode::start_with(
            id,
            &dir,
            router.clone(),
            config(),
            super::RECORD_BATCH_VERSION,
        )
        .await
        .unwrap();
        router.nodes.lock().unwrap().insert(id, node.raft.clone());
        nodes.push(node);
    }
    let members: BTreeMap<u64, String> = (1..=3).map(|i| (i, format!("node-{i}"))).collect();
    nodes[0].initialize(members).await.unwrap();
    let all: Vec<&MetaNode> = nodes.iter().collect();
    let leader = leader_of(&all, None).await;

    // Stop a follower; the others go on far past what their logs keep.
    let down = all.iter().find(|n| n.id != leader).unwrap().id;
    all[(down - 1) as usize].shutdown().await;
    router.nodes.lock().unwrap().remove(&down);
    let rest: Vec<&MetaNode> = all.iter().copied().filter(|n| n.id != down).collect();
    for _ in 0..150 {
        write(&rest, leader, Command::AllocateProducerIds { count: 1 }).await;
    }
    let image = rest[0].image();

    // Restarted, it can only catch up from a snapshot, and its log file then starts after it.
    let dir = tmp.path().join(format!("meta-{down}"));
    let restarted = rejoin(&router, down, &dir, config(), &image).await;
    let purged = restarted.raft.metrics().borrow().purged;
    assert!(
        purged.is_some(),
        "the log up to the installed snapshot is purged"
    );
    assert!(log_file_lines(&dir) < 100, "{} lines", log_file_lines(&dir));
    restarted.shutdown().await;
    router.nodes.lock().unwrap().remove(&down);

    // And a second restart replays that file and the installed snapshot to the same image.
    let again = rejoin(&router, down, &dir, config(), &image).await;
    for node in rest {
        node.shutdown().await;
    }
    again.shutdown().await;
}

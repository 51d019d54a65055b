//! Three MetaServer nodes in one process, with their real on-disk storage, connected by an
//! in-process router (the TCP transport is exercised by the process tests): commands replicate,
//! a new leader is elected when the leader stops, and a restarted node catches up from disk.

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
struct Router {
    nodes: Arc<Mutex<HashMap<u64, MetaRaft>>>,
}

struct Link {
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

async fn start(router: &Router, id: u64, dir: &std::path::Path) -> MetaNode {
    let node = MetaNode::start(id, &dir.join(format!("meta-{id}")), router.clone())
        .await
        .unwrap();
    router.nodes.lock().unwrap().insert(id, node.raft.clone());
    node
}

/// Waits (bounded) until some node reports a leader other than `not`.
async fn leader_of(nodes: &[&MetaNode], not: Option<u64>) -> u64 {
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

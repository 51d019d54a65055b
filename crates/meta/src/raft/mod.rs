//! The MetaServer's Raft glue, on `openraft` (pinned) behind a small interface: a
//! [`MetaNode`] persists its log and vote (fsynced before they are confirmed); as leader it
//! executes [`Command`]s with [`crate::execute`] before proposing them ([`proposer`]) and
//! replicates the resulting [`entry::RecordBatch`]es; every node applies committed batches to
//! the [`MetadataImage`] as they are, and snapshots the image.
//! The network is a trait parameter, so the same node runs over TCP in the server and over an
//! in-process router in tests.

mod durable_file;
pub mod entry;
pub mod inbound;
mod legacy;
mod log_file;
mod log_store;
pub mod network;
pub mod proposer;
#[cfg(test)]
mod record_tests;
mod state_machine;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use parking_lot::{Mutex, RwLock};

use crate::{Command, MetaError, MetadataImage, Reply};
pub use entry::{ApplyError, EntryOutcome, MetaEntry, RecordBatch, RECORD_BATCH_VERSION};
pub use log_store::LogStore;
pub use state_machine::{check_snapshot_data, StateMachine};

openraft::declare_raft_types!(
    /// The Raft types of the MetaServer.
    pub TypeConfig:
        D = MetaEntry,
        R = EntryOutcome,
        NodeId = u64,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type MetaRaft = Raft<TypeConfig>;

#[derive(Debug, thiserror::Error)]
pub enum MetaNodeError {
    #[error("not the MetaServer leader; the leader is {leader:?}")]
    NotLeader { leader: Option<u64> },
    #[error("metadata command refused: {0}")]
    Command(#[from] MetaError),
    #[error("raft: {0}")]
    Raft(String),
    #[error("storage: {0}")]
    Storage(#[from] std::io::Error),
    #[error(transparent)]
    Locked(#[from] crate::dir_lock::DirLockError),
    #[error("data directory {dir} belongs to MetaServer node {stored}, not {asked}: node ids are never reused or changed")]
    WrongNodeId {
        dir: String,
        stored: u64,
        asked: u64,
    },
}

/// The file in a node's data directory naming the node that owns it.
const NODE_ID_FILE: &str = "node-id";

/// Refuses to open `dir` as node `id` if another node id has used it; claims it otherwise.
fn claim_dir(dir: &Path, id: u64) -> Result<(), MetaNodeError> {
    std::fs::create_dir_all(dir)?;
    match std::fs::read_to_string(dir.join(NODE_ID_FILE)) {
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(stored) if stored == id => Ok(()),
            Ok(stored) => Err(MetaNodeError::WrongNodeId {
                dir: dir.display().to_string(),
                stored,
                asked: id,
            }),
            Err(e) => Err(MetaNodeError::Storage(std::io::Error::other(format!(
                "{}/{NODE_ID_FILE} is unreadable: {e}",
                dir.display()
            )))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let path = dir.join(NODE_ID_FILE);
            let bytes = id.to_string().into_bytes();
            tinymq_storage::replace_file(&tinymq_storage::OsStorage, &path, &bytes)
                .map_err(std::io::Error::from)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// A snapshot is taken once this many log entries were applied since the last one.
pub const SNAPSHOT_INTERVAL_ENTRIES: u64 = 5000;

/// Entries a snapshot covers that stay in the log (so that a follower slightly behind catches
/// up from the log, not a snapshot); older ones are purged. With [`SNAPSHOT_INTERVAL_ENTRIES`]
/// this bounds the live Raft log to about 6000 entries (more only while the leader still sends
/// older ones to a follower), and so the log file (see `log_store.rs`).
pub const LOG_KEPT_AFTER_SNAPSHOT_ENTRIES: u64 = 1000;

/// The Raft settings of every MetaServer node. Elections are short because a broker trusts
/// its session for only `SESSION_TRUST` (1 s) after its last answered heartbeat: while the
/// group has no leader, brokers stop acknowledging writes once that lapses. Followers refuse
/// votes for the longest election timeout after they last heard from a leader (openraft's
/// lease), so a new leader is in place about 1–2 s after the old one dies.
fn raft_config() -> Config {
    Config {
        heartbeat_interval: 100,
        election_timeout_min: 500,
        election_timeout_max: 1000,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_INTERVAL_ENTRIES),
        max_in_snapshot_log_to_keep: LOG_KEPT_AFTER_SNAPSHOT_ENTRIES,
        // Purge as soon as a snapshot allows (purges are rare: one per snapshot).
        purge_batch_size: 1,
        ..Config::default()
    }
}

/// One MetaServer node.
pub struct MetaNode {
    pub id: u64,
    pub raft: MetaRaft,
    image: Arc<RwLock<MetadataImage>>,
    version: Arc<tokio::sync::watch::Sender<u64>>,
    /// Commands for this node's [`proposer`] (which answers "not the leader" unless it leads).
    proposals: tokio::sync::mpsc::Sender<proposer::Proposal>,
    /// A copy of the snapshot being received from a peer, checked whole before its last chunk
    /// reaches openraft.
    pub(crate) snapshot_intake: inbound::SnapshotIntake,
    /// The data directory's lock, held from start until [`MetaNode::shutdown`] (or drop).
    dir_lock: Mutex<Option<crate::dir_lock::DirLock>>,
}

/// Logs every change of the Raft leader as this node sees it (INFO), until the node stops.
async fn log_leader_changes(
    id: u64,
    mut metrics: tokio::sync::watch::Receiver<openraft::RaftMetrics<u64, BasicNode>>,
) {
    let mut last = None;
    loop {
        let (leader, term) = {
            let m = metrics.borrow_and_update();
            (m.current_leader, m.current_term)
        };
        if leader != last {
            match leader {
                Some(l) if l == id => {
                    tracing::info!(node = id, term, "this node is the MetaServer leader")
                }
                Some(l) => tracing::info!(node = id, leader = l, term, "MetaServer leader elected"),
                None => tracing::info!(node = id, term, "no MetaServer leader; electing"),
            }
            last = leader;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Snapshots the image each time this node replayed legacy command entries (an old log read at
/// start, or an old leader's entries while the cluster is upgraded one node at a time): the
/// snapshot covers them, so later starts begin from it instead of executing them again.
async fn snapshot_after_legacy_replay(raft: MetaRaft, replayed: Arc<tokio::sync::Notify>) {
    loop {
        replayed.notified().await;
        if let Err(e) = raft.trigger().snapshot().await {
            tracing::warn!(error = %e, "snapshotting after replaying legacy metadata entries failed");
        }
    }
}

impl MetaNode {
    /// Opens the node's storage in `dir` and starts Raft with `network`.
    pub async fn start<N>(id: u64, dir: &Path, network: N) -> Result<MetaNode, MetaNodeError>
    where
        N: openraft::RaftNetworkFactory<TypeConfig>,
    {
        MetaNode::start_with(id, dir, network, raft_config(), RECORD_BATCH_VERSION).await
    }

    /// [`MetaNode::start`] with other Raft settings (tests use short snapshot intervals) and
    /// another newest record batch version to apply (tests play older and newer versions).
    async fn start_with<N>(
        id: u64,
        dir: &Path,
        network: N,
        config: Config,
        batch_version_max: u32,
    ) -> Result<MetaNode, MetaNodeError>
    where
        N: openraft::RaftNetworkFactory<TypeConfig>,
    {
        let config = Arc::new(
            config
                .validate()
                .map_err(|e| MetaNodeError::Raft(e.to_string()))?,
        );
        let owned = dir.to_path_buf();
        let (dir_lock, log, sm) = tokio::task::spawn_blocking(move || {
            // Before anything in the directory is read: another process may be writing it.
            let dir_lock = crate::dir_lock::DirLock::acquire(&owned)?;
            claim_dir(&owned, id)?;
            let log = LogStore::open(&owned)?;
            let sm = StateMachine::open(&owned, batch_version_max)?;
            Ok::<_, MetaNodeError>((dir_lock, log, sm))
        })
        .await
        .map_err(|e| MetaNodeError::Raft(format!("opening the Raft storage failed: {e}")))??;
        let image = sm.image_handle();
        let version = sm.version_handle();
        let legacy_replayed = sm.legacy_replayed.clone();
        let raft = Raft::new(id, config, network, log, sm)
            .await
            .map_err(|e| MetaNodeError::Raft(e.to_string()))?;
        tokio::spawn(log_leader_changes(id, raft.metrics()));
        tokio::spawn(snapshot_after_legacy_replay(raft.clone(), legacy_replayed));
        let (proposals, queue) = tokio::sync::mpsc::channel(proposer::PROPOSALS_QUEUED_MAX);
        let proposer = proposer::Proposer {
            id,
            raft: raft.clone(),
            image: image.clone(),
        };
        tokio::spawn(proposer.run(queue));
        Ok(MetaNode {
            id,
            raft,
            image,
            version,
            proposals,
            snapshot_intake: inbound::SnapshotIntake::default(),
            dir_lock: Mutex::new(Some(dir_lock)),
        })
    }

    /// Makes a new cluster of `members` (id → address). Run once, on one node.
    pub async fn initialize(&self, members: BTreeMap<u64, String>) -> Result<(), MetaNodeError> {
        let nodes: BTreeMap<u64, BasicNode> = members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode { addr }))
            .collect();
        self.raft
            .initialize(nodes)
            .await
            .map_err(|e| MetaNodeError::Raft(e.to_string()))
    }

    /// Executes `command` on this node, the leader, and returns the reply `execute` gave once
    /// its records are committed and applied (a refusal once this node is confirmed leader).
    pub async fn write(&self, command: Command) -> Result<Reply, MetaNodeError> {
        let leader = self.current_leader();
        if leader != Some(self.id) {
            return Err(MetaNodeError::NotLeader { leader });
        }
        let stopped = || MetaNodeError::Raft("the MetaServer proposer stopped".into());
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.proposals
            .send(proposer::Proposal { command, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// The cluster id as applied on this node (empty until the cluster is named), without
    /// copying the rest of the image.
    pub fn cluster_id(&self) -> String {
        self.image.read().cluster_id.clone()
    }

    /// The image as applied on this node (possibly behind the leader's).
    pub fn image(&self) -> MetadataImage {
        self.image.read().clone()
    }

    /// `f` of the current image, without copying it (e.g. one user's credential at a login).
    pub fn with_image<T>(&self, f: impl FnOnce(&MetadataImage) -> T) -> T {
        f(&self.image.read())
    }

    /// The index of the last log entry applied to the image (see [`MetaNode::versioned_image`]).
    pub fn version(&self) -> u64 {
        *self.version.borrow()
    }

    /// The image with the index of the last log entry applied to it (the image may already
    /// include later entries; it never lacks earlier ones).
    pub fn versioned_image(&self) -> (u64, MetadataImage) {
        let version = *self.version.borrow();
        (version, self.image())
    }

    /// Waits until the applied index exceeds `since`, or `wait` passes; returns the index.
    pub async fn wait_for_change(&self, since: u64, wait: std::time::Duration) -> u64 {
        let mut changes = self.version.subscribe();
        let _ = tokio::time::timeout(wait, changes.wait_for(|v| *v > since)).await;
        let version = *changes.borrow();
        version
    }

    /// Resolves when the Raft core has stopped on a fatal error (a panic in it, a storage
    /// failure), with that error. The process should end then: the node can no longer vote or
    /// apply, and a restart recovers from the data directory.
    pub async fn fatal(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(e) = &metrics.borrow().running_state {
                return e.to_string();
            }
            if metrics.changed().await.is_err() {
                return "the raft core stopped".into();
            }
        }
    }

    pub fn current_leader(&self) -> Option<u64> {
        self.raft.metrics().borrow().current_leader
    }

    /// Voters of the Raft group.
    pub fn voters(&self) -> BTreeSet<u64> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .collect()
    }

    /// The address of group member `id`, from the current membership.
    /// Every node of the group's membership (voters and learners).
    pub fn members(&self) -> Vec<u64> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn member_addr(&self, id: u64) -> Option<String> {
        self.raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|n| n.addr.clone())
    }

    /// Stops the Raft core, then releases the data directory: the core wrote its last, so
    /// another node (or this one, restarted) may open it.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
        self.dir_lock.lock().take();
    }
}

#[cfg(test)]
mod node_id_tests {
    use super::*;

    #[test]
    fn a_data_directory_is_never_opened_under_another_node_id() {
        let tmp = tempfile::tempdir().unwrap();
        claim_dir(tmp.path(), 3).unwrap();
        claim_dir(tmp.path(), 3).expect("the same node may reopen its directory");
        assert!(matches!(
            claim_dir(tmp.path(), 4),
            Err(MetaNodeError::WrongNodeId {
                stored: 3,
                asked: 4,
                ..
            })
        ));
    }
}

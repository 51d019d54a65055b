//! The leader's proposer: the one task that turns commands into log entries. It executes each
//! command against the applied image ([`crate::execute`], before anything is proposed) and
//! proposes the records as one [`RecordBatch`]; the reply sent back is the one `execute`
//! returned, once the batch is committed and applied.
//!
//! Proposals are serialized: a round starts only when this leader has applied its whole log,
//! so `execute` sees every earlier proposal. Commands queued meanwhile are executed together in
//! the next round, each against the image the ones before it leave, and share one entry (one
//! fsync and one replication round for all). The batch names the index it was executed
//! against; if an entry from elsewhere changed the image before the batch is applied (a
//! leader change in the instant between the check and the proposal), every node skips it and
//! the round runs again.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::entry::{EntryOutcome, MetaEntry, RecordBatch, RECORD_BATCH_VERSION};
use super::{MetaNodeError, MetaRaft};
use crate::{Command, MetaError, MetadataImage, MetadataRecord, Reply};

/// Commands waiting for the proposer; a writer waits for room beyond this.
pub const PROPOSALS_QUEUED_MAX: usize = 1024;
/// Most commands executed into one log entry.
pub const PROPOSAL_BATCH_COMMANDS_MAX: usize = 64;
/// How long a new leader may take to apply the entries of earlier terms before a command is
/// answered "no leader yet" (the MetaService retries it; nothing was proposed).
const CATCH_UP_WAIT_MAX: Duration = Duration::from_secs(5);
/// Rounds of one batch skipped as stale before its commands are answered "no leader yet".
const STALE_ROUNDS_MAX: usize = 3;

/// A command and where its reply goes.
pub(super) struct Proposal {
    pub command: Command,
    pub reply: oneshot::Sender<Result<Reply, MetaNodeError>>,
}

/// Why a whole round failed: every command in it gets this (none was applied).
#[derive(Debug, Clone)]
enum RoundFailure {
    NotLeader(Option<u64>),
    Raft(String),
}

impl RoundFailure {
    fn to_error(&self) -> MetaNodeError {
        match self {
            RoundFailure::NotLeader(leader) => MetaNodeError::NotLeader { leader: *leader },
            RoundFailure::Raft(e) => MetaNodeError::Raft(e.clone()),
        }
    }
}

pub(super) struct Proposer {
    pub id: u64,
    pub raft: MetaRaft,
    pub image: std::sync::Arc<parking_lot::RwLock<MetadataImage>>,
}

impl Proposer {
    /// Runs rounds until every sender of `queue` is gone.
    pub async fn run(self, mut queue: mpsc::Receiver<Proposal>) {
        while let Some(first) = queue.recv().await {
            let mut batch = vec![first];
            while batch.len() < PROPOSAL_BATCH_COMMANDS_MAX {
                match queue.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            let outcomes = self.round(&batch).await;
            for (proposal, outcome) in batch.into_iter().zip(outcomes) {
                // The writer may have given up waiting; its command's outcome stands.
                let _ = proposal.reply.send(outcome);
            }
        }
    }

    /// Executes and proposes `batch`; one outcome per command, in order.
    async fn round(&self, batch: &[Proposal]) -> Vec<Result<Reply, MetaNodeError>> {
        let mut failure = RoundFailure::NotLeader(None);
        for _ in 0..STALE_ROUNDS_MAX {
            let attempt = self.attempt(batch).await;
            match attempt {
                Ok(Some(replies)) => {
                    return replies
                        .into_iter()
                        .map(|r| r.map_err(MetaNodeError::Command))
                        .collect()
                }
                Ok(None) => tracing::info!(
                    node = self.id,
                    "a metadata batch was executed against an image changed before it applied; executing again"
                ),
                Err(e) => {
                    failure = e;
                    break;
                }
            }
        }
        batch.iter().map(|_| Err(failure.to_error())).collect()
    }

    /// One try: `None` if the batch was skipped as stale.
    async fn attempt(
        &self,
        batch: &[Proposal],
    ) -> Result<Option<Vec<Result<Reply, MetaError>>>, RoundFailure> {
        let base_index = self.caught_up().await?;
        let (records, replies) = {
            let image = self.image.read();
            execute_all(&image, batch.iter().map(|p| &p.command))
        };
        if records.is_empty() {
            // Nothing to replicate, but the replies must come from a node that still leads
            // (an old leader's image may be behind).
            self.confirm_leadership().await?;
            return Ok(Some(replies));
        }
        let entry = MetaEntry::Records(RecordBatch {
            version: RECORD_BATCH_VERSION,
            base_index,
            records,
        });
        match self.raft.client_write(entry).await {
            Ok(response) => match response.data {
                EntryOutcome::Stale => Ok(None),
                _ => Ok(Some(replies)),
            },
            Err(openraft::error::RaftError::APIError(
                openraft::error::ClientWriteError::ForwardToLeader(f),
            )) => Err(RoundFailure::NotLeader(f.leader_id)),
            Err(e) => Err(RoundFailure::Raft(e.to_string())),
        }
    }

    /// Waits until this node leads and has applied every entry in its log (a new leader's
    /// log may hold entries of earlier terms, committed with its first entry); returns the
    /// applied index.
    async fn caught_up(&self) -> Result<u64, RoundFailure> {
        let mut metrics = self.raft.metrics();
        let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT_MAX;
        loop {
            {
                let m = metrics.borrow_and_update();
                if let Err(e) = &m.running_state {
                    return Err(RoundFailure::Raft(e.to_string()));
                }
                if m.current_leader != Some(self.id) {
                    return Err(RoundFailure::NotLeader(m.current_leader));
                }
                let applied = m.last_applied.map_or(0, |l| l.index);
                if applied >= m.last_log_index.unwrap_or(0) {
                    return Ok(applied);
                }
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(RoundFailure::Raft("the raft core stopped".into())),
                Err(_) => return Err(RoundFailure::NotLeader(None)),
            }
        }
    }

    async fn confirm_leadership(&self) -> Result<(), RoundFailure> {
        match self.raft.ensure_linearizable().await {
            Ok(_) => Ok(()),
            Err(openraft::error::RaftError::APIError(
                openraft::error::CheckIsLeaderError::ForwardToLeader(f),
            )) => Err(RoundFailure::NotLeader(f.leader_id)),
            Err(e) => Err(RoundFailure::Raft(e.to_string())),
        }
    }
}

/// Executes `commands` in order, each against `image` as the records before it leave it: the
/// records of all, and each command's reply. A refused command adds no records.
pub(crate) fn execute_all<'a>(
    image: &MetadataImage,
    commands: impl ExactSizeIterator<Item = &'a Command>,
) -> (Vec<MetadataRecord>, Vec<Result<Reply, MetaError>>) {
    let count = commands.len();
    let mut records = Vec::new();
    let mut replies = Vec::with_capacity(count);
    // A copy of the image only once a later command must see earlier records.
    let mut scratch: Option<MetadataImage> = None;
    for (i, command) in commands.enumerate() {
        let current = scratch.as_ref().unwrap_or(image);
        match execute_without_panic(current, command) {
            Ok((produced, reply)) => {
                if i + 1 < count && !produced.is_empty() {
                    let next = scratch.get_or_insert_with(|| image.clone());
                    for record in &produced {
                        next.apply(record);
                    }
                }
                records.extend(produced);
                replies.push(Ok(reply));
            }
            Err(e) => replies.push(Err(e)),
        }
    }
    (records, replies)
}

/// [`crate::execute`], with a panic turned into a refusal of the command (execution is pure, so
/// a panic leaves nothing half-changed, and the parking_lot locks are not poisoned).
pub(super) fn execute_without_panic(
    image: &MetadataImage,
    command: &Command,
) -> crate::command::Outcome {
    catch_unwind(AssertUnwindSafe(|| crate::execute(image, command))).unwrap_or_else(|_| {
        tracing::error!(
            ?command,
            "executing a metadata command panicked; it is refused"
        );
        Err(MetaError::Invalid(
            "the MetaServer failed executing this command (an internal error, logged)".into(),
        ))
    })
}

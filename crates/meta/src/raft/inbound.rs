//! Checks on Raft RPCs from peers before openraft sees them. A peer's claim to be a
//! MetaServer node is identification, not authentication, so every field that openraft would
//! trust is bounded here: the sender is the node its handshake named and a member of this
//! group (once it knows its group); terms and log indexes are in a range no real group reaches (openraft adds 1 to terms
//! and would overflow, ending the node for good); a snapshot chunk stays within a named size.

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{LogId, Vote};

use super::TypeConfig;

/// Largest term accepted from a peer: one election a millisecond for a hundred years stays
/// far below it, and adding to it never overflows.
pub const RAFT_TERM_MAX: u64 = 1 << 48;
/// Largest log index accepted from a peer (a trillion entries).
pub const RAFT_INDEX_MAX: u64 = 1 << 40;
/// Largest snapshot a peer may send (chunk offset plus length): the image is small, and a
/// chunk's offset sizes the buffer it is written into.
pub const SNAPSHOT_BYTES_MAX: u64 = 512 << 20;

/// Why an RPC is refused, if it is.
pub type Refusal = String;

fn check_vote(vote: &Vote<u64>, sender: u64, members: &[u64]) -> Result<(), Refusal> {
    let leader = &vote.leader_id;
    if leader.term > RAFT_TERM_MAX {
        return Err(format!("term {} is over {RAFT_TERM_MAX}", leader.term));
    }
    if leader.node_id != sender {
        return Err(format!(
            "the vote names node {} but this connection identified as node {sender}",
            leader.node_id
        ));
    }
    // A node not yet initialized knows no members: it must hear from the group to join it.
    if !members.is_empty() && !members.contains(&sender) {
        return Err(format!("node {sender} is not a member of this group"));
    }
    Ok(())
}

fn check_log_ids<'a>(ids: impl IntoIterator<Item = &'a LogId<u64>>) -> Result<(), Refusal> {
    for id in ids {
        if id.leader_id.term > RAFT_TERM_MAX || id.index > RAFT_INDEX_MAX {
            return Err(format!(
                "log id (term {}, index {}) is out of range",
                id.leader_id.term, id.index
            ));
        }
    }
    Ok(())
}

pub fn check_vote_request(
    rpc: &VoteRequest<u64>,
    sender: u64,
    members: &[u64],
) -> Result<(), Refusal> {
    check_vote(&rpc.vote, sender, members)?;
    check_log_ids(rpc.last_log_id.iter())
}

pub fn check_append(
    rpc: &AppendEntriesRequest<TypeConfig>,
    sender: u64,
    members: &[u64],
) -> Result<(), Refusal> {
    check_vote(&rpc.vote, sender, members)?;
    check_log_ids(rpc.prev_log_id.iter())?;
    check_log_ids(rpc.leader_commit.iter())?;
    check_log_ids(rpc.entries.iter().map(|e| &e.log_id))
}

pub fn check_snapshot(
    rpc: &InstallSnapshotRequest<TypeConfig>,
    sender: u64,
    members: &[u64],
) -> Result<(), Refusal> {
    check_vote(&rpc.vote, sender, members)?;
    check_log_ids(rpc.meta.last_log_id.iter())?;
    let end = rpc.offset.saturating_add(rpc.data.len() as u64);
    if end > SNAPSHOT_BYTES_MAX {
        return Err(format!(
            "snapshot chunk ends at byte {end}, over {SNAPSHOT_BYTES_MAX}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LeaderId};

    fn vote(term: u64, node: u64) -> Vote<u64> {
        Vote {
            leader_id: LeaderId::new(term, node),
            committed: false,
        }
    }

    #[test]
    fn absurd_terms_impostors_and_strangers_are_refused() {
        let members = [1, 2, 3];
        let ok = VoteRequest {
            vote: vote(5, 2),
            last_log_id: Some(LogId::new(CommittedLeaderId::new(4, 1), 10)),
        };
        assert!(check_vote_request(&ok, 2, &members).is_ok());
        let huge = VoteRequest {
            vote: vote(u64::MAX - 1, 2),
            ..ok.clone()
        };
        assert!(check_vote_request(&huge, 2, &members).is_err());
        assert!(check_vote_request(&ok, 3, &members).is_err(), "impostor");
        assert!(check_vote_request(&ok, 2, &[1, 3]).is_err(), "not a member");
        assert!(
            check_vote_request(&ok, 2, &[]).is_ok(),
            "an uninitialized node hears from anyone"
        );
        let far = VoteRequest {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(4, 1), u64::MAX)),
            ..ok
        };
        assert!(check_vote_request(&far, 2, &members).is_err());
    }
}

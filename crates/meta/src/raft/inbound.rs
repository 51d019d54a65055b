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

/// Who an RPC came from and who receives it.
#[derive(Debug, Clone, Copy)]
pub struct Parties<'a> {
    /// The node id the connection's handshake gave.
    pub sender: u64,
    /// This node.
    pub me: u64,
    /// This node's group (empty before it has heard from one).
    pub members: &'a [u64],
}

fn check_vote(vote: &Vote<u64>, parties: Parties<'_>) -> Result<(), Refusal> {
    let Parties {
        sender,
        me,
        members,
    } = parties;
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
    if sender == me {
        return Err(format!("node {me} does not send Raft RPCs to itself"));
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

pub fn check_vote_request(rpc: &VoteRequest<u64>, parties: Parties<'_>) -> Result<(), Refusal> {
    check_vote(&rpc.vote, parties)?;
    check_log_ids(rpc.last_log_id.iter())
}

pub fn check_append(
    rpc: &AppendEntriesRequest<TypeConfig>,
    parties: Parties<'_>,
) -> Result<(), Refusal> {
    check_vote(&rpc.vote, parties)?;
    check_log_ids(rpc.prev_log_id.iter())?;
    check_log_ids(rpc.leader_commit.iter())?;
    check_log_ids(rpc.entries.iter().map(|e| &e.log_id))?;
    // Entries follow `prev_log_id` one index at a time, with terms that never go down and
    // never pass the sender's own term, as a leader's always do.
    let mut previous = rpc.prev_log_id;
    for entry in &rpc.entries {
        let id = entry.log_id;
        let expected_index = previous.map_or(0, |p| p.index + 1);
        let term_back = previous.is_some_and(|p| id.leader_id.term < p.leader_id.term);
        if id.index != expected_index || term_back || id.leader_id.term > rpc.vote.leader_id.term {
            return Err(format!(
                "entry (term {}, index {}) does not follow (term {:?}, index {:?}) under term {}",
                id.leader_id.term,
                id.index,
                previous.map(|p| p.leader_id.term),
                previous.map(|p| p.index),
                rpc.vote.leader_id.term
            ));
        }
        previous = Some(id);
    }
    Ok(())
}

pub fn check_snapshot(
    rpc: &InstallSnapshotRequest<TypeConfig>,
    parties: Parties<'_>,
) -> Result<(), Refusal> {
    check_vote(&rpc.vote, parties)?;
    check_log_ids(rpc.meta.last_log_id.iter())?;
    let end = rpc.offset.saturating_add(rpc.data.len() as u64);
    if end > SNAPSHOT_BYTES_MAX {
        return Err(format!(
            "snapshot chunk ends at byte {end}, over {SNAPSHOT_BYTES_MAX}"
        ));
    }
    Ok(())
}

/// A copy of the snapshot a peer is sending, chunk by chunk: openraft installs a snapshot
/// when its last chunk arrives and purges its log for it, so the whole must be known to be a
/// metadata image before that chunk is let through.
#[derive(Debug, Default)]
pub struct SnapshotIntake {
    receiving: parking_lot::Mutex<Option<Receiving>>,
}

#[derive(Debug)]
struct Receiving {
    sender: u64,
    snapshot_id: String,
    data: Vec<u8>,
}

impl SnapshotIntake {
    /// Takes a chunk already checked by [`check_snapshot`]; refuses one that does not follow
    /// the chunks before it, or a last chunk that completes something other than a metadata
    /// image (checked with `is_valid`).
    pub fn take(
        &self,
        rpc: &InstallSnapshotRequest<TypeConfig>,
        sender: u64,
        is_valid: impl Fn(&[u8]) -> Result<(), String>,
    ) -> Result<(), Refusal> {
        let mut receiving = self.receiving.lock();
        if rpc.offset == 0 {
            *receiving = Some(Receiving {
                sender,
                snapshot_id: rpc.meta.snapshot_id.clone(),
                data: Vec::new(),
            });
        }
        let Some(current) = receiving.as_mut().filter(|r| {
            r.sender == sender
                && r.snapshot_id == rpc.meta.snapshot_id
                && r.data.len() as u64 == rpc.offset
        }) else {
            *receiving = None;
            return Err(format!(
                "snapshot chunk at offset {} does not follow the chunks received",
                rpc.offset
            ));
        };
        current.data.extend_from_slice(&rpc.data);
        if !rpc.done {
            return Ok(());
        }
        let whole = receiving.take().map(|r| r.data).unwrap_or_default();
        is_valid(&whole)
    }
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
        let parties = |sender: u64, members: &'static [u64]| Parties {
            sender,
            me: 1,
            members,
        };
        let ok = VoteRequest {
            vote: vote(5, 2),
            last_log_id: Some(LogId::new(CommittedLeaderId::new(4, 1), 10)),
        };
        assert!(check_vote_request(&ok, parties(2, &[1, 2, 3])).is_ok());
        let huge = VoteRequest {
            vote: vote(u64::MAX - 1, 2),
            ..ok.clone()
        };
        assert!(check_vote_request(&huge, parties(2, &[1, 2, 3])).is_err());
        assert!(
            check_vote_request(&ok, parties(3, &[1, 2, 3])).is_err(),
            "impostor"
        );
        assert!(
            check_vote_request(&ok, parties(2, &[1, 3])).is_err(),
            "not a member"
        );
        assert!(
            check_vote_request(&ok, parties(2, &[])).is_ok(),
            "an uninitialized node hears from anyone"
        );
        let as_me = VoteRequest {
            vote: vote(5, 1),
            ..ok.clone()
        };
        assert!(
            check_vote_request(&as_me, parties(1, &[1, 2, 3])).is_err(),
            "from myself"
        );
        let far = VoteRequest {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(4, 1), u64::MAX)),
            ..ok
        };
        assert!(check_vote_request(&far, parties(2, &[1, 2, 3])).is_err());
        let _ = members;
    }

    #[test]
    fn a_snapshot_is_let_through_only_whole_and_valid() {
        let chunk =
            |offset: u64, data: &[u8], done: bool, id: &str| InstallSnapshotRequest::<TypeConfig> {
                vote: vote(3, 2),
                meta: openraft::SnapshotMeta {
                    last_log_id: None,
                    last_membership: Default::default(),
                    snapshot_id: id.into(),
                },
                offset,
                data: data.to_vec(),
                done,
            };
        let json_object = |d: &[u8]| {
            serde_json::from_slice::<serde_json::Value>(d)
                .map(drop)
                .map_err(|e| e.to_string())
        };
        let intake = SnapshotIntake::default();
        assert!(intake
            .take(&chunk(0, b"{\"a\":", false, "s1"), 2, json_object)
            .is_ok());
        assert!(intake
            .take(&chunk(5, b"1}", true, "s1"), 2, json_object)
            .is_ok());
        assert!(intake
            .take(&chunk(0, b"garbage", true, "s2"), 2, json_object)
            .is_err());
        assert!(intake
            .take(&chunk(0, b"{", false, "s3"), 2, json_object)
            .is_ok());
        assert!(
            intake
                .take(&chunk(9, b"}", true, "s3"), 2, json_object)
                .is_err(),
            "a gap"
        );
        assert!(intake
            .take(&chunk(0, b"{", false, "s4"), 2, json_object)
            .is_ok());
        assert!(
            intake
                .take(&chunk(1, b"}", true, "s4"), 3, json_object)
                .is_err(),
            "another sender"
        );
    }
}

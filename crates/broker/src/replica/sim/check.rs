//! The invariants, checked after every step against every replica's actual log: no
//! acknowledged record is ever lost or changed; whatever any replica had below its high
//! watermark (what consumers may have read) is the same on every replica that has it below
//! its own, and every leader of a later or the same epoch holds it at the same offset with
//! the same bytes; a leader's high watermark never goes backwards within its leadership; a
//! consumer's read stops at the high watermark.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::node::{Batch, Node};
use crate::replica::Role;

/// A batch some replica had below its high watermark: its bytes, and the lowest leader
/// epoch it was seen committed in.
#[derive(Debug, Clone)]
struct Committed {
    bytes: Bytes,
    epoch: u32,
}

#[derive(Default)]
pub struct Checker {
    /// Acknowledged batches by base offset: bytes and the epoch they were written in.
    acked: BTreeMap<i64, (Bytes, u32)>,
    committed: BTreeMap<i64, Committed>,
    /// The highest high watermark each leadership (node, incarnation, leader epoch) showed.
    leader_hw: BTreeMap<(u32, u64, u32), i64>,
    /// Changes to `acked` and `committed` so far.
    changes: u64,
    /// Per broker: what its last full check saw (log generation, high watermark, role
    /// epoch, `changes`); the same again needs no new check.
    checked: BTreeMap<u32, (u64, i64, Option<u32>, u64)>,
}

/// The batch at `base` in a log sorted by base offset.
pub fn batch_at(log: &[Batch], base: i64) -> Option<&Batch> {
    log.binary_search_by_key(&base, |b| b.0)
        .ok()
        .map(|i| &log[i])
}

impl Checker {
    /// A write the producer was told is stored.
    pub fn acknowledge(&mut self, base: i64, bytes: Bytes, epoch: u32) -> Result<(), String> {
        if let Some((before, _)) = self.acked.get(&base) {
            if *before != bytes {
                return Err(format!(
                    "two different writes were acknowledged at offset {base}"
                ));
            }
        }
        self.acked.insert(base, (bytes, epoch));
        self.changes += 1;
        Ok(())
    }

    /// Checks every up replica's log (`logs[i]` is `nodes[i]`'s, read this step).
    /// `generations[i]` counts the changes of `logs[i]`.
    pub fn check(
        &mut self,
        nodes: &[Node],
        logs: &[Vec<Batch>],
        generations: &[u64],
    ) -> Result<(), String> {
        let seen = |node: &Node, generation: u64, changes: u64| {
            let hw = node.partition.as_ref().map_or(-1, |p| p.high_watermark());
            let epoch = match node.role() {
                Some(Role::Leader(state)) => Some(state.leader_epoch),
                Some(Role::Follower { leader_epoch, .. }) => Some(leader_epoch + (1 << 31)),
                None => None,
            };
            (generation, hw, epoch, changes)
        };
        let mut todo = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            if self.checked.get(&node.id) != Some(&seen(node, generations[i], self.changes)) {
                self.check_node(node, &logs[i])?;
                todo.push(i);
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            let unchanged =
                self.checked.get(&node.id) == Some(&seen(node, generations[i], self.changes));
            if unchanged && !todo.contains(&i) {
                continue;
            }
            if let Some(Role::Leader(state)) = node.role() {
                self.leader_holds_all(node.id, state.leader_epoch, &logs[i])?;
            }
        }
        for (i, node) in nodes.iter().enumerate() {
            self.checked
                .insert(node.id, seen(node, generations[i], self.changes));
        }
        Ok(())
    }

    fn check_node(&mut self, node: &Node, log: &[Batch]) -> Result<(), String> {
        let Some(p) = &node.partition else {
            return Ok(());
        };
        let (hw, end) = (p.high_watermark(), p.log.log_end_offset());
        if hw > end {
            return Err(format!(
                "broker {}: high watermark {hw} past its log end {end}",
                node.id
            ));
        }
        let epoch = match node.role() {
            Some(Role::Leader(state)) => {
                let key = (node.id, node.incarnation, state.leader_epoch);
                let before = self.leader_hw.insert(key, hw).unwrap_or(hw);
                if hw < before {
                    return Err(format!(
                        "broker {} leading in epoch {}: high watermark went back {before} -> {hw}",
                        node.id, state.leader_epoch
                    ));
                }
                state.leader_epoch
            }
            Some(Role::Follower { leader_epoch, .. }) => leader_epoch,
            None => return Ok(()),
        };
        for (base, next, bytes) in log.iter().take_while(|b| b.1 <= hw) {
            match self.committed.get_mut(base) {
                Some(c) if c.bytes != *bytes => {
                    return Err(format!(
                        "broker {} holds a different batch [{base}, {next}) below its high \
                         watermark {hw} than a replica had committed there",
                        node.id
                    ));
                }
                Some(c) if c.epoch > epoch => {
                    c.epoch = epoch;
                    self.changes += 1;
                }
                Some(_) => {}
                None => {
                    self.changes += 1;
                    let c = Committed {
                        bytes: bytes.clone(),
                        epoch,
                    };
                    self.committed.insert(*base, c);
                }
            }
        }
        Ok(())
    }

    /// A leader in `epoch` holds every acknowledged and committed batch of that epoch or an
    /// earlier one, at its offset, with its bytes.
    fn leader_holds_all(&self, id: u32, epoch: u32, log: &[Batch]) -> Result<(), String> {
        for (base, (bytes, written_in)) in &self.acked {
            if *written_in <= epoch && batch_at(log, *base).map(|b| &b.2) != Some(bytes) {
                return Err(format!(
                    "broker {id} leading in epoch {epoch} lost the batch at {base} \
                     acknowledged in epoch {written_in}"
                ));
            }
        }
        for (base, c) in &self.committed {
            if c.epoch <= epoch && batch_at(log, *base).map(|b| &b.2) != Some(&c.bytes) {
                return Err(format!(
                    "broker {id} leading in epoch {epoch} lost the batch at {base} \
                     committed (below a high watermark) in epoch {}",
                    c.epoch
                ));
            }
        }
        Ok(())
    }
}

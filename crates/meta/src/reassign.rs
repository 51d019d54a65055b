//! Partition reassignment: a partition's replicas move to a target list by first adding the
//! new replicas (`replicas` = target, then the rest), waiting until the leader's
//! `AlterPartition` has them all in the ISR, then dropping the others in the same step. The
//! partition keeps its leader (or an in-sync one) throughout, so it stays writable.

use crate::command::{MetaError, Outcome, Reply, PARTITION_REPLICAS_PER_BROKER_MAX};
use crate::election::{choose_leader, update};
use crate::image::{MetadataImage, MetadataRecord, PartitionRecord};
use crate::placement::PlannedMove;

/// Finishes `next`'s reassignment if every adding replica is in its ISR: `replicas` becomes
/// the target, the removed ones leave the ISR, and a removed leader hands over to the first
/// live in-sync target replica. Waits instead while that would leave the ISR empty or take
/// leadership from a live leader with nobody to hand it to.
pub(crate) fn complete_if_in_sync(next: &mut PartitionRecord, live: &[u32]) {
    if !next.is_reassigning() || !next.adding_replicas.iter().all(|r| next.isr.contains(r)) {
        return;
    }
    let target = next.target_replicas();
    let isr: Vec<u32> = next
        .isr
        .iter()
        .copied()
        .filter(|r| target.contains(r))
        .collect();
    let leader = match next.leader {
        Some(l) if target.contains(&l) => Some(l),
        Some(_) => match choose_leader(&target, &isr, live, false) {
            Some(l) => Some(l),
            None => return,
        },
        // An offline partition gets a leader here only if its ISR can be trusted.
        None if next.needs_unclean_election => None,
        None => choose_leader(&target, &isr, live, false),
    };
    if isr.is_empty() {
        return;
    }
    next.replicas = target;
    next.isr = isr;
    next.leader = leader;
    next.adding_replicas.clear();
    next.removing_replicas.clear();
}

/// Partition `partition` of `topic`, or the error naming what is unknown.
fn partition_record<'i>(
    image: &'i MetadataImage,
    topic: &str,
    partition: u32,
) -> Result<&'i PartitionRecord, MetaError> {
    image
        .topics
        .get(topic)
        .ok_or_else(|| MetaError::UnknownTopic(topic.into()))?
        .partitions
        .get(partition as usize)
        .ok_or_else(|| MetaError::UnknownPartition {
            topic: topic.into(),
            partition,
        })
}

/// `ReassignPartition`: the partition's state once the move to `target` has started (and,
/// when nothing needs adding, finished).
fn reassigned(
    image: &MetadataImage,
    topic: &str,
    partition: u32,
    target: &[u32],
) -> Result<(PartitionRecord, PartitionRecord), MetaError> {
    let t = image
        .topics
        .get(topic)
        .ok_or_else(|| MetaError::UnknownTopic(topic.into()))?;
    let p = partition_record(image, topic, partition)?;
    let invalid = |why: String| MetaError::Invalid(format!("reassign {topic}/{partition}: {why}"));
    if target.is_empty() {
        return Err(invalid("no target replicas".into()));
    }
    if (target.len() as u32) < t.min_insync_replicas() {
        return Err(MetaError::InvalidConfig(format!(
            "{topic}/{partition}: {} target replicas are fewer than min_insync_replicas {}",
            target.len(),
            t.min_insync_replicas()
        )));
    }
    let load = image.load();
    for (i, b) in target.iter().enumerate() {
        if target[..i].contains(b) {
            return Err(invalid(format!("broker {b} named twice")));
        }
        if p.replicas.contains(b) {
            continue;
        }
        // A new replica must be able to copy the data now.
        let held = load.get(b).map(|(_, replicas)| *replicas);
        match held {
            None => return Err(invalid(format!("broker {b} is not a live broker"))),
            Some(n) if n >= PARTITION_REPLICAS_PER_BROKER_MAX => {
                return Err(invalid(format!(
                    "broker {b} already holds {n} partition replicas (at most \
                     {PARTITION_REPLICAS_PER_BROKER_MAX})"
                )))
            }
            Some(_) => {}
        }
    }
    let mut replicas = target.to_vec();
    replicas.extend(p.replicas.iter().filter(|r| !target.contains(r)));
    let mut next = PartitionRecord {
        adding_replicas: target
            .iter()
            .copied()
            .filter(|r| !p.replicas.contains(r))
            .collect(),
        removing_replicas: p
            .replicas
            .iter()
            .copied()
            .filter(|r| !target.contains(r))
            .collect(),
        replicas,
        ..p.clone()
    };
    complete_if_in_sync(&mut next, &image.live_brokers());
    Ok((p.clone(), next))
}

pub(crate) fn reassign_partition(
    image: &MetadataImage,
    topic: &str,
    partition: u32,
    target: &[u32],
) -> Outcome {
    let (p, next) = reassigned(image, topic, partition, target)?;
    let mut after = p.clone();
    after.take_state(&next);
    let records = update(topic, partition as usize, &p, next)
        .into_iter()
        .collect();
    Ok((records, Reply::Partition(after)))
}

/// `CancelReassignment`: the partition moves back to its replicas before the move under way
/// (those that are not being added), decided on this image.
pub(crate) fn cancel_reassignment(image: &MetadataImage, topic: &str, partition: u32) -> Outcome {
    let p = partition_record(image, topic, partition)?;
    if !p.is_reassigning() {
        return Err(MetaError::Invalid(format!(
            "no reassignment of {topic}/{partition} is in progress"
        )));
    }
    let mut original: Vec<u32> = p
        .replicas
        .iter()
        .copied()
        .filter(|r| !p.adding_replicas.contains(r))
        .collect();
    // The order before the move is not kept: the current leader goes first, so that the
    // cancel moves no leadership.
    if let Some(at) = original.iter().position(|r| Some(*r) == p.leader) {
        original[..=at].rotate_right(1);
    }
    reassign_partition(image, topic, partition, &original)
}

/// `Rebalance` and `DrainBroker`: starts every move of `plan` (unless `dry_run`) and replies
/// with the plan.
pub(crate) fn start_plan(image: &MetadataImage, plan: Vec<PlannedMove>, dry_run: bool) -> Outcome {
    let mut records: Vec<MetadataRecord> = Vec::new();
    for m in &plan {
        let (p, next) = reassigned(image, &m.topic, m.partition, &m.replicas)?;
        if !dry_run {
            records.extend(update(&m.topic, m.partition as usize, &p, next));
        }
    }
    Ok((records, Reply::Plan(plan)))
}

//! `AlterPartition`: a partition leader's ISR change, accepted only from the current leader
//! with the current broker, leader and partition epochs (compare-and-set), so a deposed leader
//! or one working from an outdated view changes nothing.

use crate::command::{MetaError, Outcome, Reply};
use crate::election::update;
use crate::image::{MetadataImage, PartitionRecord};

/// The fields of [`crate::Command::AlterPartition`].
pub(crate) struct Proposal<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub broker_id: u32,
    pub broker_epoch: u64,
    pub leader_epoch: u32,
    pub partition_epoch: u32,
    pub isr: &'a [u32],
}

pub(crate) fn alter_partition(image: &MetadataImage, req: &Proposal) -> Outcome {
    let (topic, partition) = (req.topic.to_string(), req.partition);
    let p = image
        .topics
        .get(req.topic)
        .and_then(|t| t.partitions.get(partition as usize))
        .ok_or_else(|| MetaError::UnknownPartition {
            topic: topic.clone(),
            partition,
        })?;
    let broker = image.brokers.get(&req.broker_id).filter(|b| !b.fenced);
    if broker.map(|b| b.epoch) != Some(req.broker_epoch) {
        return Err(MetaError::StaleBrokerEpoch {
            id: req.broker_id,
            sent: req.broker_epoch,
            current: broker.map(|b| b.epoch),
        });
    }
    if p.leader != Some(req.broker_id) {
        return Err(MetaError::NotLeader {
            topic,
            partition,
            broker: req.broker_id,
            leader: p.leader,
        });
    }
    if req.leader_epoch != p.leader_epoch {
        return Err(MetaError::FencedLeaderEpoch {
            topic,
            partition,
            sent: req.leader_epoch,
            current: p.leader_epoch,
        });
    }
    if req.partition_epoch != p.partition_epoch {
        return Err(MetaError::StalePartitionEpoch {
            topic,
            partition,
            sent: req.partition_epoch,
            current: p.partition_epoch,
        });
    }
    if let Err(refusal) = check_isr(image, p, req) {
        return Ok(refuse_at_current_epochs(req, p, &refusal));
    }
    let live = image.live_brokers();
    let mut next = PartitionRecord {
        isr: req.isr.to_vec(),
        ..p.clone()
    };
    crate::reassign::complete_if_in_sync(&mut next, &live);
    let mut after = p.clone();
    after.take_state(&next);
    let records = update(req.topic, partition as usize, p, next)
        .into_iter()
        .collect();
    Ok((records, Reply::Partition(after)))
}

/// Refuses the current leader's proposal at the current epochs by moving the partition epoch:
/// the leader keeps a proposal it has no answer to and resends it, and settles it only when the
/// partition epoch moves, so a delayed copy of this refused proposal must not apply later at
/// the same epoch (the simulation's seed 32925 found that). The reply carries the partition
/// unchanged but for its epoch; the leader sees its ISR was not taken.
fn refuse_at_current_epochs(
    req: &Proposal,
    p: &PartitionRecord,
    refusal: &MetaError,
) -> (Vec<crate::image::MetadataRecord>, Reply) {
    tracing::info!(topic = req.topic, partition = req.partition, isr = ?req.isr, %refusal, "ISR proposal refused");
    let mut after = p.clone();
    after.partition_epoch = after.partition_epoch.saturating_add(1);
    let bump = crate::image::MetadataRecord::BumpPartitionEpoch {
        name: req.topic.into(),
        partition: req.partition,
        partition_epoch: p.partition_epoch,
    };
    (vec![bump], Reply::Partition(after))
}

/// The proposed ISR holds the leader, only replicas, no broker twice, and only live brokers
/// among those it adds.
fn check_isr(image: &MetadataImage, p: &PartitionRecord, req: &Proposal) -> Result<(), MetaError> {
    let invalid = |why: &str| {
        Err(MetaError::Invalid(format!(
            "{}/{}: ISR {:?} {why}",
            req.topic, req.partition, req.isr
        )))
    };
    if !req.isr.contains(&req.broker_id) {
        return invalid("does not hold the leader");
    }
    for (i, b) in req.isr.iter().enumerate() {
        if req.isr[..i].contains(b) {
            return invalid("names a broker twice");
        }
        let added = !p.isr.contains(b);
        let live = image.brokers.get(b).is_some_and(|r| !r.fenced);
        if !p.replicas.contains(b) || (added && !live) {
            return Err(MetaError::IneligibleReplica {
                topic: req.topic.into(),
                partition: req.partition,
                broker: *b,
            });
        }
    }
    Ok(())
}

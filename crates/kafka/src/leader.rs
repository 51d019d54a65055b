//! Who leads a partition, for the current-leader fields of the data APIs' answers: Produce
//! (v10+) and Fetch (v12+) name the new leader beside NOT_LEADER_OR_FOLLOWER so a client can
//! go there before its metadata refresh, and ListOffsets/Fetch report the leader epoch.

use crate::context::Ctx;

/// A partition's leader and leader epoch as this broker's metadata image has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Leader {
    pub node_id: u32,
    pub epoch: i32,
}

/// The leader of `topic`/`partition` in the image; `None` for an unknown partition or one
/// with no leader (offline).
pub(crate) fn of(ctx: &Ctx, topic: &str, partition: u32) -> Option<Leader> {
    let image = ctx.state().cluster.image();
    let record = image
        .topics
        .get(topic)?
        .partitions
        .get(partition as usize)?;
    Some(Leader {
        node_id: record.leader?,
        epoch: i32::try_from(record.leader_epoch).unwrap_or(i32::MAX),
    })
}

/// The leader epoch of `topic`/`partition`, or -1 (Kafka's "unknown").
pub(crate) fn epoch(ctx: &Ctx, topic: &str, partition: u32) -> i32 {
    of(ctx, topic, partition).map_or(-1, |leader| leader.epoch)
}

/// The leader named by a native NOT_LEADER answer (`current_leader`, 0 = unknown), with its
/// epoch and its Kafka address when it has a Kafka listener: what a client needs to go there.
pub(crate) fn named(
    ctx: &Ctx,
    topic: &str,
    partition: u32,
    current_leader: u32,
) -> Option<(Leader, Option<(String, u16)>)> {
    if current_leader == 0 {
        return None;
    }
    let epoch = of(ctx, topic, partition)
        .filter(|leader| leader.node_id == current_leader)
        .map_or(-1, |leader| leader.epoch);
    let leader = Leader {
        node_id: current_leader,
        epoch,
    };
    Some((leader, crate::metadata::kafka_broker(ctx, current_leader)))
}

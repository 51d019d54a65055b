//! Half messages: transactional messages with check-back (RocketMQ's model, which Kafka
//! lacks). A producer of a producer group stores a record batch no consumer sees (HalfSend),
//! runs its local transaction, then commits the half (its records are appended to their
//! partition as one batch) or rolls it back (HalfEnd). A half left unresolved is offered, once
//! its check time comes and then every `half_check_interval`, to a live member of its group
//! (HalfCheckPoll), at most `half_checks_max` times; then it is rolled back.
//!
//! The broker leading a group's partition of `__half_messages` (`murmur2(group) % 4`)
//! coordinates its halves. Every event of a half is one record there, acknowledged once every
//! in-sync replica holds it, so a new coordinator replays the partition and carries on.
//!
//! - [`store`]: the halves coordinated here, in memory, and the rules of checks, pure.
//! - [`log`]: the records, and the replay of a partition.
//! - [`ops`]: the requests and the timer; [`deliver`]: appending a commit exactly once;
//!   `durable`: writing an event to the log and applying it.
//!
//! docs/transactions.md, "Half messages", says what this guarantees and what it costs.

pub mod deliver;
mod durable;
pub mod log;
pub mod ops;
mod records;
pub mod store;
#[cfg(test)]
mod tests;

pub use store::HalfStore;
pub use tinymq_meta::command::HALF_TOPIC;

/// Partitions of `__half_messages`.
pub const HALF_PARTITIONS: u32 = 4;

/// The header every record of a committed half carries: `<topic id>.<partition>.<half id>` of
/// its `__half_messages` partition (how a new coordinator recognises a commit already made).
pub const HALF_ID_HEADER: &str = "tinymq.half-id";

/// How long `__half_messages` keeps its records (7 days), in segments rolled hourly: far
/// beyond the longest a half can stay unresolved (its first check at most an hour after it is
/// stored, then at most `half_checks_max` intervals), so retention removes only resolved ones.
pub const HALF_RETENTION_MS: i64 = 7 * 24 * 3600 * 1000;
const HALF_SEGMENT_MS: i64 = 3600 * 1000;

/// The settings of `__half_messages`, whatever the broker's topic defaults: those of the
/// offsets topic (flush `always`), but with [`HALF_RETENTION_MS`].
pub fn topic_settings(partitions: u32, replication_factor: u32) -> crate::topic::TopicSettings {
    crate::topic::TopicSettings {
        retention_ms: HALF_RETENTION_MS,
        segment_ms: HALF_SEGMENT_MS,
        ..crate::group::offsets::topic_settings(partitions, replication_factor)
    }
}

/// The partition of `__half_messages` whose leader coordinates `group`.
pub fn partition_for_group(group: &str) -> u32 {
    tinymq_protocol::hash::murmur2_positive(group.as_bytes()) % HALF_PARTITIONS
}
